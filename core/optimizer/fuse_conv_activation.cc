// Fuses Conv, an optional residual Add and an optional activation into one FusedConv node of the optimizer's own
// domain (TESS_FUSED_OPS_DOMAIN, provider.h; the signature of onnxruntime's com.microsoft FusedConv:
// Y = activation(Conv(X, W, B) + Z)), so that the sum and the activation are applied
// while the convolution's output block is still in cache instead of in two more passes over memory:
//   Conv -> act                      => FusedConv(X, W, B) activation=act
//   Conv -> Add(., Z) [-> act]       => FusedConv(X, W, B, Z) [activation=act]   (also a two-input Sum)
// Activations: Relu, Clip (constant bounds), Sigmoid, Tanh, LeakyRelu, HardSigmoid, as FusedConv defines them.
// The fused node is kept only where the provider that would run it is the one that would run every node it
// replaces (PassContext::placement); elsewhere the graph stays as it was.
#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"
#include "tessera/provider.h"

namespace tessera {

namespace {

constexpr const char* kFusedDomain = TESS_FUSED_OPS_DOMAIN;

bool is_float32(const Graph& graph, const std::string& value) {
    auto it = graph.types.find(value);
    return it != graph.types.end() && it->second.element_type == TESS_ELEMENT_FLOAT32;
}

class FuseConvActivation : public GraphPass {
public:
    const char* name() const override { return "fuse-conv-activation"; }
    OptimizationLevel level() const override { return OptimizationLevel::Extended; }

    bool run(Graph& graph, const PassContext& context) const override {
        if (!context.placement) return false;
        return fusion::apply_where_placed(graph, context, find_chains(graph));
    }

private:
    static std::vector<fusion::Candidate> find_chains(const Graph& graph) {
        std::vector<fusion::Candidate> chains;
        fusion::ChainWalk walk(graph);
        auto single_reader = [&](const std::string& value, size_t& reader) { return walk.single_reader(value, reader); };
        std::vector<bool>& taken = walk.taken;
        for (size_t c = 0; c < graph.nodes.size(); ++c) {
            const Node& conv = graph.nodes[c];
            if (!conv.domain.empty() || conv.op_type != "Conv" || conv.outputs.size() != 1 || taken[c]) continue;
            if (!is_float32(graph, conv.outputs[0])) continue;
            fusion::Candidate chain;
            chain.nodes.push_back(c);
            std::string tail = conv.outputs[0];
            std::string z;
            size_t next = 0;
            if (single_reader(tail, next)) {
                const Node& add = graph.nodes[next];
                // Sum of two inputs is an Add (older exporters write residual connections that way).
                if (add.domain.empty() && (add.op_type == "Add" || add.op_type == "Sum") && add.inputs.size() == 2 &&
                    add.outputs.size() == 1 &&
                    add.inputs[0] != add.inputs[1]) {
                    const std::string& other = add.inputs[0] == tail ? add.inputs[1] : add.inputs[0];
                    // Z must have exactly the convolution's shape: FusedConv does not broadcast it.
                    auto conv_shape = fusion::static_shape(graph, tail);
                    auto other_shape = fusion::static_shape(graph, other);
                    auto sum_shape = fusion::static_shape(graph, add.outputs[0]);
                    if (conv_shape && other_shape && sum_shape && *conv_shape == *other_shape &&
                        *conv_shape == *sum_shape && is_float32(graph, other)) {
                        z = other;
                        chain.nodes.push_back(next);
                        tail = add.outputs[0];
                    }
                }
            }
            std::string activation;
            std::vector<float> params;
            if (single_reader(tail, next) && fusion::fusable_activation(graph, graph.nodes[next], activation, params)) {
                chain.nodes.push_back(next);
                tail = graph.nodes[next].outputs[0];
            } else {
                activation.clear();
            }
            if (chain.nodes.size() == 1) continue;

            Node fused;
            fused.name = conv.name.empty() ? tail + "_fused_conv" : conv.name + "_fused";
            fused.op_type = "FusedConv";
            fused.domain = kFusedDomain;
            fused.inputs = conv.inputs;
            fused.inputs.resize(3);  // X, W, B ("" when absent)
            if (!z.empty()) fused.inputs.push_back(z);
            while (!fused.inputs.empty() && fused.inputs.back().empty()) fused.inputs.pop_back();
            fused.outputs = {tail};
            fused.attributes = conv.attributes;
            if (!activation.empty()) {
                fused.attributes.push_back(fusion::make_attribute("activation", activation));
                if (!params.empty()) fused.attributes.push_back(fusion::make_attribute("activation_params", params));
            }
            for (size_t n : chain.nodes) taken[n] = true;
            chain.fused = std::move(fused);
            chains.push_back(std::move(chain));
        }
        return chains;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_conv_activation_pass() { return std::make_unique<FuseConvActivation>(); }

}  // namespace tessera
