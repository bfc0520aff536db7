// CPU provider: unary math (Abs, Exp, Sin, Erf, IsNaN, ...), activations (Relu, Sigmoid, Gelu, ...), Clip,
// Shrink, PRelu, and the unary logic/bitwise ops Not and BitwiseNot.
//
// Every unary op is a functor run by UnaryKernel: `operator()(T)` gives the scalar result for each supported
// element type; a functor may add `vec(vec::Vf)`, a 16-lane float form (util/vec_math.h), and `kGrain`, the
// number of elements worth one parallel task when its per-element cost is high.  Float work runs in code
// compiled for the best ISA of the machine.
#include <cmath>
#include <concepts>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/all_kernels.h"
#include "util/broadcast.h"
#include "util/float16_compute.h"
#include "util/type_list.h"
#include "util/vec_math.h"
#include "util/wrapping.h"

namespace tessera::cpu {

namespace {

// Per-element cost classes, as elements per parallel task.
constexpr int64_t kCheapGrain = kElementwiseGrain;
constexpr int64_t kTranscendentalGrain = 4096;

template <typename Fn>
concept HasVectorForm = requires(const Fn& fn, vec::Vf v) {
    { fn.vec(v) } -> std::same_as<vec::Vf>;
};

template <typename Fn> constexpr int64_t grain_of() {
    if constexpr (requires { Fn::kGrain; }) return Fn::kGrain;
    else return kCheapGrain;
}

template <typename Fn> Fn make_functor(const NodeInfo& info) {
    if constexpr (std::is_constructible_v<Fn, const NodeInfo&>) return Fn(info);
    else return Fn{};
}

// Calls a functor's vector form (always inlined: the 16-lane values must not cross a real call).
template <typename Fn> struct VectorForm {
    const Fn& fn;
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf v) const { return fn.vec(v); }
};

// out[k] = fn(in[k]) over n elements, split across the pool.  out may equal in.
template <typename Fn, typename T, typename Out>
void apply_unary(const Fn& fn, const T* in, Out* out, int64_t n, ThreadPool& pool) {
    auto chunk = [&](int64_t begin, int64_t end) {
        if constexpr (std::is_same_v<T, float> && std::is_same_v<Out, float>) {
            vec::run_best_isa([&] {
                if constexpr (HasVectorForm<Fn>) {
                    vec::map(in + begin, out + begin, end - begin, VectorForm<Fn>{fn});
                } else {
                    for (int64_t k = begin; k < end; ++k) out[k] = fn(in[k]);
                }
            });
        } else {
            for (int64_t k = begin; k < end; ++k) out[k] = fn(in[k]);
        }
    };
    constexpr int64_t grain = grain_of<Fn>();
    if (n <= grain || pool.size() <= 1) chunk(0, n);
    else pool.parallel_for(n, grain, chunk);
}

template <typename Fn, typename Types> class UnaryKernel final : public Kernel {
public:
    explicit UnaryKernel(const NodeInfo& info) : fn_(make_functor<Fn>(info)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if constexpr (list_contains<float>(Types{})) {
            if (is_16bit_float(x.type)) return compute_16bit_float(ctx, x);
        }
        dispatch_list(Types{}, x.type, [&]<typename T>() {
            using Out = decltype(fn_(T{}));
            Tensor& y = ctx.output(0, element_type_of<Out>(), x.shape);
            apply_unary(fn_, x.ptr<T>(), y.ptr<Out>(), x.size(), ctx.pool());
        });
    }

private:
    void compute_16bit_float(KernelContext& ctx, const Tensor& x) const {
        const WidenedTensor wide(x);
        using Out = decltype(fn_(float{}));
        if constexpr (std::is_same_v<Out, float>) {
            NarrowedOutput y(ctx.output(0, x.type, x.shape));
            apply_unary(fn_, wide.tensor().ptr<float>(), y.tensor().ptr<float>(), x.size(), ctx.pool());
            y.finish();
        } else {
            Tensor& y = ctx.output(0, element_type_of<Out>(), x.shape);
            apply_unary(fn_, wide.tensor().ptr<float>(), y.ptr<Out>(), x.size(), ctx.pool());
        }
    }


    Fn fn_;
};

// ---- Unary math ----------------------------------------------------------------------------------------------

struct Abs {
    template <typename T> T operator()(T x) const { return wrapping_abs(x); }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return vec::abs(x); }
};
struct Neg {
    template <typename T> T operator()(T x) const { return wrapping_neg(x); }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return -x; }
};
struct Exp {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    template <typename T> T operator()(T x) const { return std::exp(x); }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return vec::exp(x); }
};
struct Log {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    template <typename T> T operator()(T x) const { return std::log(x); }
};
struct Sqrt {
    template <typename T> T operator()(T x) const { return std::sqrt(x); }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return vec::sqrt(x); }
};
struct Reciprocal {
    template <typename T> T operator()(T x) const { return T(1) / x; }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return 1.0f / x; }
};
struct Floor {
    template <typename T> T operator()(T x) const { return std::floor(x); }
};
struct Ceil {
    template <typename T> T operator()(T x) const { return std::ceil(x); }
};
// Halves round to even (the default rounding mode), as ONNX specifies.
struct Round {
    template <typename T> T operator()(T x) const { return std::nearbyint(x); }
};
struct Sign {
    template <typename T> T operator()(T x) const {
        if (x > T(0)) return T(1);
        if constexpr (std::is_signed_v<T>) {
            if (x < T(0)) return T(-1);
        }
        return x;  // 0 (or NaN) stays as it is
    }
};

