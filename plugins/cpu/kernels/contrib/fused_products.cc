// CPU provider, com.microsoft: the fused matrix products of onnxruntime's optimizer and converters, with its
// semantics, on the provider's GEMM and pool.
//
//   FusedMatMul(A, B; alpha = 1, transA, transB, transBatchA, transBatchB), and its older name TransposeMatMul
//     numpy.matmul with the last two dims of A (B) transposed when transA (transB), times alpha.  Transposes are
//     ignored for 1-D operands, as onnxruntime does.  transBatchA reads A, of shape [d0, b1..bn, dl], as
//     [b1..bn, d0, dl] (dim 0 moved in front of the last dim) before transA; likewise transBatchB; both need
//     operands of one rank >= 3.  Batch dims broadcast.  Each batch is one product on strided views (no copies); a
//     2-D B with a plain A is one product for all of A's rows.
//   FusedGemm(A, B [, C]; alpha, beta, transA, transB, activation, activation_alpha / _beta / _gamma)
//     Gemm (C unidirectionally broadcast to (M, N)) followed by the activation (GemmActivation below).
//   GemmFastGelu(X, W [, bias]) = FastGelu(numpy.matmul(X, W) + bias), bias of W's last dim.
//   FusedConv(X, W [, B [, Z]]; Conv's attributes, activation, activation_params)
//     activation(Conv(X, W) + B + Z): the provider's own convolution with its fused epilogue (kernels/nn/conv.cc).
//
// float16 and bfloat16 operands compute in float and round once; double computes in double.
#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "util/compute_cast.h"
#include "util/gemm.h"
#include "util/type_list.h"
#include "util/vec_math.h"

namespace tessera::cpu {

namespace {

int64_t product_of(std::span<const int64_t> dims) {
    int64_t p = 1;
    for (int64_t d : dims) p *= d;
    return p;
}

// ---- Batched products on strided views ---------------------------------------------------------------------------

// One operand of a batched product: batches of a row-major rows x cols matrix with row stride ld.
struct Operand {
    std::vector<int64_t> batch_dims, batch_strides;
    int64_t rows = 0, cols = 0, ld = 1;
};

Operand describe(const Shape& dims, bool trans_batch, bool left) {
    Operand op;
    const size_t r = dims.size();
    if (r == 1) {
        op.rows = left ? 1 : dims[0];
        op.cols = left ? dims[0] : 1;
        op.ld = std::max<int64_t>(op.cols, 1);
        return op;
    }
    std::vector<int64_t> strides(r, 1);
    for (size_t i = r; i-- > 1;) strides[i - 1] = strides[i] * dims[i];
    if (trans_batch) {
        op.batch_dims.assign(dims.begin() + 1, dims.end() - 1);
        op.batch_strides.assign(strides.begin() + 1, strides.end() - 1);
        op.rows = dims[0];
        op.cols = dims[r - 1];
        op.ld = strides[0];
    } else {
        op.batch_dims.assign(dims.begin(), dims.end() - 2);
        op.batch_strides.assign(strides.begin(), strides.end() - 2);
        op.rows = dims[r - 2];
        op.cols = dims[r - 1];
        op.ld = op.cols;
    }
    op.ld = std::max<int64_t>(op.ld, 1);
    return op;
}

struct ProductAttributes {
    bool trans_a = false, trans_b = false, trans_batch_a = false, trans_batch_b = false;
    float alpha = 1.0f;

    explicit ProductAttributes(const NodeInfo& info)
        : trans_a(info.attr_int("transA", 0) != 0),
          trans_b(info.attr_int("transB", 0) != 0),
          trans_batch_a(info.attr_int("transBatchA", 0) != 0),
          trans_batch_b(info.attr_int("transBatchB", 0) != 0),
          alpha(info.attr_float("alpha", 1.0f)) {}
};

// The product's plan for given operand shapes (the shape rules of onnxruntime's MatMulComputeHelper).
struct ProductPlan {
    Operand a, b;
    bool ta = false, tb = false;
    int64_t M = 0, N = 0, K = 0;
    Shape batch, out_shape;

