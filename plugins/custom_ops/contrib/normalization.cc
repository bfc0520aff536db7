// Normalization contrib ops: SkipLayerNormalization, SkipSimplifiedLayerNormalization and BiasSoftmax.
//
// SkipLayerNormalization(input, skip, gamma [, beta [, bias]]; epsilon = 1e-12)
// SkipSimplifiedLayerNormalization(input, skip, gamma [, bias]; epsilon = 1e-12)
//   input (B, S, H) or (T, H); skip like input, or (1, S, H) / (S, H) for a 3-D input (repeated over the batch);
//   gamma, beta, bias: (H).  Per row of H elements, v = input + skip (+ bias), then
//     LayerNorm:  out = (v - mean) / sqrt(E[v^2] - mean^2 + epsilon) * gamma (+ beta)
//     Simplified: out = v / sqrt(E[v^2] + epsilon) * gamma
//   Outputs: out; mean and inv_std_var (float, shape input[:-1] + [1]; onnxruntime's CPU kernel leaves them unset,
//   here they hold the row mean and 1 / the denominator above); input_skip_bias_sum (v, like input).
//   Statistics accumulate in double; 16-bit inputs compute in float and round once.
//
// BiasSoftmax(data, bias; axis = 1, is_inner_broadcast)
//   Softmax over the dims from `axis` on, flattened (opset-11 style), of data + bias.  The bias holds
//   bias_batches = size(bias) / size(data[axis:]) rows; row b of data uses bias row
//     is_inner_broadcast != 0:  b / (batches / bias_batches)  (bias repeats over the batch dims next to axis)
//     is_inner_broadcast == 0:  b % bias_batches              (bias repeats over the leading batch dims)
#include <algorithm>
#include <cmath>
#include <limits>

#include "op_support.h"

namespace tessera::contrib {
namespace {

// ---- Skip(Simplified)LayerNormalization ------------------------------------------------------------------------

struct LayerNormLayout {
    bool simplified;
    size_t beta;  // input index, or SIZE_MAX
    size_t bias;
};

constexpr LayerNormLayout kSkipLayerNorm{false, 3, 4};
constexpr LayerNormLayout kSkipSimplified{true, SIZE_MAX, 3};

template <const LayerNormLayout& L>
void check_skip_layer_norm(const Node& node) {
    require_same_type(node, {0, 1, 2, 3, 4});
    float epsilon = node.get_float("epsilon", 1e-12f);
    if (!(epsilon >= 0.0f)) fail("epsilon must not be negative");
    auto x = node.input_dims(0);
    auto skip = node.input_dims(1);
    if (x && x->size() != 2 && x->size() != 3)
        fail("input must be 3-D (batch, sequence, hidden) or 2-D (tokens, hidden), it has rank " +
             std::to_string(x->size()));
    if (skip && skip->size() != 2 && skip->size() != 3)
        fail("skip must be 2-D or 3-D, it has rank " + std::to_string(skip->size()));
    if (x && skip && skip->size() > x->size())
        fail("skip " + shape_string(*skip) + " has a higher rank than input " + shape_string(*x));
    const int64_t hidden = x && !x->empty() ? x->back() : -1;
    for (size_t i : {size_t{2}, L.beta, L.bias}) {
        if (i == SIZE_MAX) continue;
        auto d = node.input_dims(i);
        if (!d) continue;
        if (d->size() != 1) fail("input " + std::to_string(i) + " must be 1-D (hidden), it has rank " +
                                 std::to_string(d->size()));
        if (hidden >= 0 && (*d)[0] >= 0 && (*d)[0] != hidden)
            fail("input " + std::to_string(i) + " has length " + std::to_string((*d)[0]) + ", the hidden size is " +
                 std::to_string(hidden));
    }
}

void infer_skip_layer_norm(const Node& node, const ShapeOut& out) {
    int32_t type = node.input_type(0);
    auto dims = node.input_dims(0);
    out.set(0, type, dims);
    std::optional<std::vector<int64_t>> stats;
    if (dims && !dims->empty()) {
        stats = dims;
        stats->back() = 1;
    }
    if (node.has_output(1)) out.set(1, kFloat, stats);
    if (node.has_output(2)) out.set(2, kFloat, stats);
    if (node.has_output(3)) out.set(3, type, dims);
}

template <const LayerNormLayout& L>
class SkipLayerNormKernel final : public Kernel {
public:
    explicit SkipLayerNormKernel(const Node& node)
        : epsilon_(node.get_float("epsilon", 1e-12f)),
          want_mean_(node.has_output(1)),
          want_inv_std_(node.has_output(2)),
          want_sum_(node.has_output(3)) {
        // gamma, beta and bias are usually initializers: convert them once.
        dispatch_float(node.input_type(0) == TESS_ELEMENT_UNDEFINED ? kFloat : node.input_type(0), [&](auto tag) {
            using T = decltype(tag);
            auto keep = [&](size_t i, Packed& p) {
                if (i == SIZE_MAX || node.constant(i) == nullptr) return;
                p.present = true;
                p.type = element_type_of<T>();
                auto values = constant_as_compute<T>(node, i);
                if constexpr (std::is_same_v<compute_t<T>, double>) {
                    p.d = std::move(values);
                } else {
                    p.f = std::move(values);
                }
            };
            keep(2, gamma_);
            keep(L.beta, beta_);
            keep(L.bias, bias_);
        });
    }

