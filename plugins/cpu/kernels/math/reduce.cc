// CPU provider: reductions — ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp, ReduceSumSquare — and ArgMax/ArgMin.
//
// Integer sums and products wrap around on overflow (util/wrapping.h).  float16 and bfloat16 inputs are widened to
// float, reduced by the float code (accumulating in float) and rounded once at the end (util/float16_compute.h).
//
// A reduction is described by a Reducer (identity, step, finish) and run over the input viewed as alternating
// groups of kept and reduced dimensions (util/axes.h):
//  - rows     {K kept, R reduced}: each output folds R contiguous elements (several accumulators per row, so the
//             loop vectorizes);
//  - columns  {O kept, R reduced, K kept}: each output row of K accumulates R input rows (vectorizes over K);
//  - anything else folds each output's elements through an odometer over the reduced groups.
//
// Axes come from the "axes" attribute before opset 18 (ReduceSum: 13) and from the optional second input after.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/element_convert.h"
#include "util/float16_compute.h"
#include "util/type_list.h"
#include "util/vec_math.h"
#include "util/wrapping.h"

namespace tessera::cpu {

namespace {

enum class Reduction { Sum, Mean, SumSquare, L1, L2, LogSum, LogSumExp, Prod, Max, Min };

// Transcendental finishing steps of integer reductions run in double and truncate, like numpy's astype.
template <typename T> using Wide = std::conditional_t<std::is_same_v<T, float>, float, double>;

// Running log-sum-exp: sum of exp(x - max) with the max tracked online, so it needs one pass and no overflow.
template <typename W> struct LogSumExpAcc {
    W max = -std::numeric_limits<W>::infinity();
    W sum = 0;
};

template <Reduction R, typename T> struct Reducer {
    static constexpr bool kLogSumExp = R == Reduction::LogSumExp;
    using Acc = std::conditional_t<kLogSumExp, LogSumExpAcc<Wide<T>>, T>;

    static Acc identity() {
        if constexpr (kLogSumExp) return Acc{};
        else if constexpr (R == Reduction::Prod) return T(1);
        else if constexpr (R == Reduction::Max) {
            if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
            else return std::numeric_limits<T>::lowest();
        } else if constexpr (R == Reduction::Min) {
            if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
            else return std::numeric_limits<T>::max();
        } else {
            return T(0);
        }
    }

    static Acc step(Acc a, T x) {
        if constexpr (kLogSumExp) {
            using W = Wide<T>;
            const W v = static_cast<W>(x);
            if (v > a.max) {
                a.sum = a.sum * std::exp(a.max - v) + W(1);
                a.max = v;
            } else if (v == a.max) {
                a.sum += W(1);
            } else if (v < a.max) {
                a.sum += std::exp(v - a.max);
            } else {
                a.max = std::numeric_limits<W>::quiet_NaN();  // NaN poisons the result
            }
            return a;
        } else if constexpr (R == Reduction::Prod) {
            return wrapping_mul(a, x);
        } else if constexpr (R == Reduction::Max) {
            // NaN propagates (numpy's max).
            if constexpr (std::is_floating_point_v<T>) return (x > a || x != x) ? x : a;
            else return x > a ? x : a;
        } else if constexpr (R == Reduction::Min) {
            if constexpr (std::is_floating_point_v<T>) return (x < a || x != x) ? x : a;
            else return x < a ? x : a;
        } else if constexpr (R == Reduction::SumSquare || R == Reduction::L2) {
            return wrapping_add(a, wrapping_mul(x, x));
        } else if constexpr (R == Reduction::L1) {
            return wrapping_add(a, wrapping_abs(x));
        } else {
            return wrapping_add(a, x);
        }
    }

    // Combines two partial accumulators (not used for LogSumExp, which folds sequentially).
    static Acc merge(Acc a, Acc b) {
        if constexpr (R == Reduction::Prod) return wrapping_mul(a, b);
        else if constexpr (R == Reduction::Max || R == Reduction::Min) return step(a, b);
        else return wrapping_add(a, b);
    }

    // A floating-point result stored as T: integer types get a defined conversion (the log of a zero sum is -inf,
    // which a plain cast to an integer type leaves undefined; fuzz_model, UBSan).
    template <typename F> static T store(F v) {
        if constexpr (std::is_integral_v<T>) return convert::float_to_integer<T>(v);
        else return static_cast<T>(v);
    }

    static T finish(Acc a, int64_t count) {
        if constexpr (kLogSumExp) {
            return store(a.max + std::log(a.sum));
        } else if constexpr (R == Reduction::Mean) {
            if constexpr (std::is_integral_v<T>) return count == 0 ? T(0) : static_cast<T>(a / static_cast<T>(count));
            else return a / static_cast<T>(count);
        } else if constexpr (R == Reduction::L2) {
            return store(std::sqrt(static_cast<Wide<T>>(a)));
        } else if constexpr (R == Reduction::LogSum) {
            return store(std::log(static_cast<Wide<T>>(a)));
        } else {
            return a;
        }
    }
};

constexpr int64_t kReduceGrain = 32768;  // input elements per parallel task

template <typename Body> void run_float_isa(bool is_float, const Body& body) {
    if (is_float) vec::run_best_isa(body);
    else body();
}

// {K kept, R reduced}: out[k] = fold of in[k*R .. k*R+R).
template <Reduction R, typename T>
void reduce_rows(const T* in, T* out, int64_t rows, int64_t length, int64_t count, ThreadPool& pool) {
    using Red = Reducer<R, T>;
    pool.parallel_for(rows, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, length)),
                      [&](int64_t begin, int64_t end) {
        run_float_isa(std::is_same_v<T, float>, [&] {
            for (int64_t r = begin; r < end; ++r) {
                const T* row = in + r * length;
                if constexpr (Red::kLogSumExp) {
                    auto acc = Red::identity();
                    for (int64_t k = 0; k < length; ++k) acc = Red::step(acc, row[k]);
                    out[r] = Red::finish(acc, count);
                } else {
                    // Independent accumulators let the compiler keep one vector of partial results.
                    constexpr int kLanes = 16;
                    T lanes[kLanes];
                    for (T& lane : lanes) lane = Red::identity();
                    int64_t k = 0;
                    for (; k + kLanes <= length; k += kLanes) {
                        for (int j = 0; j < kLanes; ++j) lanes[j] = Red::step(lanes[j], row[k + j]);
                    }
                    for (; k < length; ++k) lanes[0] = Red::step(lanes[0], row[k]);
                    T acc = lanes[0];
                    for (int j = 1; j < kLanes; ++j) acc = Red::merge(acc, lanes[j]);
                    out[r] = Red::finish(acc, count);
                }
            }
        });
    });
}

