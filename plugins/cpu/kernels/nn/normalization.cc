// CPU provider: BatchNormalization, InstanceNormalization, GroupNormalization, LayerNormalization, LRN and
// MeanVarianceNormalization (float, double).  Statistics accumulate in double.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/blocked_conv.h"
#include "util/broadcast.h"
#include "util/compute_cast.h"
#include "util/thread_scratch.h"
#include "util/normalize_row.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

void check_float_type(std::string_view op, int32_t type) {
    if (type != TESS_ELEMENT_FLOAT32 && type != TESS_ELEMENT_FLOAT64) throw_unsupported_type(op, type);
}

// A per-channel parameter input (scale, bias, mean, var): 1-D with `count` elements of X's type.
void check_channel_input(std::string_view op, const Tensor& X, const Tensor& p, const char* name, int64_t count) {
    if (p.type != X.type) {
        throw KernelError(std::string(op) + ": input " + name + " must have the element type of X");
    }
    if (p.size() != count || p.rank() != 1) {
        throw KernelError(std::string(op) + ": input " + name + " " + shape_string(p.shape) + " must be [" +
                          std::to_string(count) + "]");
    }
}

// Mean and population variance of x[0..count), two passes in double.
struct Moments {
    double mean = 0;
    double variance = 0;
};

template <typename T>
Moments moments(const T* x, int64_t count) {
    Moments m;
    if (count == 0) return m;
    double sum = 0;
    for (int64_t i = 0; i < count; ++i) sum += x[i];
    m.mean = sum / static_cast<double>(count);
    double squares = 0;
    for (int64_t i = 0; i < count; ++i) {
        const double d = x[i] - m.mean;
        squares += d * d;
    }
    m.variance = squares / static_cast<double>(count);
    return m;
}

// y[i] = x[i] * a + b over one contiguous run: a multiply, then an add (this file is built for the baseline ISA,
// which has no FMA to contract them into).
template <typename T>
void scale_shift(const T* x, T* y, int64_t count, T a, T b) {
    for (int64_t i = 0; i < count; ++i) y[i] = x[i] * a + b;
}

// Inference BatchNormalization's per-channel y = x * a + b, with a = scale / sqrt(var + epsilon) and
// b = bias - mean * a, rounded in T step by step as onnxruntime rounds them.  Computing them in double instead is no
// more accurate where it matters and moves a third of the outputs by one ulp, which a following
// DynamicQuantizeLinear turns into different integers: a dynamically quantized CNN then disagrees with
// onnxruntime on most of its logits.
template <typename T>
void inference_scale_shift(const T* scale, const T* bias, const T* mean, const T* var, float epsilon, int64_t C,
                           T* a, T* b) {
    for (int64_t c = 0; c < C; ++c) {
        const T inv_std = T(1) / std::sqrt(var[c] + static_cast<T>(epsilon));
        a[c] = inv_std * scale[c];
        b[c] = bias[c] - mean[c] * a[c];
    }
}

int64_t plane_grain(int64_t plane) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, plane)); }

// ---- BatchNormalization ------------------------------------------------------------------------------------

// Inference: Y = (X - mean) / sqrt(var + epsilon) * scale + B per channel.  Training (opset >= 14 with
// training_mode=1, or an older node asking for the statistics outputs): the batch statistics normalize X, and the
// running statistics are blended with `momentum`.
class BatchNormKernel final : public Kernel, public BlockedLayoutKernel {
public:
    explicit BatchNormKernel(const NodeInfo& info)
        : epsilon_(info.attr_float("epsilon", 1e-5f)),
          momentum_(info.attr_float("momentum", 0.9f)),
          training_(info.opset() >= 14
                        ? info.attr_int("training_mode", 0) != 0
                        : info.has_output(1) || info.has_output(2) || info.has_output(3) || info.has_output(4)) {
        blocked_capable_ = !training_ && info.input_type(0) == TESS_ELEMENT_FLOAT32 && blocked_input_declared(info);
    }