    static ProductPlan make(const std::string& op, const ProductAttributes& attrs, const Shape& a_dims,
                            const Shape& b_dims) {
        ProductPlan p;
        const size_t ra = a_dims.size(), rb = b_dims.size();
        if (ra == 0 || rb == 0) throw KernelError(op + ": A and B must have at least one dimension");
        if ((attrs.trans_batch_a || attrs.trans_batch_b) && (ra != rb || ra < 3))
            throw KernelError(op + ": transBatchA / transBatchB need A and B of one rank >= 3, they are " +
                              shape_string(a_dims) + " and " + shape_string(b_dims));
        p.ta = attrs.trans_a && ra != 1;
        p.tb = attrs.trans_b && rb != 1;
        p.a = describe(a_dims, attrs.trans_batch_a && ra >= 3, true);
        p.b = describe(b_dims, attrs.trans_batch_b && rb >= 3, false);
        p.M = p.ta ? p.a.cols : p.a.rows;
        p.K = p.ta ? p.a.rows : p.a.cols;
        const int64_t kb = p.tb ? p.b.cols : p.b.rows;
        p.N = p.tb ? p.b.rows : p.b.cols;
        if (p.K != kb)
            throw KernelError(op + ": inner dimensions differ: A " + shape_string(a_dims) + " and B " +
                              shape_string(b_dims) + " give K = " + std::to_string(p.K) + " and " + std::to_string(kb));
        const size_t nb = std::max(p.a.batch_dims.size(), p.b.batch_dims.size());
        p.batch.assign(nb, 1);
        for (size_t i = 0; i < nb; ++i) {
            auto pick = [&](const Operand& o) -> int64_t {
                const size_t pad = nb - o.batch_dims.size();
                return i < pad ? 1 : o.batch_dims[i - pad];
            };
            const int64_t da = pick(p.a), db = pick(p.b);
            const int64_t d = std::min(da, db) == 0 ? 0 : std::max(da, db);
            if ((da != d && da != 1) || (db != d && db != 1))
                throw KernelError(op + ": batch dims of A " + shape_string(a_dims) + " and B " + shape_string(b_dims) +
                                  " do not broadcast");
            p.batch[i] = d;
        }
        p.out_shape = p.batch;
        if (ra != 1) p.out_shape.push_back(p.M);
        if (rb != 1) p.out_shape.push_back(p.N);
        return p;
    }

    // Calls f(offset of A, offset of B, offset of Y) for each batch, in elements.
    template <typename F> void for_each_batch(F&& f) const {
        const size_t nb = batch.size();
        const int64_t count = product_of(batch);
        if (count == 0) return;
        auto padded_strides = [&](const Operand& o) {
            std::vector<int64_t> s(nb, 0);
            const size_t pad = nb - o.batch_dims.size();
            for (size_t i = 0; i < o.batch_dims.size(); ++i) s[pad + i] = o.batch_dims[i] == 1 ? 0 : o.batch_strides[i];
            return s;
        };
        const std::vector<int64_t> sa = padded_strides(a), sb = padded_strides(b);
        std::vector<int64_t> index(nb, 0);
        int64_t oa = 0, ob = 0;
        for (int64_t i = 0; i < count; ++i) {
            f(oa, ob, i * M * N);
            for (size_t d = nb; d-- > 0;) {
                oa += sa[d];
                ob += sb[d];
                if (++index[d] < batch[d]) break;
                oa -= sa[d] * index[d];
                ob -= sb[d] * index[d];
                index[d] = 0;
            }
        }
    }

    template <typename C> void run(ThreadPool& pool, C alpha, const C* A, const C* B, C* Y) const {
        const bool b_single = std::all_of(b.batch_dims.begin(), b.batch_dims.end(), [](int64_t d) { return d == 1; });
        const bool a_plain =
            !ta && a.ld == a.cols && (a.batch_dims.empty() || a.batch_strides.back() == a.rows * a.cols);
        if (b_single && a_plain && a.batch_dims.size() >= b.batch_dims.size()) {
            gemm<C>(pool, false, tb, product_of(batch) * M, N, K, alpha, A, a.ld, B, b.ld, C(0), Y, N);
            return;
        }
        for_each_batch([&](int64_t oa, int64_t ob, int64_t oy) {
            gemm<C>(pool, ta, tb, M, N, K, alpha, A + oa, a.ld, B + ob, b.ld, C(0), Y + oy, N);
        });
    }
};

// ---- FusedMatMul and TransposeMatMul -------------------------------------------------------------------------

class FusedMatMulKernel final : public Kernel {
public:
    explicit FusedMatMulKernel(const NodeInfo& info) : op_(info.op_type()), attrs_(info) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        if (a.type != b.type) throw KernelError(op_ + ": A and B must have one element type");
        const ProductPlan plan = ProductPlan::make(op_, attrs_, a.shape, b.shape);
        Tensor& y = ctx.output(0, a.type, plan.out_shape);
        if (y.size() == 0) return;
        if (plan.K == 0) {  // an empty sum
            std::memset(y.data, 0, y.byte_size());
            return;
        }
        ThreadPool& pool = ctx.pool();
        auto run = [&]<typename C>() {
            const ConvertedInput<C> pa(a, pool), pb(b, pool);
            ConvertedOutput<C> out(y);
            plan.run<C>(pool, static_cast<C>(attrs_.alpha), pa.data(), pb.data(), out.data());
            out.finish(pool);
        };
        if (a.type == TESS_ELEMENT_FLOAT64) run.template operator()<double>();
        else run.template operator()<float>();
    }

private:
    std::string op_;
    ProductAttributes attrs_;
};

// ---- FusedGemm -------------------------------------------------------------------------------------------------

// The activations FusedGemm applies, named as onnxruntime's ElementWiseRangedTransform names them, with their
// parameters in activation_alpha / activation_beta / activation_gamma (each required where the activation has it).
struct GemmActivation {
    enum class Kind {
        Identity, Relu, Tanh, Sigmoid, Softsign, Softplus, LeakyRelu, Elu, ThresholdedRelu, Celu, HardSigmoid,
        ScaledTanh, ParametricSoftplus, Selu
    };
    Kind kind = Kind::Identity;
    float alpha = 0, beta = 0, gamma = 0;

