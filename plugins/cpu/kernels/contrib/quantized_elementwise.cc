// CPU provider, com.microsoft: the quantized (QOperator-format) operators onnxruntime's quantize_static writes
// beside QLinearConv and QLinearMatMul, and that its optimizer makes of QDQ groups.
//
//   QLinearAdd, QLinearMul               C = quantize(dequantize(A) op dequantize(B)), numpy broadcasting
//   QLinearSigmoid, QLinearLeakyRelu     256-entry tables from the float function
//   QLinearGlobalAveragePool             exact integer sums, one requantization
//   QLinearAveragePool                   1-3 spatial dims, NCHW or channels_last
//   QLinearConcat, QLinearWhere          inputs re-quantized to the output's parameters through tables
//   QLinearSoftmax                       onnxruntime's exponent table
//
// All of them are uint8 or int8 with per-tensor scales and zero points.  Each follows onnxruntime's CPU arithmetic
// step by step (the order of float roundings, where an FMA is or is not used, round half to even), so that a
// quantized model agrees with onnxruntime exactly and not merely within one quantum: a one-quantum difference
// early in a network changes what every later layer sees.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "runtime/host.h"
#include "util/axes.h"
#include "util/broadcast.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

template <typename T> constexpr int32_t kQmin = std::numeric_limits<T>::min();
template <typename T> constexpr int32_t kQmax = std::numeric_limits<T>::max();

template <typename Fn> void dispatch_8bit(const std::string& op, int32_t type, const Fn& fn) {
    if (type != TESS_ELEMENT_UINT8 && type != TESS_ELEMENT_INT8) throw_unsupported_type(op, type);
    dispatch<int8_t, uint8_t>(type, fn);
}

// ---- Scalars and the rounding steps shared by every operator -----------------------------------------------------

float scale_of(const std::string& op, const char* name, const Tensor& t) {
    if (t.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(op + " " + name, t.type);
    if (t.size() != 1) throw KernelError(op + ": " + name + " must be a scalar, got " + shape_string(t.shape));
    return t.ptr<float>()[0];
}

// A zero point input (absent: 0); it must have the data's type.
template <typename T> int32_t zero_point_of(const std::string& op, const KernelContext& ctx, size_t index) {
    if (!ctx.has_input(index)) return 0;
    const Tensor& t = ctx.input(index);
    if (t.type != element_type_of<T>())
        throw KernelError(op + ": zero point " + std::to_string(index) + " has type " + element_type_name(t.type) +
                          ", not its data's " + element_type_name(element_type_of<T>()));
    if (t.size() != 1) throw KernelError(op + ": zero points must be scalars, got " + shape_string(t.shape));
    return static_cast<int32_t>(t.ptr<T>()[0]);
}

// What cvtps2dq does: round half to even; out of int32's range (or NaN) gives INT32_MIN.
inline int32_t round_to_int32(float v) {
    if (!(v > -2147483648.0f && v < 2147483648.0f)) return std::numeric_limits<int32_t>::min();
    return static_cast<int32_t>(std::nearbyint(v));
}

template <typename T> inline T saturate(int32_t v) { return static_cast<T>(std::clamp(v, kQmin<T>, kQmax<T>)); }

// onnxruntime's QuantizeLinear: v = x / scale (a division), limited to [qmin - zp, qmax - zp] (NaN to the low end,
// as maxps does), rounded half to even, plus the zero point.
template <typename T> inline T quantize_value(float x, float scale, int32_t zero) {
    const float v = x / scale;
    const float low = static_cast<float>(kQmin<T> - zero), high = static_cast<float>(kQmax<T> - zero);
    const float limited = std::min(v > low ? v : low, high);
    return static_cast<T>(static_cast<int32_t>(std::nearbyint(limited)) + zero);
}

// onnxruntime's requantization of an int32 sum: f32(sum * scale), limited, rounded, plus the zero point.
template <typename T> inline T requantize_value(int32_t sum, float scale, int32_t zero) {
    return quantize_value<T>(static_cast<float>(sum) * scale, 1.0f, zero);
}

// A table over the 256 byte values of T: entry [byte] = quantize(g(x_scale * (x - x_zero))).
template <typename T, typename G>
void build_table(float x_scale, int32_t x_zero, float y_scale, int32_t y_zero, const G& g, T* table) {
    for (int i = 0; i < 256; ++i) {
        const T x = static_cast<T>(static_cast<uint8_t>(i));
        const float d = x_scale * static_cast<float>(static_cast<int32_t>(x) - x_zero);
        table[static_cast<uint8_t>(i)] = quantize_value<T>(g(d), y_scale, y_zero);
    }
}

template <typename T>
void apply_table(ThreadPool& pool, const T* table, const T* x, T* y, int64_t n) {
    pool.parallel_for(n, 1 << 14, [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) y[i] = table[static_cast<uint8_t>(x[i])];
    });
}

