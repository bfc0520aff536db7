// Matrix-product contrib ops: FusedMatMul (and its older name TransposeMatMul), FusedGemm and GemmFastGelu.
//
// FusedMatMul(A, B; alpha = 1, transA = 0, transB = 0, transBatchA = 0, transBatchB = 0)
//   numpy.matmul with the last two dims of A (B) transposed when transA (transB), times alpha.  Transposes are
//   ignored for 1-D operands (as onnxruntime does).  transBatchA reads A, of shape [d0, b1..bn, dl], as
//   [b1..bn, d0, dl] (dim 0 moved in front of the last dim), before transA; likewise transBatchB.  Both need
//   operands of one rank >= 3.  Batch dims broadcast.  Each batch is one BLAS call on strided views (no copies for
//   float and double); a 2-D B with untransposed A is one call for all of A's rows.
//
// FusedGemm(A, B [, C]; alpha = 1, beta = 1, transA = 0, transB = 0, activation, activation_alpha/beta/gamma)
//   Gemm (C unidirectionally broadcast to (M, N)) followed by the activation (activation.h).
//
// GemmFastGelu(X, W [, bias]) = FastGelu(numpy.matmul(X, W) + bias), bias of W's last dim (gelu.cc's formula).
//
// float16 / bfloat16 operands are converted to float once (constant B: when the node is compiled), multiplied in
// float and rounded once.
#include <algorithm>

#include "activation.h"
#include "fast_math.h"
#include "gemm.h"
#include "op_support.h"

