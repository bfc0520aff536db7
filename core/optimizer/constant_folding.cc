// Constant folding: a node whose inputs are all constants is evaluated once, when the session is created, by a
// provider that runs on host memory, and its outputs become constants.  The core runs no kernels itself.
#include <unordered_set>

#include "common/log.h"
#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"

namespace tessera {

namespace {

bool is_foldable_op(const Node& node) {
    // Random generators must produce new values on every run.
    static const std::unordered_set<std::string> kNondeterministic = {
        "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"};
    if (node.domain.empty() && kNondeterministic.count(node.op_type)) return false;
    if (node.domain.empty() && node.op_type == "Dropout") return false;
    for (const auto& attr : node.attributes)
        if (attr.type() == onnx::AttributeProto::GRAPH || attr.type() == onnx::AttributeProto::GRAPHS) return false;
    return true;
}

// The nodes some graph output depends on, through the values they read (implicit inputs of bodies included).
std::vector<bool> live_nodes(const Graph& graph) {
    std::vector<bool> live(graph.nodes.size(), false);
    const auto producers = graph.producers();
    std::vector<std::string> pending(graph.outputs.begin(), graph.outputs.end());
    while (!pending.empty()) {
        const std::string value = std::move(pending.back());
        pending.pop_back();
        auto it = producers.find(value);
        if (it == producers.end() || live[it->second]) continue;
        live[it->second] = true;
        for (const auto& in : graph.nodes[it->second].reads()) pending.push_back(in);
    }
    return live;
}

class ConstantFolding : public GraphPass {
public:
    const char* name() const override { return "constant-folding"; }

    bool run(Graph& graph, const PassContext& context) const override {
        if (!context.evaluate) return false;
        bool changed = false;
        std::vector<bool> folded(graph.nodes.size(), false);
        // Nodes no graph output depends on are left to the dead-node pass: folding them would only make constants
        // to throw away (a fusion's leftover DequantizeLinear of a weight would become a float copy of the weight).
        const std::vector<bool> live = live_nodes(graph);
        for (size_t k = 0; k < graph.nodes.size(); ++k) {
            const Node& node = graph.nodes[k];
            if (!live[k] || !is_foldable_op(node)) continue;
            bool all_constant = true;
            for (const auto& in : node.inputs)
                if (!in.empty() && !graph.is_constant(in)) all_constant = false;
            if (!all_constant) continue;
            bool output_is_graph_output = false;
            for (const auto& out : node.outputs)
                if (graph.is_graph_output(out)) output_is_graph_output = true;
            // Graph outputs must be produced by the run (a constant output would be copied anyway).
            if (output_is_graph_output) continue;
            std::vector<ValuePtr> values = context.evaluate(graph, k);
            if (values.size() != node.outputs.size()) continue;
            bool all_tensors = true;
            for (const auto& v : values)
                if (!v || v->kind != TESS_VALUE_TENSOR) all_tensors = false;
            if (!all_tensors) continue;
            for (size_t o = 0; o < values.size(); ++o) {
                if (node.outputs[o].empty()) continue;
                fusion::set_constant(graph, node.outputs[o], SharedValue(values[o].release(), ValueDeleter{}));
            }
            log_message(TESS_LOG_DEBUG, "optimizer", "folded " + node.label());
            folded[k] = true;
            changed = true;
        }
        if (!changed) return false;
        std::vector<Node> kept;
        for (size_t k = 0; k < graph.nodes.size(); ++k)
            if (!folded[k]) kept.push_back(std::move(graph.nodes[k]));
        graph.nodes = std::move(kept);
        return true;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_constant_folding_pass() { return std::make_unique<ConstantFolding>(); }

}  // namespace tessera
