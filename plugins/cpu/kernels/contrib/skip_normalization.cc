// CPU provider, com.microsoft: the residual normalizations and the biased softmax of onnxruntime's transformer
// optimizer, with its semantics.
//
//   SkipLayerNormalization(input, skip, gamma [, beta [, bias]]; epsilon = 1e-12)
//   SkipSimplifiedLayerNormalization(input, skip, gamma [, bias]; epsilon = 1e-12)
//     input (B, S, H) or (T, H); skip like input, or (1, S, H) / (S, H) for a 3-D input (repeated over the batch);
//     gamma, beta, bias (H).  Per row of H elements v = input + skip (+ bias), then
//       LayerNorm:   out = (v - mean) / sqrt(var + epsilon) * gamma (+ beta)
//       Simplified:  out = v / sqrt(E[v^2] + epsilon) * gamma
//     Outputs: out; mean and inv_std_var (float, input[:-1] + [1]; onnxruntime's CPU kernel leaves them unset, here
//     they hold the row mean and 1 / the denominator); input_skip_bias_sum (v, like input).
//   BiasSoftmax(data, bias; axis = 1, is_inner_broadcast)
//     Softmax over the dims from `axis` on, flattened, of data + bias.  The bias holds size(bias) / size(data[axis:])
//     rows; row b of data uses bias row b / (batches / bias rows) when is_inner_broadcast, else b % bias rows.
//
// float, float16 and bfloat16 compute in float on vector lanes (row sums finished in double), double in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "util/compute_cast.h"
#include "util/thread_scratch.h"
#include "util/normalize_row.h"
#include "util/type_list.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kRowGrainElements = 16384;

struct Scale {
    float factor;
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return x * factor; }
};

struct RowStats {
    double mean = 0, mean_square = 0, variance = 0;
};

RowStats row_stats(const float* v, int64_t n) {
    RowStats s;
    vec::run_best_isa([&] {
        vec::Vf sum{}, squares{};
        int64_t i = 0;
        for (; i + vec::kLanes <= n; i += vec::kLanes) {
            const vec::Vf x = vec::load(v + i);
            sum += x;
            squares += x * x;
        }
        if (i < n) {
            const vec::Vf x = vec::load_n(v + i, n - i);
            sum += x;
            squares += x * x;
        }
        double total = 0, total_squares = 0;
        for (int lane = 0; lane < vec::kLanes; ++lane) {
            total += sum[lane];
            total_squares += squares[lane];
        }
        s.mean = total / static_cast<double>(n);
        s.mean_square = total_squares / static_cast<double>(n);
        // The variance in a second pass around the mean: E[v^2] - mean^2 cancels for rows far from zero.
        const vec::Vf mean = vec::splat(static_cast<float>(s.mean));
        vec::Vf deviations{};
        for (i = 0; i + vec::kLanes <= n; i += vec::kLanes) {
            const vec::Vf d = vec::load(v + i) - mean;
            deviations += d * d;
        }
        double total_deviations = 0;
        for (int lane = 0; lane < vec::kLanes; ++lane) total_deviations += deviations[lane];
        for (; i < n; ++i) total_deviations += (v[i] - s.mean) * (v[i] - s.mean);
        s.variance = total_deviations / static_cast<double>(n);
    });
    return s;
}

RowStats row_stats(const double* v, int64_t n) {
    RowStats s;
    double total = 0, total_squares = 0;
    for (int64_t i = 0; i < n; ++i) {
        total += v[i];
        total_squares += v[i] * v[i];
    }
    s.mean = total / static_cast<double>(n);
    s.mean_square = total_squares / static_cast<double>(n);
    double deviations = 0;
    for (int64_t i = 0; i < n; ++i) deviations += (v[i] - s.mean) * (v[i] - s.mean);
    s.variance = deviations / static_cast<double>(n);
    return s;
}

