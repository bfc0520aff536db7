// Rewrites an inference BatchNormalization that no Conv before it could absorb (fuse_conv_batchnorm.cc), together
// with the activation after it, as the per-channel convolution it is, when what it makes feeds convolutions:
//   BN(X; gamma, beta, mean, var) [-> act]  =>  FusedConv(X, a [C,1,1,1], b) group=C kernel 1x1 [activation=act]
//   a = gamma / sqrt(var + epsilon),  b = beta - mean * a    (in float, as the normalization itself rounds them)
// DenseNet normalizes the concatenation of every earlier layer this way before each of its 1x1 convolutions.  As
// two nodes, the normalization and the activation each make a pass over that tensor; as one convolution they make
// one, and a provider that runs a 1x1 convolution over a per-channel one's rows as they are made (the CPU
// provider's blocked layout) never writes the tensor between them at all.  Only where every reader of the result is
// a convolution or an average pool: elsewhere the normalization stays as the model wrote it.  The fused node is kept
// only where the provider that runs the normalization claims it (PassContext::placement).
#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"
#include "tessera/provider.h"

namespace tessera {

namespace {

// Readers after which the rewrite pays: convolutions, and the average pools that DenseNet's transitions put between
// the normalization and the convolution once pool_before_pointwise_conv.cc has moved them.
bool convolution_or_pool(const Node& node) {
    return (node.domain.empty() && (node.op_type == "Conv" || node.op_type == "AveragePool")) ||
           (node.domain == TESS_FUSED_OPS_DOMAIN && node.op_type == "FusedConv");
}

class BatchNormToConv : public GraphPass {
public:
    const char* name() const override { return "batchnorm-to-conv"; }
    OptimizationLevel level() const override { return OptimizationLevel::Extended; }

    bool run(Graph& graph, const PassContext& context) const override {
        if (!context.placement) return false;
        std::vector<std::string> constants;
        const bool changed = fusion::apply_where_placed(graph, context, find(graph, constants));
        // The scales and shifts of normalizations left as they were (their provider does not run the convolution).
        fusion::erase_unread_constants(graph, constants);
        return changed;
    }

private:
    // A Conv whose output feeds only `bn`: fuse_conv_batchnorm folds the normalization into it (once a
    // fold_channel_affine between them has run, say), which is better than any convolution of its own.
    static bool foldable_into_producer(const Graph& graph, const std::unordered_map<std::string, size_t>& producers,
                                       const fusion::ChainWalk& walk, const Node& bn, size_t b) {
        auto producer = producers.find(bn.inputs[0]);
        if (producer == producers.end()) return false;
        const Node& conv = graph.nodes[producer->second];
        return conv.domain.empty() && conv.op_type == "Conv" && conv.outputs.size() == 1 &&
               fusion::only_feeds(graph, walk.readers, conv.outputs[0], b);
    }

    static std::vector<fusion::Candidate> find(Graph& graph, std::vector<std::string>& constants) {
        std::vector<fusion::Candidate> found;
        fusion::ChainWalk walk(graph);
        const auto producers = graph.producers();
        for (size_t b = 0; b < graph.nodes.size(); ++b) {
            const Node& bn = graph.nodes[b];
            if (!bn.domain.empty() || bn.op_type != "BatchNormalization" || bn.inputs.size() != 5 || walk.taken[b])
                continue;
            if (fusion::int_attribute(bn, "training_mode", 0) != 0 || bn.outputs.empty() || bn.outputs[0].empty())
                continue;
            bool extra_outputs = false;
            for (size_t o = 1; o < bn.outputs.size(); ++o) extra_outputs |= !bn.outputs[o].empty();
            if (extra_outputs) continue;
            // Rank 4 with a known channel count (the batch and the image size may vary).
            auto type = graph.types.find(bn.inputs[0]);
            if (type == graph.types.end() || !type->second.has_shape || type->second.dims.size() != 4 ||
                type->second.dims[1] <= 0 || type->second.element_type != TESS_ELEMENT_FLOAT32)
                continue;
            if (foldable_into_producer(graph, producers, walk, bn, b)) continue;
            const int64_t C = type->second.dims[1];
            auto gamma = fusion::constant_floats(graph, bn.inputs[1], C);
            auto beta = fusion::constant_floats(graph, bn.inputs[2], C);
            auto mean = fusion::constant_floats(graph, bn.inputs[3], C);
            auto var = fusion::constant_floats(graph, bn.inputs[4], C);
            if (!gamma || !beta || !mean || !var) continue;

            fusion::Candidate candidate;
            candidate.nodes.push_back(b);
            std::string tail = bn.outputs[0];
            std::string activation;
            std::vector<float> params;
            size_t next = 0;
            // Relu and Clip only (the clamps the CPU provider's blocked 1x1 rows apply with the normalization's own
            // rounding); other activations stay a node of their own, after the normalization.
            if (walk.single_reader(tail, next) &&
                fusion::fusable_activation(graph, graph.nodes[next], activation, params) &&
                (activation == "Relu" || activation == "Clip")) {
                candidate.nodes.push_back(next);
                tail = graph.nodes[next].outputs[0];
            } else {
                activation.clear();
            }
            if (!read_only_by_convolutions_or_pools(graph, walk, tail)) continue;

            std::vector<float> a, shift;
            fusion::batchnorm_scale_shift(*gamma, *beta, *mean, *var, fusion::float_attribute(bn, "epsilon", 1e-5f), a,
                                          shift);
            Node conv;
            conv.name = bn.name.empty() ? tail + "_as_conv" : bn.name + "_as_conv";
            conv.op_type = "FusedConv";
            conv.domain = TESS_FUSED_OPS_DOMAIN;
            constants.push_back(fusion::add_float_constant(graph, bn.outputs[0] + "_channel_scale", {C, 1, 1, 1}, a));
            constants.push_back(fusion::add_float_constant(graph, bn.outputs[0] + "_channel_shift", {C}, shift));
            conv.inputs = {bn.inputs[0], constants[constants.size() - 2], constants.back()};
            conv.outputs = {tail};
            conv.attributes.push_back(fusion::make_attribute("group", C));
            conv.attributes.push_back(fusion::make_attribute("kernel_shape", std::vector<int64_t>{1, 1}));
            if (!activation.empty()) {
                conv.attributes.push_back(fusion::make_attribute("activation", activation));
                if (!params.empty()) conv.attributes.push_back(fusion::make_attribute("activation_params", params));
            }
            for (size_t n : candidate.nodes) walk.taken[n] = true;
            candidate.fused = std::move(conv);
            found.push_back(std::move(candidate));
        }
        return found;
    }

    // `value` is read by convolutions and pools alone (one or more), and is not a graph output.
    static bool read_only_by_convolutions_or_pools(const Graph& graph, const fusion::ChainWalk& walk,
                                                   const std::string& value) {
        if (graph.is_graph_output(value)) return false;
        auto it = walk.readers.find(value);
        if (it == walk.readers.end() || it->second.empty()) return false;
        for (size_t reader : it->second)
            if (!convolution_or_pool(graph.nodes[reader])) return false;
        return true;
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_batchnorm_to_conv_pass() { return std::make_unique<BatchNormToConv>(); }

}  // namespace tessera