// A libm function as a functor; F is a captureless lambda calling the overloaded std function.
template <auto F> struct Libm {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    template <typename T> T operator()(T x) const { return F(x); }
};
using Sin = Libm<[](auto x) { return std::sin(x); }>;
using Cos = Libm<[](auto x) { return std::cos(x); }>;
using Tan = Libm<[](auto x) { return std::tan(x); }>;
using Asin = Libm<[](auto x) { return std::asin(x); }>;
using Acos = Libm<[](auto x) { return std::acos(x); }>;
using Atan = Libm<[](auto x) { return std::atan(x); }>;
using Sinh = Libm<[](auto x) { return std::sinh(x); }>;
using Cosh = Libm<[](auto x) { return std::cosh(x); }>;
using Asinh = Libm<[](auto x) { return std::asinh(x); }>;
using Acosh = Libm<[](auto x) { return std::acosh(x); }>;
using Atanh = Libm<[](auto x) { return std::atanh(x); }>;

// Erf accepts every numeric type; integers go through double and truncate (numpy's astype).
struct Erf {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    template <typename T> T operator()(T x) const {
        if constexpr (std::is_floating_point_v<T>) return std::erf(x);
        else return static_cast<T>(std::erf(static_cast<double>(x)));
    }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return vec::erf(x); }
};

struct IsNaN {
    template <typename T> bool operator()(T x) const { return std::isnan(x); }
};
struct IsInf {
    bool negative = true;
    bool positive = true;
    explicit IsInf(const NodeInfo& info)
        : negative(info.attr_int("detect_negative", 1) != 0), positive(info.attr_int("detect_positive", 1) != 0) {}
    template <typename T> bool operator()(T x) const {
        return std::isinf(x) && (x > 0 ? positive : negative);
    }
};

struct Not {
    bool operator()(bool x) const { return !x; }
};
struct BitwiseNot {
    template <typename T> T operator()(T x) const { return static_cast<T>(~x); }
};

// ---- Activations ---------------------------------------------------------------------------------------------

