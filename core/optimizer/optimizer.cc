#include "optimizer/optimizer.h"

#include "common/log.h"

namespace tessera {

std::vector<std::unique_ptr<GraphPass>> default_passes() {
    std::vector<std::unique_ptr<GraphPass>> passes;
    passes.push_back(make_expand_gradient_pass());
    passes.push_back(make_eliminate_identity_pass());
    passes.push_back(make_constant_folding_pass());
    passes.push_back(make_dead_node_pass());
    return passes;
}

void optimize(Graph& graph, const PassContext& context, int level) {
    auto passes = default_passes();
    constexpr int kMaxRounds = 4;  // each pass is idempotent; a few rounds reach the fixed point in practice
    for (int round = 0; round < kMaxRounds; ++round) {
        bool changed = false;
        for (const auto& pass : passes) {
            if (level <= 0 && !pass->required()) continue;
            if (pass->run(graph, context)) {
                changed = true;
                log_message(TESS_LOG_DEBUG, "optimizer", std::string(pass->name()) + " changed the graph");
            }
        }
        if (!changed) break;
    }
}

void rename_uses(Graph& graph, const std::string& from, const std::string& to) {
    for (auto& node : graph.nodes)
        for (auto& in : node.inputs)
            if (in == from) in = to;
}

}  // namespace tessera