class SkipLayerNormKernel final : public Kernel {
public:
    SkipLayerNormKernel(const NodeInfo& info, bool simplified)
        : op_(info.op_type()),
          simplified_(simplified),
          beta_index_(simplified ? SIZE_MAX : 3),
          bias_index_(simplified ? 3 : 4),
          epsilon_(info.attr_float("epsilon", 1e-12f)) {
        if (!(epsilon_ >= 0.0f)) throw KernelError(op_ + ": epsilon must not be negative");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& skip = ctx.input(1);
        if (x.rank() != 2 && x.rank() != 3)
            throw KernelError(op_ + ": input must be 3-D (batch, sequence, hidden) or 2-D (tokens, hidden), it has "
                                    "shape " + shape_string(x.shape));
        const size_t r = x.rank(), rs = skip.rank();
        const bool same = skip.shape == x.shape;
        const bool repeated = r == 3 && (rs == 2 || rs == 3) && skip.shape[rs - 1] == x.shape[2] &&
                              skip.shape[rs - 2] == x.shape[1] && (rs == 2 || skip.shape[0] == 1);
        if (!same && !repeated)
            throw KernelError(op_ + ": skip " + shape_string(skip.shape) + " must have the shape of input " +
                              shape_string(x.shape) + ", or (1, S, H) / (S, H) for a 3-D input");
        if (skip.type != x.type) throw KernelError(op_ + ": skip has another element type than input");
        const int64_t hidden = x.shape[r - 1];
        auto check_vector = [&](size_t index, const char* name) {
            if (index == SIZE_MAX || !ctx.has_input(index)) return;
            const Tensor& t = ctx.input(index);
            if (t.rank() != 1 || t.shape[0] != hidden)
                throw KernelError(op_ + ": " + name + " " + shape_string(t.shape) + " must be 1-D of the hidden size " +
                                  std::to_string(hidden));
            if (t.type != x.type) throw KernelError(op_ + ": " + name + " has another element type than input");
        };
        check_vector(2, "gamma");
        check_vector(beta_index_, "beta");
        check_vector(bias_index_, "bias");
        if (x.type == TESS_ELEMENT_FLOAT64) return run<double>(ctx, x, skip, hidden);
        run<float>(ctx, x, skip, hidden);
    }

private:
    template <typename C> void run(KernelContext& ctx, const Tensor& x, const Tensor& skip, int64_t hidden) const {
        Shape stats_shape = x.shape;
        stats_shape.back() = 1;
        Tensor& y = ctx.output(0, x.type, x.shape);
        float* mean_out = ctx.output_wanted(1) ? ctx.output(1, TESS_ELEMENT_FLOAT32, stats_shape).ptr<float>() : nullptr;
        float* inv_std_out =
            ctx.output_wanted(2) ? ctx.output(2, TESS_ELEMENT_FLOAT32, stats_shape).ptr<float>() : nullptr;
        ConvertedOutput<C> sum_out;
        if (ctx.output_wanted(3)) sum_out = ConvertedOutput<C>(ctx.output(3, x.type, x.shape));
        if (x.size() == 0 || hidden == 0) return;
        ThreadPool& pool = ctx.pool();
        const ConvertedInput<C> in(x, pool), sk(skip, pool), gamma(ctx.input(2), pool);
        auto optional = [&](size_t index) {
            return index != SIZE_MAX && ctx.has_input(index) ? ConvertedInput<C>(ctx.input(index), pool)
                                                             : ConvertedInput<C>();
        };
        const ConvertedInput<C> beta = optional(beta_index_), bias = optional(bias_index_);
        ConvertedOutput<C> out(y);
        const int64_t skip_size = skip.size();
        pool.parallel_for(x.size() / hidden, std::max<int64_t>(1, kRowGrainElements / hidden),
                          [&](int64_t begin, int64_t end) {
            C* v = thread_scratch_buffer<C>(hidden);
            for (int64_t row = begin; row < end; ++row) {
                const int64_t offset = row * hidden;
                const C* xr = in.data() + offset;
                const C* sr = sk.data() + offset % skip_size;
                for (int64_t h = 0; h < hidden; ++h) v[h] = xr[h] + sr[h];
                if (bias.data() != nullptr)
                    for (int64_t h = 0; h < hidden; ++h) v[h] += bias.data()[h];
                if (sum_out.data() != nullptr) std::copy(v, v + hidden, sum_out.data() + offset);
                const RowStats s = row_stats(v, hidden);
                const double denominator =
                    std::sqrt((simplified_ ? s.mean_square : s.variance) + static_cast<double>(epsilon_));
                if (mean_out != nullptr) mean_out[row] = static_cast<float>(s.mean);
                if (inv_std_out != nullptr) inv_std_out[row] = static_cast<float>(1.0 / denominator);
                normalize_row(v, out.data() + offset, hidden, static_cast<C>(simplified_ ? 0.0 : s.mean),
                          static_cast<C>(1.0 / denominator), gamma.data(), beta.data());
            }
        });
        out.finish(pool);
        sum_out.finish(pool);
    }

