// Folds a per-channel Mul or Add by a constant into the Conv or inference BatchNormalization that produces its
// input, the way Caffe-converted models (DenseNet's Scale layers) and some exporters write a normalization:
//   Conv(X, W, B) * c   = Conv(X, W * c, B * c)        BN(x; s, b) * c = BN(x; s * c, b * c)
//   Conv(X, W, B) + c   = Conv(X, W, B + c)            BN(x; s, b) + c = BN(x; s, b + c)
// where c is a float32 constant holding one value per channel (shape [C, 1, ..] or [1, C, 1, ..]) or a scalar, and
// the producer's output feeds only the Mul/Add.  Each fold removes a pass over the activations.
#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"

namespace tessera {

namespace {

// The per-channel values of `name` for a tensor of `rank` with `channels` channels on axis 1, or nullopt.
std::optional<std::vector<float>> channel_values(const Graph& graph, const std::string& name, size_t rank,
                                                 int64_t channels) {
    auto dims = fusion::constant_dims(graph, name);
    if (!dims || dims->size() > rank) return std::nullopt;
    auto values = fusion::constant_floats(graph, name);
    if (!values) return std::nullopt;
    // Right-aligned broadcasting: every axis but the channel axis must be 1.
    const size_t offset = rank - dims->size();
    int64_t along_channels = 1;
    for (size_t i = 0; i < dims->size(); ++i) {
        const size_t axis = offset + i;
        if (axis == 1) along_channels = (*dims)[i];
        else if ((*dims)[i] != 1) return std::nullopt;
    }
    if (along_channels == 1) return std::vector<float>(static_cast<size_t>(channels), values->empty() ? 0.0f : (*values)[0]);
    if (along_channels != channels) return std::nullopt;
    return values;
}

class FoldChannelAffine : public GraphPass {
public:
    const char* name() const override { return "fold-channel-affine"; }

    bool run(Graph& graph, const PassContext&) const override {
        bool changed = false;
        auto readers = fusion::consumers(graph);
        auto producers = graph.producers();
        std::vector<bool> removed(graph.nodes.size(), false);
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            const Node& op = graph.nodes[n];
            if (!op.domain.empty() || (op.op_type != "Mul" && op.op_type != "Add") || op.inputs.size() != 2 ||
                op.outputs.size() != 1 || op.inputs[0] == op.inputs[1])
                continue;
            const bool multiply = op.op_type == "Mul";
            const int data = graph.is_constant(op.inputs[0]) ? 1 : 0;
            const std::string& constant = op.inputs[1 - data];
            auto producer = producers.find(op.inputs[data]);
            if (producer == producers.end() || removed[producer->second]) continue;
            Node& source = graph.nodes[producer->second];
            if (!fusion::only_feeds(graph, readers, op.inputs[data], n)) continue;
            auto shape = fusion::static_shape(graph, op.inputs[data]);
            auto out_shape = fusion::static_shape(graph, op.outputs[0]);
            if (!shape || !out_shape || *shape != *out_shape || shape->size() < 2) continue;  // no broadcasting up
            const int64_t channels = (*shape)[1];
            auto c = channel_values(graph, constant, shape->size(), channels);
            if (!c) continue;
            if (source.domain.empty() && source.op_type == "Conv" && source.outputs.size() == 1) {
                if (!fold_into_conv(graph, source, *c, multiply, channels)) continue;
            } else if (source.domain.empty() && source.op_type == "BatchNormalization" && source.inputs.size() == 5 &&
                       fusion::int_attribute(source, "training_mode", 0) == 0 &&
                       (source.outputs.size() == 1 || source.outputs[1].empty())) {
                if (!fold_into_batchnorm(graph, source, *c, multiply, channels)) continue;
            } else {
                continue;
            }
            source.outputs[0] = op.outputs[0];
            removed[n] = true;
            changed = true;
        }
        if (!changed) return false;
        fusion::erase_nodes(graph, removed);
        return true;
    }

private:
    static bool fold_into_conv(Graph& graph, Node& conv, const std::vector<float>& c, bool multiply, int64_t M) {
        auto w_dims = fusion::constant_dims(graph, conv.inputs.size() > 1 ? conv.inputs[1] : "");
        if (!w_dims || w_dims->empty() || (*w_dims)[0] != M) return false;
        std::optional<std::vector<float>> bias = std::vector<float>(static_cast<size_t>(M), 0.0f);
        if (conv.inputs.size() > 2 && !conv.inputs[2].empty()) bias = fusion::constant_floats(graph, conv.inputs[2], M);
        if (!bias) return false;
        if (multiply) {
            auto weights = fusion::constant_floats(graph, conv.inputs[1]);
            if (!weights) return false;
            const size_t per_channel = weights->size() / static_cast<size_t>(M);
            for (size_t m = 0; m < static_cast<size_t>(M); ++m) {
                for (size_t k = 0; k < per_channel; ++k) (*weights)[m * per_channel + k] *= c[m];
                (*bias)[m] *= c[m];
            }
            conv.inputs.resize(3);
            conv.inputs[1] = fusion::add_float_constant(graph, conv.inputs[1] + "_scaled", *w_dims, *weights);
        } else {
            for (size_t m = 0; m < static_cast<size_t>(M); ++m) (*bias)[m] += c[m];
            conv.inputs.resize(3);
        }
        conv.inputs[2] = fusion::add_float_constant(graph, conv.outputs[0] + "_bias_folded", {M}, *bias);
        return true;
    }

    static bool fold_into_batchnorm(Graph& graph, Node& bn, const std::vector<float>& c, bool multiply, int64_t C) {
        auto scale = fusion::constant_floats(graph, bn.inputs[1], C);
        auto bias = fusion::constant_floats(graph, bn.inputs[2], C);
        if (!scale || !bias) return false;
        for (size_t i = 0; i < static_cast<size_t>(C); ++i) {
            if (multiply) {
                (*scale)[i] *= c[i];
                (*bias)[i] *= c[i];
            } else {
                (*bias)[i] += c[i];
            }
        }
        if (multiply) bn.inputs[1] = fusion::add_float_constant(graph, bn.inputs[1] + "_scaled", {C}, *scale);
        bn.inputs[2] = fusion::add_float_constant(graph, bn.inputs[2] + "_folded", {C}, *bias);
        return true;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_fold_channel_affine_pass() { return std::make_unique<FoldChannelAffine>(); }

}  // namespace tessera