// NaN passes through the comparisons below unchanged, as with numpy's maximum.
struct Relu {
    template <typename T> T operator()(T x) const { return x < T(0) ? T(0) : x; }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return vec::select(x < 0.0f, vec::Vf{}, x); }
};
struct LeakyRelu {
    float alpha;
    explicit LeakyRelu(const NodeInfo& info) : alpha(info.attr_float("alpha", 0.01f)) {}
    template <typename T> T operator()(T x) const { return x < T(0) ? static_cast<T>(alpha) * x : x; }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return vec::select(x < 0.0f, alpha * x, x); }
};
struct ThresholdedRelu {
    float alpha;
    explicit ThresholdedRelu(const NodeInfo& info) : alpha(info.attr_float("alpha", 1.0f)) {}
    template <typename T> T operator()(T x) const { return x > static_cast<T>(alpha) ? x : T(0); }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return vec::select(x > alpha, x, vec::Vf{}); }
};
struct Elu {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    float alpha;
    explicit Elu(const NodeInfo& info) : alpha(info.attr_float("alpha", 1.0f)) {}
    template <typename T> T operator()(T x) const { return x < T(0) ? static_cast<T>(alpha) * std::expm1(x) : x; }
};
struct Selu {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    float alpha, gamma;
    explicit Selu(const NodeInfo& info)
        : alpha(info.attr_float("alpha", 1.67326319217681884765625f)),
          gamma(info.attr_float("gamma", 1.05070102214813232421875f)) {}
    template <typename T> T operator()(T x) const {
        const T g = static_cast<T>(gamma);
        return x > T(0) ? g * x : g * static_cast<T>(alpha) * std::expm1(x);
    }
};
struct Celu {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    float alpha;
    explicit Celu(const NodeInfo& info) : alpha(info.attr_float("alpha", 1.0f)) {
        if (alpha == 0.0f) throw KernelError("Celu: alpha must not be 0");
    }
    template <typename T> T operator()(T x) const {
        const T a = static_cast<T>(alpha);
        return x > T(0) ? x : a * std::expm1(x / a);
    }
};
struct Sigmoid {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    template <typename T> T operator()(T x) const { return T(1) / (T(1) + std::exp(-x)); }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return vec::sigmoid(x); }
};
struct HardSigmoid {
    float alpha, beta;
    explicit HardSigmoid(const NodeInfo& info)
        : alpha(info.attr_float("alpha", 0.2f)), beta(info.attr_float("beta", 0.5f)) {}
    template <typename T> T operator()(T x) const {
        const T v = static_cast<T>(alpha) * x + static_cast<T>(beta);
        return v < T(0) ? T(0) : (v > T(1) ? T(1) : v);
    }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const {
        const vec::Vf v = alpha * x + beta;
        return vec::select(v < 0.0f, vec::Vf{}, vec::select(v > 1.0f, vec::splat(1.0f), v));
    }
};
// x * HardSigmoid(x) with alpha = 1/6, beta = 1/2.
struct HardSwish {
    template <typename T> T operator()(T x) const {
        const T v = x / T(6) + T(0.5);
        return x * (v < T(0) ? T(0) : (v > T(1) ? T(1) : v));
    }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const {
        const vec::Vf v = x * (1.0f / 6.0f) + 0.5f;
        return x * vec::select(v < 0.0f, vec::Vf{}, vec::select(v > 1.0f, vec::splat(1.0f), v));
    }
};
struct Tanh {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    template <typename T> T operator()(T x) const { return std::tanh(x); }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return vec::tanh(x); }
};
// log(1 + e^x) without overflow for large x.
template <typename T> T softplus(T x) { return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
struct Softplus {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    template <typename T> T operator()(T x) const { return softplus(x); }
};
struct Softsign {
    template <typename T> T operator()(T x) const { return x / (T(1) + std::abs(x)); }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const { return x / (1.0f + vec::abs(x)); }
};
struct Mish {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    template <typename T> T operator()(T x) const { return x * std::tanh(softplus(x)); }
};
struct Gelu {
    static constexpr int64_t kGrain = kTranscendentalGrain;
    bool tanh_approximation = false;
    explicit Gelu(const NodeInfo& info) {
        const std::string approximate = info.attr_string("approximate", "none");
        if (approximate == "tanh") tanh_approximation = true;
        else if (approximate != "none") {
            throw KernelError("Gelu: approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
        }
    }
    template <typename T> T operator()(T x) const {
        if (tanh_approximation) {
            // 1 + tanh(u) = 2 * sigmoid(2u): no cancellation for negative x.
            const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
            return x / (T(1) + std::exp(T(-2) * u));
        }
        const T z = x * T(0.70710678118654752);
        return x < T(0) ? T(0.5) * x * std::erfc(-z) : T(0.5) * x * (T(1) + std::erf(z));
    }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const {
        return tanh_approximation ? vec::gelu_tanh(x) : vec::gelu(x);
    }
};

// Shrink accepts every numeric type; the comparison and bias happen in double so that unsigned inputs and
// fractional lambd/bias behave as in the reference.
struct Shrink {
    double lambd, bias;
    explicit Shrink(const NodeInfo& info)
        : lambd(info.attr_float("lambd", 0.5f)), bias(info.attr_float("bias", 0.0f)) {}
    template <typename T> T operator()(T x) const {
        const double v = static_cast<double>(x);
        if (v < -lambd) return static_cast<T>(v + bias);
        if (v > lambd) return static_cast<T>(v - bias);
        return T(0);
    }
};

// ---- Clip ----------------------------------------------------------------------------------------------------

template <typename T> struct Clamp {
    T lo, hi;
    // min(max(x, lo), hi): with lo > hi everything becomes hi, as the spec says; NaN stays NaN.
    T operator()(T x) const {
        const T v = x < lo ? lo : x;
        return v > hi ? hi : v;
    }
    [[gnu::always_inline]] vec::Vf vec(vec::Vf x) const
        requires std::is_same_v<T, float>
    {
        const vec::Vf v = vec::select(x < lo, vec::splat(lo), x);
        return vec::select(v > hi, vec::splat(hi), v);
    }
};

// Opset 1-10 take the bounds as float attributes, opset 11+ as optional scalar inputs of the data type.
class ClipKernel final : public Kernel {
public:
    ClipKernel(const NodeInfo& info, bool bounds_are_inputs) : bounds_are_inputs_(bounds_are_inputs) {
        if (!bounds_are_inputs) {
            min_ = info.attr_float("min", std::numeric_limits<float>::lowest());
            max_ = info.attr_float("max", std::numeric_limits<float>::max());
        }
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        dispatch_list(NumericTypes{}, x.type, [&]<typename T>() {
            Clamp<T> clamp{std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max()};
            if (bounds_are_inputs_) {
                if (ctx.has_input(1)) clamp.lo = bound<T>(ctx.input(1), x.type, "min");
                if (ctx.has_input(2)) clamp.hi = bound<T>(ctx.input(2), x.type, "max");
            } else {
                clamp.lo = static_cast<T>(min_);
                clamp.hi = static_cast<T>(max_);
            }
            Tensor& y = ctx.output(0, x.type, x.shape);
            apply_unary(clamp, x.ptr<T>(), y.ptr<T>(), x.size(), ctx.pool());
        });
    }

private:
    template <typename T> static T bound(const Tensor& t, int32_t type, const char* which) {
        if (t.type != type) throw KernelError(std::string("Clip: ") + which + " has a different type than the input");
        if (t.size() != 1) {
            throw KernelError(std::string("Clip: ") + which + " must be a scalar, got shape " + shape_string(t.shape));
        }
        return *t.ptr<T>();
    }

    bool bounds_are_inputs_;
    float min_ = 0, max_ = 0;
};

// ---- PRelu ---------------------------------------------------------------------------------------------------

using PReluTypes = TypeList<float, double, int32_t, int64_t, uint32_t, uint64_t>;

// The slope broadcasts to X unidirectionally (a per-channel slope is typically [C, 1, 1]).  Before opset 7 a 1-D
// slope of X's channel count applies per channel (axis 1), as the converters of that time emitted it.
class PReluKernel final : public Kernel {
public:
    PReluKernel(const NodeInfo&, bool channel_slope) : channel_slope_(channel_slope) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& slope = ctx.input(1);
        if (slope.type != x.type) throw KernelError("PRelu: slope has a different type than X");
        Shape slope_shape = slope.shape;
        if (channel_slope_ && slope.rank() == 1 && x.rank() >= 2 && slope.shape[0] == x.shape[1]) {
            slope_shape.assign(x.rank() - 1, 1);
            slope_shape[0] = slope.shape[0];
        }
        const Shape* shapes[] = {&x.shape, &slope_shape};
        const BroadcastPlan plan("PRelu", shapes, x.shape);
        dispatch_list(PReluTypes{}, x.type, [&]<typename T>() {
            Tensor& y = ctx.output(0, x.type, x.shape);
            broadcast_binary(plan, x.ptr<T>(), slope.ptr<T>(), y.ptr<T>(),
                             [](T v, T s) { return v < T(0) ? s * v : v; }, &ctx.pool());
        });
    }

private:
    bool channel_slope_;
};

// ---- Registration --------------------------------------------------------------------------------------------

template <typename Fn, typename Types>
void add_unary(KernelRegistry& registry, const char* op, int since, KernelMemory memory = KernelMemory::InPlaceInput0,
               const char* domain = "") {
    registry.add(KernelDef{.domain = domain,
                           .op_type = op,
                           .since_version = since,
                           .input_types = {{0, type_ids_16bit_via_float(Types{})}},
                           .memory = memory,
                           .factory = make_factory<UnaryKernel<Fn, Types>>()});
}

}  // namespace

