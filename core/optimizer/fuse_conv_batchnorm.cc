// Folds an inference-mode BatchNormalization into the Conv before it:
//   BN(Conv(X, W, B)) = Conv(X, W * s, (B - mean) * s + beta),  s = gamma / sqrt(var + epsilon)  (per out channel)
// when W, B and the four BN parameters are float32 constants and the Conv's output feeds only the BN.  The result is
// a plain Conv: every provider runs it, and a pass over the activations disappears.  Folding is done in double so
// that the folded weights are the correctly rounded products.
#include <cmath>

#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"

namespace tessera {

namespace {

class FuseConvBatchNorm : public GraphPass {
public:
    const char* name() const override { return "fuse-conv-batchnorm"; }

    bool run(Graph& graph, const PassContext&) const override {
        bool changed = false;
        auto readers = fusion::consumers(graph);
        auto producers = graph.producers();
        std::vector<bool> removed(graph.nodes.size(), false);
        for (size_t b = 0; b < graph.nodes.size(); ++b) {
            const Node& bn = graph.nodes[b];
            if (!bn.domain.empty() || bn.op_type != "BatchNormalization" || bn.inputs.size() != 5) continue;
            if (fusion::int_attribute(bn, "training_mode", 0) != 0) continue;
            bool extra_outputs = false;
            for (size_t o = 1; o < bn.outputs.size(); ++o)
                if (!bn.outputs[o].empty()) extra_outputs = true;
            if (extra_outputs || bn.outputs.empty() || bn.outputs[0].empty()) continue;
            auto producer = producers.find(bn.inputs[0]);
            if (producer == producers.end() || removed[producer->second]) continue;
            Node& conv = graph.nodes[producer->second];
            if (!conv.domain.empty() || conv.op_type != "Conv" || conv.outputs.size() != 1) continue;
            if (!fusion::only_feeds(graph, readers, conv.outputs[0], b)) continue;

            auto w_dims = fusion::constant_dims(graph, conv.inputs.size() > 1 ? conv.inputs[1] : "");
            if (!w_dims || w_dims->size() < 3 || (*w_dims)[0] <= 0) continue;
            const int64_t M = (*w_dims)[0];
            auto weights = fusion::constant_floats(graph, conv.inputs[1]);
            std::optional<std::vector<float>> bias = std::vector<float>(static_cast<size_t>(M), 0.0f);
            if (conv.inputs.size() > 2 && !conv.inputs[2].empty()) bias = fusion::constant_floats(graph, conv.inputs[2], M);
            auto gamma = fusion::constant_floats(graph, bn.inputs[1], M);
            auto beta = fusion::constant_floats(graph, bn.inputs[2], M);
            auto mean = fusion::constant_floats(graph, bn.inputs[3], M);
            auto var = fusion::constant_floats(graph, bn.inputs[4], M);
            if (!weights || !bias || !gamma || !beta || !mean || !var) continue;

            const double epsilon = fusion::float_attribute(bn, "epsilon", 1e-5f);
            const size_t per_channel = weights->size() / static_cast<size_t>(M);
            std::vector<float> folded_bias(static_cast<size_t>(M));
            for (size_t m = 0; m < static_cast<size_t>(M); ++m) {
                const double s = double((*gamma)[m]) / std::sqrt(double((*var)[m]) + epsilon);
                for (size_t k = 0; k < per_channel; ++k) {
                    float& w = (*weights)[m * per_channel + k];
                    w = static_cast<float>(double(w) * s);
                }
                folded_bias[m] = static_cast<float>((double((*bias)[m]) - double((*mean)[m])) * s + double((*beta)[m]));
            }
            const std::string w_name = fusion::add_float_constant(graph, conv.inputs[1] + "_bn_folded", *w_dims, *weights);
            const std::string b_name = fusion::add_float_constant(graph, bn.outputs[0] + "_bias_bn_folded", {M}, folded_bias);
            conv.inputs.resize(3);
            conv.inputs[1] = w_name;
            conv.inputs[2] = b_name;
            conv.outputs[0] = bn.outputs[0];
            removed[b] = true;
            changed = true;
        }
        if (!changed) return false;
        fusion::erase_nodes(graph, removed);
        return true;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_conv_batchnorm_pass() { return std::make_unique<FuseConvBatchNorm>(); }

}  // namespace tessera
