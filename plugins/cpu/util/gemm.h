// CPU provider: matrix products.
//  - gemm(): float and double go to OpenBLAS, which runs single-threaded: the parallelism comes from splitting the
//    product across the session's pool, so that a session has exactly one set of threads.  Other element types
//    (integer MatMul/Gemm) use a plain loop.
//  - packed_gemm*(): hand-vectorized float micro-kernels for convolutions (filters packed once, columns read in
//    place), see below.
//  - MatMul broadcasting plans, and OwnedTensor for the constants kernels keep.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <type_traits>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/thread_pool.h"

namespace tessera::cpu {

// Runs after a worker finished its block of C (rows [row_begin, row_end) x columns [col_begin, col_end)), while the
// block is still in cache: bias adds and similar fused epilogues.  Must not throw.
using GemmEpilogue = std::function<void(int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end)>;

// Row-major C[M,N] = alpha * op(A) * op(B) + beta * C, where op(A) is M x K (A is K x M when trans_a) and op(B) is
// K x N (B is N x K when trans_b).  When beta is 0, C is not read (it may hold garbage).  Splits the work across the
// pool; call it from outside any parallel region.  Throws KernelError when a dimension does not fit BLAS's int.
template <typename T>
void gemm(ThreadPool& pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, std::type_identity_t<T> alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, std::type_identity_t<T> beta, T* C, int64_t ldc,
          const GemmEpilogue& epilogue = {});

// Throws KernelError when a product of these dimensions does not fit BLAS's int; callers of gemm_serial check
// once before their parallel region.
void check_gemm_dimensions(int64_t M, int64_t N, int64_t K);

// The same on the calling thread only, for use inside a parallel region.  Never throws (the caller validated the
// dimensions).
template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, std::type_identity_t<T> alpha, const T* A,
                 int64_t lda, const T* B, int64_t ldb, std::type_identity_t<T> beta, T* C, int64_t ldc);

// gemm() and gemm_serial() exist for float, double, int32, int64, uint32 and uint64.

// A constant input (weights) that a kernel copies when it is created: the graph view holding the constant lives
// only for the compile call.  Moving keeps the view valid; copying is disabled.
class OwnedTensor {
public:
    explicit OwnedTensor(const Tensor& source);
    OwnedTensor(OwnedTensor&&) noexcept = default;
    OwnedTensor& operator=(OwnedTensor&&) noexcept = default;
    OwnedTensor(const OwnedTensor&) = delete;
    OwnedTensor& operator=(const OwnedTensor&) = delete;

    const Tensor& tensor() const { return tensor_; }

private:
    std::vector<std::byte> storage_;
    Tensor tensor_;
};

// A copy of input `index` when the node binds it to a constant; nullopt otherwise.
std::optional<OwnedTensor> copy_constant_input(const NodeInfo& info, size_t index);

// ---- Packed-filter products (float) ---------------------------------------------------------------------------
// Convolution-shaped products C[M, N] = A[M, K] x B[K, N] (+ a bias per row), where A (the filters) is packed once
// into panels of packed_gemm_panel_rows() rows and B (an im2col matrix) is produced directly in the column-panel
// layout the micro-kernel reads (see im2col_panels), so that B is never copied a second time as a BLAS call would.
// Hand-vectorized for AVX-512 and for AVX2+FMA; packed_gemm_supported() says whether this CPU has either
// (otherwise use gemm()).  TESSERA_CPU_MAX_ISA=avx2|none in the environment caps the choice (for testing).

bool packed_gemm_supported();
// Rows per filter panel and columns per B panel for this CPU's micro-kernel (0 when unsupported).
int64_t packed_gemm_panel_rows();
int64_t packed_gemm_panel_width();

class PackedFilters {
public:
    PackedFilters() = default;
    // A is row-major [rows, depth] with row stride lda.
    PackedFilters(const float* A, int64_t rows, int64_t depth, int64_t lda);

