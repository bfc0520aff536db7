// CPU provider: loss functions: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (float, double; float16 and
// bfloat16 computed in float).
//
// Both take scores [N, C, d1, ..., dk], viewed as [N, C, D] with D = d1 * ... * dk (1 for 2-D scores), and class
// indices [N, d1, ..., dk].  SoftmaxCrossEntropyLoss is NegativeLogLikelihoodLoss applied to LogSoftmax(scores)
// along the class axis; it can also return those log-probabilities.  Sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/float16_compute.h"
#include "util/type_list.h"

namespace tessera::cpu {

namespace {

enum class Reduction { None, Sum, Mean };

struct LossAttributes {
    Reduction reduction = Reduction::Mean;
    std::optional<int64_t> ignore_index;

    static LossAttributes parse(const NodeInfo& info) {
        LossAttributes attrs;
        const std::string reduction = info.attr_string("reduction", "mean");
        if (reduction == "none") attrs.reduction = Reduction::None;
        else if (reduction == "sum") attrs.reduction = Reduction::Sum;
        else if (reduction == "mean") attrs.reduction = Reduction::Mean;
        else throw KernelError(std::string(info.op_type()) + ": unknown reduction '" + reduction + "'");
        if (info.has_attr("ignore_index")) attrs.ignore_index = info.attr_int("ignore_index");
        return attrs;
    }
};

// The [N, C, D] view of the scores.
struct LossGeometry {
    int64_t N = 0, C = 0, D = 1;
};

LossGeometry check_shapes(const std::string& op, const Tensor& scores, const Tensor& target, const Tensor* weight) {
    if (scores.rank() < 2) {
        throw KernelError(op + ": scores " + shape_string(scores.shape) + " must be [N, C, d1, ...]");
    }
    Shape expected_target{scores.shape[0]};
    expected_target.insert(expected_target.end(), scores.shape.begin() + 2, scores.shape.end());
    if (target.shape != expected_target) {
        throw KernelError(op + ": target " + shape_string(target.shape) + " must be " + shape_string(expected_target) +
                          " for scores " + shape_string(scores.shape));
    }
    if (weight != nullptr && (weight->rank() != 1 || weight->shape[0] != scores.shape[1])) {
        throw KernelError(op + ": weight " + shape_string(weight->shape) + " must be [" +
                          std::to_string(scores.shape[1]) + "]");
    }
    if (weight != nullptr && weight->type != scores.type) {
        throw KernelError(op + ": weight must have the element type of the scores");
    }
    LossGeometry g;
    g.N = scores.shape[0];
    g.C = scores.shape[1];
    for (size_t d = 2; d < scores.rank(); ++d) g.D *= scores.shape[d];
    return g;
}

// Every target must be a class index or the ignored index.
template <typename Index> void check_targets(const std::string& op, const Index* target, int64_t count, int64_t classes,
                                             const std::optional<int64_t>& ignore_index) {
    for (int64_t i = 0; i < count; ++i) {
        const int64_t t = target[i];
        if (ignore_index && t == *ignore_index) continue;
        if (t < 0 || t >= classes) {
            throw KernelError(op + ": target value " + std::to_string(t) + " at index " + std::to_string(i) +
                              " is outside [0, " + std::to_string(classes) + ")");
        }
    }
}

// loss = -log_prob[n, target, d] * weight[target]; none: one value per target, sum: their sum, mean: their sum
// divided by the sum of the weights of the targets that are not ignored (NaN when that is zero, as in ONNX's
// reference).  `out` holds N * D values for Reduction::None, one otherwise.
template <typename T, typename Index> void negative_log_likelihood(const T* log_prob, const Index* target,
                                                                   const T* weight, const LossGeometry& g,
                                                                   const LossAttributes& attrs, T* out) {
    double total = 0;
    double total_weight = 0;
    for (int64_t n = 0; n < g.N; ++n) {
        for (int64_t d = 0; d < g.D; ++d) {
            const int64_t i = n * g.D + d;
            const int64_t t = target[i];
            double loss = 0;
            double w = 0;
            if (!(attrs.ignore_index && t == *attrs.ignore_index)) {
                w = weight ? double(weight[t]) : 1.0;
                loss = -double(log_prob[(n * g.C + t) * g.D + d]) * w;
            }
            if (attrs.reduction == Reduction::None) {
                out[i] = T(loss);
            } else {
                total += loss;
                total_weight += w;
            }
        }
    }
    if (attrs.reduction == Reduction::Sum) out[0] = T(total);
    if (attrs.reduction == Reduction::Mean) out[0] = T(total / total_weight);
}

// log_prob = LogSoftmax(scores) along C for each of the N * D lines (C elements D apart); lines are split across
// the pool in groups of neighbouring d so that the inner loops run over contiguous memory.
template <typename T> void log_softmax_classes(ThreadPool& pool, const T* scores, const LossGeometry& g, T* log_prob) {
    constexpr int64_t kColumns = 64;  // neighbouring lines handled together
    const int64_t groups = (g.D + kColumns - 1) / kColumns;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.C * std::min(g.D, kColumns)));
    pool.parallel_for(g.N * groups, grain, [&](int64_t begin, int64_t end) {
        T max[kColumns];
        double sum[kColumns];
        for (int64_t task = begin; task < end; ++task) {
            const int64_t n = task / groups;
            const int64_t d0 = (task % groups) * kColumns;
            const int64_t width = std::min(kColumns, g.D - d0);
            const T* in = scores + n * g.C * g.D + d0;
            T* out = log_prob + n * g.C * g.D + d0;
            std::fill(max, max + width, -std::numeric_limits<T>::infinity());
            std::fill(sum, sum + width, 0.0);
            for (int64_t c = 0; c < g.C; ++c) {
                for (int64_t k = 0; k < width; ++k) max[k] = std::max(max[k], in[c * g.D + k]);
            }
            for (int64_t c = 0; c < g.C; ++c) {
                for (int64_t k = 0; k < width; ++k) sum[k] += std::exp(double(in[c * g.D + k] - max[k]));
            }
            for (int64_t k = 0; k < width; ++k) max[k] += T(std::log(sum[k]));  // now the shift
            for (int64_t c = 0; c < g.C; ++c) {
                for (int64_t k = 0; k < width; ++k) out[c * g.D + k] = in[c * g.D + k] - max[k];
            }
        }
    });
}