// ---- QLinearAdd and QLinearMul -----------------------------------------------------------------------------------

template <typename T> struct AddParams {
    float ratio_a, ratio_b;  // A_scale / C_scale, B_scale / C_scale
    int32_t zero_a, zero_b, zero_c;
};

// onnxruntime's AVX2 kernel, FMAs included.  X is the operand that varies along the run, Y the other:
// fixed = Cz - fma(rX, Xz, rY * Yz);  r = fma(x, rX, fma(y, rY, fixed)), or with a scalar y
// r = fma(x, rX, fma(y0, rY, fixed)).
template <typename T>
void add_run(const T* x, float rx, int32_t zx, const T* y, bool y_scalar, float ry, int32_t zy, int32_t zc, T* out,
             int64_t count) {
    const float y_zero_term = ry * static_cast<float>(zy);
    const float fixed = static_cast<float>(zc) - std::fma(rx, static_cast<float>(zx), y_zero_term);
    if (y_scalar) {
        const float base = std::fma(static_cast<float>(y[0]), ry, fixed);
        vec::run_best_isa([&] {
            for (int64_t i = 0; i < count; ++i)
                out[i] = saturate<T>(round_to_int32(__builtin_fmaf(static_cast<float>(x[i]), rx, base)));
        });
        return;
    }
    vec::run_best_isa([&] {
        for (int64_t i = 0; i < count; ++i) {
            const float inner = __builtin_fmaf(static_cast<float>(y[i]), ry, fixed);
            out[i] = saturate<T>(round_to_int32(__builtin_fmaf(static_cast<float>(x[i]), rx, inner)));
        }
    });
}

// (a - Az)(b - Bz) exactly, times f32(f32(As * Bs) / Cs), plus Cz, rounded: a multiply and an add (no FMA).
template <typename T>
__attribute__((optimize("fp-contract=off"))) void mul_run(const T* a, bool a_vec, const T* b, bool b_vec, int32_t za, int32_t zb, float ratio, int32_t zc, T* out,
             int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
        const int32_t p = (static_cast<int32_t>(a[a_vec ? i : 0]) - za) * (static_cast<int32_t>(b[b_vec ? i : 0]) - zb);
        const float product = static_cast<float>(p) * ratio;  // rounded on its own: contraction is off here
        out[i] = saturate<T>(round_to_int32(product + static_cast<float>(zc)));
    }
}

class QLinearBinaryKernel final : public Kernel {
public:
    QLinearBinaryKernel(const NodeInfo& info, bool multiply) : op_(info.op_type()), multiply_(multiply) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& A = ctx.input(0);
        const Tensor& B = ctx.input(3);
        if (A.type != B.type) throw KernelError(op_ + ": A and B must have one element type");
        dispatch_8bit(op_, A.type, [&]<typename T>() { run<T>(ctx, A, B); });
    }