    static GemmActivation parse(const NodeInfo& info) {
        GemmActivation act;
        if (!info.has_attr("activation")) return act;
        const std::string name = info.attr_string("activation", "");
        struct Entry {
            const char* name;
            Kind kind;
            bool alpha, beta, gamma;
        };
        static const Entry kEntries[] = {
            {"Relu", Kind::Relu, false, false, false},          {"Tanh", Kind::Tanh, false, false, false},
            {"Sigmoid", Kind::Sigmoid, false, false, false},    {"Softsign", Kind::Softsign, false, false, false},
            {"Softplus", Kind::Softplus, false, false, false},  {"LeakyRelu", Kind::LeakyRelu, true, false, false},
            {"Elu", Kind::Elu, true, false, false},             {"ThresholdedRelu", Kind::ThresholdedRelu, true, false, false},
            {"Celu", Kind::Celu, true, false, false},           {"HardSigmoid", Kind::HardSigmoid, true, true, false},
            {"ScaledTanh", Kind::ScaledTanh, true, true, false}, {"ParametricSoftplus", Kind::ParametricSoftplus, true, true, false},
            {"Selu", Kind::Selu, true, false, true},
        };
        for (const Entry& e : kEntries) {
            if (name != e.name) continue;
            act.kind = e.kind;
            auto param = [&](bool needed, const char* attr, float& out) {
                if (!needed) return;
                if (!info.has_attr(attr))
                    throw KernelError("FusedGemm: activation " + name + " needs the attribute '" + attr + "'");
                out = info.attr_float(attr, 0.0f);
            };
            param(e.alpha, "activation_alpha", act.alpha);
            param(e.beta, "activation_beta", act.beta);
            param(e.gamma, "activation_gamma", act.gamma);
            if (act.kind == Kind::Celu && act.alpha == 0.0f)
                throw KernelError("FusedGemm: activation Celu needs a non-zero activation_alpha");
            return act;
        }
        throw KernelError("FusedGemm: activation '" + name + "' is not supported");
    }

    template <typename C> void apply(C* x, int64_t n) const {
        const C a = static_cast<C>(alpha), b = static_cast<C>(beta), g = static_cast<C>(gamma);
        auto softplus = [](C v) { return v > C(0) ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)); };
        for (int64_t i = 0; i < n; ++i) {
            const C v = x[i];
            switch (kind) {
                case Kind::Identity: return;
                case Kind::Relu: x[i] = v > C(0) ? v : C(0); break;
                case Kind::Tanh: x[i] = std::tanh(v); break;
                case Kind::Sigmoid: x[i] = C(1) / (C(1) + std::exp(-v)); break;
                case Kind::Softsign: x[i] = v / (C(1) + std::abs(v)); break;
                case Kind::Softplus: x[i] = softplus(v); break;
                case Kind::LeakyRelu: x[i] = v >= C(0) ? v : a * v; break;
                case Kind::Elu: x[i] = v >= C(0) ? v : a * (std::exp(v) - C(1)); break;
                case Kind::ThresholdedRelu: x[i] = v > a ? v : C(0); break;
                case Kind::Celu: x[i] = std::max(C(0), v) + std::min(C(0), a * (std::exp(v / a) - C(1))); break;
                case Kind::HardSigmoid: x[i] = std::max(C(0), std::min(C(1), a * v + b)); break;
                case Kind::ScaledTanh: x[i] = a * std::tanh(b * v); break;
                case Kind::ParametricSoftplus: x[i] = a * softplus(b * v); break;
                case Kind::Selu: x[i] = v > C(0) ? g * v : g * (a * std::exp(v) - a); break;
            }
        }
    }
};

