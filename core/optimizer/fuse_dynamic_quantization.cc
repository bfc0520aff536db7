// Fuses the tail of a dynamically quantized MatMul, as onnxruntime's quantize_dynamic writes it, into one
// com.microsoft MatMulIntegerToFloat (as onnxruntime's optimizer does):
//
//   a_q, a_scale, a_zero = DynamicQuantizeLinear(a)
//   MatMulInteger(a_q, B, a_zero, b_zero) -> Cast(to float) -> Mul(., Mul(a_scale, b_scale)) [-> Add(., bias)]
//     => MatMulIntegerToFloat(a_q, B, a_scale, b_scale, a_zero, b_zero [, bias])
//
// The convolutions of a dynamically quantized CNN go the same way, with what quantize_dynamic leaves after them:
//
//   ConvInteger(x_q, W, x_zero, w_zero) -> Cast(to float) -> Mul(., Mul(x_scale, w_scale))
//     [-> BatchNormalization (inference, constant)] [-> Relu | Clip (constant bounds)]
//     => ai.tessera ConvIntegerToFloat(x_q, W, x_zero, w_zero, x_scale, w_scale [, a, b]) [activation]
//
// with a = gamma / sqrt(var + epsilon) and b = beta - mean * a per channel, rounded in float as the normalization
// rounds them, so that y = clamp((float(sum) * scale) * a + b) gives the chain's bits; W and w_scale (one value) are
// constants.  Four passes over the convolution's output (the int32 sums, their float copy, the scaled copy, the
// normalized copy) become none.
//
// B, b_scale, b_zero and the bias are constants.  The fused kernel computes exactly what the chain does -- the int32
// sum converted to float, multiplied by the float product of the scales, then the bias added -- without writing the
// int32 product, its float copy and the scaled copy to memory in between.  The DynamicQuantizeLinear stays (its
// outputs often feed several products); a depthwise convolution reading it takes its float input instead and
// quantizes the rows it reads itself (find_quantizing), and where a ConvIntegerToFloat makes its input, it joins
// that node, which gathers the range while writing the floats (find_quantized_outputs).
#include <optional>

#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"
#include "tessera/provider.h"

namespace tessera {

namespace {

bool is_op(const Node& node, const char* op, size_t inputs, size_t outputs = 1) {
    return node.domain.empty() && node.op_type == op && node.inputs.size() >= inputs && node.outputs.size() == outputs;
}

// What the MatMul and Conv forms share: product(x_q, W, x_zero, w_zero) with x_q and x_zero from a
// DynamicQuantizeLinear and W (and w_zero, if given) constant, read only by Cast(to float), read only by
// Mul(., Mul(x_scale, w_scale)) with x_scale the DynamicQuantizeLinear's and w_scale constant.
struct ScaledProduct {
    const Node* quantize;
    std::string w_zero, x_scale, w_scale;
    size_t cast, mul;  // node indices
};

std::optional<ScaledProduct> scaled_product(const Graph& graph, const fusion::ChainWalk& walk,
                                            const std::unordered_map<std::string, size_t>& producers,
                                            const Node& product) {
    auto producer = [&](const std::string& value) -> const Node* {
        auto it = producers.find(value);
        return it == producers.end() ? nullptr : &graph.nodes[it->second];
    };
    if (product.inputs.size() < 3 || !graph.is_constant(product.inputs[1])) return std::nullopt;
    ScaledProduct chain;
    chain.quantize = producer(product.inputs[0]);
    if (chain.quantize == nullptr || !is_op(*chain.quantize, "DynamicQuantizeLinear", 1, 3) ||
        product.inputs[2] != chain.quantize->outputs[2])
        return std::nullopt;
    chain.w_zero = product.inputs.size() > 3 ? product.inputs[3] : std::string();
    if (!chain.w_zero.empty() && !graph.is_constant(chain.w_zero)) return std::nullopt;
    if (!walk.single_reader(product.outputs[0], chain.cast)) return std::nullopt;
    const Node& cast = graph.nodes[chain.cast];
    if (!is_op(cast, "Cast", 1) || fusion::int_attribute(cast, "to", 0) != onnx::TensorProto::FLOAT)
        return std::nullopt;
    if (!walk.single_reader(cast.outputs[0], chain.mul)) return std::nullopt;
    const Node& mul = graph.nodes[chain.mul];
    if (!is_op(mul, "Mul", 2) || mul.inputs.size() != 2) return std::nullopt;
    const std::string& scale = mul.inputs[0] == cast.outputs[0] ? mul.inputs[1] : mul.inputs[0];
    // scale = Mul(x_scale, w_scale): the float product of the two, as the fused kernels form it.
    const Node* scales = producer(scale);
    if (scales == nullptr || !is_op(*scales, "Mul", 2) || scales->inputs.size() != 2) return std::nullopt;
    chain.x_scale = chain.quantize->outputs[1];
    if (scales->inputs[0] == chain.x_scale) chain.w_scale = scales->inputs[1];
    else if (scales->inputs[1] == chain.x_scale) chain.w_scale = scales->inputs[0];
    if (chain.w_scale.empty() || !fusion::constant_floats(graph, chain.w_scale)) return std::nullopt;
    return chain;
}

class FuseDynamicQuantization : public GraphPass {
public:
    const char* name() const override { return "fuse-dynamic-quantization"; }
    OptimizationLevel level() const override { return OptimizationLevel::Extended; }

