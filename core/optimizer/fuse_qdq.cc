// Turns the QDQ groups that onnxruntime's quantize_static (QDQ format) writes into integer operators, as
// onnxruntime's QDQ transformer does, so that a quantized model computes in 8-bit integers and keeps its weights in
// 8 bits instead of running float kernels between DequantizeLinear and QuantizeLinear (and holding every weight
// dequantized to float32, four times its size):
//
//   DQ(x), DQ(w) [, DQ(b int32)] -> Conv -> Q                 => QLinearConv
//   DQ(a), DQ(b) -> MatMul -> Q                                => QLinearMatMul
//   DQ(a), DQ(b) -> MatMul  (float output)                     => com.microsoft MatMulIntegerToFloat
//   DQ(a), DQ(b) [, DQ(c int32)] -> Gemm [-> Q]                => com.microsoft QGemm (float output without Q)
//   DQ(x) -> GlobalAveragePool -> Q                            => com.microsoft QLinearGlobalAveragePool
//
// Every DQ/Q must be an 8-bit, non-blocked quantization with constant scales and zero points; activations per
// tensor, weights per tensor or per output channel (Conv: axis 0; MatMul/Gemm B: per column).  A DQ that other
// nodes also read stays for them.  The pass runs before constant folding, which would otherwise fold each weight's
// DQ into a float constant, and keeps a fused node only where the provider that runs the group runs it too.
#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"

namespace tessera {

namespace {

constexpr const char* kMicrosoft = "com.microsoft";

using fusion::constant_elements;
using fusion::element_type;
using fusion::is_8bit;

// A DequantizeLinear or QuantizeLinear the fusion can absorb: (data, scale, zero point), 8-bit data, constant
// float32 scale and zero point (a zero point is required: the fused operators need its type), no block_size.
struct Quantization {
    std::string data, scale, zero_point;
    int32_t type = TESS_ELEMENT_UNDEFINED;  // of the quantized side
    int64_t axis = 1;
    int64_t scales = 0;  // number of scale values
};

std::optional<Quantization> quantization_of(const Graph& graph, const Node& node, const char* op) {
    if (!node.domain.empty() || node.op_type != op || node.inputs.size() != 3 || node.outputs.size() != 1 ||
        node.inputs[2].empty())
        return std::nullopt;
    if (fusion::int_attribute(node, "block_size", 0) != 0) return std::nullopt;
    Quantization q;
    q.data = node.inputs[0];
    q.scale = node.inputs[1];
    q.zero_point = node.inputs[2];
    q.axis = fusion::int_attribute(node, "axis", 1);
    q.type = element_type(graph, q.zero_point);
    q.scales = constant_elements(graph, q.scale);
    if (!is_8bit(q.type) || element_type(graph, q.scale) != TESS_ELEMENT_FLOAT32 || q.scales < 1 ||
        constant_elements(graph, q.zero_point) != q.scales)
        return std::nullopt;
    if (std::string(op) == "DequantizeLinear" && element_type(graph, q.data) != q.type) return std::nullopt;
    return q;
}

// The DQ producing `value`, when it is an absorbable one.
std::optional<Quantization> dequantized(const Graph& graph, const std::unordered_map<std::string, size_t>& producers,
                                        const std::string& value) {
    auto it = producers.find(value);
    if (it == producers.end()) return std::nullopt;
    return quantization_of(graph, graph.nodes[it->second], "DequantizeLinear");
}

// A bias DQ of constant int32 data with zero point 0 (or none) and the scale of the product, x_scale * w_scale
// (per output channel when the weights are), as quantizers write it: then the fused operators take the int32 values
// as they are.  Another scale would change the sum.
std::optional<std::string> int32_bias(const Graph& graph, const std::unordered_map<std::string, size_t>& producers,
                                      const std::string& value, const Quantization& x, const Quantization& w) {
    auto it = producers.find(value);
    if (it == producers.end()) return std::nullopt;
    const Node& dq = graph.nodes[it->second];
    if (!dq.domain.empty() || dq.op_type != "DequantizeLinear" || dq.inputs.size() < 2 ||
        element_type(graph, dq.inputs[0]) != TESS_ELEMENT_INT32 || !graph.is_constant(dq.inputs[0]))
        return std::nullopt;
    if (dq.inputs.size() > 2 && !dq.inputs[2].empty()) {
        const TessValue* zero = graph.initializers.count(dq.inputs[2]) ? graph.initializers.at(dq.inputs[2]).get()
                                                                      : nullptr;
        if (zero == nullptr || !graph.is_constant(dq.inputs[2]) || zero->element_type != TESS_ELEMENT_INT32) return std::nullopt;
        const auto* zeros = static_cast<const int32_t*>(zero->data);
        for (size_t i = 0; i < zero->element_count(); ++i)
            if (zeros[i] != 0) return std::nullopt;
    }
    const auto bias_scale = fusion::constant_floats(graph, dq.inputs[1]);
    const auto x_scale = fusion::constant_floats(graph, x.scale, 1);
    const auto w_scale = fusion::constant_floats(graph, w.scale, w.scales);
    if (!bias_scale || !x_scale || !w_scale || (bias_scale->size() != 1 && bias_scale->size() != w_scale->size()))
        return std::nullopt;
    for (size_t i = 0; i < std::max(bias_scale->size(), w_scale->size()); ++i) {
        const float expected = (*x_scale)[0] * (*w_scale)[w_scale->size() == 1 ? 0 : i];
        if ((*bias_scale)[bias_scale->size() == 1 ? 0 : i] != expected) return std::nullopt;
    }
    return dq.inputs[0];
}

class FuseQdq : public GraphPass {
public:
    const char* name() const override { return "fuse-qdq"; }
    OptimizationLevel level() const override { return OptimizationLevel::Extended; }