class FusedGemmKernel final : public Kernel {
public:
    explicit FusedGemmKernel(const NodeInfo& info)
        : trans_a_(info.attr_int("transA", 0) != 0),
          trans_b_(info.attr_int("transB", 0) != 0),
          alpha_(info.attr_float("alpha", 1.0f)),
          beta_(info.attr_float("beta", 1.0f)),
          activation_(GemmActivation::parse(info)) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        const Tensor* c = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (a.rank() != 2 || b.rank() != 2)
            throw KernelError("FusedGemm: A " + shape_string(a.shape) + " and B " + shape_string(b.shape) +
                              " must be 2-D");
        if (a.type != b.type || (c != nullptr && c->type != a.type))
            throw KernelError("FusedGemm: A, B and C must have one element type");
        const int64_t M = trans_a_ ? a.shape[1] : a.shape[0], K = trans_a_ ? a.shape[0] : a.shape[1];
        const int64_t KB = trans_b_ ? b.shape[1] : b.shape[0], N = trans_b_ ? b.shape[0] : b.shape[1];
        if (K != KB)
            throw KernelError("FusedGemm: inner dimensions differ: A " + shape_string(a.shape) + ", B " +
                              shape_string(b.shape));
        const bool use_c = c != nullptr && beta_ != 0.0f;
        int64_t c_rows = 1, c_cols = 1;
        if (use_c) {
            if (c->rank() > 2) throw KernelError("FusedGemm: C " + shape_string(c->shape) + " must have rank 2 at most");
            if (c->rank() == 2) {
                c_rows = c->shape[0];
                c_cols = c->shape[1];
            } else if (c->rank() == 1) {
                c_cols = c->shape[0];
            }
            if ((c_rows != 1 && c_rows != M) || (c_cols != 1 && c_cols != N))
                throw KernelError("FusedGemm: C " + shape_string(c->shape) + " does not broadcast to (" +
                                  std::to_string(M) + ", " + std::to_string(N) + ")");
        }
        Tensor& y = ctx.output(0, a.type, Shape{M, N});
        if (M == 0 || N == 0) return;
        ThreadPool& pool = ctx.pool();
        auto run = [&]<typename C>() {
            const ConvertedInput<C> pa(a, pool), pb(b, pool);
            const ConvertedInput<C> pc = use_c ? ConvertedInput<C>(*c, pool) : ConvertedInput<C>();
            ConvertedOutput<C> out(y);
            C* py = out.data();
            C beta = C(0);
            if (use_c) {
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t n = 0; n < N; ++n)
                        py[m * N + n] = pc.data()[(c_rows == 1 ? 0 : m) * c_cols + (c_cols == 1 ? 0 : n)];
                beta = static_cast<C>(beta_);
            }
            if (K == 0) {
                for (int64_t i = 0; i < M * N; ++i) py[i] = use_c ? beta * py[i] : C(0);
            } else {
                gemm<C>(pool, trans_a_, trans_b_, M, N, K, static_cast<C>(alpha_), pa.data(),
                        std::max<int64_t>(a.shape[1], 1), pb.data(), std::max<int64_t>(b.shape[1], 1), beta, py, N);
            }
            pool.parallel_for(M, std::max<int64_t>(1, 16384 / N), [&](int64_t begin, int64_t end) {
                activation_.apply(py + begin * N, (end - begin) * N);
            });
            out.finish(pool);
        };
        if (a.type == TESS_ELEMENT_FLOAT64) run.template operator()<double>();
        else run.template operator()<float>();
    }

private:
    bool trans_a_, trans_b_;
    float alpha_, beta_;
    GemmActivation activation_;
};

// ---- GemmFastGelu ----------------------------------------------------------------------------------------------

struct TanhGelu {
    [[gnu::always_inline]] vec::Vf operator()(vec::Vf x) const { return vec::gelu_tanh(x); }
};