// {O kept, R reduced, K kept}: out[o, k] = fold over r of in[o, r, k].  The output doubles as accumulator.
template <Reduction R, typename T>
void reduce_columns(const T* in, T* out, int64_t outer, int64_t length, int64_t inner, int64_t count,
                    ThreadPool& pool) {
    using Red = Reducer<R, T>;
    static_assert(!Red::kLogSumExp);
    // Work items are (o, block of columns); a block is long enough to vectorize, short enough to split.
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    const int64_t item_cost = std::max<int64_t>(1, length * std::min(inner, kBlock));
    pool.parallel_for(outer * blocks, std::max<int64_t>(1, kReduceGrain / item_cost), [&](int64_t begin, int64_t end) {
        run_float_isa(std::is_same_v<T, float>, [&] {
            for (int64_t item = begin; item < end; ++item) {
                const int64_t o = item / blocks;
                const int64_t first = (item % blocks) * kBlock;
                const int64_t width = std::min(kBlock, inner - first);
                T* acc = out + o * inner + first;
                const T* src = in + o * length * inner + first;
                for (int64_t k = 0; k < width; ++k) acc[k] = Red::identity();
                for (int64_t r = 0; r < length; ++r) {
                    const T* row = src + r * inner;
                    for (int64_t k = 0; k < width; ++k) acc[k] = Red::step(acc[k], row[k]);
                }
                for (int64_t k = 0; k < width; ++k) acc[k] = Red::finish(acc[k], count);
            }
        });
    });
}