    bool run(Graph& graph, const PassContext& context) const override {
        if (!context.placement || graph.opset_of("") < 10) return false;
        return fusion::apply_where_placed(graph, context, find(graph));
    }

private:
    static std::vector<fusion::Candidate> find(const Graph& graph) {
        std::vector<fusion::Candidate> found;
        const auto producers = graph.producers();
        fusion::ChainWalk walk(graph);
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& node = graph.nodes[n];
            if (!node.domain.empty() || node.outputs.size() != 1 || walk.taken[n]) continue;
            const bool conv = node.op_type == "Conv", matmul = node.op_type == "MatMul",
                       gemm = node.op_type == "Gemm", pool = node.op_type == "GlobalAveragePool";
            if (!conv && !matmul && !gemm && !pool) continue;
            const size_t operands = pool ? 1 : 2;
            if (node.inputs.size() < operands) continue;
            std::vector<Quantization> in;
            for (size_t i = 0; i < operands; ++i)
                if (auto q = dequantized(graph, producers, node.inputs[i])) in.push_back(*q);
            if (in.size() != operands || in[0].scales != 1) continue;
            // The output's Q, when the output feeds one.
            std::optional<Quantization> out;
            size_t q_index = 0;
            if (walk.single_reader(node.outputs[0], q_index))
                out = quantization_of(graph, graph.nodes[q_index], "QuantizeLinear");
            if (out && out->scales != 1) out.reset();
            if ((conv || pool) && !out) continue;  // these only exist with a quantized output
            // Depthwise convolutions (one input channel per group) stay float between their DQ and Q: the CPU
            // provider's float depthwise kernel (vectorized along rows, no padded copies) is faster than its exact
            // integer one, and onnxruntime's results agree either way.
            if (conv && fusion::int_attribute(node, "group", 1) != 1) {
                const auto dims = fusion::constant_dims(graph, in[1].data);
                if (!dims || dims->size() < 2 || (*dims)[1] == 1) continue;
            }

            fusion::Candidate c;
            c.nodes = {n};
            if (out) c.nodes.push_back(q_index);
            Node fused;
            fused.name = (node.name.empty() ? node.outputs[0] : node.name) + "_qdq";
            fused.outputs = {out ? graph.nodes[q_index].outputs[0] : node.outputs[0]};
            if (pool) {
                fused.op_type = "QLinearGlobalAveragePool";
                fused.domain = kMicrosoft;
                fused.inputs = {in[0].data, in[0].scale, in[0].zero_point, out->scale, out->zero_point};
            } else {
                const Quantization& w = in[1];
                // Weights per tensor, or one scale per output channel / column.
                if (w.scales != 1) {
                    const auto dims = fusion::constant_dims(graph, w.data);
                    if (!dims || dims->size() < 2) continue;
                    const bool per_channel = conv ? (w.axis == 0 && w.scales == (*dims)[0])
                                                  : (dims->size() == 2 && (w.axis == 1 || w.axis == -1) &&
                                                     w.scales == (*dims)[1]);
                    if (!per_channel) continue;
                    if (gemm && fusion::int_attribute(node, "transB", 0) != 0) continue;
                }
                std::optional<std::string> bias;
                if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
                    bias = int32_bias(graph, producers, node.inputs[2], in[0], w);
                    if (!bias || matmul) continue;
                    if (gemm && fusion::float_attribute(node, "beta", 1.0f) != 1.0f) continue;
                }
                if (conv) {
                    fused.op_type = "QLinearConv";
                    fused.inputs = {in[0].data, in[0].scale, in[0].zero_point, w.data, w.scale, w.zero_point,
                                    out->scale, out->zero_point};
                    if (bias) fused.inputs.push_back(*bias);
                    fused.attributes = node.attributes;
                } else if (matmul && out) {
                    fused.op_type = "QLinearMatMul";
                    fused.inputs = {in[0].data, in[0].scale, in[0].zero_point, w.data, w.scale, w.zero_point,
                                    out->scale, out->zero_point};
                } else if (matmul) {
                    fused.op_type = "MatMulIntegerToFloat";
                    fused.domain = kMicrosoft;
                    fused.inputs = {in[0].data, w.data, in[0].scale, w.scale, in[0].zero_point, w.zero_point};
                } else {  // Gemm
                    fused.op_type = "QGemm";
                    fused.domain = kMicrosoft;
                    fused.inputs = {in[0].data, in[0].scale, in[0].zero_point, w.data, w.scale, w.zero_point,
                                    bias ? *bias : std::string()};
                    if (out) {
                        fused.inputs.push_back(out->scale);
                        fused.inputs.push_back(out->zero_point);
                    }
                    for (const auto& attr : node.attributes)
                        if (attr.name() == "alpha" || attr.name() == "transA" || attr.name() == "transB")
                            fused.attributes.push_back(attr);
                }
            }
            for (size_t k : c.nodes) walk.taken[k] = true;
            c.fused = std::move(fused);
            found.push_back(std::move(c));
        }
        return found;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_qdq_pass() { return std::make_unique<FuseQdq>(); }

}  // namespace tessera