    // Inference is per channel and element by element: a blocked X gives a blocked Y.
    bool reads_blocked(size_t input) const override { return input == 0 && blocked_capable_; }
    bool writes_blocked() const override { return blocked_capable_; }
    bool same_layout_as_output(size_t input) const override { return input == 0; }
    void set_layout(const std::vector<bool>& blocked_inputs, bool /*blocked_output*/) override {
        x_blocked_ = !blocked_inputs.empty() && blocked_inputs[0];
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        check_float_type("BatchNormalization", X.type);
        if (X.rank() < 2) {
            throw KernelError("BatchNormalization: X " + shape_string(X.shape) + " must be [N, C, ...]");
        }
        const int64_t N = X.shape[0], C = X.shape[1];
        const char* names[] = {"X", "scale", "B", "mean", "var"};
        for (size_t i = 1; i < 5; ++i) check_channel_input("BatchNormalization", X, ctx.input(i), names[i], C);
        const int64_t plane = N * C == 0 ? 0 : X.size() / (N * C);
        Tensor& Y = ctx.output(0, X.type, X.shape);
        if (x_blocked_) {
            // Held blocked only with the declared float [N, 16k, H, W] shape, which X then has.
            if (X.type != TESS_ELEMENT_FLOAT32 || C % kChannelBlock != 0)
                throw KernelError("BatchNormalization: a blocked X " + shape_string(X.shape) + " that is not float [N, 16k, ...]");
            float* a = thread_scratch_buffer<float, 12>(2 * C);
            float* b = a + C;
            const float* scale = ctx.input(1).ptr<float>();
            const float* bias = ctx.input(2).ptr<float>();
            const float* mean = ctx.input(3).ptr<float>();
            const float* var = ctx.input(4).ptr<float>();
            inference_scale_shift(scale, bias, mean, var, epsilon_, C, a, b);
            blocked_scale_shift(ctx.pool(), N, C, plane, X.ptr<float>(), a, b, Y.ptr<float>());
            return;
        }
        dispatch<float, double>(X.type, [&]<typename T>() {
            const T* scale = ctx.input(1).ptr<T>();
            const T* bias = ctx.input(2).ptr<T>();
            const T* mean = ctx.input(3).ptr<T>();
            const T* var = ctx.input(4).ptr<T>();
            // Per channel: y = x * a[c] + b[c].
            std::vector<T> a(C), b(C);
            std::vector<double> batch_mean, batch_var;
            if (training_) {
                // The batch statistics accumulate in double; the coefficients round once.
                batch_mean.resize(C);
                batch_var.resize(C);
                batch_statistics(X.ptr<T>(), N, C, plane, batch_mean, batch_var, ctx.pool());
                for (int64_t c = 0; c < C; ++c) {
                    const double ac = scale[c] / std::sqrt(batch_var[c] + epsilon_);
                    a[c] = static_cast<T>(ac);
                    b[c] = static_cast<T>(bias[c] - batch_mean[c] * ac);
                }
            } else {
                inference_scale_shift(scale, bias, mean, var, epsilon_, C, a.data(), b.data());
            }
            const T* x = X.ptr<T>();
            T* y = Y.ptr<T>();
            ctx.pool().parallel_for(N * C, plane_grain(plane), [&](int64_t first, int64_t last) {
                for (int64_t p = first; p < last; ++p) {
                    scale_shift(x + p * plane, y + p * plane, plane, a[p % C], b[p % C]);
                }
            });
            if (training_) write_statistics<T>(ctx, C, mean, var, batch_mean, batch_var);
        });
    }

private:
    template <typename T>
    static void batch_statistics(const T* x, int64_t N, int64_t C, int64_t plane, std::vector<double>& mean,
                                 std::vector<double>& var, ThreadPool& pool) {
        pool.parallel_for(C, 1, [&](int64_t first, int64_t last) {
            for (int64_t c = first; c < last; ++c) {
                double sum = 0;
                for (int64_t n = 0; n < N; ++n) {
                    const T* p = x + (n * C + c) * plane;
                    for (int64_t i = 0; i < plane; ++i) sum += p[i];
                }
                const double count = static_cast<double>(N * plane);
                const double m = count > 0 ? sum / count : 0;
                double squares = 0;
                for (int64_t n = 0; n < N; ++n) {
                    const T* p = x + (n * C + c) * plane;
                    for (int64_t i = 0; i < plane; ++i) squares += (p[i] - m) * (p[i] - m);
                }
                mean[c] = m;
                var[c] = count > 0 ? squares / count : 0;
            }
        });
    }