// Any grouping: each output folds its elements through an odometer over the reduced groups.
template <Reduction R, typename T>
void reduce_general(const T* in, T* out, const std::vector<AxisGroup>& groups, int64_t outputs, int64_t count,
                    ThreadPool& pool) {
    using Red = Reducer<R, T>;
    std::vector<int64_t> group_strides(groups.size());
    int64_t stride = 1;
    for (size_t g = groups.size(); g-- > 0;) {
        group_strides[g] = stride;
        stride *= groups[g].size;
    }
    std::vector<int64_t> kept_sizes, kept_strides, reduced_sizes, reduced_strides;
    for (size_t g = 0; g < groups.size(); ++g) {
        (groups[g].reduced ? reduced_sizes : kept_sizes).push_back(groups[g].size);
        (groups[g].reduced ? reduced_strides : kept_strides).push_back(group_strides[g]);
    }
    if (count == 0) {
        for (int64_t i = 0; i < outputs; ++i) out[i] = Red::finish(Red::identity(), 0);
        return;
    }
    pool.parallel_for(outputs, std::max<int64_t>(1, kReduceGrain / count), [&](int64_t begin, int64_t end) {
        std::array<int64_t, 16> index{};  // reduced groups alternate with kept ones: at most rank/2 + 1 of them
        for (int64_t i = begin; i < end; ++i) {
            int64_t base = 0;
            for (size_t g = kept_sizes.size(), rest = static_cast<size_t>(i); g-- > 0;) {
                base += static_cast<int64_t>(rest % kept_sizes[g]) * kept_strides[g];
                rest /= kept_sizes[g];
            }
            auto acc = Red::identity();
            index.fill(0);
            int64_t offset = base;
            for (int64_t n = 0; n < count; ++n) {
                acc = Red::step(acc, in[offset]);
                for (size_t g = reduced_sizes.size(); g-- > 0;) {
                    offset += reduced_strides[g];
                    if (++index[g] < reduced_sizes[g]) break;
                    offset -= reduced_sizes[g] * reduced_strides[g];
                    index[g] = 0;
                }
            }
            out[i] = Red::finish(acc, count);
        }
    });
}

template <Reduction R, typename T>
void reduce(const T* in, T* out, const Shape& shape, const ReductionAxes& axes, int64_t outputs, ThreadPool& pool) {
    const std::vector<AxisGroup> groups = collapse_reduction(shape, axes.reduced);
    const int64_t count = axes.reduced_count;
    const size_t n = groups.size();
    if (groups.back().reduced && n <= 2) {
        reduce_rows<R>(in, out, n == 2 ? groups[0].size : 1, groups.back().size, count, pool);
        return;
    }
    if constexpr (R != Reduction::LogSumExp) {
        if (n >= 2 && n <= 3 && groups[n - 2].reduced) {
            reduce_columns<R>(in, out, n == 3 ? groups[0].size : 1, groups[n - 2].size, groups.back().size, count,
                              pool);
            return;
        }
    }
    if (groups.size() > 32) throw KernelError("Reduce: too many alternating reduced and kept dimensions");
    reduce_general<R>(in, out, groups, outputs, count, pool);
}

// ---- Kernel --------------------------------------------------------------------------------------------------

using ReduceTypes = TypeList<float, double, int32_t, int64_t, int8_t, uint8_t, uint32_t, uint64_t>;
using ReduceMinMaxTypes = TypeList<float, double, int32_t, int64_t, int8_t, uint8_t, uint32_t, uint64_t, bool>;

