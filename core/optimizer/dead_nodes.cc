// Removes nodes none of whose outputs is read by another node or returned by the graph, and constants nobody reads.
#include "optimizer/optimizer.h"

namespace tessera {

namespace {

class DeadNodes : public GraphPass {
public:
    const char* name() const override { return "dead-nodes"; }

    bool run(Graph& graph, const PassContext&) const override {
        auto uses = graph.use_counts();
        std::vector<bool> dead(graph.nodes.size(), false);
        bool changed = false;
        // Reverse topological order: removing a node may free its producers.
        for (size_t k = graph.nodes.size(); k-- > 0;) {
            const Node& node = graph.nodes[k];
            bool used = false;
            for (const auto& out : node.outputs)
                if (!out.empty() && uses[out] > 0) used = true;
            if (used) continue;
            dead[k] = true;
            changed = true;
            for (const auto& in : node.reads())
                if (uses[in] > 0) --uses[in];
        }
        if (changed) {
            std::vector<Node> kept;
            for (size_t k = 0; k < graph.nodes.size(); ++k)
                if (!dead[k]) kept.push_back(std::move(graph.nodes[k]));
            graph.nodes = std::move(kept);
        }
        // Constants nobody reads any more are dropped too (they may be large: a folded BatchNormalization leaves
        // the original weights behind).
        for (auto it = graph.initializers.begin(); it != graph.initializers.end();) {
            if (uses[it->first] == 0 && !graph.is_graph_input(it->first)) {
                it = graph.initializers.erase(it);
                changed = true;
            } else {
                ++it;
            }
        }
        return changed;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_dead_node_pass() { return std::make_unique<DeadNodes>(); }

}  // namespace tessera