    // Opset >= 14: outputs 1, 2 = running mean, running var.  Older opsets: 1, 2 = running mean/var, 3, 4 = the
    // batch mean/var.
    template <typename T>
    void write_statistics(KernelContext& ctx, int64_t C, const T* mean, const T* var,
                          const std::vector<double>& batch_mean, const std::vector<double>& batch_var) const {
        auto write = [&](size_t output, auto&& value_of) {
            if (output >= ctx.output_count() || !ctx.output_wanted(output)) return;
            T* out = ctx.output(output, element_type_of<T>(), {C}).template ptr<T>();
            for (int64_t c = 0; c < C; ++c) out[c] = static_cast<T>(value_of(c));
        };
        const double keep = momentum_;
        write(1, [&](int64_t c) { return mean[c] * keep + batch_mean[c] * (1 - keep); });
        write(2, [&](int64_t c) { return var[c] * keep + batch_var[c] * (1 - keep); });
        write(3, [&](int64_t c) { return batch_mean[c]; });
        write(4, [&](int64_t c) { return batch_var[c]; });
    }

    float epsilon_;
    float momentum_;
    bool training_;
    bool blocked_capable_ = false;  // inference on a declared float [N, 16k, H, W]
    bool x_blocked_ = false;        // set_layout
};

// ---- InstanceNormalization and GroupNormalization -----------------------------------------------------------

// Normalizes X [N, C, ...] over blocks of `C / groups` channels x spatial, then applies scale/bias per channel
// (or per group for GroupNormalization-18).  InstanceNormalization is the case groups = C.
class GroupedNormKernel final : public Kernel {
public:
    GroupedNormKernel(const NodeInfo& info, bool instance)
        : op_(info.op_type()),
          epsilon_(info.attr_float("epsilon", 1e-5f)),
          groups_(instance ? 0 : info.attr_int("num_groups")),
          per_group_params_(!instance && info.opset() < 21) {
        if (!instance && groups_ <= 0) throw KernelError(op_ + ": num_groups must be positive");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        check_float_type(op_, X.type);
        if (X.rank() < 2) throw KernelError(op_ + ": X " + shape_string(X.shape) + " must be [N, C, ...]");
        const int64_t N = X.shape[0], C = X.shape[1];
        const int64_t groups = groups_ == 0 ? C : groups_;
        if (groups > 0 && C % groups != 0) {
            throw KernelError(op_ + ": " + std::to_string(C) + " channels do not split into " + std::to_string(groups) +
                              " groups");
        }
        const int64_t param_count = per_group_params_ ? groups : C;
        check_channel_input(op_, X, ctx.input(1), "scale", param_count);
        check_channel_input(op_, X, ctx.input(2), "bias", param_count);
        Tensor& Y = ctx.output(0, X.type, X.shape);
        if (X.size() == 0) return;
        const int64_t plane = X.size() / (N * C);
        const int64_t channels_per_group = C / groups;
        const int64_t block = channels_per_group * plane;
        dispatch<float, double>(X.type, [&]<typename T>() {
            const T* x = X.ptr<T>();
            const T* scale = ctx.input(1).ptr<T>();
            const T* bias = ctx.input(2).ptr<T>();
            T* y = Y.ptr<T>();
            ctx.pool().parallel_for(N * groups, plane_grain(block), [&](int64_t first, int64_t last) {
                for (int64_t b = first; b < last; ++b) {
                    const Moments m = moments(x + b * block, block);
                    const double inv_std = 1.0 / std::sqrt(m.variance + epsilon_);
                    const int64_t group = b % groups;
                    for (int64_t k = 0; k < channels_per_group; ++k) {
                        const int64_t param = per_group_params_ ? group : group * channels_per_group + k;
                        const double a = scale[param] * inv_std;
                        const int64_t offset = b * block + k * plane;
                        scale_shift(x + offset, y + offset, plane, static_cast<T>(a), static_cast<T>(bias[param] - m.mean * a));
                    }
                }
            });
        });
    }

private:
    std::string op_;
    float epsilon_;
    int64_t groups_;  // 0: one group per channel (InstanceNormalization)
    bool per_group_params_;
};

