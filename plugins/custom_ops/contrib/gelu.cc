// Elementwise contrib ops: Gelu, FastGelu, BiasGelu, QuickGelu, BiasAdd and BiasSplitGelu.
//
//   Gelu(X)            = 0.5 X (1 + erf(X / sqrt 2))
//   BiasGelu(A, B)     = Gelu(A + B)                   B: 1-D, the length of A's last dimension
//   FastGelu(X [, b])  = 0.5 v (1 + tanh(v (0.035677408136300125 v^2 + 0.7978845608028654))),  v = X (+ b)
//                        (onnxruntime's constants: sqrt(2/pi) and 0.044715 sqrt(2/pi)); b as for BiasGelu
//   QuickGelu(X)       = X sigmoid(alpha X), alpha = 1.702 unless given
//   BiasAdd(X, b, s)   = X + b + s                      X, s: (N, S, C); b: (C)
//   BiasSplitGelu(X, b) = L * Gelu(R), [L, R] = X + b split in halves along the last dim; X: (N, S, D), b: (D)
//
// Everything computes in float (double for double inputs) and rounds once on the way out.  The float paths use
// the vectorizable exp / erfc / tanh of fast_math.h; double uses libm.
#include <algorithm>
#include <cmath>

#include "fast_math.h"
#include "op_support.h"

namespace tessera::contrib {
namespace {

enum class GeluKind { Exact, Tanh, Quick };

template <typename C>
struct GeluFn {
    GeluKind kind;
    C alpha;

    C operator()(C v) const {
        switch (kind) {
            case GeluKind::Exact:
                return C(0.5) * v * (C(1) + std::erf(v * C(0.70710678118654752440)));
            case GeluKind::Tanh: {
                constexpr C kB = C(0.7978845608028654);    // sqrt(2 / pi)
                constexpr C kC = C(0.035677408136300125);  // 0.044715 * sqrt(2 / pi)
                return C(0.5) * v * (C(1) + std::tanh(v * (kC * v * v + kB)));
            }
            case GeluKind::Quick:
                return v / (C(1) + std::exp(-alpha * v));
        }
        return v;
    }
};

// ---- Checks and shape inference shared by the Gelu family ------------------------------------------------------

// A bias input (index 1) is 1-D and as long as the input's last dimension, as onnxruntime's bias_gelu_helper asks.
void check_bias(const Node& node) {
    require_same_type(node, {0, 1});
    if (!node.has_input(1)) return;
    auto bias = node.input_dims(1);
    auto x = node.input_dims(0);
    if (bias && bias->size() != 1) fail("the bias must be 1-D, it has rank " + std::to_string(bias->size()));
    if (x && x->empty()) fail("the input must have at least one dimension");
    if (bias && x && !x->empty() && (*bias)[0] >= 0 && x->back() >= 0 && (*bias)[0] != x->back())
        fail("the bias length " + std::to_string((*bias)[0]) + " differs from the input's last dimension " +
             std::to_string(x->back()));
}

void check_gelu(const Node& node) { check_bias(node); }

void check_quick_gelu(const Node& node) {
    node.get_float("alpha", 1.702f);  // fails on a wrongly typed attribute
}

void infer_like_input0(const Node& node, const ShapeOut& out) { out.set(0, node.input_type(0), node.input_dims(0)); }

// ---- Kernel -----------------------------------------------------------------------------------------------------

class GeluKernel final : public Kernel {
public:
    GeluKernel(GeluKind kind, float alpha) : kind_(kind), alpha_(alpha) {}

    void compute(const Context& ctx) const override {
        Tensor x = ctx.input(0, "X");
        std::optional<Tensor> bias = ctx.optional_input(1);
        if (bias) {
            if (x.rank() < 1) fail("the input must have at least one dimension");
            if (bias->rank() != 1) fail("the bias must be 1-D, it has shape " + shape_string(bias->dims));
            if (bias->dim(0) != x.dim(x.rank() - 1))
                fail("the bias length " + std::to_string(bias->dim(0)) + " differs from the input's last dimension " +
                     std::to_string(x.dim(x.rank() - 1)));
            if (bias->type != x.type) fail("the bias has another element type than the input");
        }
        void* y = ctx.output(0, x.type, x.dims);
        if (x.count == 0) return;
        const size_t cols = bias ? static_cast<size_t>(bias->dim(0)) : std::min<size_t>(x.count, kChunk);
        if (cols == 0) return;
        dispatch_float(x.type, [&](auto tag) {
            using T = decltype(tag);
            using C = compute_t<T>;
            const T* in = x.as<T>();
            T* out = static_cast<T*>(y);
            std::vector<C> b;
            if (bias) {
                b.resize(cols);
                convert_in(bias->as<T>(), b.data(), cols);
            }
            // Row by row (a row: the bias length, or a chunk without bias): v = x (+ bias) in the compute type,
            // the activation over the row in place, then the row is stored.
            std::vector<C> v(cols);
            for (size_t start = 0; start < x.count; start += cols) {
                const size_t n = std::min(cols, x.count - start);
                const T* row = in + start;
                if (bias) {
                    for (size_t j = 0; j < n; ++j) v[j] = load(row[j]) + b[j];
                } else {
                    convert_in(row, v.data(), n);
                }
                apply(v.data(), n);
                convert_out(v.data(), out + start, n);
            }
        });
    }

private:
    static constexpr size_t kChunk = 4096;