private:
    template <typename T> void run(KernelContext& ctx, const Tensor& A, const Tensor& B) const {
        const float a_scale = scale_of(op_, "A_scale", ctx.input(1));
        const float b_scale = scale_of(op_, "B_scale", ctx.input(4));
        const float c_scale = scale_of(op_, "C_scale", ctx.input(6));
        const int32_t za = zero_point_of<T>(op_, ctx, 2), zb = zero_point_of<T>(op_, ctx, 5),
                      zc = zero_point_of<T>(op_, ctx, 7);
        const BroadcastPlan plan(op_, {&A.shape, &B.shape});
        Tensor& C = ctx.output(0, A.type, plan.output_shape());
        const T* a = A.ptr<T>();
        const T* b = B.ptr<T>();
        T* c = C.ptr<T>();
        const bool a_vec = plan.inner_contiguous(0), b_vec = plan.inner_contiguous(1);
        if (multiply_) {
            const float ratio = (a_scale * b_scale) / c_scale;
            for_each_broadcast_run<2>(plan, &ctx.pool(), [&](int64_t o, const std::array<int64_t, 2>& in,
                                                            int64_t count) {
                mul_run(a + in[0], a_vec, b + in[1], b_vec, za, zb, ratio, zc, c + o, count);
            });
            return;
        }
        const float ra = a_scale / c_scale, rb = b_scale / c_scale;
        for_each_broadcast_run<2>(plan, &ctx.pool(), [&](int64_t o, const std::array<int64_t, 2>& in, int64_t count) {
            // onnxruntime's roles: a scalar A makes B the varying operand; otherwise A is.
            if (!a_vec && b_vec) {
                add_run(b + in[1], rb, zb, a + in[0], true, ra, za, zc, c + o, count);
            } else if (!a_vec) {  // both scalar along the run: one value, repeated
                add_run(a + in[0], ra, za, b + in[1], true, rb, zb, zc, c + o, 1);
                std::fill_n(c + o + 1, count - 1, c[o]);
            } else {
                add_run(a + in[0], ra, za, b + in[1], !b_vec, rb, zb, zc, c + o, count);
            }
        });
    }

    std::string op_;
    bool multiply_;
};

// ---- Table operators: QLinearSigmoid, QLinearLeakyRelu -----------------------------------------------------------

// onnxruntime's logistic function on FMA machines: a rational polynomial in float (MlasComputeLogistic).
float logistic(float x) {
    const float v = std::clamp(x, -18.0f, 18.0f);
    const float x2 = v * v;
    float p = std::fma(x2, 4.37031012579801e-11f, 1.15627324459942e-07f);
    p = std::fma(p, x2, 6.08574864600143e-05f);
    p = std::fma(p, x2, 8.51377133304701e-03f);
    p = std::fma(p, x2, 2.48287947061529e-01f);
    volatile float pv = p * v;
    float q = std::fma(x2, 6.10247389755681e-13f, 5.76102136993427e-09f);
    q = std::fma(q, x2, 6.29106785017040e-06f);
    q = std::fma(q, x2, 1.70198817374094e-03f);
    q = std::fma(q, x2, 1.16817656904453e-01f);
    q = std::fma(q, x2, 9.93151921023180e-01f);
    volatile float ratio = pv / q;
    return std::clamp(ratio + 0.5f, 0.0f, 1.0f);
}

class QLinearTableKernel final : public Kernel {
public:
    QLinearTableKernel(const NodeInfo& info, bool sigmoid)
        : op_(info.op_type()), sigmoid_(sigmoid), alpha_(info.attr_float("alpha", 0.01f)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        dispatch_8bit(op_, X.type, [&]<typename T>() {
            const float x_scale = scale_of(op_, "X_scale", ctx.input(1));
            const float y_scale = scale_of(op_, "Y_scale", ctx.input(3));
            const int32_t zx = zero_point_of<T>(op_, ctx, 2), zy = zero_point_of<T>(op_, ctx, 4);
            T table[256];
            const float alpha = alpha_;
            if (sigmoid_)
                build_table<T>(x_scale, zx, y_scale, zy, logistic, table);
            else
                build_table<T>(x_scale, zx, y_scale, zy, [alpha](float d) {
                    volatile float scaled = alpha * d;
                    return d >= 0 ? d : static_cast<float>(scaled);
                }, table);
            Tensor& Y = ctx.output(0, X.type, X.shape);
            apply_table(ctx.pool(), table, X.ptr<T>(), Y.ptr<T>(), X.size());
        });
    }

private:
    std::string op_;
    bool sigmoid_;
    float alpha_;
};