// ---- LayerNormalization ---------------------------------------------------------------------------------------

// Mean and population variance of a float row, two passes over vector lanes, each lane's sum finished in double.
Moments float_moments(const float* x, int64_t n) {
    Moments m;
    if (n == 0) return m;
    vec::run_best_isa([&] {
        vec::Vf sum{};
        int64_t i = 0;
        for (; i + vec::kLanes <= n; i += vec::kLanes) sum += vec::load(x + i);
        if (i < n) sum += vec::load_n(x + i, n - i);
        double total = 0;
        for (int lane = 0; lane < vec::kLanes; ++lane) total += sum[lane];
        m.mean = total / static_cast<double>(n);
        const vec::Vf mean = vec::splat(static_cast<float>(m.mean));
        vec::Vf squares{};
        for (i = 0; i + vec::kLanes <= n; i += vec::kLanes) {
            const vec::Vf d = vec::load(x + i) - mean;
            squares += d * d;
        }
        if (i < n) {
            const vec::Vf d = vec::load_n(x + i, n - i) - mean;  // lanes past n hold -mean: left out
            for (int lane = 0; lane < static_cast<int>(n - i); ++lane) squares[lane] += d[lane] * d[lane];
        }
        double total_squares = 0;
        for (int lane = 0; lane < vec::kLanes; ++lane) total_squares += squares[lane];
        m.variance = total_squares / static_cast<double>(n);
    });
    return m;
}

// Expands `source` (unidirectionally broadcastable to `target`) to a dense array of target's shape.
template <typename T>
std::vector<T> expand_to(std::string_view op, const Tensor& source, const Shape& target) {
    const Shape* inputs[] = {&source.shape};
    BroadcastPlan plan(op, std::span<const Shape* const>(inputs), target);
    std::vector<T> out(static_cast<size_t>(plan.output_size()));
    const T* s = source.ptr<T>();
    for_each_broadcast_run<1>(plan, nullptr, [&](int64_t o, const std::array<int64_t, 1>& in, int64_t count) {
        if (plan.inner_contiguous(0)) {
            std::copy(s + in[0], s + in[0] + count, out.begin() + o);
        } else {
            std::fill(out.begin() + o, out.begin() + o + count, s[in[0]]);
        }
    });
    return out;
}

// Normalizes each row of X viewed as [prod(shape[:axis]), prod(shape[axis:])].  Mean and InvStdDev (optional
// outputs) have X's shape with the normalized dimensions set to 1, in float (stash_type 1) unless the model
// declares double.
class LayerNormKernel final : public Kernel {
public:
    explicit LayerNormKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis", -1)),
          epsilon_(info.attr_float("epsilon", 1e-5f)),
          mean_type_(info.output_type(1) == TESS_ELEMENT_FLOAT64 ? TESS_ELEMENT_FLOAT64 : TESS_ELEMENT_FLOAT32),
          inv_std_type_(info.output_type(2) == TESS_ELEMENT_FLOAT64 ? TESS_ELEMENT_FLOAT64 : TESS_ELEMENT_FLOAT32) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        const Tensor& scale = ctx.input(1);
        const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (X.type != TESS_ELEMENT_FLOAT32 && X.type != TESS_ELEMENT_FLOAT64 && X.type != TESS_ELEMENT_FLOAT16 &&
            X.type != TESS_ELEMENT_BFLOAT16)
            throw_unsupported_type("LayerNormalization", X.type);
        if (scale.type != X.type || (bias != nullptr && bias->type != X.type)) {
            throw KernelError("LayerNormalization: Scale and B must have the element type of X");
        }
        const size_t axis = normalize_axis("LayerNormalization", axis_, X.rank());
        const Shape trailing(X.shape.begin() + axis, X.shape.end());
        const int64_t cols = shape_size(trailing);
        const int64_t rows = cols == 0 ? 0 : X.size() / cols;
        Shape stats_shape = X.shape;
        std::fill(stats_shape.begin() + axis, stats_shape.end(), 1);