    void compute(const Context& ctx) const override {
        Tensor x = ctx.input(0, "input");
        Tensor skip = ctx.input(1, "skip");
        Tensor gamma = ctx.input(2, "gamma");
        std::optional<Tensor> beta = L.beta == SIZE_MAX ? std::nullopt : ctx.optional_input(L.beta);
        std::optional<Tensor> bias = ctx.optional_input(L.bias);

        if (x.rank() != 2 && x.rank() != 3)
            fail("input must be 3-D (batch, sequence, hidden) or 2-D (tokens, hidden), it has shape " +
                 shape_string(x.dims));
        if (skip.rank() != 2 && skip.rank() != 3) fail("skip must be 2-D or 3-D, it has shape " + shape_string(skip.dims));
        const size_t r = x.rank(), rs = skip.rank();
        bool same = skip.shape() == x.shape();
        bool broadcast = r == 3 && skip.dim(rs - 1) == x.dim(2) && skip.dim(rs - 2) == x.dim(1) &&
                         (rs == 2 || skip.dim(0) == 1);
        if (!same && !broadcast)
            fail("skip " + shape_string(skip.dims) + " must have the shape of input " + shape_string(x.dims) +
                 ", or (1, S, H) / (S, H) for a 3-D input");
        const int64_t hidden = x.dim(r - 1);
        auto check_vector = [&](const Tensor& t, const char* name) {
            if (t.rank() != 1 || t.dim(0) != hidden)
                fail(std::string(name) + " " + shape_string(t.dims) + " must be 1-D of the hidden size " +
                     std::to_string(hidden));
            if (t.type != x.type) fail(std::string(name) + " has another element type than input");
        };
        check_vector(gamma, "gamma");
        if (beta) check_vector(*beta, "beta");
        if (bias) check_vector(*bias, "bias");
        if (skip.type != x.type) fail("skip has another element type than input");

        std::vector<int64_t> stats_shape = x.shape();
        stats_shape.back() = 1;
        void* out = ctx.output(0, x.type, x.dims);
        float* mean_out = want_mean_ ? ctx.output<float>(1, stats_shape) : nullptr;
        float* inv_std_out = want_inv_std_ ? ctx.output<float>(2, stats_shape) : nullptr;
        void* sum_out = want_sum_ ? ctx.output(3, x.type, x.dims) : nullptr;
        if (x.count == 0 || hidden == 0) return;

        dispatch_float(x.type, [&](auto tag) {
            using T = decltype(tag);
            using C = compute_t<T>;
            const size_t H = static_cast<size_t>(hidden);
            std::vector<C> scratch;
            auto vec = [&](const Packed& packed, const std::optional<Tensor>& t, std::vector<C>& local) -> const C* {
                if (!t) return nullptr;
                if (packed.present && packed.type == element_type_of<T>()) {
                    if constexpr (std::is_same_v<C, double>) {
                        return packed.d.data();
                    } else {
                        return packed.f.data();
                    }
                }
                local.resize(H);
                convert_in(t->as<T>(), local.data(), H);
                return local.data();
            };
            std::vector<C> gl, bl, cl;
            const C* g = vec(gamma_, std::optional<Tensor>(gamma), gl);
            const C* b = vec(beta_, beta, bl);
            const C* c = vec(bias_, bias, cl);

            const T* in = x.as<T>();
            const T* sk = skip.as<T>();
            const size_t skip_size = skip.count;
            T* o = static_cast<T*>(out);
            T* so = static_cast<T*>(sum_out);
            std::vector<C> v(H);
            const size_t rows = x.count / H;
            for (size_t row = 0; row < rows; ++row) {
                const size_t offset = row * H;
                const T* xr = in + offset;
                const T* sr = sk + offset % skip_size;
                double sum = 0.0, sum_sq = 0.0;
                for (size_t h = 0; h < H; ++h) {
                    C value = load(xr[h]) + load(sr[h]);
                    if (c != nullptr) value += c[h];
                    v[h] = value;
                    sum += static_cast<double>(value);
                    sum_sq += static_cast<double>(value) * static_cast<double>(value);
                }
                if (so != nullptr) convert_out(v.data(), so + offset, H);
                const double mean = sum / static_cast<double>(H);
                const double mean_sq = sum_sq / static_cast<double>(H);
                const double denom = L.simplified ? std::sqrt(mean_sq + epsilon_)
                                                  : std::sqrt(std::max(mean_sq - mean * mean, 0.0) + epsilon_);
                if (mean_out != nullptr) mean_out[row] = static_cast<float>(mean);
                if (inv_std_out != nullptr) inv_std_out[row] = static_cast<float>(1.0 / denom);
                const C m = L.simplified ? C(0) : static_cast<C>(mean);
                const C inv = static_cast<C>(1.0 / denom);
                T* orow = o + offset;
                if (b != nullptr) {
                    for (size_t h = 0; h < H; ++h) orow[h] = store<T>((v[h] - m) * inv * g[h] + b[h]);
                } else {
                    for (size_t h = 0; h < H; ++h) orow[h] = store<T>((v[h] - m) * inv * g[h]);
                }
            }
        });
    }

private:
    struct Packed {
        bool present = false;
        int32_t type = TESS_ELEMENT_UNDEFINED;
        std::vector<float> f;
        std::vector<double> d;
    };
    float epsilon_;
    bool want_mean_, want_inv_std_, want_sum_;
    Packed gamma_, beta_, bias_;
};

// ---- BiasSoftmax --------------------------------------------------------------------------------------------------

void check_bias_softmax(const Node& node) {
    require_same_type(node, {0, 1});
    if (!node.has("is_inner_broadcast")) fail("the attribute 'is_inner_broadcast' is required");
    node.get_int("is_inner_broadcast", 0);
    int64_t axis = node.get_int("axis", 1);
    int64_t rank = node.input_rank(0);
    if (rank >= 0 && (axis < -rank || axis >= rank))
        fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
}

class BiasSoftmaxKernel final : public Kernel {
public:
    explicit BiasSoftmaxKernel(const Node& node)
        : axis_(node.get_int("axis", 1)), inner_(node.get_int("is_inner_broadcast", 0) != 0) {}