// ---- Pooling ---------------------------------------------------------------------------------------------------

// Per (n, c): sum(x) - x_zero * positions exactly, requantized with f32(x_scale / f32(y_scale * positions)).
template <typename T>
void global_average(ThreadPool& pool, const T* x, int64_t N, int64_t C, int64_t positions, bool channels_last,
                    float x_scale, int32_t zx, float y_scale, int32_t zy, T* y) {
    if (positions >= (int64_t{1} << 24))
        throw KernelError("QLinearGlobalAveragePool: more than 2^24 positions per channel");
    const float scale = x_scale / (y_scale * static_cast<float>(positions));
    pool.parallel_for(N * C, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, positions)),
                      [&](int64_t first, int64_t last) {
                          for (int64_t nc = first; nc < last; ++nc) {
                              const int64_t n = nc / C, c = nc % C;
                              int32_t sum = 0;
                              if (channels_last) {
                                  const T* base = x + n * positions * C + c;
                                  for (int64_t p = 0; p < positions; ++p) sum += base[p * C];
                              } else {
                                  const T* base = x + nc * positions;
                                  for (int64_t p = 0; p < positions; ++p) sum += base[p];
                              }
                              sum -= zx * static_cast<int32_t>(positions);
                              y[channels_last ? n * C + c : nc] = requantize_value<T>(sum, scale, zy);
                          }
                      });
}

class QLinearGlobalAveragePoolKernel final : public Kernel {
public:
    explicit QLinearGlobalAveragePoolKernel(const NodeInfo& info)
        : channels_last_(info.attr_int("channels_last", 0) != 0) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "QLinearGlobalAveragePool";
        const Tensor& X = ctx.input(0);
        if (X.rank() < 3) throw KernelError(op + ": X " + shape_string(X.shape) + " must have spatial dimensions");
        dispatch_8bit(op, X.type, [&]<typename T>() {
            const int64_t N = X.shape[0], C = channels_last_ ? X.shape.back() : X.shape[1];
            const int64_t positions = N * C == 0 ? 0 : X.size() / (N * C);
            Shape out_shape(X.rank(), 1);
            out_shape[0] = N;
            out_shape[channels_last_ ? X.rank() - 1 : 1] = C;
            Tensor& Y = ctx.output(0, X.type, out_shape);
            global_average<T>(ctx.pool(), X.ptr<T>(), N, C, positions, channels_last_,
                              scale_of(op, "x_scale", ctx.input(1)), zero_point_of<T>(op, ctx, 2),
                              scale_of(op, "y_scale", ctx.input(3)), zero_point_of<T>(op, ctx, 4), Y.ptr<T>());
        });
    }

private:
    bool channels_last_;
};

class QLinearAveragePoolKernel final : public Kernel {
public:
    explicit QLinearAveragePoolKernel(const NodeInfo& info)
        : kernel_(info.attr_ints("kernel_shape")),
          strides_(info.attr_ints("strides")),
          pads_(info.attr_ints("pads")),
          auto_pad_(info.attr_string("auto_pad", "NOTSET")),
          ceil_mode_(info.attr_int("ceil_mode", 0) != 0),
          count_include_pad_(info.attr_int("count_include_pad", 0) != 0),
          channels_last_(info.attr_int("channels_last", 0) != 0) {
        if (kernel_.empty() || kernel_.size() > 3)
            throw KernelError("QLinearAveragePool: kernel_shape must have 1 to 3 dimensions");
        if (strides_.empty()) strides_.assign(kernel_.size(), 1);
        if (pads_.empty()) pads_.assign(2 * kernel_.size(), 0);
        if (strides_.size() != kernel_.size() || pads_.size() != 2 * kernel_.size())
            throw KernelError("QLinearAveragePool: strides and pads must match kernel_shape");
    }