    std::string op_;
    bool simplified_;
    size_t beta_index_, bias_index_;
    float epsilon_;
};

class BiasSoftmaxKernel final : public Kernel {
public:
    explicit BiasSoftmaxKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis", 1)), inner_(info.attr_int("is_inner_broadcast") != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& bias = ctx.input(1);
        if (bias.type != x.type) throw KernelError("BiasSoftmax: bias has another element type than data");
        const int64_t rank = static_cast<int64_t>(x.rank());
        if (axis_ < -rank || axis_ >= rank)
            throw KernelError("BiasSoftmax: axis " + std::to_string(axis_) + " is out of range for data " +
                              shape_string(x.shape));
        const size_t axis = static_cast<size_t>(axis_ < 0 ? axis_ + rank : axis_);
        int64_t batches = 1, elements = 1;
        for (size_t d = 0; d < x.rank(); ++d) (d < axis ? batches : elements) *= x.shape[d];
        Tensor& y = ctx.output(0, x.type, x.shape);
        if (x.size() == 0) return;
        const int64_t bias_size = bias.size();
        if (bias_size == 0 || bias_size % elements != 0 || batches % (bias_size / elements) != 0)
            throw KernelError("BiasSoftmax: bias " + shape_string(bias.shape) + " does not broadcast to data " +
                              shape_string(x.shape) + " along the softmax dims");
        const int64_t bias_rows = bias_size / elements, repeat = batches / bias_rows;
        if (x.type == TESS_ELEMENT_FLOAT64) return run<double>(ctx, x, bias, y, batches, elements, bias_rows, repeat);
        run<float>(ctx, x, bias, y, batches, elements, bias_rows, repeat);
    }

private:
    template <typename C>
    void run(KernelContext& ctx, const Tensor& x, const Tensor& bias, Tensor& y, int64_t batches, int64_t elements,
             int64_t bias_rows, int64_t repeat) const {
        ThreadPool& pool = ctx.pool();
        const ConvertedInput<C> in(x, pool), b(bias, pool);
        ConvertedOutput<C> out(y);
        pool.parallel_for(batches, std::max<int64_t>(1, kRowGrainElements / elements), [&](int64_t begin, int64_t end) {
            for (int64_t row = begin; row < end; ++row) {
                const int64_t bias_row = inner_ ? row / repeat : row % bias_rows;
                const C* xr = in.data() + row * elements;
                const C* br = b.data() + bias_row * elements;
                C* o = out.data() + row * elements;
                for (int64_t i = 0; i < elements; ++i) o[i] = xr[i] + br[i];
                softmax_row(o, elements);
            }
        });
        out.finish(pool);
    }

    static void softmax_row(float* v, int64_t n) {
        vec::run_best_isa([&] {
            const float max = vec::reduce_max(v, n);
            const float inv = 1.0f / vec::exp_shifted_sum(v, v, n, max);
            vec::map(v, v, n, Scale{inv});
        });
    }
    static void softmax_row(double* v, int64_t n) {
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t i = 0; i < n; ++i) max = std::max(max, v[i]);
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += (v[i] = std::exp(v[i] - max));
        for (int64_t i = 0; i < n; ++i) v[i] /= sum;
    }

    int64_t axis_;
    bool inner_;
};

