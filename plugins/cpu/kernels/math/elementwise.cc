// CPU provider: broadcasting elementwise operators with two or more inputs — arithmetic (Add, Sub, Mul, Div, Pow,
// Mod), variadic (Sum, Mean, Max, Min), comparison (Equal, Less, Greater, LessOrEqual, GreaterOrEqual), logic
// (And, Or, Xor), bitwise (BitShift, BitwiseAnd/Or/Xor) and Where.  The unary ones (Not, BitwiseNot, math,
// activations) live in activation.cc.
//
// Every binary operator is a small functor run by one kernel template over a BroadcastPlan, so the per-type and
// per-broadcast-pattern loops come from templates (util/broadcast.h), never from hand-written copies.
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/all_kernels.h"
#include "util/broadcast.h"
#include "util/float16_compute.h"
#include "util/type_list.h"
#include "util/wrapping.h"

namespace tessera::cpu {

namespace {

// ---- Integer helpers -------------------------------------------------------------------------------------------

// Converts a double to an integer type the way numpy's astype does for in-range values (truncation), and
// saturates instead of invoking undefined behaviour for values out of range or NaN.
template <typename T> T saturating_cast(double v) {
    if constexpr (std::is_floating_point_v<T>) {
        return static_cast<T>(v);
    } else {
        if (std::isnan(v)) return T(0);
        if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
        if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
        return static_cast<T>(v);
    }
}

// ---- Functors --------------------------------------------------------------------------------------------------
// Each functor maps (T, T) to its output element; a functor with attributes has a NodeInfo constructor.

// Integer arithmetic wraps around on overflow (util/wrapping.h).
struct AddOp {
    template <typename T> T operator()(T a, T b) const { return wrapping_add(a, b); }
};
struct SubOp {
    template <typename T> T operator()(T a, T b) const { return wrapping_sub(a, b); }
};
struct MulOp {
    template <typename T> T operator()(T a, T b) const { return wrapping_mul(a, b); }
};

struct DivOp {
    // Integer division truncates (C semantics, as ONNX specifies); division by zero gives 0 instead of a trap,
    // and INT_MIN / -1 wraps instead of trapping.
    template <typename T> T operator()(T a, T b) const {
        if constexpr (std::is_integral_v<T>) {
            if (b == 0) return 0;
            if constexpr (std::is_signed_v<T>) {
                if (b == -1) return wrapping_neg(a);
            }
            return static_cast<T>(a / b);
        } else {
            return a / b;
        }
    }
};

struct ModOp {
    bool fmod = false;
    explicit ModOp(const NodeInfo& info) : fmod(info.attr_int("fmod", 0) != 0) {}

    // fmod = 0: the result takes the divisor's sign (Python's %, numpy's mod), a zero result included (opset 28
    // spells out the floating-point cases: x mod ±inf is x, or the infinity when the signs differ; ±inf mod y and
    // x mod ±0 are NaN, as fmod gives them).  fmod = 1: the dividend's sign (C's fmod).  A zero integer divisor
    // gives 0 rather than a trap.
    template <typename T> T operator()(T a, T b) const {
        if constexpr (std::is_floating_point_v<T>) {
            T r = std::fmod(a, b);
            if (fmod) return r;
            if (r == 0) return std::copysign(T(0), b);
            if ((r < 0) != (b < 0)) r += b;
            return r;
        } else {
            if (b == 0) return 0;
            if constexpr (std::is_signed_v<T>) {
                if (b == -1) return 0;
                T r = static_cast<T>(a % b);
                if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
                return r;
            } else {
                return static_cast<T>(a % b);
            }
        }
    }
};

// Max/Min propagate NaN (numpy's maximum/minimum, which the ONNX reference uses).
struct MaxOp {
    template <typename T> T operator()(T a, T b) const {
        if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(a)) return a;
        }
        return a < b ? b : a;
    }
};

struct MinOp {
    template <typename T> T operator()(T a, T b) const {
        if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(a)) return a;
        }
        return b < a ? b : a;
    }
};

struct EqualOp {
    static constexpr bool kStrings = true;
    template <typename T> bool operator()(T a, T b) const { return a == b; }
};
struct LessOp {
    template <typename T> bool operator()(T a, T b) const { return a < b; }
};
struct GreaterOp {
    template <typename T> bool operator()(T a, T b) const { return a > b; }
};
struct LessOrEqualOp {
    template <typename T> bool operator()(T a, T b) const { return a <= b; }
};
struct GreaterOrEqualOp {
    template <typename T> bool operator()(T a, T b) const { return a >= b; }
};

