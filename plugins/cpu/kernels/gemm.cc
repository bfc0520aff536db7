// CPU provider: Gemm and MatMul.
#include <string>

#include "kernels/all_kernels.h"
#include "util/gemm.h"

namespace tessera::cpu {

namespace {

const std::vector<int32_t> kGemmTypes{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT64, TESS_ELEMENT_INT32,
                                      TESS_ELEMENT_INT64,   TESS_ELEMENT_UINT32,  TESS_ELEMENT_UINT64};

template <typename Fn>
void dispatch_gemm_type(int32_t type, Fn&& fn) {
    dispatch<float, double, int32_t, int64_t, uint32_t, uint64_t>(type, std::forward<Fn>(fn));
}

void check_same_type(std::string_view op, const Tensor& a, const Tensor& b, const char* b_name) {
    if (a.type != b.type) {
        throw KernelError(std::string(op) + ": input " + b_name + " has element type " + std::to_string(b.type) +
                          " but A has " + std::to_string(a.type));
    }
}

// Y = alpha * A' * B' + beta * C.  Opsets 1-6 broadcast C only when the "broadcast" attribute says so; from opset 7
// C broadcasts unidirectionally to [M, N]; from opset 11 C is optional.
class GemmKernel final : public Kernel {
public:
    explicit GemmKernel(const NodeInfo& info)
        : trans_a_(info.attr_int("transA", 0) != 0),
          trans_b_(info.attr_int("transB", 0) != 0),
          alpha_(info.attr_float("alpha", 1.0f)),
          beta_(info.attr_float("beta", 1.0f)),
          broadcast_c_(info.opset() >= 7 || info.attr_int("broadcast", 0) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& A = ctx.input(0);
        const Tensor& B = ctx.input(1);
        const Tensor* C = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        check_same_type("Gemm", A, B, "B");
        if (C != nullptr) check_same_type("Gemm", A, *C, "C");
        if (A.rank() != 2 || B.rank() != 2) {
            throw KernelError("Gemm: A and B must be 2-D (A " + shape_string(A.shape) + ", B " + shape_string(B.shape) +
                              ")");
        }
        const int64_t M = trans_a_ ? A.shape[1] : A.shape[0];
        const int64_t K = trans_a_ ? A.shape[0] : A.shape[1];
        const int64_t N = trans_b_ ? B.shape[0] : B.shape[1];
        if ((trans_b_ ? B.shape[1] : B.shape[0]) != K) {
            throw KernelError("Gemm: inner dimensions differ (A " + shape_string(A.shape) +
                              " transA=" + std::to_string(trans_a_) + ", B " + shape_string(B.shape) +
                              " transB=" + std::to_string(trans_b_) + ")");
        }
        const bool use_c = C != nullptr && beta_ != 0.0f && C->size() > 0;
        int64_t c_row_stride = 0, c_col_stride = 0;
        if (C != nullptr) c_strides(C->shape, M, N, c_row_stride, c_col_stride);

        Tensor& Y = ctx.output(0, A.type, {M, N});
        dispatch_gemm_type(A.type, [&]<typename T>() {
            const T* a = A.ptr<T>();
            const T* b = B.ptr<T>();
            T* y = Y.ptr<T>();
            GemmEpilogue add_c;
            if (use_c) {
                const T* c = C->ptr<T>();
                const T beta = static_cast<T>(beta_);
                add_c = [=](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
                    for (int64_t m = r0; m < r1; ++m) {
                        T* row = y + m * N;
                        const T* crow = c + m * c_row_stride;
                        if (c_col_stride == 0) {
                            const T v = beta * crow[0];
                            for (int64_t n = c0; n < c1; ++n) row[n] += v;
                        } else {
                            for (int64_t n = c0; n < c1; ++n) row[n] += beta * crow[n];
                        }
                    }
                };
            }
            gemm<T>(ctx.pool(), trans_a_, trans_b_, M, N, K, static_cast<T>(alpha_), a, A.shape[1], b, B.shape[1], T(0),
                    y, N, add_c);
        });
    }

private:
    // Element strides of C over Y's rows and columns (0 where C broadcasts).
    void c_strides(const Shape& c, int64_t M, int64_t N, int64_t& row_stride, int64_t& col_stride) const {
        auto fail = [&] {
            return KernelError("Gemm: C " + shape_string(c) + " does not broadcast to the output [" +
                               std::to_string(M) + "," + std::to_string(N) + "]");
        };
        if (c.size() > 2) throw fail();
        if (!broadcast_c_ && !(c.size() == 2 && c[0] == M && c[1] == N)) {
            throw KernelError("Gemm: C " + shape_string(c) + " must be [" + std::to_string(M) + "," +
                              std::to_string(N) + "] when the broadcast attribute is 0");
        }
        const int64_t cols = c.empty() ? 1 : c.back();
        const int64_t rows = c.size() == 2 ? c[0] : 1;
        if ((cols != N && cols != 1) || (rows != M && rows != 1)) throw fail();
        col_stride = cols == N && N != 1 ? 1 : 0;
        row_stride = rows == M && M != 1 ? cols : 0;
    }

    bool trans_a_;
    bool trans_b_;
    float alpha_;
    float beta_;
    bool broadcast_c_;
};

class MatMulKernel final : public Kernel {
public:
    explicit MatMulKernel(const NodeInfo&) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& A = ctx.input(0);
        const Tensor& B = ctx.input(1);
        check_same_type("MatMul", A, B, "B");
        const MatMulPlan plan = plan_matmul(A.shape, B.shape, "MatMul");
        Tensor& Y = ctx.output(0, A.type, plan.output_shape);
        dispatch_gemm_type(A.type,
                           [&]<typename T>() { run_matmul<T>(ctx.pool(), plan, A.ptr<T>(), B.ptr<T>(), Y.ptr<T>()); });
    }
};

}  // namespace

void register_gemm_kernels(KernelRegistry& registry) {
    registry.add({"",
                  "Gemm",
                  1,
                  8,
                  {{0, types::kFloats}, {1, types::kFloats}, {2, types::kFloats}},
                  KernelMemory::Normal,
                  make_factory<GemmKernel>()});
    registry.add({"",
                  "Gemm",
                  9,
                  0,
                  {{0, kGemmTypes}, {1, kGemmTypes}, {2, kGemmTypes}},
                  KernelMemory::Normal,
                  make_factory<GemmKernel>()});
    registry.add({"",
                  "MatMul",
                  1,
                  8,
                  {{0, types::kFloats}, {1, types::kFloats}},
                  KernelMemory::Normal,
                  make_factory<MatMulKernel>()});
    registry.add(
        {"", "MatMul", 9, 0, {{0, kGemmTypes}, {1, kGemmTypes}}, KernelMemory::Normal, make_factory<MatMulKernel>()});
}

}  // namespace tessera::cpu