    void compute(KernelContext& ctx) const override {
        const std::string op = "QLinearAveragePool";
        const Tensor& X = ctx.input(0);
        const size_t dims = kernel_.size();
        if (X.rank() != dims + 2) throw KernelError(op + ": X " + shape_string(X.shape) + " does not match kernel_shape");
        dispatch_8bit(op, X.type, [&]<typename T>() { run<T>(ctx, X); });
    }

private:
    template <typename T> void run(KernelContext& ctx, const Tensor& X) const {
        const std::string op = "QLinearAveragePool";
        const size_t dims = kernel_.size();
        const int64_t N = X.shape[0], C = channels_last_ ? X.shape.back() : X.shape[1];
        std::vector<int64_t> in(3, 1), out(3, 1), k(3, 1), s(3, 1), begin(3, 0), end_pad(3, 0);
        for (size_t d = 0; d < dims; ++d) {
            in[d] = X.shape[channels_last_ ? 1 + d : 2 + d];
            k[d] = kernel_[d];
            s[d] = strides_[d];
            begin[d] = pads_[d];
            end_pad[d] = pads_[d + dims];
            if (auto_pad_ == "SAME_UPPER" || auto_pad_ == "SAME_LOWER") {
                const int64_t o = (in[d] + s[d] - 1) / s[d];
                const int64_t total = std::max<int64_t>(0, (o - 1) * s[d] + k[d] - in[d]);
                begin[d] = auto_pad_ == "SAME_LOWER" ? (total + 1) / 2 : total / 2;
                end_pad[d] = total - begin[d];
            } else if (auto_pad_ == "VALID") {
                begin[d] = end_pad[d] = 0;
            }
            const int64_t span = in[d] + begin[d] + end_pad[d] - k[d];
            out[d] = (ceil_mode_ ? (span + s[d] - 1) / s[d] : span / s[d]) + 1;
            if (ceil_mode_ && (out[d] - 1) * s[d] >= in[d] + begin[d]) --out[d];
        }
        Shape out_shape{N};
        if (!channels_last_) out_shape.push_back(C);
        for (size_t d = 0; d < dims; ++d) out_shape.push_back(out[d]);
        if (channels_last_) out_shape.push_back(C);
        Tensor& Y = ctx.output(0, X.type, out_shape);
        const float x_scale = scale_of(op, "x_scale", ctx.input(1)), y_scale = scale_of(op, "y_scale", ctx.input(3));
        const int32_t zx = zero_point_of<T>(op, ctx, 2), zy = zero_point_of<T>(op, ctx, 4);
        const int64_t positions = in[0] * in[1] * in[2];
        bool whole_image = true;
        for (size_t d = 0; d < dims; ++d) whole_image &= k[d] == in[d] && begin[d] == 0 && end_pad[d] == 0;
        if (whole_image) {  // onnxruntime takes its global-average path (integer sums) for this case
            global_average<T>(ctx.pool(), X.ptr<T>(), N, C, positions, channels_last_, x_scale, zx, y_scale, zy,
                              Y.ptr<T>());
            return;
        }
        const T* x = X.ptr<T>();
        T* y = Y.ptr<T>();
        const int64_t out_positions = out[0] * out[1] * out[2];
        const int64_t kernel_size = k[0] * k[1] * k[2];
        ctx.pool().parallel_for(N * C, 1, [&](int64_t first, int64_t last) {
            for (int64_t nc = first; nc < last; ++nc) {
                const int64_t n = nc / C, c = nc % C;
                auto x_at = [&](int64_t p) {
                    const T v = channels_last_ ? x[(n * positions + p) * C + c] : x[nc * positions + p];
                    return x_scale * static_cast<float>(static_cast<int32_t>(v) - zx);
                };
                for (int64_t o = 0; o < out_positions; ++o) {
                    const int64_t o0 = o / (out[1] * out[2]), o1 = (o / out[2]) % out[1], o2 = o % out[2];
                    int64_t lo[3], hi[3];
                    const int64_t index[3] = {o0, o1, o2};
                    for (int d = 0; d < 3; ++d) {
                        const int64_t start = index[d] * s[d] - begin[d];
                        hi[d] = std::min(start + k[d], in[d]);
                        lo[d] = std::max<int64_t>(start, 0);
                    }
                    float sum = 0;
                    for (int64_t a = lo[0]; a < hi[0]; ++a)
                        for (int64_t b = lo[1]; b < hi[1]; ++b)
                            for (int64_t e = lo[2]; e < hi[2]; ++e) sum += x_at((a * in[1] + b) * in[2] + e);
                    const int64_t count = count_include_pad_
                                              ? kernel_size
                                              : std::max<int64_t>(0, hi[0] - lo[0]) * std::max<int64_t>(0, hi[1] - lo[1]) *
                                                    std::max<int64_t>(0, hi[2] - lo[2]);
                    const float mean = sum / static_cast<float>(std::max<int64_t>(count, 1));
                    // The zero point is added before rounding here (onnxruntime's pooling epilogue).
                    const float v = mean / y_scale + static_cast<float>(zy);
                    const T q = saturate<T>(static_cast<int32_t>(std::nearbyint(v)));
                    if (channels_last_)
                        y[(n * out_positions + o) * C + c] = q;
                    else
                        y[nc * out_positions + o] = q;
                }
            }
        });
    }