struct AndOp {
    bool operator()(bool a, bool b) const { return a && b; }
};
struct OrOp {
    bool operator()(bool a, bool b) const { return a || b; }
};
struct XorOp {
    bool operator()(bool a, bool b) const { return a != b; }
};

struct BitwiseAndOp {
    template <typename T> T operator()(T a, T b) const { return static_cast<T>(a & b); }
};
struct BitwiseOrOp {
    template <typename T> T operator()(T a, T b) const { return static_cast<T>(a | b); }
};
struct BitwiseXorOp {
    template <typename T> T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
};

struct BitShiftOp {
    bool left = true;
    explicit BitShiftOp(const NodeInfo& info) {
        const std::string direction = info.attr_string("direction", "");
        if (direction == "LEFT") left = true;
        else if (direction == "RIGHT") left = false;
        else throw KernelError("BitShift: direction must be \"LEFT\" or \"RIGHT\", got \"" + direction + "\"");
    }
    // A shift by a negative amount or by the bit width or more leaves only the sign extension (opset 28): -1 for a
    // right shift of a negative value, 0 otherwise.  C++ leaves such shifts undefined, so they are caught first.
    // Left shifts run in the unsigned type, where bits pushed past the sign bit are simply dropped (no signed
    // overflow); right shifts of signed values are arithmetic, as C++20 defines them.
    template <typename T> T operator()(T a, T b) const {
        constexpr T kBits = T(sizeof(T) * 8);
        bool out_of_range = b >= kBits;
        if constexpr (std::is_signed_v<T>) out_of_range = out_of_range || b < 0;
        if (out_of_range) {
            if constexpr (std::is_signed_v<T>) return !left && a < 0 ? T(-1) : T(0);
            else return T(0);
        }
        if (left) return static_cast<T>(static_cast<WrappingType<T>>(a) << b);
        return static_cast<T>(a >> b);
    }
};

template <typename Op> Op make_op(const NodeInfo& info) {
    if constexpr (std::is_constructible_v<Op, const NodeInfo&>) return Op(info);
    else return Op{};
}

template <typename Op> constexpr bool compares_strings() {
    if constexpr (requires { Op::kStrings; }) return Op::kStrings;
    else return false;
}

// Equal on string tensors: strings are reached through the host, one at a time.
void equal_strings(KernelContext& ctx, const BroadcastPlan& plan, const Tensor& a, const Tensor& b, bool* out) {
    const TessHostApi& host = ctx.host();
    auto get = [&](const Tensor& t, int64_t index) {
        const char* data = nullptr;
        size_t len = 0;
        if (TessStatus* status = host.tensor_get_string(t.value, static_cast<size_t>(index), &data, &len)) {
            std::string message = host.status_message(status);
            host.status_release(status);
            throw KernelError("Equal: cannot read a string element: " + message);
        }
        return std::string_view(data, len);
    };
    // Serial: reading strings may fail, and nothing may throw inside a parallel region.
    for_each_broadcast_run<2>(plan, nullptr, [&](int64_t o, const std::array<int64_t, 2>& in, int64_t count) {
        const int64_t step_a = plan.inner_contiguous(0) ? 1 : 0;
        const int64_t step_b = plan.inner_contiguous(1) ? 1 : 0;
        for (int64_t k = 0; k < count; ++k) out[o + k] = get(a, in[0] + k * step_a) == get(b, in[1] + k * step_b);
    });
}

// ---- Binary kernel -------------------------------------------------------------------------------------------

// Reads the opset < 7 "broadcast"/"axis" attributes.
struct LegacyBroadcast {
    bool enabled = false;  // opset < 7 semantics
    bool broadcast = false;
    std::optional<int64_t> axis;

    LegacyBroadcast(const NodeInfo& info, bool legacy) : enabled(legacy) {
        if (!legacy) return;
        broadcast = info.attr_int("broadcast", 0) != 0;
        if (info.has_attr("axis")) axis = info.attr_int("axis");
    }
    Shape operand_shape(std::string_view op, const Shape& a, const Shape& b) const {
        return enabled ? legacy_broadcast_shape(op, a, b, broadcast, axis) : b;
    }
};