        Tensor& Y_out = ctx.output(0, X.type, X.shape);
        void* mean_out = nullptr;
        void* inv_std_out = nullptr;
        if (ctx.output_count() > 1 && ctx.output_wanted(1)) mean_out = ctx.output(1, mean_type_, stats_shape).data;
        if (ctx.output_count() > 2 && ctx.output_wanted(2)) {
            inv_std_out = ctx.output(2, inv_std_type_, stats_shape).data;
        }
        // float16 and bfloat16 compute in float (statistics in double, as for float) and round once on the way out.
        with_float_or_double(X.type == TESS_ELEMENT_FLOAT64, [&]<typename T>() {
            const ConvertedInput<T> x_in(X, ctx.pool()), scale_in(scale, ctx.pool());
            ConvertedInput<T> bias_in;
            if (bias != nullptr) bias_in = ConvertedInput<T>(*bias, ctx.pool());
            ConvertedOutput<T> y_out(Y_out);
            auto as_compute = [](const Tensor& t, const T* data) {
                return Tensor{element_type_of<T>(), t.shape, const_cast<T*>(data), nullptr};
            };
            // Scale/B usually cover only the normalized dimensions: one row of parameters serves every row.
            auto params = [&](const Tensor& given, bool& per_row) {
                const Tensor p = as_compute(given, &given == &scale ? scale_in.data() : bias_in.data());
                Tensor view = p;
                while (view.rank() > trailing.size() && view.shape.front() == 1) view.shape.erase(view.shape.begin());
                per_row = view.rank() > trailing.size();
                return per_row ? expand_to<T>("LayerNormalization", p, X.shape)
                               : expand_to<T>("LayerNormalization", view, trailing);
            };
            const T* x = x_in.data();
            T* y = y_out.data();
            // The common case -- float, Scale and B exactly the normalized dimensions' size -- runs on vector
            // lanes with no copy of the parameters.
            if constexpr (std::is_same_v<T, float>) {
                if (scale.size() == cols && (bias == nullptr || bias->size() == cols)) {
                    const float* s = scale_in.data();
                    const float* b = bias != nullptr ? bias_in.data() : nullptr;
                    ctx.pool().parallel_for(rows, plane_grain(cols), [&](int64_t first, int64_t last) {
                        for (int64_t r = first; r < last; ++r) {
                            const Moments m = float_moments(x + r * cols, cols);
                            const double inv_std = 1.0 / std::sqrt(m.variance + epsilon_);
                            normalize_row(x + r * cols, y + r * cols, cols, static_cast<float>(m.mean),
                                          static_cast<float>(inv_std), s, b);
                            store(mean_out, mean_type_, r, m.mean);
                            store(inv_std_out, inv_std_type_, r, inv_std);
                        }
                    });
                    y_out.finish(ctx.pool());
                    return;
                }
            }
            bool scale_per_row = false, bias_per_row = false;
            const std::vector<T> scale_values = params(scale, scale_per_row);
            const std::vector<T> bias_values = bias != nullptr ? params(*bias, bias_per_row) : std::vector<T>();
            ctx.pool().parallel_for(rows, plane_grain(cols), [&](int64_t first, int64_t last) {
                for (int64_t r = first; r < last; ++r) {
                    const T* xr = x + r * cols;
                    T* yr = y + r * cols;
                    const Moments m = moments(xr, cols);
                    const double inv_std = 1.0 / std::sqrt(m.variance + epsilon_);
                    const T* s = scale_values.data() + (scale_per_row ? r * cols : 0);
                    const T* b = bias_values.empty() ? nullptr : bias_values.data() + (bias_per_row ? r * cols : 0);
                    const T mean = static_cast<T>(m.mean), inv = static_cast<T>(inv_std);
                    for (int64_t i = 0; i < cols; ++i) {
                        yr[i] = (xr[i] - mean) * inv * s[i] + (b != nullptr ? b[i] : T(0));
                    }
                    store(mean_out, mean_type_, r, m.mean);
                    store(inv_std_out, inv_std_type_, r, inv_std);
                }
            });
            y_out.finish(ctx.pool());
        });
    }