    std::vector<int64_t> kernel_, strides_, pads_;
    std::string auto_pad_;
    bool ceil_mode_, count_include_pad_, channels_last_;
};

// ---- QLinearConcat and QLinearWhere ------------------------------------------------------------------------------

// Input values re-quantized to the output's scale and zero point: a copy when the parameters are equal.
template <typename T> struct Requantizer {
    bool copy = true;
    T table[256];

    Requantizer(float x_scale, int32_t zx, float y_scale, int32_t zy) {
        copy = x_scale == y_scale && zx == zy;
        if (!copy) build_table<T>(x_scale, zx, y_scale, zy, [](float d) { return d; }, table);
    }
    T operator()(T v) const { return copy ? v : table[static_cast<uint8_t>(v)]; }
};

class QLinearConcatKernel final : public Kernel {
public:
    explicit QLinearConcatKernel(const NodeInfo& info) : axis_(info.attr_int("axis")) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "QLinearConcat";
        if (ctx.input_count() < 5 || (ctx.input_count() - 2) % 3 != 0)
            throw KernelError(op + ": inputs must be Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples");
        const Tensor& first = ctx.input(2);
        dispatch_8bit(op, first.type, [&]<typename T>() { run<T>(ctx, op); });
    }

private:
    template <typename T> void run(KernelContext& ctx, const std::string& op) const {
        const float y_scale = scale_of(op, "Y_scale", ctx.input(0));
        const int32_t zy = zero_point_of<T>(op, ctx, 1);
        const size_t count = (ctx.input_count() - 2) / 3;
        const Tensor& first = ctx.input(2);
        const size_t axis = normalize_axis(op, axis_, first.rank());
        Shape out_shape = first.shape;
        out_shape[axis] = 0;
        for (size_t i = 0; i < count; ++i) {
            const Tensor& x = ctx.input(2 + 3 * i);
            if (x.type != first.type || x.rank() != first.rank())
                throw KernelError(op + ": every input must have the first one's type and rank");
            for (size_t d = 0; d < x.rank(); ++d)
                if (d != axis && x.shape[d] != first.shape[d])
                    throw KernelError(op + ": input " + shape_string(x.shape) + " does not match " +
                                      shape_string(first.shape) + " outside axis " + std::to_string(axis));
            out_shape[axis] += x.shape[axis];
        }
        Tensor& Y = ctx.output(0, first.type, out_shape);
        int64_t outer = 1, inner = 1;
        for (size_t d = 0; d < axis; ++d) outer *= out_shape[d];
        for (size_t d = axis + 1; d < out_shape.size(); ++d) inner *= out_shape[d];
        const int64_t out_row = out_shape[axis] * inner;
        int64_t offset = 0;
        for (size_t i = 0; i < count; ++i) {
            const Tensor& x = ctx.input(2 + 3 * i);
            const Requantizer<T> requantize(scale_of(op, "X_scale", ctx.input(3 + 3 * i)), zero_point_of<T>(op, ctx, 4 + 3 * i),
                                            y_scale, zy);
            const int64_t row = x.shape[axis] * inner;
            const T* src = x.ptr<T>();
            T* dst = Y.ptr<T>() + offset;
            for (int64_t o = 0; o < outer; ++o)
                for (int64_t j = 0; j < row; ++j) dst[o * out_row + j] = requantize(src[o * row + j]);
            offset += row;
        }
    }

    int64_t axis_;
};