template <typename Op, typename Types> class BinaryKernel final : public Kernel {
public:
    BinaryKernel(const NodeInfo& info, bool legacy)
        : op_(make_op<Op>(info)), name_(info.op_type()), legacy_(info, legacy) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        if (a.type != b.type) {
            throw KernelError(name_ + ": inputs have different element types (" + std::to_string(a.type) + " and " +
                              std::to_string(b.type) + ")");
        }
        const Shape b_shape = legacy_.operand_shape(name_, a.shape, b.shape);
        const BroadcastPlan plan(name_, {&a.shape, &b_shape});
        if constexpr (compares_strings<Op>()) {
            if (a.type == TESS_ELEMENT_STRING) {
                Tensor& out = ctx.output(0, TESS_ELEMENT_BOOL, plan.output_shape());
                equal_strings(ctx, plan, a, b, out.ptr<bool>());
                return;
            }
        }
        if constexpr (list_contains<float>(Types{})) {
            if (is_16bit_float(a.type)) return compute_16bit_float(ctx, plan, a, b);
        }
        dispatch_list(Types{}, a.type, [&]<typename T>() {
            using Out = decltype(op_(T{}, T{}));
            Tensor& out = ctx.output(0, element_type_of<Out>(), plan.output_shape());
            broadcast_binary(plan, a.ptr<T>(), b.ptr<T>(), out.ptr<Out>(), op_, &ctx.pool());
        });
    }

private:
    void compute_16bit_float(KernelContext& ctx, const BroadcastPlan& plan, const Tensor& a, const Tensor& b) const {
        const WidenedTensor wide_a(a), wide_b(b);
        const float* pa = wide_a.tensor().ptr<float>();
        const float* pb = wide_b.tensor().ptr<float>();
        using Out = decltype(op_(float{}, float{}));
        if constexpr (std::is_same_v<Out, bool>) {
            Tensor& out = ctx.output(0, TESS_ELEMENT_BOOL, plan.output_shape());
            broadcast_binary(plan, pa, pb, out.ptr<bool>(), op_, &ctx.pool());
        } else {
            NarrowedOutput out(ctx.output(0, a.type, plan.output_shape()));
            broadcast_binary(plan, pa, pb, out.tensor().ptr<float>(), op_, &ctx.pool());
            out.finish();
        }
    }


    Op op_;
    std::string name_;
    LegacyBroadcast legacy_;
};

// ---- Pow -----------------------------------------------------------------------------------------------------

// Integer power by squaring; wraps on overflow.  Negative exponents truncate 1/a^n toward zero.
template <typename T, typename E> T integer_pow(T base, E exponent) {
    if constexpr (std::is_signed_v<E>) {
        if (exponent < 0) {
            if (base == 1) return 1;
            if constexpr (std::is_signed_v<T>) {
                if (base == -1) return (exponent % 2 == 0) ? 1 : -1;
            }
            return 0;  // |1 / base^n| < 1 (and 1/0 has no integer value)
        }
    }
    T result = 1;
    auto e = static_cast<std::make_unsigned_t<E>>(exponent);
    while (e) {
        if (e & 1) result = wrapping_mul(result, base);
        base = wrapping_mul(base, base);
        e >>= 1;
    }
    return result;
}

template <typename T, typename E> T power(T base, E exponent) {
    if constexpr (std::is_integral_v<T> && std::is_integral_v<E>) {
        return integer_pow(base, exponent);
    } else if constexpr (std::is_same_v<T, float> && std::is_same_v<E, float>) {
        return std::pow(base, exponent);
    } else {
        // numpy computes mixed types in double and casts back to the base's type.
        return saturating_cast<T>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
    }
}

using PowBaseTypes = TypeList<float, double, int32_t, int64_t>;

class PowKernel final : public Kernel {
public:
    PowKernel(const NodeInfo& info, bool legacy) : legacy_(info, legacy) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& y = ctx.input(1);
        const Shape y_shape = legacy_.operand_shape("Pow", x.shape, y.shape);
        const BroadcastPlan plan("Pow", {&x.shape, &y_shape});
        dispatch_list(PowBaseTypes{}, x.type, [&]<typename T>() {
            dispatch_list(NumericTypes{}, y.type, [&]<typename E>() {
                Tensor& out = ctx.output(0, x.type, plan.output_shape());
                const T* base = x.ptr<T>();
                const E* exponent = y.ptr<E>();
                T* result = out.ptr<T>();
                // x^2 (and friends) with a scalar exponent are common in decomposed normalizations; a multiply is
                // exact and far cheaper than pow().
                if (plan.is_scalar(1) && plan.is_full(0)) {
                    const double e = static_cast<double>(*exponent);
                    if (e == 1.0) return parallel_map(base, result, x.size(), [](T v) { return v; }, &ctx.pool());
                    if (e == 2.0) {
                        return parallel_map(base, result, x.size(), [](T v) { return MulOp{}(v, v); }, &ctx.pool());
                    }
                    if (e == 3.0) {
                        return parallel_map(
                            base, result, x.size(), [](T v) { return MulOp{}(MulOp{}(v, v), v); }, &ctx.pool());
                    }
                }
                broadcast_binary(plan, base, exponent, result, [](T a, E b) { return power(a, b); }, &ctx.pool(),
                                 kElementwiseGrain / 8);
            });
        });
    }

