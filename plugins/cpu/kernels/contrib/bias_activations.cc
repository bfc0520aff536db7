// CPU provider, com.microsoft: the elementwise operators of onnxruntime's transformer optimizer, with its semantics.
//
//   Gelu(X)               0.5 X (1 + erf(X / sqrt 2))
//   BiasGelu(A, B)        Gelu(A + B)                    B: 1-D, the length of A's last dimension
//   FastGelu(X [, B])     0.5 v (1 + tanh(0.7978845608 (v + 0.044715 v^3))),  v = X (+ B); B as for BiasGelu
//   QuickGelu(X)          X sigmoid(alpha X), alpha = 1.702 unless given
//   BiasAdd(X, B, S)      X + B + S                      X, S: (N, S, C); B: (C)
//   BiasSplitGelu(X, B)   L Gelu(R), [L, R] = X + B split in halves along the last dim; X: (N, S, D), B: (D)
//
// float runs on the provider's vector math (util/vec_math.h), float16 and bfloat16 compute in float and round once,
// double computes in double; rows are spread over the session's pool.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "util/compute_cast.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

enum class GeluKind { Exact, Tanh, Quick };

constexpr int64_t kGrainElements = 8192;  // transcendental work per task

struct ExactGelu {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return vec::gelu(x); }
};
struct TanhGelu {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return vec::gelu_tanh(x); }
};
struct QuickGelu {
    float alpha;
    // -inf * sigmoid(-inf) would be NaN; the limit is 0.
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const {
        return vec::max(x, vec::splat(-3.4028234e38f)) * vec::sigmoid(alpha * x);
    }
};

// The activation over n values in place: float on vector lanes, double with libm.
void activate(GeluKind kind, float alpha, float* v, int64_t n) {
    vec::run_best_isa([&] {
        switch (kind) {
            case GeluKind::Exact: return vec::map(v, v, n, ExactGelu{});
            case GeluKind::Tanh: return vec::map(v, v, n, TanhGelu{});
            case GeluKind::Quick: return vec::map(v, v, n, QuickGelu{alpha});
        }
    });
}

void activate(GeluKind kind, float alpha, double* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const double x = v[i];
        switch (kind) {
            case GeluKind::Exact: v[i] = 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)); break;
            case GeluKind::Tanh:
                v[i] = 0.5 * x * (1.0 + std::tanh(x * (0.035677408136300125 * x * x + 0.7978845608028654)));
                break;
            case GeluKind::Quick: v[i] = x / (1.0 + std::exp(-static_cast<double>(alpha) * x)); break;
        }
    }
}

// A 1-D input of length `length` (a bias over the last dimension).
void check_vector(const std::string& op, const char* name, const Tensor& t, int64_t length, int32_t type) {
    if (t.rank() != 1 || t.shape[0] != length)
        throw KernelError(op + ": " + name + " " + shape_string(t.shape) + " must be 1-D of length " +
                          std::to_string(length));
    if (t.type != type) throw KernelError(op + ": " + name + " has another element type than the input");
}

// Gelu, BiasGelu, FastGelu and QuickGelu: y = activation(x (+ bias over the last dimension)).
class BiasActivationKernel final : public Kernel {
public:
    BiasActivationKernel(const NodeInfo& info, GeluKind kind)
        : op_(info.op_type()), kind_(kind), alpha_(info.attr_float("alpha", 1.702f)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const bool has_bias = ctx.has_input(1);
        const int64_t cols = x.rank() == 0 ? 1 : x.shape.back();
        if (has_bias) {
            if (x.rank() < 1) throw KernelError(op_ + ": the input must have at least one dimension");
            check_vector(op_, "the bias", ctx.input(1), cols, x.type);
        }
        Tensor& y = ctx.output(0, x.type, x.shape);
        if (x.size() == 0) return;
        ThreadPool& pool = ctx.pool();
        if (x.type == TESS_ELEMENT_FLOAT64) return run<double>(ctx, x, y, has_bias, cols, pool);
        run<float>(ctx, x, y, has_bias, cols, pool);
    }

private:
    template <typename C>
    void run(KernelContext& ctx, const Tensor& x, Tensor& y, bool has_bias, int64_t cols, ThreadPool& pool) const {
        const ConvertedInput<C> in(x, pool);
        const ConvertedInput<C> bias = has_bias ? ConvertedInput<C>(ctx.input(1), pool) : ConvertedInput<C>();
        ConvertedOutput<C> out(y);
        const int64_t n = x.size();
        if (!has_bias) {
            pool.parallel_for(n, kGrainElements, [&](int64_t begin, int64_t end) {
                std::copy(in.data() + begin, in.data() + end, out.data() + begin);
                activate(kind_, alpha_, out.data() + begin, end - begin);
            });
        } else {
            const int64_t rows = n / cols;
            pool.parallel_for(rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(cols, 1)),
                              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                    C* o = out.data() + r * cols;
                    const C* i = in.data() + r * cols;
                    for (int64_t c = 0; c < cols; ++c) o[c] = i[c] + bias.data()[c];
                    activate(kind_, alpha_, o, cols);
                }
            });
        }
        out.finish(pool);
    }

    std::string op_;
    GeluKind kind_;
    float alpha_;
};

