// Matrix products of the contrib ops, over BLAS (OpenBLAS, kept single-threaded: the library owns no threads).
// Row-major; leading dimensions may exceed the row length (strided views such as FusedMatMul's transBatch).
#pragma once

#include <cblas.h>

#include <climits>
#include <string>

#include "op_support.h"

namespace tessera::contrib {

inline int blas_int(int64_t v, const char* what) {
    if (v < 0 || v > INT_MAX) fail(std::string("matrix ") + what + " " + std::to_string(v) + " exceeds BLAS's int range");
    return static_cast<int>(v);
}

// C = alpha * op(A) op(B) + beta * C, with op(A): M x K, op(B): K x N.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = beta == T(0) ? T(0) : beta * C[m * ldc + n];
        return;
    }
    const auto ta = trans_a ? CblasTrans : CblasNoTrans;
    const auto tb = trans_b ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>) {
        cblas_sgemm(CblasRowMajor, ta, tb, blas_int(M, "rows"), blas_int(N, "columns"), blas_int(K, "depth"), alpha, A,
                    blas_int(lda, "stride"), B, blas_int(ldb, "stride"), beta, C, blas_int(ldc, "stride"));
    } else {
        cblas_dgemm(CblasRowMajor, ta, tb, blas_int(M, "rows"), blas_int(N, "columns"), blas_int(K, "depth"), alpha, A,
                    blas_int(lda, "stride"), B, blas_int(ldb, "stride"), beta, C, blas_int(ldc, "stride"));
    }
}

}  // namespace tessera::contrib
