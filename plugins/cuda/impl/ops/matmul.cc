// CUDA provider operators: matrix products on cuBLAS -- Gemm, and MatMul batched with numpy broadcasting.
#include <algorithm>

#include "ops/op_table.h"

namespace tessera::cuda::ops {
namespace {

// Column-major C[m x n] = alpha * op(A) op(B) + beta * C, `batch` times with the given strides (elements).
void gemm(Run& r, const Step& step, DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, float beta,
          void* c, int64_t ldc, int64_t stride_c, int64_t batch) {
    if (m == 0 || n == 0 || batch == 0) return;
    const cudaDataType_t dt = t == DType::F32 ? CUDA_R_32F : CUDA_R_16F;
    const cublasComputeType_t compute =
        t == DType::F32 && r.dev.config.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int im = to_int(m, step, "matrix dimension"), in = to_int(n, step, "matrix dimension"),
              ik = to_int(k, step, "matrix dimension");
    const int ilda = to_int(std::max<int64_t>(lda, 1), step, "leading dimension"),
              ildb = to_int(std::max<int64_t>(ldb, 1), step, "leading dimension"),
              ildc = to_int(std::max<int64_t>(ldc, 1), step, "leading dimension");
    if (batch == 1) {
        check_cublas(cublasGemmEx(r.dev.cublas, oa, ob, im, in, ik, &alpha, a, dt, ilda, b, dt, ildb, &beta, c, dt, ildc,
                                  compute, CUBLAS_GEMM_DEFAULT),
                     step.label.c_str());
    } else {
        check_cublas(cublasGemmStridedBatchedEx(r.dev.cublas, oa, ob, im, in, ik, &alpha, a, dt, ilda, stride_a, b, dt,
                                                ildb, stride_b, &beta, c, dt, ildc, stride_c,
                                                to_int(batch, step, "batch count"), compute, CUBLAS_GEMM_DEFAULT),
                     step.label.c_str());
    }
}

struct GemmStep final : Step {
    bool trans_a = false, trans_b = false;
    float alpha = 1.0f, beta = 1.0f;
    void run(Run& r) override {
        const Tensor& a = r.required(*this, 0);
        const Tensor& b = r.required(*this, 1);
        const Tensor* c = r.input(*this, 2);
        if (a.rank() != 2 || b.rank() != 2)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": A " + shape_string(a.dims) + " and B " + shape_string(b.dims) +
                                                   " must be matrices");
        const int64_t m = trans_a ? a.dims[1] : a.dims[0], k = trans_a ? a.dims[0] : a.dims[1];
        const int64_t kb = trans_b ? b.dims[1] : b.dims[0], n = trans_b ? b.dims[0] : b.dims[1];
        if (k != kb)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": A " + shape_string(a.dims) + " and B " + shape_string(b.dims) +
                                                   " do not multiply");
        const Shape out = {m, n};
        Tensor& y = r.output(*this, 0, a.type, out);
        const DType t = dtype_of(a.type);
        float beta_used = 0.0f;
        if (c != nullptr && beta != 0.0f && c->count() > 0) {
            if (broadcast_shapes(c->dims, out, *this) != out)
                fail(TESS_STATUS_INVALID_ARGUMENT, label + ": C " + shape_string(c->dims) + " does not broadcast to " +
                                                       shape_string(out));
            check_launch(launch_binary(BinaryOp::First, t, c->data, c->data, y.data, broadcast_plan(c->dims, c->dims, out),
                                       r.stream()),
                         *this);
            beta_used = beta;
        }
        // Row-major Y = A B is column-major Y^T = B^T A^T.
        gemm(r, *this, t, trans_b, trans_a, n, m, k, alpha, b.data, trans_b ? k : n, 0, a.data, trans_a ? m : k, 0,
             beta_used, y.data, n, 0, 1);
    }
};