private:
    static void store(void* out, int32_t type, int64_t index, double value) {
        if (out == nullptr) return;
        if (type == TESS_ELEMENT_FLOAT64) {
            static_cast<double*>(out)[index] = value;
        } else {
            static_cast<float*>(out)[index] = static_cast<float>(value);
        }
    }

    int64_t axis_;
    float epsilon_;
    int32_t mean_type_;
    int32_t inv_std_type_;
};

// ---- LRN ------------------------------------------------------------------------------------------------------

// Y = X / (bias + alpha / size * sum of squares over the channel window)^beta, the window spanning
// [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)].
class LrnKernel final : public Kernel {
public:
    explicit LrnKernel(const NodeInfo& info)
        : alpha_(info.attr_float("alpha", 1e-4f)),
          beta_(info.attr_float("beta", 0.75f)),
          bias_(info.attr_float("bias", 1.0f)),
          size_(info.attr_int("size")) {
        if (size_ <= 0) throw KernelError("LRN: size must be positive");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        check_float_type("LRN", X.type);
        if (X.rank() < 2) throw KernelError("LRN: X " + shape_string(X.shape) + " must be [N, C, ...]");
        Tensor& Y = ctx.output(0, X.type, X.shape);
        if (X.size() == 0) return;
        const int64_t N = X.shape[0], C = X.shape[1];
        const int64_t plane = X.size() / (N * C);
        const int64_t before = (size_ - 1) / 2, after = size_ - 1 - before;
        dispatch<float, double>(X.type, [&]<typename T>() {
            const T* x = X.ptr<T>();
            T* y = Y.ptr<T>();
            const T alpha_over_size = static_cast<T>(alpha_ / static_cast<double>(size_));
            const T bias = static_cast<T>(bias_), beta = static_cast<T>(beta_);
            ctx.pool().parallel_for(N * C, plane_grain(plane * size_), [&](int64_t first, int64_t last) {
                std::vector<T> squares(static_cast<size_t>(plane));
                for (int64_t p = first; p < last; ++p) {
                    const int64_t n = p / C, c = p % C;
                    std::fill(squares.begin(), squares.end(), T(0));
                    for (int64_t k = std::max<int64_t>(0, c - before); k <= std::min(C - 1, c + after); ++k) {
                        const T* xk = x + (n * C + k) * plane;
                        for (int64_t i = 0; i < plane; ++i) squares[i] += xk[i] * xk[i];
                    }
                    const T* xp = x + p * plane;
                    T* yp = y + p * plane;
                    for (int64_t i = 0; i < plane; ++i)
                        yp[i] = xp[i] / std::pow(bias + alpha_over_size * squares[i], beta);
                }
            });
        });
    }

private:
    float alpha_;
    float beta_;
    float bias_;
    int64_t size_;
};

// ---- MeanVarianceNormalization --------------------------------------------------------------------------------