    void apply(float* v, size_t n) const {
        switch (kind_) {
            case GeluKind::Exact: return fast::gelu(v, n);
            case GeluKind::Tanh: return fast::fast_gelu(v, n);
            case GeluKind::Quick: return fast::quick_gelu(v, n, alpha_);
        }
    }
    void apply(double* v, size_t n) const {
        const GeluFn<double> fn{kind_, static_cast<double>(alpha_)};
        for (size_t i = 0; i < n; ++i) v[i] = fn(v[i]);
    }

    GeluKind kind_;
    float alpha_;
};

// ---- BiasAdd --------------------------------------------------------------------------------------------------

void check_bias_add(const Node& node) {
    require_same_type(node, {0, 1, 2});
    auto x = node.input_dims(0);
    auto b = node.input_dims(1);
    auto s = node.input_dims(2);
    if (x && x->size() != 3) fail("X must be 3-D (N, S, C), it has rank " + std::to_string(x->size()));
    if (b && b->size() != 1) fail("bias must be 1-D (C), it has rank " + std::to_string(b->size()));
    if (s && s->size() != 3) fail("skip must be 3-D (N, S, C), it has rank " + std::to_string(s->size()));
    if (x && s && x->size() == s->size())
        for (size_t d = 0; d < x->size(); ++d)
            if ((*x)[d] >= 0 && (*s)[d] >= 0 && (*x)[d] != (*s)[d])
                fail("skip " + shape_string(*s) + " must have the shape of X " + shape_string(*x));
    if (x && b && x->size() == 3 && b->size() == 1 && (*x)[2] >= 0 && (*b)[0] >= 0 && (*x)[2] != (*b)[0])
        fail("bias length " + std::to_string((*b)[0]) + " differs from C = " + std::to_string((*x)[2]));
}

class BiasAddKernel final : public Kernel {
public:
    void compute(const Context& ctx) const override {
        Tensor x = ctx.input(0, "X");
        Tensor bias = ctx.input(1, "bias");
        Tensor skip = ctx.input(2, "skip");
        if (x.rank() != 3) fail("X must be 3-D (N, S, C), it has shape " + shape_string(x.dims));
        if (bias.rank() != 1 || bias.dim(0) != x.dim(2))
            fail("bias " + shape_string(bias.dims) + " must be (C) for X " + shape_string(x.dims));
        if (skip.shape() != x.shape()) fail("skip " + shape_string(skip.dims) + " must have the shape of X " +
                                            shape_string(x.dims));
        if (bias.type != x.type || skip.type != x.type) fail("X, bias and skip must have one element type");
        void* y = ctx.output(0, x.type, x.dims);
        dispatch_float(x.type, [&](auto tag) {
            using T = decltype(tag);
            const size_t cols = static_cast<size_t>(x.dim(2));
            if (cols == 0) return;
            const T* in = x.as<T>();
            const T* b = bias.as<T>();
            const T* s = skip.as<T>();
            T* out = static_cast<T*>(y);
            for (size_t r = 0; r < x.count / cols; ++r)
                for (size_t j = 0; j < cols; ++j) {
                    size_t i = r * cols + j;
                    out[i] = store<T>(load(in[i]) + load(b[j]) + load(s[i]));
                }
        });
    }
};

// ---- BiasSplitGelu ------------------------------------------------------------------------------------------

void check_bias_split_gelu(const Node& node) {
    require_same_type(node, {0, 1});
    auto x = node.input_dims(0), b = node.input_dims(1);
    if (x && x->size() != 3) fail("X must be 3-D (N, S, D), it has rank " + std::to_string(x->size()));
    if (b && b->size() != 1) fail("bias must be 1-D (D), it has rank " + std::to_string(b->size()));
    if (x && x->size() == 3 && (*x)[2] >= 0 && (*x)[2] % 2 != 0)
        fail("the hidden dimension " + std::to_string((*x)[2]) + " must be even");
    if (x && b && x->size() == 3 && b->size() == 1 && (*x)[2] >= 0 && (*b)[0] >= 0 && (*x)[2] != (*b)[0])
        fail("bias length " + std::to_string((*b)[0]) + " differs from D = " + std::to_string((*x)[2]));
}

void infer_bias_split_gelu(const Node& node, const ShapeOut& out) {
    auto x = node.input_dims(0);
    if (x && x->size() == 3 && (*x)[2] >= 0) (*x)[2] /= 2;
    out.set(0, node.input_type(0), x);
}

// Y = left * Gelu(right), where left and right are the two halves of X + bias along the last dim.
class BiasSplitGeluKernel final : public Kernel {
public:
    void compute(const Context& ctx) const override {
        Tensor x = ctx.input(0, "X");
        Tensor bias = ctx.input(1, "bias");
        if (x.rank() != 3 || x.dim(2) % 2 != 0)
            fail("X " + shape_string(x.dims) + " must be 3-D with an even last dimension");
        if (bias.rank() != 1 || bias.dim(0) != x.dim(2))
            fail("bias " + shape_string(bias.dims) + " must be (D) for X " + shape_string(x.dims));
        if (bias.type != x.type) fail("bias has another element type than X");
        const std::vector<int64_t> y_shape{x.dim(0), x.dim(1), x.dim(2) / 2};
        void* y = ctx.output(0, x.type, y_shape);
        const size_t half = static_cast<size_t>(x.dim(2) / 2);
        if (x.count == 0 || half == 0) return;
        dispatch_float(x.type, [&](auto tag) {
            using T = decltype(tag);
            using C = compute_t<T>;
            std::vector<C> b(2 * half), left(half), right(half);
            convert_in(bias.as<T>(), b.data(), 2 * half);
            const T* in = x.as<T>();
            T* out = static_cast<T*>(y);
            const GeluFn<double> exact{GeluKind::Exact, 0.0};
            for (size_t r = 0; r < x.count / (2 * half); ++r) {
                const T* row = in + r * 2 * half;
                for (size_t j = 0; j < half; ++j) {
                    left[j] = load(row[j]) + b[j];
                    right[j] = load(row[half + j]) + b[half + j];
                }
                if constexpr (std::is_same_v<C, float>) {
                    fast::gelu(right.data(), half);
                } else {
                    for (size_t j = 0; j < half; ++j) right[j] = exact(right[j]);
                }
                for (size_t j = 0; j < half; ++j) out[r * half + j] = store<T>(left[j] * right[j]);
            }
        });
    }
};

const std::vector<int32_t> kGeluTypes = {kFloat, kHalf, kDouble, kBFloat16};
const std::vector<int32_t> kHalfFloat = {kFloat, kHalf};

}  // namespace

void add_activation_ops(std::vector<OpSpec>& ops) {
    OpSpec gelu;
    gelu.name = "Gelu";
    gelu.inputs = {{"X", kGeluTypes}};
    gelu.outputs = {{"Y", kGeluTypes}};
    gelu.check = check_gelu;
    gelu.infer = infer_like_input0;
    gelu.create = [](const Node&) -> std::unique_ptr<Kernel> {
        return std::make_unique<GeluKernel>(GeluKind::Exact, 0.0f);
    };
    ops.push_back(gelu);

    OpSpec bias_gelu;
    bias_gelu.name = "BiasGelu";
    bias_gelu.inputs = {{"A", kGeluTypes}, {"B", kGeluTypes}};
    bias_gelu.outputs = {{"C", kGeluTypes}};
    bias_gelu.check = check_gelu;
    bias_gelu.infer = infer_like_input0;
    bias_gelu.create = gelu.create;
    ops.push_back(bias_gelu);

    OpSpec fast_gelu;
    fast_gelu.name = "FastGelu";
    fast_gelu.inputs = {{"X", kGeluTypes}, {"bias", kGeluTypes, true}};
    fast_gelu.outputs = {{"Y", kGeluTypes}};
    fast_gelu.check = check_gelu;
    fast_gelu.infer = infer_like_input0;
    fast_gelu.create = [](const Node&) -> std::unique_ptr<Kernel> {
        return std::make_unique<GeluKernel>(GeluKind::Tanh, 0.0f);
    };
    ops.push_back(fast_gelu);

    OpSpec quick_gelu;
    quick_gelu.name = "QuickGelu";
    quick_gelu.inputs = {{"X", kGeluTypes}};
    quick_gelu.outputs = {{"Y", kGeluTypes}};
    quick_gelu.attributes = {"alpha"};
    quick_gelu.check = check_quick_gelu;
    quick_gelu.infer = infer_like_input0;
    quick_gelu.create = [](const Node& node) -> std::unique_ptr<Kernel> {
        return std::make_unique<GeluKernel>(GeluKind::Quick, node.get_float("alpha", 1.702f));
    };
    ops.push_back(quick_gelu);

    OpSpec bias_add;
    bias_add.name = "BiasAdd";
    bias_add.inputs = {{"X", kHalfFloat}, {"bias", kHalfFloat}, {"skip", kHalfFloat}};
    bias_add.outputs = {{"Y", kHalfFloat}};
    bias_add.check = check_bias_add;
    bias_add.infer = infer_like_input0;
    bias_add.create = [](const Node&) -> std::unique_ptr<Kernel> { return std::make_unique<BiasAddKernel>(); };
    ops.push_back(bias_add);

    OpSpec split;
    split.name = "BiasSplitGelu";
    split.inputs = {{"X", kHalfFloat}, {"bias", kHalfFloat}};
    split.outputs = {{"Y", kHalfFloat}};
    split.check = check_bias_split_gelu;
    split.infer = infer_bias_split_gelu;
    split.create = [](const Node&) -> std::unique_ptr<Kernel> { return std::make_unique<BiasSplitGeluKernel>(); };
    ops.push_back(split);
}

}  // namespace tessera::contrib