// BiasAdd: X + bias + skip, X and skip (N, S, C), bias (C).
class BiasAddKernel final : public Kernel {
public:
    explicit BiasAddKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& bias = ctx.input(1);
        const Tensor& skip = ctx.input(2);
        if (x.rank() != 3) throw KernelError("BiasAdd: X must be 3-D (N, S, C), it has shape " + shape_string(x.shape));
        check_vector("BiasAdd", "bias", bias, x.shape[2], x.type);
        if (skip.shape != x.shape)
            throw KernelError("BiasAdd: skip " + shape_string(skip.shape) + " must have the shape of X " +
                              shape_string(x.shape));
        if (skip.type != x.type) throw KernelError("BiasAdd: skip has another element type than X");
        Tensor& y = ctx.output(0, x.type, x.shape);
        const int64_t cols = x.shape[2];
        if (x.size() == 0 || cols == 0) return;
        ThreadPool& pool = ctx.pool();
        const ConvertedInput<float> in(x, pool), b(bias, pool), s(skip, pool);
        ConvertedOutput<float> out(y);
        pool.parallel_for(x.size() / cols, std::max<int64_t>(1, 65536 / cols), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    out.data()[r * cols + c] = in.data()[r * cols + c] + b.data()[c] + s.data()[r * cols + c];
        });
        out.finish(pool);
    }
};

// BiasSplitGelu: Y = left * Gelu(right), the halves of X + bias along the last dimension.
class BiasSplitGeluKernel final : public Kernel {
public:
    explicit BiasSplitGeluKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& bias = ctx.input(1);
        if (x.rank() != 3 || x.shape[2] % 2 != 0)
            throw KernelError("BiasSplitGelu: X " + shape_string(x.shape) + " must be 3-D with an even last dimension");
        check_vector("BiasSplitGelu", "bias", bias, x.shape[2], x.type);
        const int64_t half = x.shape[2] / 2;
        Tensor& y = ctx.output(0, x.type, Shape{x.shape[0], x.shape[1], half});
        if (x.size() == 0 || half == 0) return;
        ThreadPool& pool = ctx.pool();
        const ConvertedInput<float> in(x, pool), b(bias, pool);
        ConvertedOutput<float> out(y);
        pool.parallel_for(x.size() / (2 * half), std::max<int64_t>(1, kGrainElements / half),
                          [&](int64_t begin, int64_t end) {
            float* right = thread_scratch_buffer<float>(static_cast<size_t>(half));
            for (int64_t r = begin; r < end; ++r) {
                const float* row = in.data() + r * 2 * half;
                for (int64_t j = 0; j < half; ++j) right[j] = row[half + j] + b.data()[half + j];
                activate(GeluKind::Exact, 0.0f, right, half);
                float* o = out.data() + r * half;
                for (int64_t j = 0; j < half; ++j) o[j] = (row[j] + b.data()[j]) * right[j];
            }
        });
        out.finish(pool);
    }
};

// ---- Checks at session creation (declared shapes; the kernels check the real ones again) ------------------------