namespace tessera::contrib {
namespace {

// One operand of a batched product: batches of a row-major rows x cols matrix with row stride ld.
struct Operand {
    std::vector<int64_t> batch_dims;
    std::vector<int64_t> batch_strides;
    int64_t rows = 0, cols = 0, ld = 1;
};

std::vector<int64_t> contiguous_strides(std::span<const int64_t> dims) {
    std::vector<int64_t> strides(dims.size(), 1);
    for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
    return strides;
}

Operand describe(std::span<const int64_t> dims, bool trans_batch, bool left) {
    Operand op;
    const size_t r = dims.size();
    if (r == 1) {
        op.rows = left ? 1 : dims[0];
        op.cols = left ? dims[0] : 1;
        op.ld = std::max<int64_t>(op.cols, 1);
        return op;
    }
    std::vector<int64_t> strides = contiguous_strides(dims);
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

struct MatMulAttrs {
    bool trans_a = false, trans_b = false, trans_batch_a = false, trans_batch_b = false;
    float alpha = 1.0f;

    explicit MatMulAttrs(const Node& node)
        : trans_a(node.get_int("transA", 0) != 0),
          trans_b(node.get_int("transB", 0) != 0),
          trans_batch_a(node.get_int("transBatchA", 0) != 0),
          trans_batch_b(node.get_int("transBatchB", 0) != 0),
          alpha(node.get_float("alpha", 1.0f)) {}
};

// The product's plan for given operand shapes (the shape rules of onnxruntime's MatMulComputeHelper).
struct MatMulPlan {
    Operand a, b;
    bool ta = false, tb = false;
    int64_t M = 0, N = 0, K = 0;
    std::vector<int64_t> batch;  // output batch dims
    std::vector<int64_t> out_shape;

    static MatMulPlan make(const MatMulAttrs& attrs, std::span<const int64_t> a_dims, std::span<const int64_t> b_dims) {
        MatMulPlan p;
        const size_t ra = a_dims.size(), rb = b_dims.size();
        if (ra == 0 || rb == 0) fail("A and B must have at least one dimension");
        if ((attrs.trans_batch_a || attrs.trans_batch_b) && (ra != rb || ra < 3))
            fail("transBatchA / transBatchB need A and B of one rank >= 3, they are " + shape_string(a_dims) + " and " +
                 shape_string(b_dims));
        p.ta = attrs.trans_a && ra != 1;
        p.tb = attrs.trans_b && rb != 1;
        p.a = describe(a_dims, attrs.trans_batch_a && ra >= 3, true);
        p.b = describe(b_dims, attrs.trans_batch_b && rb >= 3, false);
        p.M = p.ta ? p.a.cols : p.a.rows;
        p.K = p.ta ? p.a.rows : p.a.cols;
        int64_t kb = p.tb ? p.b.cols : p.b.rows;
        p.N = p.tb ? p.b.rows : p.b.cols;
        if (p.K != kb)
            fail("inner dimensions differ: A " + shape_string(a_dims) + " and B " + shape_string(b_dims) + " give K = " +
                 std::to_string(p.K) + " and " + std::to_string(kb));
        const size_t nb = std::max(p.a.batch_dims.size(), p.b.batch_dims.size());
        p.batch.assign(nb, 1);
        for (size_t i = 0; i < nb; ++i) {
            auto pick = [&](const Operand& o) -> int64_t {
                size_t pad = nb - o.batch_dims.size();
                return i < pad ? 1 : o.batch_dims[i - pad];
            };
            int64_t da = pick(p.a), db = pick(p.b);
            int64_t d = std::min(da, db) == 0 ? 0 : std::max(da, db);
            if ((da != d && da != 1) || (db != d && db != 1))
                fail("batch dims of A " + shape_string(a_dims) + " and B " + shape_string(b_dims) + " do not broadcast");
            p.batch[i] = d;
        }
        p.out_shape = p.batch;
        if (ra != 1) p.out_shape.push_back(p.M);
        if (rb != 1) p.out_shape.push_back(p.N);
        return p;
    }

    // Offsets (in elements) of each batch's A, B and output matrix.
    template <typename F>
    void for_each_batch(F&& f) const {
        const size_t nb = batch.size();
        const int64_t count = product(batch);
        if (count == 0) return;
        auto padded_strides = [&](const Operand& o) {
            std::vector<int64_t> s(nb, 0);
            size_t pad = nb - o.batch_dims.size();
            for (size_t i = 0; i < o.batch_dims.size(); ++i) s[pad + i] = o.batch_dims[i] == 1 ? 0 : o.batch_strides[i];
            return s;
        };
        std::vector<int64_t> sa = padded_strides(a), sb = padded_strides(b);
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
};

template <typename C>
void run_matmul(const MatMulPlan& p, C alpha, const C* A, const C* B, C* Y) {
    // A 2-D (or broadcast) B with plain A: all of A's rows in one product.
    const bool b_single = std::all_of(p.b.batch_dims.begin(), p.b.batch_dims.end(), [](int64_t d) { return d == 1; });
    const bool a_plain = !p.ta && p.a.ld == p.a.cols &&
                         (p.a.batch_dims.empty() || p.a.batch_strides.back() == p.a.rows * p.a.cols);
    if (b_single && a_plain && p.a.batch_dims.size() >= p.b.batch_dims.size()) {
        gemm<C>(false, p.tb, product(p.batch) * p.M, p.N, p.K, alpha, A, p.a.ld, B, p.b.ld, C(0), Y, p.N);
        return;
    }
    p.for_each_batch([&](int64_t oa, int64_t ob, int64_t oy) {
        gemm<C>(p.ta, p.tb, p.M, p.N, p.K, alpha, A + oa, p.a.ld, B + ob, p.b.ld, C(0), Y + oy, p.N);
    });
}

void check_matmul(const Node& node) {
    require_same_type(node, {0, 1});
    MatMulAttrs attrs(node);
    int64_t ra = node.input_rank(0), rb = node.input_rank(1);
    if ((attrs.trans_batch_a || attrs.trans_batch_b) && ra >= 0 && rb >= 0 && (ra != rb || ra < 3))
        fail("transBatchA / transBatchB need A and B of one rank >= 3, the ranks are " + std::to_string(ra) + " and " +
             std::to_string(rb));
    if (ra == 0 || rb == 0) fail("A and B must have at least one dimension");
}

void infer_matmul(const Node& node, const ShapeOut& out) {
    int32_t type = node.input_type(0);
    auto a = node.input_dims(0), b = node.input_dims(1);
    if (!a || !b) return out.set_type(0, type);
    bool known = std::all_of(a->begin(), a->end(), [](int64_t d) { return d >= 0; }) &&
                 std::all_of(b->begin(), b->end(), [](int64_t d) { return d >= 0; });
    if (!known) {
        // The rank is still known: numpy.matmul's rule.
        size_t batch = std::max(a->size() >= 2 ? a->size() - 2 : 0, b->size() >= 2 ? b->size() - 2 : 0);
        if (a->size() >= 3 && b->size() >= 3 && node.get_int("transBatchA", 0) + node.get_int("transBatchB", 0) > 0)
            batch = a->size() - 2;
        size_t rank = batch + (a->size() != 1) + (b->size() != 1);
        return out.set(0, type, std::vector<int64_t>(rank, -1));
    }
    MatMulPlan plan = MatMulPlan::make(MatMulAttrs(node), *a, *b);
    out.set(0, type, plan.out_shape);
}

class MatMulKernel final : public Kernel {
public:
    explicit MatMulKernel(const Node& node) : attrs_(node) {
        int32_t type = node.input_type(1);
        if ((type == kHalf || type == kBFloat16) && node.constant(1) != nullptr) {
            packed_type_ = type;
            packed_b_ = type == kHalf ? constant_as_compute<Half>(node, 1) : constant_as_compute<BFloat16>(node, 1);
        }
    }

    void compute(const Context& ctx) const override {
        Tensor a = ctx.input(0, "A");
        Tensor b = ctx.input(1, "B");
        if (a.type != b.type) fail("A and B must have one element type");
        MatMulPlan plan = MatMulPlan::make(attrs_, a.dims, b.dims);
        void* y = ctx.output(0, a.type, plan.out_shape);
        const int64_t out_count = product(plan.out_shape);
        if (out_count == 0) return;
        dispatch_float(a.type, [&](auto tag) {
            using T = decltype(tag);
            using C = compute_t<T>;
            if constexpr (std::is_same_v<T, C>) {
                run_matmul<C>(plan, static_cast<C>(attrs_.alpha), a.as<C>(), b.as<C>(), static_cast<C*>(y));
            } else {
                std::vector<float> fa(a.count), fb, fy(static_cast<size_t>(out_count));
                convert_in(a.as<T>(), fa.data(), a.count);
                const float* pb = nullptr;
                if (packed_type_ == element_type_of<T>() && packed_b_.size() == b.count) {
                    pb = packed_b_.data();
                } else {
                    fb.resize(b.count);
                    convert_in(b.as<T>(), fb.data(), b.count);
                    pb = fb.data();
                }
                run_matmul<float>(plan, attrs_.alpha, fa.data(), pb, fy.data());
                convert_out(fy.data(), static_cast<T*>(y), fy.size());
            }
        });
    }

private:
    MatMulAttrs attrs_;
    int32_t packed_type_ = TESS_ELEMENT_UNDEFINED;
    std::vector<float> packed_b_;
};

// ---- FusedGemm ---------------------------------------------------------------------------------------------------

void check_gemm(const Node& node) {
    require_same_type(node, {0, 1, 2});
    Activation::for_gemm(node);
    node.get_float("alpha", 1.0f);
    node.get_float("beta", 1.0f);
    node.get_int("transA", 0);
    node.get_int("transB", 0);
    int64_t ra = node.input_rank(0), rb = node.input_rank(1), rc = node.input_rank(2);
    if (ra >= 0 && ra != 2) fail("A must be 2-D, it has rank " + std::to_string(ra));
    if (rb >= 0 && rb != 2) fail("B must be 2-D, it has rank " + std::to_string(rb));
    if (rc > 2) fail("C must have rank 2 at most, it has rank " + std::to_string(rc));
}

void infer_gemm(const Node& node, const ShapeOut& out) {
    int32_t type = node.input_type(0);
    auto a = node.input_dims(0), b = node.input_dims(1);
    if (!a || !b || a->size() != 2 || b->size() != 2) return out.set_type(0, type);
    bool ta = node.get_int("transA", 0) != 0, tb = node.get_int("transB", 0) != 0;
    out.set(0, type, std::vector<int64_t>{ta ? (*a)[1] : (*a)[0], tb ? (*b)[0] : (*b)[1]});
}

class GemmKernel final : public Kernel {
public:
    explicit GemmKernel(const Node& node)
        : trans_a_(node.get_int("transA", 0) != 0),
          trans_b_(node.get_int("transB", 0) != 0),
          alpha_(node.get_float("alpha", 1.0f)),
          beta_(node.get_float("beta", 1.0f)),
          activation_(Activation::for_gemm(node)) {}

    void compute(const Context& ctx) const override {
        Tensor a = ctx.input(0, "A");
        Tensor b = ctx.input(1, "B");
        std::optional<Tensor> c = ctx.optional_input(2);
        if (a.rank() != 2 || b.rank() != 2)
            fail("A " + shape_string(a.dims) + " and B " + shape_string(b.dims) + " must be 2-D");
        if (a.type != b.type || (c && c->type != a.type)) fail("A, B and C must have one element type");
        const int64_t M = trans_a_ ? a.dim(1) : a.dim(0), K = trans_a_ ? a.dim(0) : a.dim(1);
        const int64_t KB = trans_b_ ? b.dim(1) : b.dim(0), N = trans_b_ ? b.dim(0) : b.dim(1);
        if (K != KB) fail("inner dimensions differ: A " + shape_string(a.dims) + ", B " + shape_string(b.dims));
        const bool use_c = c && beta_ != 0.0f;
        int64_t c_rows = 1, c_cols = 1;
        if (use_c) {
            if (c->rank() > 2) fail("C " + shape_string(c->dims) + " must have rank 2 at most");
            if (c->rank() == 2) {
                c_rows = c->dim(0);
                c_cols = c->dim(1);
            } else if (c->rank() == 1) {
                c_cols = c->dim(0);
            }
            if ((c_rows != 1 && c_rows != M) || (c_cols != 1 && c_cols != N))
                fail("C " + shape_string(c->dims) + " does not broadcast to (" + std::to_string(M) + ", " +
                     std::to_string(N) + ")");
        }
        const std::vector<int64_t> out_shape{M, N};
        void* y = ctx.output(0, a.type, out_shape);
        if (M == 0 || N == 0) return;
        dispatch_float(a.type, [&](auto tag) {
            using T = decltype(tag);
            using C = compute_t<T>;
            std::vector<C> fa, fb, fy;
            const C* pa;
            const C* pb;
            C* py;
            if constexpr (std::is_same_v<T, C>) {
                pa = a.as<C>();
                pb = b.as<C>();
                py = static_cast<C*>(y);
            } else {
                fa.resize(a.count);
                fb.resize(b.count);
                fy.resize(static_cast<size_t>(M * N));
                convert_in(a.as<T>(), fa.data(), a.count);
                convert_in(b.as<T>(), fb.data(), b.count);
                pa = fa.data();
                pb = fb.data();
                py = fy.data();
            }
            C beta = C(0);
            if (use_c) {
                const T* pc = c->as<T>();
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t n = 0; n < N; ++n)
                        py[m * N + n] = load(pc[(c_rows == 1 ? 0 : m) * c_cols + (c_cols == 1 ? 0 : n)]);
                beta = static_cast<C>(beta_);
            }
            gemm<C>(trans_a_, trans_b_, M, N, K, static_cast<C>(alpha_), pa, std::max<int64_t>(a.dim(1), 1), pb,
                    std::max<int64_t>(b.dim(1), 1), beta, py, N);
            activation_.apply(py, static_cast<size_t>(M * N));
            if constexpr (!std::is_same_v<T, C>) convert_out(fy.data(), static_cast<T*>(y), fy.size());
        });
    }

private:
    bool trans_a_, trans_b_;
    float alpha_, beta_;
    Activation activation_;
};

// ---- GemmFastGelu ------------------------------------------------------------------------------------------------

void check_gemm_fast_gelu(const Node& node) {
    require_same_type(node, {0, 1, 2});
    if (node.input_rank(0) == 0 || node.input_rank(1) == 0) fail("X and W must have at least one dimension");
    if (auto b = node.input_dims(2); b && b->size() != 1) fail("bias must be 1-D, it has rank " +
                                                               std::to_string(b->size()));
}

class GemmFastGeluKernel final : public Kernel {
public:
    explicit GemmFastGeluKernel(const Node& node) : attrs_(node) {}

    void compute(const Context& ctx) const override {
        Tensor x = ctx.input(0, "X");
        Tensor w = ctx.input(1, "W");
        std::optional<Tensor> bias = ctx.optional_input(2);
        if (w.type != x.type || (bias && bias->type != x.type)) fail("X, W and bias must have one element type");
        MatMulPlan plan = MatMulPlan::make(attrs_, x.dims, w.dims);
        const size_t cols = w.rank() == 1 ? 1 : static_cast<size_t>(plan.N);
        if (bias && (bias->rank() != 1 || static_cast<size_t>(bias->dim(0)) != cols))
            fail("bias " + shape_string(bias->dims) + " must be 1-D with " + std::to_string(cols) + " entries");
        void* y = ctx.output(0, x.type, plan.out_shape);
        const size_t count = static_cast<size_t>(product(plan.out_shape));
        if (count == 0) return;
        dispatch_float(x.type, [&](auto tag) {
            using T = decltype(tag);
            using C = compute_t<T>;
            std::vector<C> fx, fw, fy(count), fb(cols, C(0));
            const C* px;
            const C* pw;
            if constexpr (std::is_same_v<T, C>) {
                px = x.as<C>();
                pw = w.as<C>();
            } else {
                fx.resize(x.count);
                fw.resize(w.count);
                convert_in(x.as<T>(), fx.data(), x.count);
                convert_in(w.as<T>(), fw.data(), w.count);
                px = fx.data();
                pw = fw.data();
            }
            run_matmul<C>(plan, C(1), px, pw, fy.data());
            if (bias) convert_in(bias->as<T>(), fb.data(), cols);
            for (size_t start = 0; start < count; start += cols) {
                C* row = fy.data() + start;
                for (size_t j = 0; j < cols; ++j) row[j] += fb[j];
                if constexpr (std::is_same_v<C, float>) {
                    fast::fast_gelu(row, cols);
                } else {
                    for (size_t j = 0; j < cols; ++j) {
                        const C v = row[j];
                        row[j] = v / (C(1) + std::exp(-C(2) * v * (C(0.035677408136300125) * v * v +
                                                                   C(0.7978845608028654))));
                    }
                }
            }
            convert_out(fy.data(), static_cast<T*>(y), count);
        });
    }

private:
    MatMulAttrs attrs_;
};

const std::vector<int32_t> kMatMulTypes = {kFloat, kHalf, kDouble, kBFloat16};
const std::vector<int32_t> kGemmTypes = {kFloat, kHalf, kDouble};

}  // namespace

void add_matmul_ops(std::vector<OpSpec>& ops) {
    OpSpec fm;
    fm.name = "FusedMatMul";
    fm.inputs = {{"A", kMatMulTypes}, {"B", kMatMulTypes}};
    fm.outputs = {{"Y", kMatMulTypes}};
    fm.attributes = {"alpha", "transA", "transB", "transBatchA", "transBatchB"};
    fm.check = check_matmul;
    fm.infer = infer_matmul;
    fm.create = [](const Node& node) -> std::unique_ptr<Kernel> { return std::make_unique<MatMulKernel>(node); };
    ops.push_back(fm);

    OpSpec tm = fm;
    tm.name = "TransposeMatMul";
    tm.attributes = {"alpha", "transA", "transB"};
    ops.push_back(tm);

    OpSpec fg;
    fg.name = "FusedGemm";
    fg.inputs = {{"A", kGemmTypes}, {"B", kGemmTypes}, {"C", kGemmTypes, true}};
    fg.outputs = {{"Y", kGemmTypes}};
    fg.attributes = {"alpha", "beta", "transA", "transB", "activation", "activation_alpha", "activation_beta",
                     "activation_gamma"};
    fg.check = check_gemm;
    fg.infer = infer_gemm;
    fg.create = [](const Node& node) -> std::unique_ptr<Kernel> { return std::make_unique<GemmKernel>(node); };
    ops.push_back(fg);

    OpSpec gfg;
    gfg.name = "GemmFastGelu";
    gfg.inputs = {{"X", kMatMulTypes}, {"W", kMatMulTypes}, {"bias", kMatMulTypes, true}};
    gfg.outputs = {{"Y", kMatMulTypes}};
    gfg.check = check_gemm_fast_gelu;
    gfg.infer = infer_matmul;
    gfg.create = [](const Node& node) -> std::unique_ptr<Kernel> { return std::make_unique<GemmFastGeluKernel>(node); };
    ops.push_back(gfg);
}

}  // namespace tessera::contrib
