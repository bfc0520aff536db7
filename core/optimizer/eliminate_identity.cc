// Removes Identity nodes and inference-mode Dropout: their consumers read the input directly.
#include <unordered_set>

#include "optimizer/optimizer.h"

namespace tessera {

namespace {

// A Dropout is a no-op at inference unless its training_mode input is present and not a constant false, or
// its mask output is read.
bool is_inference_dropout(const Graph& graph, const Node& node, const std::unordered_map<std::string, size_t>& uses) {
    if (node.outputs.size() > 1 && !node.outputs[1].empty() && uses.count(node.outputs[1])) return false;
    if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
        auto it = graph.initializers.find(node.inputs[2]);
        if (it == graph.initializers.end() || !graph.is_constant(node.inputs[2])) return false;
        const TessValue& mode = *it->second;
        if (mode.element_type != TESS_ELEMENT_BOOL || mode.byte_size != 1) return false;
        if (*static_cast<const uint8_t*>(mode.data) != 0) return false;
    }
    return true;
}

class EliminateIdentity : public GraphPass {
public:
    const char* name() const override { return "eliminate-identity"; }

    bool run(Graph& graph, const PassContext&) const override {
        bool changed = false;
        auto uses = graph.use_counts();
        // Subgraph bodies read outer values by name: those names must survive.
        std::unordered_set<std::string> read_by_bodies;
        for (const auto& node : graph.nodes) read_by_bodies.insert(node.implicit_inputs.begin(), node.implicit_inputs.end());
        std::vector<Node> kept;
        kept.reserve(graph.nodes.size());
        for (auto& node : graph.nodes) {
            bool removable = node.domain.empty() && node.inputs.size() >= 1 && !node.inputs[0].empty() &&
                             !node.outputs.empty() && !node.outputs[0].empty() &&
                             (node.op_type == "Identity" ||
                              (node.op_type == "Dropout" && is_inference_dropout(graph, node, uses)));
            // A graph output keeps its name, so the node producing it stays.
            if (removable && !graph.is_graph_output(node.outputs[0]) && !read_by_bodies.count(node.outputs[0])) {
                auto type = graph.types.find(node.outputs[0]);
                if (type != graph.types.end() && !graph.types.count(node.inputs[0]))
                    graph.types[node.inputs[0]] = type->second;
                rename_uses(graph, node.outputs[0], node.inputs[0]);
                changed = true;
                continue;
            }
            kept.push_back(std::move(node));
        }
        graph.nodes = std::move(kept);
        return changed;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_eliminate_identity_pass() { return std::make_unique<EliminateIdentity>(); }

}  // namespace tessera