    bool run(Graph& graph, const PassContext& context) const override {
        if (!context.placement) return false;
        const bool changed = fusion::apply_where_placed(graph, context, find(graph));
        std::vector<std::string> constants;
        const bool convolutions = fusion::apply_where_placed(graph, context, find_convolutions(graph, constants));
        fusion::erase_unread_constants(graph, constants);  // those of chains left as they were
        const bool quantizing = fusion::apply_where_placed(graph, context, find_quantizing(graph));
        const bool quantized = fusion::apply_where_placed(graph, context, find_quantized_outputs(graph));
        return changed || convolutions || quantizing || quantized;
    }

private:
    // The DynamicQuantizeLinear of a ConvIntegerToFloat's output joins it, as its outputs 1-3 (bytes, scale, zero
    // point): the kernel gathers the output's range as it writes it, so that the range pass over the floats goes.
    static std::vector<fusion::Candidate> find_quantized_outputs(const Graph& graph) {
        std::vector<fusion::Candidate> found;
        const auto producers = graph.producers();
        std::vector<bool> taken(graph.nodes.size(), false);  // one quantization per convolution
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& quantize = graph.nodes[n];
            if (!is_op(quantize, "DynamicQuantizeLinear", 1, 3)) continue;
            auto it = producers.find(quantize.inputs[0]);
            if (it == producers.end() || taken[it->second]) continue;
            const Node& conv = graph.nodes[it->second];
            if (conv.domain != TESS_FUSED_OPS_DOMAIN || conv.op_type != "ConvIntegerToFloat" ||
                conv.outputs.size() != 1)
                continue;
            fusion::Candidate c;
            c.nodes = {it->second, n};
            c.fused = conv;
            c.fused.outputs.insert(c.fused.outputs.end(), quantize.outputs.begin(), quantize.outputs.end());
            taken[it->second] = true;
            found.push_back(std::move(c));
        }
        return found;
    }

    // A depthwise ConvIntegerToFloat reading the bytes, scale and zero point of one DynamicQuantizeLinear reads
    // the floats that quantization reads instead and quantizes them itself, as it needs them: the bytes, when no
    // other node reads them, are then never made (the DynamicQuantizeLinear still finds the scale and zero point).
    // Only depthwise convolutions (one channel per group, every channel's own filter) read their input a few rows
    // at a time, so that the quantized rows stay in cache; the others would quantize the whole input first, as the
    // DynamicQuantizeLinear does.
    static std::vector<fusion::Candidate> find_quantizing(const Graph& graph) {
        std::vector<fusion::Candidate> found;
        const auto producers = graph.producers();
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& conv = graph.nodes[n];
            if (conv.domain != TESS_FUSED_OPS_DOMAIN || conv.op_type != "ConvIntegerToFloat" || conv.inputs.size() < 6)
                continue;
            const auto w_dims = fusion::constant_dims(graph, conv.inputs[1]);
            if (!w_dims || w_dims->size() != 4 || (*w_dims)[1] != 1 ||
                fusion::int_attribute(conv, "group", 1) != (*w_dims)[0])
                continue;
            auto it = producers.find(conv.inputs[0]);
            if (it == producers.end()) continue;
            const Node& quantize = graph.nodes[it->second];
            if (!is_op(quantize, "DynamicQuantizeLinear", 1, 3) || conv.inputs[0] != quantize.outputs[0] ||
                conv.inputs[2] != quantize.outputs[2] || conv.inputs[4] != quantize.outputs[1])
                continue;
            fusion::Candidate c;
            c.nodes = {n};
            c.fused = conv;
            c.fused.inputs[0] = quantize.inputs[0];
            found.push_back(std::move(c));
        }
        return found;
    }