class GemmFastGeluKernel final : public Kernel {
public:
    explicit GemmFastGeluKernel(const NodeInfo& info) : attrs_(info) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& w = ctx.input(1);
        const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (w.type != x.type || (bias != nullptr && bias->type != x.type))
            throw KernelError("GemmFastGelu: X, W and bias must have one element type");
        const ProductPlan plan = ProductPlan::make("GemmFastGelu", attrs_, x.shape, w.shape);
        const int64_t cols = w.rank() == 1 ? 1 : plan.N;
        if (bias != nullptr && (bias->rank() != 1 || bias->shape[0] != cols))
            throw KernelError("GemmFastGelu: bias " + shape_string(bias->shape) + " must be 1-D with " +
                              std::to_string(cols) + " entries");
        Tensor& y = ctx.output(0, x.type, plan.out_shape);
        const int64_t count = y.size();
        if (count == 0) return;
        ThreadPool& pool = ctx.pool();
        auto run = [&]<typename C>() {
            const ConvertedInput<C> px(x, pool), pw(w, pool);
            const ConvertedInput<C> pb = bias != nullptr ? ConvertedInput<C>(*bias, pool) : ConvertedInput<C>();
            ConvertedOutput<C> out(y);
            C* py = out.data();
            if (plan.K == 0) std::fill(py, py + count, C(0));
            else plan.run<C>(pool, C(1), px.data(), pw.data(), py);
            pool.parallel_for(count / cols, std::max<int64_t>(1, 8192 / cols), [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                    C* row = py + r * cols;
                    if (pb.data() != nullptr)
                        for (int64_t j = 0; j < cols; ++j) row[j] += pb.data()[j];
                    if constexpr (std::is_same_v<C, float>) {
                        vec::run_best_isa([&] { vec::map(row, row, cols, TanhGelu{}); });
                    } else {
                        for (int64_t j = 0; j < cols; ++j) {
                            const C v = row[j];
                            row[j] = C(0.5) * v * (C(1) + std::tanh(v * (C(0.035677408136300125) * v * v +
                                                                         C(0.7978845608028654))));
                        }
                    }
                }
            });
            out.finish(pool);
        };
        if (x.type == TESS_ELEMENT_FLOAT64) run.template operator()<double>();
        else run.template operator()<float>();
    }

private:
    ProductAttributes attrs_;
};

// ---- Checks at session creation (declared shapes; the kernels check the real ones again) ------------------------

std::string check_fused_matmul(const NodeInfo& info) {
    if (std::string problem = contrib::same_types(info, {0, 1}); !problem.empty()) return problem;
    const ProductAttributes attrs(info);
    const auto a = contrib::declared_dims(info, 0), b = contrib::declared_dims(info, 1);
    if ((a && a->empty()) || (b && b->empty())) return "A and B must have at least one dimension";
    if ((attrs.trans_batch_a || attrs.trans_batch_b) && a && b && (a->size() != b->size() || a->size() < 3))
        return "transBatchA / transBatchB need A and B of one rank >= 3, the ranks are " + std::to_string(a->size()) +
               " and " + std::to_string(b->size());
    return "";
}

std::string check_fused_gemm(const NodeInfo& info) {
    if (std::string problem = contrib::same_types(info, {0, 1, 2}); !problem.empty()) return problem;
    GemmActivation::parse(info);  // throws KernelError naming the problem
    const auto a = contrib::declared_dims(info, 0), b = contrib::declared_dims(info, 1), c = contrib::declared_dims(info, 2);
    if (a && a->size() != 2) return "A must be 2-D, it has rank " + std::to_string(a->size());
    if (b && b->size() != 2) return "B must be 2-D, it has rank " + std::to_string(b->size());
    if (c && c->size() > 2) return "C must have rank 2 at most, it has rank " + std::to_string(c->size());
    return "";
}

std::string check_gemm_fast_gelu(const NodeInfo& info) {
    if (std::string problem = contrib::same_types(info, {0, 1, 2}); !problem.empty()) return problem;
    const auto x = contrib::declared_dims(info, 0), w = contrib::declared_dims(info, 1), b = contrib::declared_dims(info, 2);
    if ((x && x->empty()) || (w && w->empty())) return "X and W must have at least one dimension";
    if (b && b->size() != 1) return "bias must be 1-D, it has rank " + std::to_string(b->size());
    return "";
}

}  // namespace

void register_contrib_fused_product_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> matmul_types = type_ids_with_16bit_floats(FloatTypes{});
    const std::vector<int32_t> gemm_types{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT16, TESS_ELEMENT_FLOAT64};
    for (const char* op : {"FusedMatMul", "TransposeMatMul"})
        contrib::add(registry, op, {{0, matmul_types}, {1, matmul_types}}, make_factory<FusedMatMulKernel>(),
                     check_fused_matmul);
    contrib::add(registry, "FusedGemm", {{0, gemm_types}, {1, gemm_types}, {2, gemm_types}},
                 make_factory<FusedGemmKernel>(), check_fused_gemm);
    contrib::add(registry, "GemmFastGelu", {{0, matmul_types}, {1, matmul_types}, {2, matmul_types}},
                 make_factory<GemmFastGeluKernel>(), check_gemm_fast_gelu);
}

}  // namespace tessera::cpu