class QLinearWhereKernel final : public Kernel {
public:
    explicit QLinearWhereKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "QLinearWhere";
        const Tensor& cond = ctx.input(0);
        const Tensor& X = ctx.input(1);
        const Tensor& Yin = ctx.input(4);
        if (cond.type != TESS_ELEMENT_BOOL) throw_unsupported_type(op + " condition", cond.type);
        if (X.type != Yin.type) throw KernelError(op + ": X and Y must have one element type");
        dispatch_8bit(op, X.type, [&]<typename T>() {
            const float z_scale = scale_of(op, "z_scale", ctx.input(7));
            const int32_t zz = zero_point_of<T>(op, ctx, 8);
            const Requantizer<T> from_x(scale_of(op, "x_scale", ctx.input(2)), zero_point_of<T>(op, ctx, 3), z_scale, zz);
            const Requantizer<T> from_y(scale_of(op, "y_scale", ctx.input(5)), zero_point_of<T>(op, ctx, 6), z_scale, zz);
            const BroadcastPlan plan(op, {&cond.shape, &X.shape, &Yin.shape});
            Tensor& Z = ctx.output(0, X.type, plan.output_shape());
            const uint8_t* c = cond.ptr<uint8_t>();
            const T* x = X.ptr<T>();
            const T* y = Yin.ptr<T>();
            T* z = Z.ptr<T>();
            const bool cv = plan.inner_contiguous(0), xv = plan.inner_contiguous(1), yv = plan.inner_contiguous(2);
            for_each_broadcast_run<3>(plan, &ctx.pool(), [&](int64_t o, const std::array<int64_t, 3>& in,
                                                            int64_t count) {
                for (int64_t i = 0; i < count; ++i)
                    z[o + i] = c[in[0] + (cv ? i : 0)] ? from_x(x[in[1] + (xv ? i : 0)]) : from_y(y[in[2] + (yv ? i : 0)]);
            });
        });
    }
};

// ---- QLinearSoftmax ----------------------------------------------------------------------------------------------

// onnxruntime's algorithm: exponentials from a 256-entry table indexed by (x - max), shifted so that sums of up to
// D terms cannot overflow; the input zero point cancels out and is ignored; the output is written with the scale
// 1 / floor(1 / y_scale).
class QLinearSoftmaxKernel final : public Kernel {
public:
    explicit QLinearSoftmaxKernel(const NodeInfo& info)
        : axis_(info.attr_int("axis", -1)), opset_(info.attr_int("opset")) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "QLinearSoftmax";
        const Tensor& X = ctx.input(0);
        dispatch_8bit(op, X.type, [&]<typename T>() { run<T>(ctx, X, op); });
    }