template <Reduction R, typename Types> class ReduceKernel final : public Kernel {
public:
    ReduceKernel(const NodeInfo& info, bool axes_from_input)
        : name_(info.op_type()),
          axes_from_input_(axes_from_input),
          keepdims_(info.attr_int("keepdims", 1) != 0),
          noop_with_empty_axes_(info.attr_int("noop_with_empty_axes", 0) != 0) {
        if (!axes_from_input) axes_ = info.attr_ints("axes");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        std::vector<int64_t> axes = axes_;
        if (axes_from_input_ && ctx.has_input(1)) axes = read_axes_tensor(name_, ctx.input(1));
        // Before axes became an input, empty axes always meant "all"; noop_with_empty_axes came with the input.
        const ReductionAxes plan =
            resolve_reduction_axes(name_, x.shape, axes, keepdims_, axes_from_input_ && noop_with_empty_axes_);
        if (plan.noop) {
            ctx.alias_output(0, 0, x.shape);
            return;
        }
        if constexpr (list_contains<float>(Types{})) {
            if (is_16bit_float(x.type)) {
                const WidenedTensor wide(x);
                NarrowedOutput y(ctx.output(0, x.type, plan.output_shape));
                const int64_t outputs = y.tensor().size();
                if (outputs == 0) return;
                reduce<R>(wide.tensor().ptr<float>(), y.tensor().ptr<float>(), x.shape, plan, outputs, ctx.pool());
                y.finish();
                return;
            }
        }
        dispatch_list(Types{}, x.type, [&]<typename T>() {
            Tensor& y = ctx.output(0, x.type, plan.output_shape);
            const int64_t outputs = y.size();
            if (outputs == 0) return;
            reduce<R>(x.ptr<T>(), y.ptr<T>(), x.shape, plan, outputs, ctx.pool());
        });
    }

private:
    std::string name_;
    bool axes_from_input_;
    bool keepdims_;
    bool noop_with_empty_axes_;
    std::vector<int64_t> axes_;
};

// ---- ArgMax / ArgMin -----------------------------------------------------------------------------------------

template <bool kMax> class ArgKernel final : public Kernel {
public:
    explicit ArgKernel(const NodeInfo& info)
        : name_(info.op_type()),
          axis_(info.attr_int("axis", 0)),
          keepdims_(info.attr_int("keepdims", 1) != 0),
          select_last_(info.attr_int("select_last_index", 0) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const size_t axis = normalize_axis(name_, axis_, std::max<size_t>(x.rank(), 1));
        int64_t outer = 1, length = 1, inner = 1;
        Shape out_shape;
        for (size_t d = 0; d < x.rank(); ++d) {
            if (d < axis) outer *= x.shape[d];
            else if (d == axis) length = x.shape[d];
            else inner *= x.shape[d];
            if (d != axis) out_shape.push_back(x.shape[d]);
            else if (keepdims_) out_shape.push_back(1);
        }
        if (length == 0 && outer * inner > 0) {
            throw KernelError(name_ + ": cannot take the index of an extremum over an empty axis");
        }
        Tensor& y = ctx.output(0, TESS_ELEMENT_INT64, out_shape);
        if (y.size() == 0) return;
        // Widening float16 and bfloat16 is exact, so the float search finds the same index.
        if (is_16bit_float(x.type)) {
            const WidenedTensor wide(x);
            return find_extrema(wide.tensor().ptr<float>(), y.ptr<int64_t>(), outer, length, inner, ctx.pool());
        }
        dispatch_list(NumericTypes{}, x.type, [&]<typename T>() {
            find_extrema(x.ptr<T>(), y.ptr<int64_t>(), outer, length, inner, ctx.pool());
        });
    }

private:
    template <typename T>
    void find_extrema(const T* in, int64_t* out, int64_t outer, int64_t length, int64_t inner,
                      ThreadPool& pool) const {
        // NaN counts as the extremum (numpy's argmax/argmin report the first NaN).
        auto better = [](T v, T best) {
            if constexpr (std::is_floating_point_v<T>) {
                if (v != v) return best == best;
            }
            return kMax ? v > best : v < best;
        };
        const bool last = select_last_;
        // Lines of `length` elements `inner` apart; for inner > 1 the inner index runs fastest, so that
        // neighbouring outputs read neighbouring inputs.
        pool.parallel_for(outer * inner, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, length)),
                          [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) {
                const T* line = in + (i / inner) * length * inner + i % inner;
                T best = line[0];
                int64_t best_index = 0;
                for (int64_t k = 1; k < length; ++k) {
                    const T v = line[k * inner];
                    if (better(v, best) || (last && v == best)) {
                        best = v;
                        best_index = k;
                    }
                }
                out[i] = best_index;
            }
        });
    }

    std::string name_;
    int64_t axis_;
    bool keepdims_;
    bool select_last_;
};

