// CPU provider, com.microsoft: the fused matrix products of onnxruntime's optimizer and converters, with its
// semantics, on the provider's GEMM and pool.
//
//   FusedMatMul(A, B; alpha = 1, transA, transB, transBatchA, transBatchB), and its older name TransposeMatMul
//     numpy.matmul with the last two dims of A (B) transposed when transA (transB), times alpha.  Transposes are
//     ignored for 1-D operands, as onnxruntime does.  transBatchA reads A, of shape [d0, b1..bn, dl], as
//     [b1..bn, d0, dl] (dim 0 moved in front of the last dim) before transA; likewise transBatchB; both need
//     operands of one rank >= 3.  Batch dims broadcast.  Each batch is one product on strided views (no copies); a
//     2-D B with a plain A is one product for all of A's rows.
//   GemmFastGelu(X, W [, bias]) = FastGelu(numpy.matmul(X, W) + bias), bias of W's last dim.
// FusedGemm and FusedConv are the provider's own Gemm and Conv kernels with their activations (kernels/nn/gemm.cc,
// kernels/nn/conv.cc).
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
    for (const char* op : {"FusedMatMul", "TransposeMatMul"})
        contrib::add(registry, op, {{0, matmul_types}, {1, matmul_types}}, make_factory<FusedMatMulKernel>(),
                     check_fused_matmul);
    contrib::add(registry, "GemmFastGelu", {{0, matmul_types}, {1, matmul_types}, {2, matmul_types}},
                 make_factory<GemmFastGeluKernel>(), check_gemm_fast_gelu);
}

}  // namespace tessera::cpu
