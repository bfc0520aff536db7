// CPU provider: Softmax, LogSoftmax and Hardmax.
//
// Opset 1-12 coerce the input to 2-D at `axis` (default 1) and normalize each row of the flattened
// [prod(dims[:axis]), prod(dims[axis:])] view; opset 13+ normalize along the single dimension `axis` (default -1).
// Both come down to "rows" of `length` elements that are `stride` apart: contiguous rows for the 2-D view and
// for the last axis, strided ones otherwise (those are gathered into a contiguous buffer first).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/float16_compute.h"
#include "util/type_list.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

enum class Mode { Softmax, LogSoftmax, Hardmax };

// Normalizes one line of n elements, `stride` apart; out may not alias in (LogSoftmax rereads the input).
template <Mode M, typename T> void normalize_line(const T* in, T* out, int64_t n, int64_t stride) {
    if constexpr (M == Mode::Hardmax) {
        // The first maximum wins; a line holding NaN marks its first NaN (NaN never compares greater).
        int64_t best = 0;
        for (int64_t k = 1; k < n; ++k) {
            const T v = in[k * stride], b = in[best * stride];
            if (v > b || (std::isnan(v) && !std::isnan(b))) best = k;
        }
        for (int64_t k = 0; k < n; ++k) out[k * stride] = k == best ? T(1) : T(0);
    } else if constexpr (std::is_same_v<T, float>) {
        if (stride == 1) {
            vec::run_best_isa([&] {
                const float max = vec::reduce_max(in, n);
                const float sum = vec::exp_shifted_sum(in, out, n, max);
                if constexpr (M == Mode::Softmax) {
                    const float scale = 1.0f / sum;
                    for (int64_t k = 0; k < n; ++k) out[k] *= scale;
                } else {
                    const float shift = max + std::log(sum);
                    for (int64_t k = 0; k < n; ++k) out[k] = in[k] - shift;
                }
            });
            return;
        }
    }
    if constexpr (M != Mode::Hardmax) {
        T max = in[0];
        for (int64_t k = 1; k < n; ++k) max = in[k * stride] > max ? in[k * stride] : max;
        T sum = 0;
        for (int64_t k = 0; k < n; ++k) {
            const T e = std::exp(in[k * stride] - max);
            out[k * stride] = e;
            sum += e;
        }
        if constexpr (M == Mode::Softmax) {
            for (int64_t k = 0; k < n; ++k) out[k * stride] /= sum;
        } else {
            const T shift = max + std::log(sum);
            for (int64_t k = 0; k < n; ++k) out[k * stride] = in[k * stride] - shift;
        }
    }
}

// Softmax/LogSoftmax of up to vec::kLanes neighbouring float lines that run across `n` rows `stride` apart
// (a non-last axis): one lane per line.
template <Mode M> void normalize_float_columns(const float* in, float* out, int64_t n, int64_t stride, int64_t lanes) {
    using vec::Vf;
    vec::run_best_isa([&] {
        Vf max = vec::splat(-std::numeric_limits<float>::infinity());
        for (int64_t k = 0; k < n; ++k) max = vec::max(max, vec::load_n(in + k * stride, lanes));
        Vf sum{};
        for (int64_t k = 0; k < n; ++k) {
            const Vf e = vec::exp(vec::load_n(in + k * stride, lanes) - max);
            vec::store_n(out + k * stride, lanes, e);
            sum += e;
        }
        if constexpr (M == Mode::Softmax) {
            const Vf scale = 1.0f / sum;
            for (int64_t k = 0; k < n; ++k) {
                vec::store_n(out + k * stride, lanes, vec::load_n(out + k * stride, lanes) * scale);
            }
        } else {
            Vf shift;
            for (int i = 0; i < vec::kLanes; ++i) shift[i] = max[i] + std::log(sum[i]);
            for (int64_t k = 0; k < n; ++k) {
                vec::store_n(out + k * stride, lanes, vec::load_n(in + k * stride, lanes) - shift);
            }
        }
    });
}