private:
    LegacyBroadcast legacy_;
};

// ---- Variadic Sum / Mean / Max / Min ---------------------------------------------------------------------------

template <typename Op, typename Types, bool kMean> class VariadicKernel final : public Kernel {
public:
    explicit VariadicKernel(const NodeInfo& info) : name_(info.op_type()) {}

    void compute(KernelContext& ctx) const override {
        const size_t n = ctx.input_count();
        if (n == 0) throw KernelError(name_ + ": needs at least one input");
        std::vector<const Tensor*> inputs;
        std::vector<const Shape*> shapes;
        for (size_t i = 0; i < n; ++i) {
            if (!ctx.has_input(i)) throw KernelError(name_ + ": input " + std::to_string(i) + " is missing");
            inputs.push_back(&ctx.input(i));
            if (inputs.back()->type != inputs[0]->type) {
                throw KernelError(name_ + ": inputs have different element types");
            }
            shapes.push_back(&inputs.back()->shape);
        }
        const Shape out_shape = broadcast_shapes(name_, shapes);
        const int32_t type = inputs[0]->type;
        if constexpr (list_contains<float>(Types{})) {
            if (is_16bit_float(type)) {
                std::vector<WidenedTensor> wide;
                wide.reserve(n);
                for (size_t i = 0; i < n; ++i) inputs[i] = &wide.emplace_back(*inputs[i]).tensor();
                NarrowedOutput out(ctx.output(0, type, out_shape));
                fold<float>(inputs, out_shape, out.tensor().ptr<float>(), ctx.pool());
                out.finish();
                return;
            }
        }
        dispatch_list(Types{}, type, [&]<typename T>() {
            Tensor& out = ctx.output(0, element_type_of<T>(), out_shape);
            fold<T>(inputs, out_shape, out.ptr<T>(), ctx.pool());
        });
    }

private:
    // out = in0 op in1, then out = out op in_k for the remaining inputs (each broadcast to the output).
    template <typename T>
    void fold(const std::vector<const Tensor*>& inputs, const Shape& out_shape, T* out, ThreadPool& pool) const {
        const Tensor& first = *inputs[0];
        if (inputs.size() == 1) {
            // The output has the lone input's shape.
            std::copy_n(first.ptr<T>(), first.size(), out);
            return;
        }
        {
            const Shape* pair[] = {&first.shape, &inputs[1]->shape};
            const BroadcastPlan plan(name_, pair, out_shape);
            broadcast_binary(plan, first.ptr<T>(), inputs[1]->ptr<T>(), out, Op{}, &pool);
        }
        for (size_t i = 2; i < inputs.size(); ++i) {
            const Shape* pair[] = {&out_shape, &inputs[i]->shape};
            const BroadcastPlan plan(name_, pair, out_shape);
            broadcast_binary(plan, static_cast<const T*>(out), inputs[i]->ptr<T>(), out, Op{}, &pool);
        }
        if constexpr (kMean) {
            const T count = static_cast<T>(inputs.size());
            parallel_map(out, out, shape_size(out_shape), [count](T v) { return v / count; }, &pool);
        }
    }

    std::string name_;
};

// ---- Where ---------------------------------------------------------------------------------------------------

// Bytes per element of the byte-addressable fixed-size types; 0 for strings, packed sub-byte and complex128.
int fixed_element_size(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_BOOL: case TESS_ELEMENT_INT8: case TESS_ELEMENT_UINT8: case TESS_ELEMENT_FLOAT8E4M3FN:
        case TESS_ELEMENT_FLOAT8E4M3FNUZ: case TESS_ELEMENT_FLOAT8E5M2: case TESS_ELEMENT_FLOAT8E5M2FNUZ:
        case TESS_ELEMENT_FLOAT8E8M0:
            return 1;
        case TESS_ELEMENT_INT16: case TESS_ELEMENT_UINT16: case TESS_ELEMENT_FLOAT16: case TESS_ELEMENT_BFLOAT16:
            return 2;
        case TESS_ELEMENT_INT32: case TESS_ELEMENT_UINT32: case TESS_ELEMENT_FLOAT32:
            return 4;
        case TESS_ELEMENT_INT64: case TESS_ELEMENT_UINT64: case TESS_ELEMENT_FLOAT64: case TESS_ELEMENT_COMPLEX64:
            return 8;
        default:
            return 0;
    }
}