void register_activation_kernels(KernelRegistry& registry) {
    // Versions differ only in added types or the dropped "consumed_inputs" attribute (ignored), so each op has
    // one registration from its first version on.  Same-type unary ops may overwrite their input.
    add_unary<Abs, NumericTypes>(registry, "Abs", 1);
    add_unary<Neg, SignedNumericTypes>(registry, "Neg", 1);
    add_unary<Exp, FloatTypes>(registry, "Exp", 1);
    add_unary<Log, FloatTypes>(registry, "Log", 1);
    add_unary<Sqrt, FloatTypes>(registry, "Sqrt", 1);
    add_unary<Reciprocal, FloatTypes>(registry, "Reciprocal", 1);
    add_unary<Floor, FloatTypes>(registry, "Floor", 1);
    add_unary<Ceil, FloatTypes>(registry, "Ceil", 1);
    add_unary<Round, FloatTypes>(registry, "Round", 11);
    add_unary<Sign, NumericTypes>(registry, "Sign", 9);
    add_unary<Sin, FloatTypes>(registry, "Sin", 7);
    add_unary<Cos, FloatTypes>(registry, "Cos", 7);
    add_unary<Tan, FloatTypes>(registry, "Tan", 7);
    add_unary<Asin, FloatTypes>(registry, "Asin", 7);
    add_unary<Acos, FloatTypes>(registry, "Acos", 7);
    add_unary<Atan, FloatTypes>(registry, "Atan", 7);
    add_unary<Sinh, FloatTypes>(registry, "Sinh", 9);
    add_unary<Cosh, FloatTypes>(registry, "Cosh", 9);
    add_unary<Asinh, FloatTypes>(registry, "Asinh", 9);
    add_unary<Acosh, FloatTypes>(registry, "Acosh", 9);
    add_unary<Atanh, FloatTypes>(registry, "Atanh", 9);
    add_unary<Erf, NumericTypes>(registry, "Erf", 9);
    add_unary<IsNaN, FloatTypes>(registry, "IsNaN", 9, KernelMemory::Normal);
    add_unary<IsInf, FloatTypes>(registry, "IsInf", 10, KernelMemory::Normal);
    add_unary<Not, BoolTypes>(registry, "Not", 1);
    add_unary<BitwiseNot, IntTypes>(registry, "BitwiseNot", 18);

    add_unary<Relu, SignedNumericTypes>(registry, "Relu", 1);  // integer types from opset 14
    add_unary<LeakyRelu, FloatTypes>(registry, "LeakyRelu", 1);
    add_unary<ThresholdedRelu, FloatTypes>(registry, "ThresholdedRelu", 10);
    add_unary<Elu, FloatTypes>(registry, "Elu", 1);
    add_unary<Selu, FloatTypes>(registry, "Selu", 1);
    add_unary<Celu, FloatTypes>(registry, "Celu", 12);
    add_unary<Sigmoid, FloatTypes>(registry, "Sigmoid", 1);
    add_unary<HardSigmoid, FloatTypes>(registry, "HardSigmoid", 1);
    add_unary<HardSwish, FloatTypes>(registry, "HardSwish", 14);
    add_unary<Tanh, FloatTypes>(registry, "Tanh", 1);
    add_unary<Softplus, FloatTypes>(registry, "Softplus", 1);
    add_unary<Softsign, FloatTypes>(registry, "Softsign", 1);
    add_unary<Mish, FloatTypes>(registry, "Mish", 18);
    add_unary<Gelu, FloatTypes>(registry, "Gelu", 20);
    // The optimizer's Gelu (provider.h), fused from the Erf pattern in models whose opset predates ONNX's Gelu.
    add_unary<Gelu, FloatTypes>(registry, "Gelu", 1, KernelMemory::InPlaceInput0, TESS_FUSED_OPS_DOMAIN);
    add_unary<Shrink, NumericTypes>(registry, "Shrink", 9);

    const auto numeric = type_ids(NumericTypes{});
    registry.add(KernelDef{.domain = "",
                           .op_type = "Clip",
                           .since_version = 1,
                           .end_version = 10,
                           .input_types = {{0, type_ids(FloatTypes{})}},
                           .memory = KernelMemory::InPlaceInput0,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<ClipKernel>(info, false);
                           }});
    registry.add(KernelDef{.domain = "",
                           .op_type = "Clip",
                           .since_version = 11,
                           .input_types = {{0, numeric}, {1, numeric}, {2, numeric}},
                           .memory = KernelMemory::InPlaceInput0,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<ClipKernel>(info, true);
                           }});
    const auto prelu_types = type_ids(PReluTypes{});
    registry.add(KernelDef{.domain = "",
                           .op_type = "PRelu",
                           .since_version = 1,
                           .end_version = 6,
                           .input_types = {{0, prelu_types}, {1, prelu_types}},
                           .memory = KernelMemory::InPlaceInput0,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<PReluKernel>(info, true);
                           }});
    registry.add(KernelDef{.domain = "",
                           .op_type = "PRelu",
                           .since_version = 7,
                           .end_version = 0,
                           .input_types = {{0, prelu_types}, {1, prelu_types}},
                           .memory = KernelMemory::InPlaceInput0,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<PReluKernel>(info, false);
                           }});
}

}  // namespace tessera::cpu