template <Mode M> class SoftmaxKernel final : public Kernel {
public:
    SoftmaxKernel(const NodeInfo& info, bool coerce_2d)
        : name_(info.op_type()), coerce_2d_(coerce_2d), axis_(info.attr_int("axis", coerce_2d ? 1 : -1)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (x.rank() == 0) throw KernelError(name_ + ": input must have at least one dimension");
        const size_t axis = normalize_axis(name_, axis_, x.rank());
        int64_t outer = 1, length = 1, inner = 1;
        for (size_t d = 0; d < x.rank(); ++d) {
            if (d < axis) outer *= x.shape[d];
            else if (d == axis || coerce_2d_) length *= x.shape[d];
            else inner *= x.shape[d];
        }
        if (is_16bit_float(x.type)) {
            const WidenedTensor wide(x);
            NarrowedOutput y(ctx.output(0, x.type, x.shape));
            run<float>(ctx.pool(), wide.tensor().ptr<float>(), y.tensor().ptr<float>(), outer, length, inner);
            y.finish();
            return;
        }
        dispatch_list(FloatTypes{}, x.type, [&]<typename T>() {
            Tensor& y = ctx.output(0, x.type, x.shape);
            run<T>(ctx.pool(), x.ptr<T>(), y.ptr<T>(), outer, length, inner);
        });
    }

private:
    // Normalizes outer x inner lines of `length` elements, `inner` apart.
    template <typename T>
    static void run(ThreadPool& pool, const T* in, T* out, int64_t outer, int64_t length, int64_t inner) {
        if (outer * length * inner == 0) return;
        const int64_t line_cost = std::max<int64_t>(1, length);
        if (inner == 1) {
            pool.parallel_for(outer, std::max<int64_t>(1, kGrain / line_cost), [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) normalize_line<M>(in + r * length, out + r * length, length, 1);
            });
            return;
        }
        if constexpr (std::is_same_v<T, float> && M != Mode::Hardmax) {
            // vec::kLanes neighbouring lines at a time, one per lane.
            const int64_t groups = (inner + vec::kLanes - 1) / vec::kLanes;
            const int64_t grain = std::max<int64_t>(1, kGrain / (line_cost * vec::kLanes));
            pool.parallel_for(outer * groups, grain, [&](int64_t begin, int64_t end) {
                for (int64_t g = begin; g < end; ++g) {
                    const int64_t first = (g % groups) * vec::kLanes;
                    const int64_t offset = (g / groups) * length * inner + first;
                    normalize_float_columns<M>(in + offset, out + offset, length, inner,
                                               std::min<int64_t>(vec::kLanes, inner - first));
                }
            });
            return;
        }
        pool.parallel_for(outer * inner, std::max<int64_t>(1, kGrain / line_cost), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                const int64_t offset = (r / inner) * length * inner + r % inner;
                normalize_line<M>(in + offset, out + offset, length, inner);
            }
        });
    }

    static constexpr int64_t kGrain = 16384;  // elements per parallel task

    std::string name_;
    bool coerce_2d_;
    int64_t axis_;
};

template <Mode M> void add_softmax(KernelRegistry& registry, const char* op) {
    const auto floats = type_ids_with_16bit_floats(FloatTypes{});
    registry.add(KernelDef{.domain = "",
                           .op_type = op,
                           .since_version = 1,
                           .end_version = 12,
                           .input_types = {{0, floats}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<SoftmaxKernel<M>>(info, true);
                           }});
    registry.add(KernelDef{.domain = "",
                           .op_type = op,
                           .since_version = 13,
                           .end_version = 0,
                           .input_types = {{0, floats}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<SoftmaxKernel<M>>(info, false);
                           }});
}

}  // namespace

void register_softmax_kernels(KernelRegistry& registry) {
    add_softmax<Mode::Softmax>(registry, "Softmax");
    add_softmax<Mode::LogSoftmax>(registry, "LogSoftmax");
    add_softmax<Mode::Hardmax>(registry, "Hardmax");
}

}  // namespace tessera::cpu