// Y = (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9), the expectations over `axes` (default [0, 2, 3]), as the
// operator's function body defines it.
class MvnKernel final : public Kernel {
public:
    explicit MvnKernel(const NodeInfo& info) : axes_(info.attr_ints("axes", {0, 2, 3})) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        check_float_type("MeanVarianceNormalization", X.type);
        const size_t rank = X.rank();
        std::vector<bool> reduced(rank, false);
        for (size_t a : normalize_axes("MeanVarianceNormalization", axes_, rank)) reduced[a] = true;
        Tensor& Y = ctx.output(0, X.type, X.shape);
        if (X.size() == 0) return;
        // Statistic slot of each element: its coordinates over the kept dimensions.
        std::vector<int64_t> slot_stride(rank, 0);
        int64_t slots = 1;
        for (size_t d = rank; d-- > 0;) {
            if (!reduced[d]) {
                slot_stride[d] = slots;
                slots *= X.shape[d];
            }
        }
        const int64_t per_slot = X.size() / slots;
        dispatch<float, double>(X.type, [&]<typename T>() {
            const T* x = X.ptr<T>();
            T* y = Y.ptr<T>();
            std::vector<double> sum(slots, 0.0), squares(slots, 0.0);
            for_each_slot(X.shape, slot_stride, [&](int64_t i, int64_t s) {
                sum[s] += x[i];
                squares[s] += static_cast<double>(x[i]) * x[i];
            });
            for (int64_t s = 0; s < slots; ++s) {
                const double mean = sum[s] / per_slot;
                sum[s] = mean;
                squares[s] = 1.0 / (std::sqrt(std::max(0.0, squares[s] / per_slot - mean * mean)) + 1e-9);
            }
            for_each_slot(X.shape, slot_stride,
                          [&](int64_t i, int64_t s) { y[i] = static_cast<T>((x[i] - sum[s]) * squares[s]); });
        });
    }

private:
    // fn(element index, slot) for every element in order.
    template <typename Fn>
    static void for_each_slot(const Shape& shape, const std::vector<int64_t>& slot_stride, Fn&& fn) {
        const size_t rank = shape.size();
        const int64_t total = shape_size(shape);
        std::vector<int64_t> index(rank, 0);
        int64_t slot = 0;
        for (int64_t i = 0; i < total; ++i) {
            fn(i, slot);
            for (size_t d = rank; d-- > 0;) {
                slot += slot_stride[d];
                if (++index[d] < shape[d]) break;
                slot -= slot_stride[d] * shape[d];
                index[d] = 0;
            }
        }
    }

    std::vector<int64_t> axes_;
};

}  // namespace

void register_normalization_kernels(KernelRegistry& registry) {
    const std::vector<std::pair<size_t, std::vector<int32_t>>> x_float{{0, types::kFloats}};
    registry.add(
        {"", "BatchNormalization", 1, 0, x_float, KernelMemory::InPlaceInput0, make_factory<BatchNormKernel>()});
    registry.add({"", "InstanceNormalization", 1, 0, x_float, KernelMemory::InPlaceInput0,
                  [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                      return std::make_unique<GroupedNormKernel>(info, true);
                  }});
    registry.add({"", "GroupNormalization", 18, 0, x_float, KernelMemory::InPlaceInput0,
                  [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                      return std::make_unique<GroupedNormKernel>(info, false);
                  }});
    const std::vector<std::pair<size_t, std::vector<int32_t>>> x_float_or_16bit{
        {0, {TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_FLOAT16, TESS_ELEMENT_BFLOAT16}}};
    registry.add({"", "LayerNormalization", 17, 0, x_float_or_16bit, KernelMemory::Normal,
                  make_factory<LayerNormKernel>()});
    registry.add({"", "LRN", 1, 0, x_float, KernelMemory::Normal, make_factory<LrnKernel>()});
    registry.add({"", "MeanVarianceNormalization", 9, 0, x_float, KernelMemory::Normal, make_factory<MvnKernel>()});
}

}  // namespace tessera::cpu