// A bias (input 1) is 1-D and as long as the input's last dimension, as onnxruntime's bias_gelu_helper asks.
std::string check_bias(const NodeInfo& info) {
    if (std::string problem = contrib::same_types(info, {0, 1}); !problem.empty()) return problem;
    if (!info.has_input(1)) return "";
    const auto bias = contrib::declared_dims(info, 1), x = contrib::declared_dims(info, 0);
    if (bias && bias->size() != 1) return "the bias must be 1-D, it has rank " + std::to_string(bias->size());
    if (x && x->empty()) return "the input must have at least one dimension";
    if (bias && x && (*bias)[0] >= 0 && x->back() >= 0 && (*bias)[0] != x->back())
        return "the bias length " + std::to_string((*bias)[0]) + " differs from the input's last dimension " +
               std::to_string(x->back());
    return "";
}

std::string check_quick_gelu(const NodeInfo& info) {
    info.attr_float("alpha", 1.702f);  // throws on an attribute of another type
    return "";
}

std::string check_bias_add(const NodeInfo& info) {
    if (std::string problem = contrib::same_types(info, {0, 1, 2}); !problem.empty()) return problem;
    const auto x = contrib::declared_dims(info, 0), b = contrib::declared_dims(info, 1), s = contrib::declared_dims(info, 2);
    if (x && x->size() != 3) return "X must be 3-D (N, S, C), it has rank " + std::to_string(x->size());
    if (b && b->size() != 1) return "bias must be 1-D (C), it has rank " + std::to_string(b->size());
    if (s && s->size() != 3) return "skip must be 3-D (N, S, C), it has rank " + std::to_string(s->size());
    if (x && s)
        for (size_t d = 0; d < 3; ++d)
            if ((*x)[d] >= 0 && (*s)[d] >= 0 && (*x)[d] != (*s)[d])
                return "skip " + shape_string(*s) + " must have the shape of X " + shape_string(*x);
    if (x && b && (*x)[2] >= 0 && (*b)[0] >= 0 && (*x)[2] != (*b)[0])
        return "bias length " + std::to_string((*b)[0]) + " differs from C = " + std::to_string((*x)[2]);
    return "";
}

std::string check_bias_split_gelu(const NodeInfo& info) {
    if (std::string problem = contrib::same_types(info, {0, 1}); !problem.empty()) return problem;
    const auto x = contrib::declared_dims(info, 0), b = contrib::declared_dims(info, 1);
    if (x && x->size() != 3) return "X must be 3-D (N, S, D), it has rank " + std::to_string(x->size());
    if (b && b->size() != 1) return "bias must be 1-D (D), it has rank " + std::to_string(b->size());
    if (x && (*x)[2] >= 0 && (*x)[2] % 2 != 0) return "the hidden dimension " + std::to_string((*x)[2]) + " must be even";
    if (x && b && (*x)[2] >= 0 && (*b)[0] >= 0 && (*x)[2] != (*b)[0])
        return "bias length " + std::to_string((*b)[0]) + " differs from D = " + std::to_string((*x)[2]);
    return "";
}

}  // namespace

void register_contrib_bias_activation_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> gelu_types = type_ids_with_16bit_floats(FloatTypes{});
    const std::vector<int32_t> float32_or_16 = contrib::kFloat32Or16;
    contrib::add(registry, "Gelu", {{0, gelu_types}}, contrib::factory_with<BiasActivationKernel>(GeluKind::Exact));
    contrib::add(registry, "BiasGelu", {{0, gelu_types}, {1, gelu_types}},
                 contrib::factory_with<BiasActivationKernel>(GeluKind::Exact), check_bias);
    contrib::add(registry, "FastGelu", {{0, gelu_types}, {1, gelu_types}},
                 contrib::factory_with<BiasActivationKernel>(GeluKind::Tanh), check_bias);
    contrib::add(registry, "QuickGelu", {{0, gelu_types}}, contrib::factory_with<BiasActivationKernel>(GeluKind::Quick),
                 check_quick_gelu);
    contrib::add(registry, "BiasAdd", {{0, float32_or_16}, {1, float32_or_16}, {2, float32_or_16}},
                 make_factory<BiasAddKernel>(), check_bias_add);
    contrib::add(registry, "BiasSplitGelu", {{0, float32_or_16}, {1, float32_or_16}},
                 make_factory<BiasSplitGeluKernel>(), check_bias_split_gelu);
}

}  // namespace tessera::cpu