    void compute(const Context& ctx) const override {
        Tensor x = ctx.input(0, "data");
        Tensor bias = ctx.input(1, "bias");
        if (bias.type != x.type) fail("bias has another element type than data");
        const int64_t rank = static_cast<int64_t>(x.rank());
        if (axis_ < -rank || axis_ >= rank)
            fail("axis " + std::to_string(axis_) + " is out of range for data " + shape_string(x.dims));
        const size_t axis = static_cast<size_t>(axis_ < 0 ? axis_ + rank : axis_);
        const size_t batches = static_cast<size_t>(product(x.dims, 0, axis));
        const size_t elements = static_cast<size_t>(product(x.dims, axis));
        void* out = ctx.output(0, x.type, x.dims);
        if (x.count == 0) return;
        if (bias.count == 0 || bias.count % elements != 0 || batches % (bias.count / elements) != 0)
            fail("bias " + shape_string(bias.dims) + " does not broadcast to data " + shape_string(x.dims) +
                 " along the softmax dims");
        const size_t bias_rows = bias.count / elements;
        const size_t repeat = batches / bias_rows;

        dispatch_float(x.type, [&](auto tag) {
            using T = decltype(tag);
            using C = compute_t<T>;
            const T* in = x.as<T>();
            const T* bs = bias.as<T>();
            T* o = static_cast<T*>(out);
            std::vector<C> v(elements);
            for (size_t b = 0; b < batches; ++b) {
                const size_t brow = inner_ ? b / repeat : b % bias_rows;
                const T* xr = in + b * elements;
                const T* br = bs + brow * elements;
                C max = -std::numeric_limits<C>::infinity();
                for (size_t i = 0; i < elements; ++i) {
                    v[i] = load(xr[i]) + load(br[i]);
                    max = std::max(max, v[i]);
                }
                C sum = 0;
                for (size_t i = 0; i < elements; ++i) {
                    v[i] = std::exp(v[i] - max);
                    sum += v[i];
                }
                const C inv = C(1) / sum;
                for (size_t i = 0; i < elements; ++i) o[b * elements + i] = store<T>(v[i] * inv);
            }
        });
    }

private:
    int64_t axis_;
    bool inner_;
};

const std::vector<int32_t> kLayerNormTypes = {kFloat, kHalf, kDouble};
const std::vector<int32_t> kSimplifiedTypes = {kFloat, kHalf, kDouble, kBFloat16};
const std::vector<int32_t> kSoftmaxTypes = {kFloat, kHalf, kDouble};
const std::vector<int32_t> kStatsTypes = {kFloat};

}  // namespace

void add_normalization_ops(std::vector<OpSpec>& ops) {
    OpSpec sln;
    sln.name = "SkipLayerNormalization";
    sln.inputs = {{"input", kLayerNormTypes},
                  {"skip", kLayerNormTypes},
                  {"gamma", kLayerNormTypes},
                  {"beta", kLayerNormTypes, true},
                  {"bias", kLayerNormTypes, true}};
    sln.outputs = {{"output", kLayerNormTypes},
                   {"mean", kStatsTypes, true},
                   {"inv_std_var", kStatsTypes, true},
                   {"input_skip_bias_sum", kLayerNormTypes, true}};
    sln.attributes = {"epsilon"};
    sln.check = check_skip_layer_norm<kSkipLayerNorm>;
    sln.infer = infer_skip_layer_norm;
    sln.create = [](const Node& node) -> std::unique_ptr<Kernel> {
        return std::make_unique<SkipLayerNormKernel<kSkipLayerNorm>>(node);
    };
    ops.push_back(sln);

    OpSpec ssln;
    ssln.name = "SkipSimplifiedLayerNormalization";
    ssln.inputs = {{"input", kSimplifiedTypes},
                   {"skip", kSimplifiedTypes},
                   {"gamma", kSimplifiedTypes},
                   {"bias", kSimplifiedTypes, true}};
    ssln.outputs = {{"output", kSimplifiedTypes},
                    {"mean", kStatsTypes, true},
                    {"inv_std_var", kStatsTypes, true},
                    {"input_skip_bias_sum", kSimplifiedTypes, true}};
    ssln.attributes = {"epsilon"};
    ssln.check = check_skip_layer_norm<kSkipSimplified>;
    ssln.infer = infer_skip_layer_norm;
    ssln.create = [](const Node& node) -> std::unique_ptr<Kernel> {
        return std::make_unique<SkipLayerNormKernel<kSkipSimplified>>(node);
    };
    ops.push_back(ssln);

    OpSpec bsm;
    bsm.name = "BiasSoftmax";
    bsm.inputs = {{"data", kSoftmaxTypes}, {"bias", kSoftmaxTypes}};
    bsm.outputs = {{"output", kSoftmaxTypes}};
    bsm.attributes = {"axis", "is_inner_broadcast"};
    bsm.check = check_bias_softmax;
    bsm.infer = [](const Node& node, const ShapeOut& out) { out.set(0, node.input_type(0), node.input_dims(0)); };
    bsm.create = [](const Node& node) -> std::unique_ptr<Kernel> { return std::make_unique<BiasSoftmaxKernel>(node); };
    ops.push_back(bsm);
}

}  // namespace tessera::contrib