// Selection moves whole elements, so any fixed-size element type is handled by its size.
class WhereKernel final : public Kernel {
public:
    explicit WhereKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& cond = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& y = ctx.input(2);
        if (cond.type != TESS_ELEMENT_BOOL) throw KernelError("Where: condition must be a bool tensor");
        if (x.type != y.type) throw KernelError("Where: X and Y have different element types");
        const int elem = fixed_element_size(x.type);
        if (elem == 0) throw_unsupported_type("Where", x.type);
        const BroadcastPlan plan("Where", {&cond.shape, &x.shape, &y.shape});
        Tensor& out = ctx.output(0, x.type, plan.output_shape());
        auto run = [&]<typename U>() {
            const uint8_t* c = static_cast<const uint8_t*>(cond.data);  // bools are bytes holding 0 or 1
            const U* px = static_cast<const U*>(x.data);
            const U* py = static_cast<const U*>(y.data);
            U* po = static_cast<U*>(out.data);
            const int64_t sc = plan.inner_contiguous(0), sx = plan.inner_contiguous(1), sy = plan.inner_contiguous(2);
            for_each_broadcast_run<3>(plan, &ctx.pool(), [&](int64_t o, const std::array<int64_t, 3>& in,
                                                             int64_t count) {
                const uint8_t* pc = c + in[0];
                const U* a = px + in[1];
                const U* b = py + in[2];
                U* r = po + o;
                // A bit-mask select: GCC does not vectorize `c ? x : y` with a bool condition and wider elements.
                auto pick = [](uint8_t c, U x, U y) {
                    const U mask = static_cast<U>(U(0) - static_cast<U>(c));
                    return static_cast<U>((x & mask) | (y & static_cast<U>(~mask)));
                };
                if (sc && sx && sy) {
                    for (int64_t k = 0; k < count; ++k) r[k] = pick(pc[k], a[k], b[k]);
                } else {
                    for (int64_t k = 0; k < count; ++k) r[k] = pick(pc[k * sc], a[k * sx], b[k * sy]);
                }
            });
        };
        switch (elem) {
            case 1: run.operator()<uint8_t>(); break;
            case 2: run.operator()<uint16_t>(); break;
            case 4: run.operator()<uint32_t>(); break;
            case 8: run.operator()<uint64_t>(); break;
        }
    }
};

// ---- Registration --------------------------------------------------------------------------------------------

using TypeConstraints = std::vector<std::pair<size_t, std::vector<int32_t>>>;

void add(KernelRegistry& registry, const char* op, int since, int end, TypeConstraints types, KernelFactory factory,
         KernelMemory memory = KernelMemory::Normal) {
    KernelDef def;
    def.op_type = op;
    def.since_version = since;
    def.end_version = end;
    def.input_types = std::move(types);
    def.memory = memory;
    def.factory = std::move(factory);
    registry.add(std::move(def));
}