private:
    template <typename T> void run(KernelContext& ctx, const Tensor& X, const std::string& op) const {
        const float x_scale = scale_of(op, "X_scale", ctx.input(1));
        const float y_scale = scale_of(op, "y_scale", ctx.input(3));
        const int32_t zy = zero_point_of<T>(op, ctx, 4);
        Tensor& Y = ctx.output(0, X.type, X.shape);
        if (X.size() == 0) return;
        const size_t axis = normalize_axis(op, axis_, X.rank());
        // Opset < 13: rows are the flattened dimensions from axis on; opset >= 13: the one dimension `axis`.
        int64_t outer = 1, D = 1, inner = 1;
        for (size_t d = 0; d < X.rank(); ++d) {
            if (d < axis) outer *= X.shape[d];
            else if (d == axis || opset_ < 13) D *= X.shape[d];
            else inner *= X.shape[d];
        }
        float table[256];
        // The logarithm is taken in float (onnxruntime's argument is a float), then widened.
        double shift = std::log(std::numeric_limits<float>::max() / static_cast<float>(D));
        shift = std::max(0.0, shift - 5) / static_cast<double>(x_scale);
        for (int i = 0; i < 256; ++i) {
            const float t = static_cast<float>(std::exp((static_cast<double>(i) - 255 + shift) * x_scale));
            table[std::is_same_v<T, uint8_t> ? i : static_cast<uint8_t>(i - 128)] = t;
        }
        const float out_scale = std::floor(1.0f / y_scale);
        const T* x = X.ptr<T>();
        T* y = Y.ptr<T>();
        ctx.pool().parallel_for(outer * inner, std::max<int64_t>(1, 4096 / D), [&](int64_t first, int64_t last) {
            float* values = thread_scratch_buffer<float, 22>(D);
            for (int64_t row = first; row < last; ++row) {
                const int64_t o = row / inner, i = row % inner;
                const T* xr = x + o * D * inner + i;
                T* yr = y + o * D * inner + i;
                int32_t x_max = kQmin<T>;
                for (int64_t k = 0; k < D; ++k) x_max = std::max<int32_t>(x_max, xr[k * inner]);
                float sum = 0;
                for (int64_t k = 0; k < D; ++k) {
                    const int32_t v = xr[k * inner];
                    // uint8: table[255 - max + x];  int8: table[(uint8)(127 - max + x)] (table laid out for bytes)
                    const float e = std::is_same_v<T, uint8_t> ? table[255 - x_max + v]
                                                               : table[static_cast<uint8_t>(127 - x_max + v)];
                    values[k] = e;
                    sum += e;
                }
                for (int64_t k = 0; k < D; ++k) {
                    volatile float scaled = values[k] * out_scale;
                    const int32_t q = static_cast<int32_t>(std::nearbyint(scaled / sum)) + zy;
                    yr[k * inner] = static_cast<T>(std::min(q, kQmax<T>));
                }
            }
        });
    }

    int64_t axis_;
    int64_t opset_;
};

}  // namespace

void register_contrib_quantized_elementwise_kernels(KernelRegistry& registry) {
    using namespace contrib;
    add(registry, "QLinearAdd", {{0, k8bit}, {3, k8bit}}, factory_with<QLinearBinaryKernel>(false));
    add(registry, "QLinearMul", {{0, k8bit}, {3, k8bit}}, factory_with<QLinearBinaryKernel>(true));
    add(registry, "QLinearSigmoid", {{0, k8bit}}, factory_with<QLinearTableKernel>(true));
    add(registry, "QLinearLeakyRelu", {{0, k8bit}}, factory_with<QLinearTableKernel>(false));
    add(registry, "QLinearGlobalAveragePool", {{0, k8bit}}, make_factory<QLinearGlobalAveragePoolKernel>());
    add(registry, "QLinearAveragePool", {{0, k8bit}}, make_factory<QLinearAveragePoolKernel>());
    add(registry, "QLinearConcat", {}, make_factory<QLinearConcatKernel>());
    add(registry, "QLinearWhere", {{1, k8bit}, {4, k8bit}}, make_factory<QLinearWhereKernel>());
    add(registry, "QLinearSoftmax", {{0, k8bit}}, make_factory<QLinearSoftmaxKernel>());
}

}  // namespace tessera::cpu