// ---- Registration --------------------------------------------------------------------------------------------

// One kernel for opsets [since, end] (end 0: open-ended) reading its axes from the attribute or from input 1.
template <Reduction R, typename Types>
void add_reduce_versions(KernelRegistry& registry, const char* op, int since, int end, bool axes_from_input) {
    std::vector<std::pair<size_t, std::vector<int32_t>>> input_types{{0, type_ids_16bit_via_float(Types{})}};
    if (axes_from_input) input_types.push_back({1, {TESS_ELEMENT_INT64}});
    registry.add(KernelDef{.domain = "",
                           .op_type = op,
                           .since_version = since,
                           .end_version = end,
                           .input_types = std::move(input_types),
                           .memory = KernelMemory::Normal,
                           .factory = [axes_from_input](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<ReduceKernel<R, Types>>(info, axes_from_input);
                           }});
}

// The attribute form before `axes_input_since`, the input form from it up to `end` (0: open-ended).
template <Reduction R, typename Types>
void add_reduce(KernelRegistry& registry, const char* op, int axes_input_since, int end = 0) {
    add_reduce_versions<R, Types>(registry, op, 1, axes_input_since - 1, false);
    add_reduce_versions<R, Types>(registry, op, axes_input_since, end, true);
}

template <bool kMax> void add_arg(KernelRegistry& registry, const char* op) {
    registry.add(KernelDef{.domain = "",
                           .op_type = op,
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, type_ids_with_16bit_floats(NumericTypes{})}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<ArgKernel<kMax>>()});
}

}  // namespace

void register_reduce_kernels(KernelRegistry& registry) {
    add_reduce<Reduction::Sum, ReduceTypes>(registry, "ReduceSum", 13);
    add_reduce<Reduction::Mean, ReduceTypes>(registry, "ReduceMean", 18);
    add_reduce<Reduction::Max, ReduceMinMaxTypes>(registry, "ReduceMax", 18);
    add_reduce<Reduction::Min, ReduceMinMaxTypes>(registry, "ReduceMin", 18);
    add_reduce<Reduction::Prod, ReduceTypes>(registry, "ReduceProd", 18);
    add_reduce<Reduction::L1, ReduceTypes>(registry, "ReduceL1", 18);
    add_reduce<Reduction::L2, ReduceTypes>(registry, "ReduceL2", 18);
    // Opset 28 drops the integer types from ReduceLogSum and ReduceLogSumExp.
    add_reduce<Reduction::LogSum, ReduceTypes>(registry, "ReduceLogSum", 18, 27);
    add_reduce_versions<Reduction::LogSum, FloatTypes>(registry, "ReduceLogSum", 28, 0, true);
    add_reduce<Reduction::LogSumExp, ReduceTypes>(registry, "ReduceLogSumExp", 18, 27);
    add_reduce_versions<Reduction::LogSumExp, FloatTypes>(registry, "ReduceLogSumExp", 28, 0, true);
    add_reduce<Reduction::SumSquare, ReduceTypes>(registry, "ReduceSumSquare", 18);
    add_arg<true>(registry, "ArgMax");
    add_arg<false>(registry, "ArgMin");
}

}  // namespace tessera::cpu