// ---- Checks at session creation (declared shapes; the kernels check the real ones again) ------------------------

std::string check_skip_layer_norm(const NodeInfo& info, bool simplified) {
    if (std::string problem = contrib::same_types(info, {0, 1, 2, 3, 4}); !problem.empty()) return problem;
    if (!(info.attr_float("epsilon", 1e-12f) >= 0.0f)) return "epsilon must not be negative";
    const auto x = contrib::declared_dims(info, 0), skip = contrib::declared_dims(info, 1);
    if (x && x->size() != 2 && x->size() != 3)
        return "input must be 3-D (batch, sequence, hidden) or 2-D (tokens, hidden), it has rank " +
               std::to_string(x->size());
    if (skip && skip->size() != 2 && skip->size() != 3)
        return "skip must be 2-D or 3-D, it has rank " + std::to_string(skip->size());
    if (x && skip && skip->size() > x->size())
        return "skip " + shape_string(*skip) + " has a higher rank than input " + shape_string(*x);
    const int64_t hidden = x && !x->empty() ? x->back() : -1;
    for (size_t i : {size_t{2}, simplified ? SIZE_MAX : size_t{3}, simplified ? size_t{3} : size_t{4}}) {
        const auto d = i == SIZE_MAX ? std::nullopt : contrib::declared_dims(info, i);
        if (!d) continue;
        if (d->size() != 1)
            return "input " + std::to_string(i) + " must be 1-D (hidden), it has rank " + std::to_string(d->size());
        if (hidden >= 0 && (*d)[0] >= 0 && (*d)[0] != hidden)
            return "input " + std::to_string(i) + " has length " + std::to_string((*d)[0]) + ", the hidden size is " +
                   std::to_string(hidden);
    }
    return "";
}

std::string check_bias_softmax(const NodeInfo& info) {
    if (std::string problem = contrib::same_types(info, {0, 1}); !problem.empty()) return problem;
    if (!info.has_attr("is_inner_broadcast")) return "the attribute 'is_inner_broadcast' is required";
    info.attr_int("is_inner_broadcast", 0);
    const int64_t axis = info.attr_int("axis", 1);
    const auto x = contrib::declared_dims(info, 0);
    const auto rank = x ? static_cast<int64_t>(x->size()) : -1;
    if (x && (axis < -rank || axis >= rank))
        return "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank);
    return "";
}

}  // namespace

void register_contrib_skip_normalization_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> layer_norm_types{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT16, TESS_ELEMENT_FLOAT64};
    const std::vector<int32_t> simplified_types = type_ids_with_16bit_floats(FloatTypes{});
    contrib::add(registry, "SkipLayerNormalization", {{0, layer_norm_types}, {1, layer_norm_types}, {2, layer_norm_types}},
                 contrib::factory_with<SkipLayerNormKernel>(false),
                 [](const NodeInfo& info) { return check_skip_layer_norm(info, false); });
    contrib::add(registry, "SkipSimplifiedLayerNormalization",
                 {{0, simplified_types}, {1, simplified_types}, {2, simplified_types}},
                 contrib::factory_with<SkipLayerNormKernel>(true),
                 [](const NodeInfo& info) { return check_skip_layer_norm(info, true); });
    contrib::add(registry, "BiasSoftmax", {{0, layer_norm_types}, {1, layer_norm_types}},
                 make_factory<BiasSoftmaxKernel>(), check_bias_softmax);
}

}  // namespace tessera::cpu
