#include "optimizer/optimizer.h"

#include "common/log.h"
#include "common/status.h"

namespace tessera {

std::vector<std::unique_ptr<GraphPass>> default_passes() {
    std::vector<std::unique_ptr<GraphPass>> passes;
    passes.push_back(make_expand_gradient_pass());
    passes.push_back(make_eliminate_identity_pass());
    passes.push_back(make_fuse_qdq_pass());  // before folding, which would turn each weight's DQ into a float copy
    passes.push_back(make_constant_folding_pass());
    passes.push_back(make_fuse_conv_batchnorm_pass());
    passes.push_back(make_fold_channel_affine_pass());
    passes.push_back(make_fuse_conv_activation_pass());
    passes.push_back(make_batchnorm_to_conv_pass());  // after it, so that it sees which readers are convolutions
    passes.push_back(make_pool_before_pointwise_conv_pass());  // after it: the convolution still reads the BN there
    passes.push_back(make_fuse_gelu_pass());
    passes.push_back(make_fuse_matmul_bias_pass());  // after fuse-gelu, so that the GELU it makes joins the layer
    passes.push_back(make_fuse_attention_pass());
    passes.push_back(make_fuse_dynamic_quantization_pass());
    passes.push_back(make_fuse_quantized_lookup_pass());  // after folding, which makes the groups' parameters constant
    passes.push_back(make_dead_node_pass());
    return passes;
}

OptimizationLevel optimization_level_from_int(int level) {
    if (level == 99) return OptimizationLevel::All;
    if (level < 0 || level > 3)
        throw Error(TESS_STATUS_INVALID_ARGUMENT, "optimization level must be 0 (disabled), 1 (basic), 2 (extended), "
                                                  "3 or 99 (all), got " + std::to_string(level));
    return static_cast<OptimizationLevel>(level);
}

void optimize(Graph& graph, const PassContext& context, OptimizationLevel level) {
    auto passes = default_passes();
    constexpr int kMaxRounds = 4;  // each pass is idempotent; a few rounds reach the fixed point in practice
    for (int round = 0; round < kMaxRounds; ++round) {
        bool changed = false;
        for (const auto& pass : passes) {
            if (!pass->required() && static_cast<int>(pass->level()) > static_cast<int>(level)) continue;
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