// A binary op with opset < 7 legacy broadcasting before `modern_since` (0: no legacy version).
template <typename Op, typename Types>
void add_binary(KernelRegistry& registry, const char* op, int since, int modern_since, TypeConstraints types,
                KernelMemory memory = KernelMemory::Normal) {
    using K = BinaryKernel<Op, Types>;
    if (modern_since > since) {
        add(registry, op, since, modern_since - 1, types,
            [](const NodeInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info, true); }, memory);
    }
    add(registry, op, std::max(since, modern_since), 0, std::move(types),
        [](const NodeInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info, false); }, memory);
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& registry) {
    const auto numeric = type_ids(NumericTypes{});
    const auto numeric16 = type_ids_with_16bit_floats(NumericTypes{});
    const auto numeric_bool = type_ids_with_16bit_floats(NumericBoolTypes{});
    const auto ints = type_ids(IntTypes{});
    const auto bools = type_ids(BoolTypes{});
    std::vector<int32_t> numeric_bool_string = numeric_bool;
    numeric_bool_string.push_back(TESS_ELEMENT_STRING);

    // Arithmetic: opset 1-6 broadcast through attributes, 7+ multidirectionally.  The output has input 0's
    // layout whenever their byte sizes match, so computing in place is safe.
    constexpr KernelMemory in_place = KernelMemory::InPlaceInput0;
    add_binary<AddOp, NumericTypes>(registry, "Add", 1, 7, {{0, numeric16}, {1, numeric16}}, in_place);
    add_binary<SubOp, NumericTypes>(registry, "Sub", 1, 7, {{0, numeric16}, {1, numeric16}}, in_place);
    add_binary<MulOp, NumericTypes>(registry, "Mul", 1, 7, {{0, numeric16}, {1, numeric16}}, in_place);
    add_binary<DivOp, NumericTypes>(registry, "Div", 1, 7, {{0, numeric16}, {1, numeric16}}, in_place);
    add_binary<ModOp, NumericTypes>(registry, "Mod", 10, 0, {{0, numeric16}, {1, numeric16}});

    add(registry, "Pow", 1, 6, {{0, type_ids(PowBaseTypes{})}, {1, numeric}},
        [](const NodeInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<PowKernel>(info, true); });
    add(registry, "Pow", 7, 0, {{0, type_ids(PowBaseTypes{})}, {1, numeric}},
        [](const NodeInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<PowKernel>(info, false); });

    // Variadic: before opset 8 the inputs must have equal shapes, which broadcasting accepts as a special case.
    const auto floats16 = type_ids_with_16bit_floats(FloatTypes{});
    add(registry, "Sum", 1, 0, {{0, floats16}}, make_factory<VariadicKernel<AddOp, FloatTypes, false>>());
    add(registry, "Mean", 1, 0, {{0, floats16}}, make_factory<VariadicKernel<AddOp, FloatTypes, true>>());
    add(registry, "Max", 1, 0, {{0, numeric16}}, make_factory<VariadicKernel<MaxOp, NumericTypes, false>>());
    add(registry, "Min", 1, 0, {{0, numeric16}}, make_factory<VariadicKernel<MinOp, NumericTypes, false>>());

    // Comparison (Equal also on bool and, from opset 19, strings).
    add_binary<EqualOp, NumericBoolTypes>(registry, "Equal", 1, 7,
                                          {{0, numeric_bool_string}, {1, numeric_bool_string}});
    add_binary<LessOp, NumericTypes>(registry, "Less", 1, 7, {{0, numeric16}, {1, numeric16}});
    add_binary<GreaterOp, NumericTypes>(registry, "Greater", 1, 7, {{0, numeric16}, {1, numeric16}});
    add_binary<LessOrEqualOp, NumericTypes>(registry, "LessOrEqual", 12, 0, {{0, numeric16}, {1, numeric16}});
    add_binary<GreaterOrEqualOp, NumericTypes>(registry, "GreaterOrEqual", 12, 0, {{0, numeric16}, {1, numeric16}});

    // Logic.
    add_binary<AndOp, BoolTypes>(registry, "And", 1, 7, {{0, bools}, {1, bools}});
    add_binary<OrOp, BoolTypes>(registry, "Or", 1, 7, {{0, bools}, {1, bools}});
    add_binary<XorOp, BoolTypes>(registry, "Xor", 1, 7, {{0, bools}, {1, bools}});

    // Bitwise.
    // Opset 28 adds the signed types; one kernel serves both versions.
    const auto unsigned_ids = type_ids(UnsignedIntTypes{});
    const KernelFactory bit_shift = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
        return std::make_unique<BinaryKernel<BitShiftOp, IntTypes>>(info, false);
    };
    add(registry, "BitShift", 11, 27, {{0, unsigned_ids}, {1, unsigned_ids}}, bit_shift);
    add(registry, "BitShift", 28, 0, {{0, ints}, {1, ints}}, bit_shift);
    add_binary<BitwiseAndOp, IntTypes>(registry, "BitwiseAnd", 18, 0, {{0, ints}, {1, ints}});
    add_binary<BitwiseOrOp, IntTypes>(registry, "BitwiseOr", 18, 0, {{0, ints}, {1, ints}});
    add_binary<BitwiseXorOp, IntTypes>(registry, "BitwiseXor", 18, 0, {{0, ints}, {1, ints}});

    // Where takes any element type of 1, 2, 4 or 8 bytes.
    const auto selectable = element_types_where([](int32_t type) { return fixed_element_size(type) != 0; });
    add(registry, "Where", 9, 0, {{0, bools}, {1, selectable}, {2, selectable}}, make_factory<WhereKernel>());
}

}  // namespace tessera::cpu