    int64_t rows() const { return rows_; }
    int64_t depth() const { return depth_; }
    int64_t panel_rows() const { return panel_rows_; }
    int64_t panels() const { return (rows_ + panel_rows_ - 1) / panel_rows_; }
    // Panel p: [depth][panel_rows], rows past the end zero.
    const float* panel(int64_t p) const { return data_.data() + p * depth_ * panel_rows_; }

private:
    int64_t rows_ = 0;
    int64_t depth_ = 0;
    int64_t panel_rows_ = 1;
    std::vector<float> data_;
};

// Rows [panel_begin, panel_end) * panel_rows (clipped to A.rows()) of C, columns [0, N):
// C[m, n] = (bias ? bias[m] : 0) + sum_k A[m, k] * B[k, n], B in panel layout with packed_gemm_panel_width()
// columns per panel (column n of row k at B[(n / w) * K * w + k * w + n % w]).  On the calling thread; never throws.
void packed_gemm(const PackedFilters& A, int64_t panel_begin, int64_t panel_end, const float* B, int64_t N,
                 const float* bias, float* C, int64_t ldc);

// The same with B given by rows: element (k, n) is B[row_offsets[k] + n].  2-D convolutions read their columns
// straight from (phase planes of) the padded image this way (row k = one channel and kernel tap), with no im2col.
// Reads up to packed_gemm_panel_width() - 1 elements past column N - 1 of a row only through masked loads.
void packed_gemm_rows(const PackedFilters& A, int64_t panel_begin, int64_t panel_end, const float* B,
                      const int64_t* row_offsets, int64_t N, const float* bias, float* C, int64_t ldc);

// Row-major float C[M,N] = alpha * op(A) * op(B) + beta * C (as gemm_serial) on the packed micro-kernels, on the
// calling thread: op(A) and op(B) are packed block by block into thread-local panels.  OpenBLAS's single-threaded
// build is not safe to call from several threads at once (its buffer pool is unlocked), and this path also skips
// OpenBLAS's own copies.  Requires packed_gemm_supported(); never throws.
void packed_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// op(B) [K, N] packed once (weights): column panels of packed_gemm_panel_width() columns, each [K][width],
// zero past column N.  The packed form serves every product with this B without packing it again.
class PackedColumns {
public:
    PackedColumns() = default;
    PackedColumns(const float* B, bool trans_b, int64_t K, int64_t N, int64_t ldb);

    int64_t depth() const { return K_; }
    int64_t cols() const { return N_; }
    int64_t panel_width() const { return width_; }
    int64_t panels() const { return (N_ + width_ - 1) / width_; }
    const float* panel(int64_t j) const { return data_.data() + j * K_ * width_; }
    bool empty() const { return data_.empty(); }

private:
    int64_t K_ = 0, N_ = 0, width_ = 1;
    std::vector<float> data_;
};

// Columns [n_begin, n_end) of C[M, N] = alpha * op(A) * B + beta * C with B packed (n_begin a multiple of
// B.panel_width()); on the calling thread.  Requires packed_gemm_supported(); never throws.
void packed_sgemm_prepacked(bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda,
                            const PackedColumns& B, int64_t n_begin, int64_t n_end, float beta, float* C, int64_t ldc);

// The whole product split across the pool (call it outside any parallel region).
void gemm_prepacked(ThreadPool& pool, bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda,
                    const PackedColumns& B, float beta, float* C, int64_t ldc);

// ONNX/numpy MatMul shapes: 1-D operands are promoted (A to [1,K], B to [K,1]) and the promoted dimension removed
// from the result; batch dimensions broadcast.
struct MatMulPlan {
    Shape output_shape;
    int64_t M = 0, N = 0, K = 0;
    int64_t batch = 1;                  // number of matrix products
    std::vector<int64_t> a_offsets;     // per product: element offset of its A matrix
    std::vector<int64_t> b_offsets;     // per product: element offset of its B matrix
    bool fold_batch_into_rows = false;  // B is shared and A's matrices are contiguous: one [batch*M, K] product
};

// Throws KernelError (naming `op`) when the shapes do not multiply.
MatMulPlan plan_matmul(const Shape& a, const Shape& b, std::string_view op = "MatMul");

// C (output_shape of the plan, contiguous) = A @ B.
template <typename T>
void run_matmul(ThreadPool& pool, const MatMulPlan& plan, const T* A, const T* B, T* C);

}  // namespace tessera::cpu
