// Fuses a linear layer as exporters write it, MatMul by a constant weight matrix, then Add of a constant bias along the
// last axis, then optionally an activation, into one FusedMatMulBias node of the optimizer's domain
// (TESS_FUSED_OPS_DOMAIN, provider.h), so that the bias is the products' starting value and the activation is
// applied while the output block is in cache, instead of two more passes over memory:
//   MatMul(A, W) -> Add(., b) [-> act]   => FusedMatMulBias(A, W, b) [activation=act]
// W is a 2-D float32 constant [K, N]; b a float32 constant of N elements shaped [N] or [1, ..., 1, N] (no wider
// than the product, so the sum has the product's shape; the fused node takes it as it is).  Activations: FusedConv's, plus GELU (ONNX's Gelu, opset
// 20, or the optimizer's own Gelu, which fuse-gelu makes from the Erf pattern), whose `approximate` carries over.
// Kept only where the provider that would run the fused node runs every node it replaces.
#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"
#include "tessera/provider.h"

namespace tessera {

namespace {

constexpr const char* kFusedDomain = TESS_FUSED_OPS_DOMAIN;

// GELU as the fused node applies it: ONNX's Gelu (opset 20 on) or the optimizer's; `approximate` "none" or "tanh".
bool gelu_of(const Graph& graph, const Node& node, std::string& approximate) {
    if (node.op_type != "Gelu" || node.inputs.size() != 1 || node.outputs.size() != 1) return false;
    const bool onnx_gelu = node.domain.empty() && graph.opset_of("") >= 20;
    if (!onnx_gelu && node.domain != kFusedDomain) return false;
    approximate = "none";
    if (const onnx::AttributeProto* a = node.attribute("approximate")) approximate = a->s();
    return approximate == "none" || approximate == "tanh";
}

class FuseMatMulBias : public GraphPass {
public:
    const char* name() const override { return "fuse-matmul-bias"; }
    OptimizationLevel level() const override { return OptimizationLevel::Extended; }

    bool run(Graph& graph, const PassContext& context) const override {
        if (!context.placement) return false;
        return fusion::apply_where_placed(graph, context, find(graph));
    }

private:
    static std::vector<fusion::Candidate> find(const Graph& graph) {
        std::vector<fusion::Candidate> found;
        fusion::ChainWalk walk(graph);
        auto single_reader = [&](const std::string& value, size_t& reader) { return walk.single_reader(value, reader); };
        std::vector<bool>& taken = walk.taken;
        for (size_t m = 0; m < graph.nodes.size(); ++m) {
            const Node& matmul = graph.nodes[m];
            if (!matmul.domain.empty() || matmul.op_type != "MatMul" || matmul.inputs.size() != 2 ||
                matmul.outputs.size() != 1 || taken[m])
                continue;
            const auto w_dims = fusion::constant_dims(graph, matmul.inputs[1]);
            // A float32 W makes the product float32 (MatMul's operands share a type), whether or not the model's
            // types were inferred (they are not for opsets newer than the installed onnx knows).
            if (!w_dims || w_dims->size() != 2 || !fusion::constant_floats(graph, matmul.inputs[1])) continue;
            const int64_t N = (*w_dims)[1];
            size_t add_index = 0;
            if (!single_reader(matmul.outputs[0], add_index)) continue;
            const Node& add = graph.nodes[add_index];
            if (!add.domain.empty() || add.op_type != "Add" || add.inputs.size() != 2 || add.outputs.size() != 1 ||
                add.inputs[0] == add.inputs[1])
                continue;
            const std::string& bias = add.inputs[0] == matmul.outputs[0] ? add.inputs[1] : add.inputs[0];
            const auto bias_dims = fusion::constant_dims(graph, bias);
            std::optional<size_t> product_rank;
            if (auto it = graph.types.find(matmul.outputs[0]); it != graph.types.end() && it->second.has_shape)
                product_rank = it->second.dims.size();
            if (!bias_dims || !fusion::constant_floats(graph, bias, N) || bias_dims->empty() ||
                bias_dims->back() != N)
                continue;
            // The bias must not widen the sum: no more dimensions than the product (any [N] bias qualifies).
            if (bias_dims->size() > 1 && !(product_rank && bias_dims->size() <= *product_rank)) continue;

            fusion::Candidate c;
            c.nodes = {m, add_index};
            std::string tail = add.outputs[0];
            Node fused;
            size_t next = 0;
            std::string activation, approximate;
            std::vector<float> params;
            if (single_reader(tail, next) &&
                (fusion::fusable_activation(graph, graph.nodes[next], activation, params) ||
                 gelu_of(graph, graph.nodes[next], approximate))) {
                if (activation.empty()) activation = "Gelu";
                c.nodes.push_back(next);
                tail = graph.nodes[next].outputs[0];
            }
            fused.name = matmul.name.empty() ? tail + "_fused_matmul" : matmul.name + "_fused";
            fused.op_type = "FusedMatMulBias";
            fused.domain = kFusedDomain;
            fused.inputs = {matmul.inputs[0], matmul.inputs[1], bias};
            fused.outputs = {tail};
            if (!activation.empty()) {
                fused.attributes.push_back(fusion::make_attribute("activation", activation));
                if (!params.empty()) fused.attributes.push_back(fusion::make_attribute("activation_params", params));
                if (!approximate.empty()) fused.attributes.push_back(fusion::make_attribute("approximate", approximate));
            }
            for (size_t n : c.nodes) taken[n] = true;
            c.fused = std::move(fused);
            found.push_back(std::move(c));
        }
        return found;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_matmul_bias_pass() { return std::make_unique<FuseMatMulBias>(); }

}  // namespace tessera