class LossKernel final : public Kernel {
public:
    LossKernel(const NodeInfo& info, bool softmax)
        : op_(info.op_type()), softmax_(softmax), attrs_(LossAttributes::parse(info)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& scores = ctx.input(0);
        const Tensor& target = ctx.input(1);
        const Tensor* weight = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        const LossGeometry g = check_shapes(op_, scores, target, weight);
        dispatch<int32_t, int64_t>(target.type, [&]<typename Index>() {
            check_targets(op_, target.ptr<Index>(), target.size(), g.C, attrs_.ignore_index);
        });
        const Shape loss_shape = attrs_.reduction == Reduction::None ? target.shape : Shape{};
        Tensor& loss = ctx.output(0, scores.type, loss_shape);
        Tensor* log_prob = softmax_ && ctx.output_wanted(1) ? &ctx.output(1, scores.type, scores.shape) : nullptr;

        if (is_16bit_float(scores.type)) {
            const WidenedTensor wide_scores(scores);
            const std::optional<WidenedTensor> wide_weight =
                weight ? std::optional<WidenedTensor>(std::in_place, *weight) : std::nullopt;
            NarrowedOutput narrow_loss(loss);
            std::optional<NarrowedOutput> narrow_log_prob;
            if (log_prob) narrow_log_prob.emplace(*log_prob);
            run<float>(ctx, g, wide_scores.tensor().ptr<float>(), target,
                       wide_weight ? wide_weight->tensor().ptr<float>() : nullptr, narrow_loss.tensor().ptr<float>(),
                       narrow_log_prob ? narrow_log_prob->tensor().ptr<float>() : nullptr);
            narrow_loss.finish();
            if (narrow_log_prob) narrow_log_prob->finish();
            return;
        }
        dispatch_list(FloatTypes{}, scores.type, [&]<typename T>() {
            run<T>(ctx, g, scores.ptr<T>(), target, weight ? weight->ptr<T>() : nullptr, loss.ptr<T>(),
                   log_prob ? log_prob->ptr<T>() : nullptr);
        });
    }

private:
    // log_prob_out: where SoftmaxCrossEntropyLoss writes its log-probabilities (null: not wanted).
    template <typename T> void run(KernelContext& ctx, const LossGeometry& g, const T* scores, const Tensor& target,
                                   const T* weight, T* loss, T* log_prob_out) const {
        const T* log_prob = scores;
        std::vector<T> scratch;
        if (softmax_) {
            if (log_prob_out == nullptr) {
                scratch.resize(static_cast<size_t>(g.N * g.C * g.D));
                log_prob_out = scratch.data();
            }
            log_softmax_classes(ctx.pool(), scores, g, log_prob_out);
            log_prob = log_prob_out;
        }
        dispatch<int32_t, int64_t>(target.type, [&]<typename Index>() {
            negative_log_likelihood(log_prob, target.ptr<Index>(), weight, g, attrs_, loss);
        });
    }

    std::string op_;
    bool softmax_;
    LossAttributes attrs_;
};

void add_loss(KernelRegistry& registry, const char* op, bool softmax) {
    registry.add(KernelDef{
        .domain = "",
        .op_type = op,
        .since_version = 12,
        .end_version = 0,
        .input_types = {{0, type_ids_with_16bit_floats(FloatTypes{})}, {1, {TESS_ELEMENT_INT32, TESS_ELEMENT_INT64}}},
        .memory = KernelMemory::Normal,
        .factory = [softmax](const NodeInfo& info) -> std::unique_ptr<Kernel> {
            return std::make_unique<LossKernel>(info, softmax);
        }});
}

}  // namespace

void register_loss_kernels(KernelRegistry& registry) {
    // The versions (12, 13, 22) differ only in the element types they admit.
    add_loss(registry, "NegativeLogLikelihoodLoss", false);
    add_loss(registry, "SoftmaxCrossEntropyLoss", true);
}

}  // namespace tessera::cpu