    static std::vector<fusion::Candidate> find_convolutions(Graph& graph, std::vector<std::string>& constants) {
        std::vector<fusion::Candidate> found;
        const auto producers = graph.producers();
        fusion::ChainWalk walk(graph);
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& conv = graph.nodes[n];
            if (!is_op(conv, "ConvInteger", 3) || walk.taken[n]) continue;
            const auto w_dims = fusion::constant_dims(graph, conv.inputs[1]);
            if (!w_dims || w_dims->size() != 4) continue;
            const int64_t M = (*w_dims)[0];
            const std::optional<ScaledProduct> chain = scaled_product(graph, walk, producers, conv);
            if (!chain || fusion::constant_elements(graph, chain->w_scale) != 1) continue;
            fusion::Candidate c;
            c.nodes = {n, chain->cast, chain->mul};
            std::string output = graph.nodes[chain->mul].outputs[0];
            Node fused;
            fused.inputs = {conv.inputs[0], conv.inputs[1], conv.inputs[2], chain->w_zero, chain->x_scale,
                            chain->w_scale};
            // A BatchNormalization after it, as its per-channel scale and shift.
            size_t next = 0;
            if (walk.single_reader(output, next)) {
                const Node& bn = graph.nodes[next];
                bool plain = is_op(bn, "BatchNormalization", 5) && bn.inputs.size() == 5 &&
                             fusion::int_attribute(bn, "training_mode", 0) == 0;
                for (size_t o = 1; plain && o < bn.outputs.size(); ++o) plain = bn.outputs[o].empty();
                const auto gamma = fusion::constant_floats(graph, bn.inputs.size() == 5 ? bn.inputs[1] : "", M);
                const auto beta = fusion::constant_floats(graph, bn.inputs.size() == 5 ? bn.inputs[2] : "", M);
                const auto mean = fusion::constant_floats(graph, bn.inputs.size() == 5 ? bn.inputs[3] : "", M);
                const auto var = fusion::constant_floats(graph, bn.inputs.size() == 5 ? bn.inputs[4] : "", M);
                if (plain && bn.inputs[0] == output && gamma && beta && mean && var) {
                    std::vector<float> a, b;
                    fusion::batchnorm_scale_shift(*gamma, *beta, *mean, *var,
                                                  fusion::float_attribute(bn, "epsilon", 1e-5f), a, b);
                    constants.push_back(fusion::add_float_constant(graph, bn.outputs[0] + "_channel_scale", {M}, a));
                    constants.push_back(fusion::add_float_constant(graph, bn.outputs[0] + "_channel_shift", {M}, b));
                    fused.inputs.push_back(constants[constants.size() - 2]);
                    fused.inputs.push_back(constants.back());
                    c.nodes.push_back(next);
                    output = bn.outputs[0];
                }
            }
            // A Relu or Clip after that.
            std::string activation;
            std::vector<float> params;
            if (walk.single_reader(output, next) &&
                fusion::fusable_activation(graph, graph.nodes[next], activation, params) &&
                (activation == "Relu" || activation == "Clip")) {
                c.nodes.push_back(next);
                output = graph.nodes[next].outputs[0];
            } else {
                activation.clear();
            }
            fused.name = (conv.name.empty() ? output : conv.name) + "_to_float";
            fused.op_type = "ConvIntegerToFloat";
            fused.domain = TESS_FUSED_OPS_DOMAIN;
            fused.outputs = {output};
            for (const auto& attribute : conv.attributes) fused.attributes.push_back(attribute);
            if (!activation.empty()) {
                fused.attributes.push_back(fusion::make_attribute("activation", activation));
                if (!params.empty()) fused.attributes.push_back(fusion::make_attribute("activation_params", params));
            }
            for (size_t k : c.nodes) walk.taken[k] = true;
            c.fused = std::move(fused);
            found.push_back(std::move(c));
        }
        return found;
    }

    static std::vector<fusion::Candidate> find(const Graph& graph) {
        std::vector<fusion::Candidate> found;
        const auto producers = graph.producers();
        fusion::ChainWalk walk(graph);
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& product = graph.nodes[n];
            if (!is_op(product, "MatMulInteger", 2) || walk.taken[n]) continue;
            const std::optional<ScaledProduct> chain = scaled_product(graph, walk, producers, product);
            if (!chain) continue;
            const std::string& b_scale = chain->w_scale;
            // The product's columns, for the bias and a per-column scale.
            const auto b_dims = fusion::constant_dims(graph, product.inputs[1]);
            if (!b_dims || b_dims->size() != 2) continue;
            const int64_t N = (*b_dims)[1];
            const auto b_scale_values = fusion::constant_floats(graph, b_scale);
            if (b_scale_values->size() != 1 && static_cast<int64_t>(b_scale_values->size()) != N) continue;

            fusion::Candidate c;
            c.nodes = {n, chain->cast, chain->mul};
            std::string output = graph.nodes[chain->mul].outputs[0];
            std::string bias;
            size_t add_index = 0;
            if (walk.single_reader(output, add_index)) {
                const Node& add = graph.nodes[add_index];
                if (is_op(add, "Add", 2) && add.inputs.size() == 2) {
                    const std::string& other = add.inputs[0] == output ? add.inputs[1] : add.inputs[0];
                    const auto dims = fusion::constant_dims(graph, other);
                    if (dims && dims->size() == 1 && (*dims)[0] == N && fusion::constant_floats(graph, other, N)) {
                        bias = other;
                        c.nodes.push_back(add_index);
                        output = add.outputs[0];
                    }
                }
            }
            Node fused;
            fused.name = (product.name.empty() ? output : product.name) + "_to_float";
            fused.op_type = "MatMulIntegerToFloat";
            fused.domain = "com.microsoft";
            fused.inputs = {product.inputs[0], product.inputs[1], chain->x_scale, b_scale, chain->quantize->outputs[2],
                            chain->w_zero};
            if (!bias.empty()) fused.inputs.push_back(bias);
            fused.outputs = {output};
            for (size_t k : c.nodes) walk.taken[k] = true;
            c.fused = std::move(fused);
            found.push_back(std::move(c));
        }
        return found;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_dynamic_quantization_pass() {
    return std::make_unique<FuseDynamicQuantization>();
}

}  // namespace tessera
