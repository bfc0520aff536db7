// Averages before a pointwise convolution instead of after it:
//   AveragePool(Conv(X, W, B)) = Conv(AveragePool(X), W, B)
// when the convolution is 1x1 with unit strides and no padding (at every position the same linear map of that
// position's channels, plus B) and the pool averages whole windows (no padding, no ceil mode, no dilations): an
// average of linear maps is the linear map of the average.  DenseNet's transition layers (a 1x1 convolution halving
// the channels, then a 2x2 stride-2 average) so convolve a quarter of the positions.  Only where the convolution's
// output feeds the pool alone; the results differ from the original order by float rounding only.
#include <optional>

#include "optimizer/fusion_util.h"
#include "optimizer/optimizer.h"

namespace tessera {

namespace {

// The INTS attribute `name`, or nullopt when the node lacks it.
std::optional<std::vector<int64_t>> ints(const Node& node, const std::string& name) {
    const onnx::AttributeProto* attr = node.attribute(name);
    if (attr == nullptr) return std::nullopt;
    return std::vector<int64_t>(attr->ints().begin(), attr->ints().end());
}

bool all_equal(const std::optional<std::vector<int64_t>>& values, int64_t v) {
    if (!values) return true;  // absent: the default, which the callers pass as v
    for (int64_t x : *values)
        if (x != v) return false;
    return true;
}

bool no_explicit_padding(const Node& node) {
    const onnx::AttributeProto* auto_pad = node.attribute("auto_pad");
    if (auto_pad != nullptr && auto_pad->s() != "NOTSET" && auto_pad->s() != "VALID") return false;
    return all_equal(ints(node, "pads"), 0);
}

// A 2-D AveragePool over whole windows of its input.
bool averages_whole_windows(const Node& pool) {
    const auto kernel = ints(pool, "kernel_shape");
    return kernel && kernel->size() == 2 && no_explicit_padding(pool) &&
           fusion::int_attribute(pool, "ceil_mode", 0) == 0 && all_equal(ints(pool, "dilations"), 1);
}

// A Conv with 1x1 filters, unit strides and no padding: the same map of each position's channels.
bool pointwise(const Graph& graph, const Node& conv) {
    if (conv.inputs.size() < 2 || conv.outputs.size() != 1) return false;
    auto w = graph.types.find(conv.inputs[1]);
    if (w == graph.types.end() || !w->second.has_shape || w->second.dims.size() != 4 || w->second.dims[2] != 1 ||
        w->second.dims[3] != 1)
        return false;
    return all_equal(ints(conv, "kernel_shape"), 1) && all_equal(ints(conv, "strides"), 1) && no_explicit_padding(conv);
}

class PoolBeforePointwiseConv : public GraphPass {
public:
    const char* name() const override { return "pool-before-pointwise-conv"; }
    OptimizationLevel level() const override { return OptimizationLevel::Extended; }

    bool run(Graph& graph, const PassContext&) const override {
        const auto readers = fusion::consumers(graph);
        const auto producers = graph.producers();
        std::vector<std::pair<size_t, size_t>> swaps;  // (conv, pool)
        for (size_t p = 0; p < graph.nodes.size(); ++p) {
            const Node& pool = graph.nodes[p];
            if (!pool.domain.empty() || pool.op_type != "AveragePool" || pool.inputs.size() != 1 ||
                pool.outputs.size() != 1 || !averages_whole_windows(pool))
                continue;
            auto producer = producers.find(pool.inputs[0]);
            if (producer == producers.end()) continue;
            const Node& conv = graph.nodes[producer->second];
            if (!conv.domain.empty() || conv.op_type != "Conv" || !pointwise(graph, conv) ||
                !fusion::only_feeds(graph, readers, conv.outputs[0], p))
                continue;
            auto x = graph.types.find(conv.inputs[0]);
            if (x == graph.types.end() || !x->second.has_shape || x->second.dims.size() != 4) continue;
            swaps.emplace_back(producer->second, p);
        }
        for (auto [c, p] : swaps) {
            Node& conv = graph.nodes[c];
            Node& pool = graph.nodes[p];
            // The pooled input, shaped as the pool's output with the input's channels.
            std::string pooled = pool.outputs[0] + "_pooled_input";
            auto taken = [&](const std::string& name) {
                return graph.types.count(name) || graph.initializers.count(name) || producers.count(name);
            };
            for (int suffix = 1; taken(pooled); ++suffix)
                pooled = pool.outputs[0] + "_pooled_input_" + std::to_string(suffix);
            TypeInfo type = graph.types.at(conv.inputs[0]);
            auto y = graph.types.find(pool.outputs[0]);
            if (y != graph.types.end() && y->second.has_shape && y->second.dims.size() == 4) {
                for (size_t d : {size_t(2), size_t(3)}) {
                    type.dims[d] = y->second.dims[d];
                    if (d < type.dim_params.size())
                        type.dim_params[d] = d < y->second.dim_params.size() ? y->second.dim_params[d] : "";
                }
            } else {
                type.has_shape = false;
                type.dims.clear();
                type.dim_params.clear();
            }
            graph.types.erase(conv.outputs[0]);
            graph.types[pooled] = std::move(type);
            // The pool takes the convolution's place in the order (it reads what the convolution read), the
            // convolution the pool's.
            Node new_pool = pool, new_conv = conv;
            new_pool.inputs = {conv.inputs[0]};
            new_pool.outputs = {pooled};
            new_conv.inputs[0] = pooled;
            new_conv.outputs = {pool.outputs[0]};
            conv = std::move(new_pool);
            pool = std::move(new_conv);
        }
        return !swaps.empty();
    }
};

}  // namespace

std::unique_ptr<GraphPass> make_pool_before_pointwise_conv_pass() {
    return std::make_unique<PoolBeforePointwiseConv>();
}

}  // namespace tessera