struct MatMulStep final : Step {
    void run(Run& r) override {
        const Tensor& a = r.required(*this, 0);
        const Tensor& b = r.required(*this, 1);
        if (a.rank() == 0 || b.rank() == 0)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": MatMul inputs must have at least one dimension");
        Shape ad = a.dims, bd = b.dims;
        const bool drop_m = ad.size() == 1, drop_n = bd.size() == 1;
        if (drop_m) ad.insert(ad.begin(), 1);
        if (drop_n) bd.push_back(1);
        const int64_t m = ad[ad.size() - 2], k = ad.back(), kb = bd[bd.size() - 2], n = bd.back();
        if (k != kb)
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": " + shape_string(a.dims) + " and " + shape_string(b.dims) +
                                                   " do not multiply");
        const Shape batch_a(ad.begin(), ad.end() - 2), batch_b(bd.begin(), bd.end() - 2);
        const Shape batch = broadcast_shapes(batch_a, batch_b, *this);
        Shape out = batch;
        if (!drop_m) out.push_back(m);
        if (!drop_n) out.push_back(n);
        Tensor& y = r.output(*this, 0, a.type, out);
        const DType t = dtype_of(a.type);
        const int64_t count = element_count(batch), count_a = element_count(batch_a), count_b = element_count(batch_b);
        if (y.count() == 0) return;
        if (k == 0) {
            check_cuda(cudaMemsetAsync(y.data, 0, y.bytes(), r.stream()), label.c_str());
            return;
        }
        // Column-major Y_i^T = B_i^T A_i^T for each batch entry.
        if (count_b == 1) {
            // B is shared: all of A's rows form one matrix.
            gemm(r, *this, t, false, false, n, count * m, k, 1.0f, b.data, n, 0, a.data, k, 0, 0.0f, y.data, n, 0, 1);
            return;
        }
        auto padded = [&](const Shape& s) {
            Shape p(batch.size() - s.size(), 1);
            p.insert(p.end(), s.begin(), s.end());
            return p;
        };
        if ((count_a == count && padded(batch_a) == batch) || count_a == 1) {
            if (count_b == count && padded(batch_b) == batch) {
                gemm(r, *this, t, false, false, n, m, k, 1.0f, b.data, n, k * n, a.data, k, count_a == 1 ? 0 : m * k,
                     0.0f, y.data, n, m * n, count);
                return;
            }
        }
        // General broadcasting: one product per output batch entry.
        const BroadcastPlan p = broadcast_plan(batch_a, batch_b, batch);
        const size_t es = element_size(a.type);
        for (int64_t i = 0; i < count; ++i) {
            int64_t rest = i, ao = 0, bo = 0;
            for (int d = p.rank - 1; d >= 0; --d) {
                const int64_t c = rest % p.dims[d];
                rest /= p.dims[d];
                ao += c * p.a_strides[d];
                bo += c * p.b_strides[d];
            }
            gemm(r, *this, t, false, false, n, m, k, 1.0f, static_cast<const char*>(b.data) + bo * k * n * es, n, 0,
                 static_cast<const char*>(a.data) + ao * m * k * es, k, 0, 0.0f,
                 static_cast<char*>(y.data) + i * m * n * es, n, 0, 1);
        }
    }
};

}  // namespace

void register_matmul_ops(OpTable& t) {
    t.add("Gemm", 1, 0, float_x(), {
        [](const Node& n) -> std::string {
            if (n.in(1) == nullptr) return "B is missing";
            return same_float(n, {1, 2});
        },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<GemmStep>();
            wire(ctx, *s, n);
            s->trans_a = n.i("transA", 0) != 0;
            s->trans_b = n.i("transB", 0) != 0;
            s->alpha = n.f("alpha", 1.0f);
            s->beta = n.f("beta", 1.0f);
            return s;
        }});
    t.add("MatMul", 1, 0, float_x(), {
        [](const Node& n) -> std::string {
            if (n.in(1) == nullptr) return "B is missing";
            return same_float(n, {1});
        },
        [](BuildContext& ctx, const Node& n, Fused&) -> std::unique_ptr<Step> {
            auto s = std::make_unique<MatMulStep>();
            wire(ctx, *s, n);
            return s;
        }});
}

}  // namespace tessera::cuda::ops
