// CPU provider: matrix products over our packed kernels, or single-threaded OpenBLAS, split across the session pool.
#include "util/cpu_isa.h"
#include "util/gemm.h"

#include <cblas.h>  // types and prototypes only: the library itself is opened on first use (blas_library below)
#include <dlfcn.h>
#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#ifndef TESSERA_OPENBLAS_LIBRARY  // set by plugins/cpu/CMakeLists.txt
#define TESSERA_OPENBLAS_LIBRARY "libopenblas.so.0"
#endif

namespace tessera::cpu {

namespace {

// OpenBLAS serves the products our own kernels do not (doubles, and floats on CPUs without the packed
// micro-kernels), so most sessions never call it.  It is opened on the first such call rather than linked: loading
// it (and the libgfortran it pulls in) cost every process about 3 ms of its first session creation and 2 MB of
// resident memory.  TESSERA_OPENBLAS_LIBRARY is the build found at configure time (the single-threaded one where
// installed); the SONAME, searched on the library path, is the fallback for a relocated install.
struct BlasLibrary {
    decltype(&cblas_sgemm) sgemm = nullptr;
    decltype(&cblas_dgemm) dgemm = nullptr;
    decltype(&cblas_sgemv) sgemv = nullptr;
    decltype(&cblas_dgemv) dgemv = nullptr;
};

template <typename F>
bool resolve(void* handle, const char* name, F& function) {
    function = reinterpret_cast<F>(dlsym(handle, name));
    return function != nullptr;
}

std::optional<BlasLibrary> open_blas() {
    void* handle = dlopen(TESSERA_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr && std::strcmp(TESSERA_OPENBLAS_LIBRARY, "libopenblas.so.0") != 0)
        handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return std::nullopt;  // never closed otherwise: kernels may call it until the process ends
    BlasLibrary blas;
    if (!resolve(handle, "cblas_sgemm", blas.sgemm) || !resolve(handle, "cblas_dgemm", blas.dgemm) ||
        !resolve(handle, "cblas_sgemv", blas.sgemv) || !resolve(handle, "cblas_dgemv", blas.dgemv)) {
        dlclose(handle);
        return std::nullopt;
    }
    // Every call runs on the calling thread: the session pool splits the work (the pthread build has its own pool).
    using SetThreads = void (*)(int);
    if (auto set_threads = reinterpret_cast<SetThreads>(dlsym(handle, "openblas_set_num_threads"))) set_threads(1);
    return blas;
}

// Opened once per process, on the first product that needs it (often inside a pool region, where nothing may
// throw): where OpenBLAS cannot be loaded, NULL, and those products run as plain loops (loop_gemm) instead.
const BlasLibrary* blas_library() {
    static const std::optional<BlasLibrary> blas = open_blas();
    return blas ? &*blas : nullptr;
}

// Products with fewer multiply-adds than this per task are not worth a hand-off to another thread.
constexpr int64_t kWorkPerTask = int64_t{1} << 18;
// Cost of packing one element of A or B relative to one multiply-add (packing streams memory; the micro-kernel
// runs at several multiply-adds per cycle).
constexpr double kPackCost = 16.0;
// Column blocks are multiples of this so that every block starts on a 64-byte boundary for floats.
constexpr int64_t kColumnAlign = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T>
void fill_scaled(T* C, int64_t ldc, int64_t rows, int64_t cols, T beta) {
    for (int64_t m = 0; m < rows; ++m) {
        T* row = C + m * ldc;
        if (beta == T(0)) {
            std::fill(row, row + cols, T(0));
        } else if (beta != T(1)) {
            for (int64_t n = 0; n < cols; ++n) row[n] *= beta;
        }
    }
}

// Plain loops for element types BLAS lacks (integers); i-k-j order keeps the inner loop contiguous.
template <typename T>
void loop_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
    fill_scaled(C, ldc, M, N, beta);
    for (int64_t m = 0; m < M; ++m) {
        T* crow = C + m * ldc;
        if (!trans_b) {
            for (int64_t k = 0; k < K; ++k) {
                const T a = alpha * (trans_a ? A[k * lda + m] : A[m * lda + k]);
                const T* brow = B + k * ldb;
                for (int64_t n = 0; n < N; ++n) crow[n] += a * brow[n];
            }
        } else {
            for (int64_t n = 0; n < N; ++n) {
                const T* brow = B + n * ldb;
                T sum = T(0);
                for (int64_t k = 0; k < K; ++k) sum += (trans_a ? A[k * lda + m] : A[m * lda + k]) * brow[k];
                crow[n] += alpha * sum;
            }
        }
    }
}

template <typename T>
void blas_gemv(bool trans, int64_t rows, int64_t cols, T alpha, const T* A, int64_t lda, const T* x, int64_t incx,
               T beta, T* y, int64_t incy) {
    const auto t = trans ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>) {
        blas_library()->sgemv(CblasRowMajor, t, int(rows), int(cols), alpha, A, int(lda), x, int(incx), beta, y,
                             int(incy));
    } else {
        blas_library()->dgemv(CblasRowMajor, t, int(rows), int(cols), alpha, A, int(lda), x, int(incx), beta, y,
                             int(incy));
    }
}

template <typename T>
void blas_product(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                  const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
    if (blas_library() == nullptr) {
        loop_gemm<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (M == 1 || N == 1) {
        // Matrix-vector shapes: gemv streams the matrix once instead of packing it.  BLAS's gemv scales y by beta
        // even when beta is 0 (0 * NaN garbage = NaN), so clear y ourselves.
        if (beta == T(0)) {
            fill_scaled(C, ldc, M, N, T(0));
            beta = T(1);
        }
        if (M == 1) {
            // y[N] = op(B)^T-applied: op(B) is K x N.
            if (!trans_b) {
                blas_gemv(true, K, N, alpha, B, ldb, A, trans_a ? lda : 1, beta, C, 1);
            } else {
                blas_gemv(false, N, K, alpha, B, ldb, A, trans_a ? lda : 1, beta, C, 1);
            }
        } else {
            const int64_t incb = trans_b ? 1 : ldb;
            if (!trans_a) {
                blas_gemv(false, M, K, alpha, A, lda, B, incb, beta, C, ldc);
            } else {
                blas_gemv(true, K, M, alpha, A, lda, B, incb, beta, C, ldc);
            }
        }
        return;
    }
    const auto ta = trans_a ? CblasTrans : CblasNoTrans;
    const auto tb = trans_b ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>) {
        blas_library()->sgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C,
                             int(ldc));
    } else {
        blas_library()->dgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C,
                             int(ldc));
    }
}

// OpenBLAS's single-threaded build shares an unlocked buffer pool between calls, so calls from several threads at
// once corrupt each other's results: the calls that still go to it (double, and float on CPUs without the packed
// micro-kernels) take turns.
std::mutex& blas_mutex() {
    static std::mutex mutex;
    return mutex;
}

void check_blas_range(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
    for (int64_t v : {M, N, K, lda, ldb, ldc}) {
        if (v < 0 || v > INT_MAX) {
            throw KernelError("gemm: dimension " + std::to_string(v) + " is outside the range BLAS supports");
        }
    }
}

}  // namespace

void check_gemm_dimensions(int64_t M, int64_t N, int64_t K) {
    check_blas_range(M, N, K, std::max(M, K), std::max(N, K), N);
}

template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, std::type_identity_t<T> alpha, const T* A,
                 int64_t lda, const T* B, int64_t ldb, std::type_identity_t<T> beta, T* C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == T(0)) {
        fill_scaled(C, ldc, M, N, beta);
        return;
    }
    if constexpr (std::is_same_v<T, float>) {
        if (packed_gemm_supported()) {
            packed_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        } else {
            std::lock_guard lock(blas_mutex());
            blas_product<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        }
    } else if constexpr (std::is_same_v<T, double>) {
        std::lock_guard lock(blas_mutex());
        blas_product<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    } else {
        loop_gemm<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}

template <typename T>
void gemm(ThreadPool& pool, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, std::type_identity_t<T> alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, std::type_identity_t<T> beta, T* C, int64_t ldc,
          const GemmEpilogue& epilogue) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) check_blas_range(M, N, K, lda, ldb, ldc);
    if (M <= 0 || N <= 0) return;

    const int64_t work = M * N * std::max<int64_t>(K, 1);
    int64_t tasks = std::min<int64_t>(pool.size(), work / kWorkPerTask);
    if (tasks <= 1) {
        gemm_serial<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        if (epilogue) epilogue(0, M, 0, N);
        return;
    }

    // Split C into a grid of blocks, one per task.  Every task packs its rows of A and its columns of B, so the grid
    // minimizes the block's compute plus packing, m * n + kPackCost * (m + n) (in multiply-adds per unit of K);
    // column blocks are multiples of kColumnAlign.
    int64_t block_rows = M, block_cols = N;
    double best_cost = -1;
    for (int64_t row_tasks = 1; row_tasks <= tasks; ++row_tasks) {
        const int64_t col_tasks = tasks / row_tasks;
        const int64_t m = ceil_div(M, row_tasks);
        const int64_t n = col_tasks == 1 ? N : ceil_div(ceil_div(N, col_tasks), kColumnAlign) * kColumnAlign;
        const double cost = double(m) * double(n) + kPackCost * double(m + n);
        if (best_cost < 0 || cost < best_cost) {
            best_cost = cost;
            block_rows = m;
            block_cols = n;
        }
    }
    const int64_t row_blocks = ceil_div(M, block_rows), col_blocks = ceil_div(N, block_cols);
    pool.parallel_for(row_blocks * col_blocks, 1, [&](int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
            const int64_t m0 = (t / col_blocks) * block_rows, m1 = std::min(M, m0 + block_rows);
            const int64_t n0 = (t % col_blocks) * block_cols, n1 = std::min(N, n0 + block_cols);
            const T* a = trans_a ? A + m0 : A + m0 * lda;
            const T* b = trans_b ? B + n0 * ldb : B + n0;
            gemm_serial<T>(trans_a, trans_b, m1 - m0, n1 - n0, K, alpha, a, lda, b, ldb, beta, C + m0 * ldc + n0, ldc);
            if (epilogue) epilogue(m0, m1, n0, n1);
        }
    });
}

OwnedTensor::OwnedTensor(const Tensor& source) : storage_(source.byte_size()) {
    if (source.type == TESS_ELEMENT_STRING) throw KernelError("cannot keep a copy of a string constant");
    if (!storage_.empty()) std::memcpy(storage_.data(), source.data, storage_.size());
    tensor_.type = source.type;
    tensor_.shape = source.shape;
    tensor_.data = storage_.data();
}

std::optional<OwnedTensor> copy_constant_input(const NodeInfo& info, size_t index) {
    if (!info.has_input(index)) return std::nullopt;
    std::optional<Tensor> constant = info.constant_tensor(index);
    if (!constant) return std::nullopt;
    return OwnedTensor(*constant);
}

// ---- Packed-filter products ------------------------------------------------------------------------------------

namespace {

// Depth processed per pass: a [kDepthBlock x width] block of B stays in L1 while every filter panel sweeps it.
constexpr int64_t kDepthBlock = 256;
// Column blocks per chunk: the C chunk (filter rows x kColumnChunkBlocks * width) stays in L2 across depth blocks.
constexpr int64_t kColumnChunkBlocks = 16;

#if TESSERA_CPU_X86  // the micro-kernels; elsewhere there are none, and packed_gemm_supported() is false
// One register tile: rows x cols (<= kRows x 32) of C over `depth` steps; a is a filter panel [depth][kRows].  Row k
// of B starts at b + row_offsets[k] (kTable) or b + k * ldb.  first_pass: start from the bias (or 0) instead of the
// current C.  Every loop over the rows is unrolled so that the accumulators live in registers.
template <int kRows, bool kTable>
__attribute__((target("avx512f"))) void tile_avx512(int64_t depth, const float* a, const float* b, int64_t ldb,
                                                    const int64_t* row_offsets, float* c, int64_t ldc, int64_t rows,
                                                    int64_t cols, const float* bias, bool first_pass) {
    const __mmask16 mask0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
    const __mmask16 mask1 = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : 0;
    __m512 acc[kRows][2];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
        if (r < rows && !first_pass) {
            acc[r][0] = _mm512_maskz_loadu_ps(mask0, c + r * ldc);
            acc[r][1] = _mm512_maskz_loadu_ps(mask1, c + r * ldc + 16);
        } else {
            const __m512 init = _mm512_set1_ps(r < rows && bias != nullptr ? bias[r] : 0.0f);
            acc[r][0] = init;
            acc[r][1] = init;
        }
    }
    for (int64_t k = 0; k < depth; ++k) {
        const float* bk = kTable ? b + row_offsets[k] : b + k * ldb;
        // Rows read through the table are scattered over the image: fetch the next column block's part of the
        // row ahead of time (the next tile usually starts there).
        if constexpr (kTable) _mm_prefetch(reinterpret_cast<const char*>(bk + 32), _MM_HINT_T0);
        const __m512 b0 = _mm512_maskz_loadu_ps(mask0, bk);
        const __m512 b1 = _mm512_maskz_loadu_ps(mask1, bk + 16);
        const float* ak = a + k * kRows;
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) {
            const __m512 av = _mm512_set1_ps(ak[r]);
            acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
        if (r < rows) {
            _mm512_mask_storeu_ps(c + r * ldc, mask0, acc[r][0]);
            _mm512_mask_storeu_ps(c + r * ldc + 16, mask1, acc[r][1]);
        }
    }
}

// The AVX2 tile: rows x cols (<= kRows x 16), 16 registers in all.
template <int kRows, bool kTable>
__attribute__((target("avx2,fma"))) void tile_avx2(int64_t depth, const float* a, const float* b, int64_t ldb,
                                                   const int64_t* row_offsets, float* c, int64_t ldc, int64_t rows,
                                                   int64_t cols, const float* bias, bool first_pass) {
    alignas(32) static const int32_t ramp[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const __m256i lane = _mm256_load_si256(reinterpret_cast<const __m256i*>(ramp));
    const __m256i mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(cols)), lane);
    const __m256i mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(cols) - 8), lane);
    __m256 acc[kRows][2];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
        if (r < rows && !first_pass) {
            acc[r][0] = _mm256_maskload_ps(c + r * ldc, mask0);
            acc[r][1] = _mm256_maskload_ps(c + r * ldc + 8, mask1);
        } else {
            const __m256 init = _mm256_set1_ps(r < rows && bias != nullptr ? bias[r] : 0.0f);
            acc[r][0] = init;
            acc[r][1] = init;
        }
    }
    for (int64_t k = 0; k < depth; ++k) {
        const float* bk = kTable ? b + row_offsets[k] : b + k * ldb;
        const __m256 b0 = _mm256_maskload_ps(bk, mask0);
        const __m256 b1 = _mm256_maskload_ps(bk + 8, mask1);
        const float* ak = a + k * kRows;
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) {
            const __m256 av = _mm256_broadcast_ss(ak + r);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
        if (r < rows) {
            _mm256_maskstore_ps(c + r * ldc, mask0, acc[r][0]);
            _mm256_maskstore_ps(c + r * ldc + 8, mask1, acc[r][1]);
        }
    }
}
#endif  // TESSERA_CPU_X86

using TileFn = void (*)(int64_t, const float*, const float*, int64_t, const int64_t*, float*, int64_t, int64_t, int64_t,
                        const float*, bool);

struct TileKernel {
    TileFn strided = nullptr;  // B rows a fixed stride apart
    TileFn table = nullptr;    // B rows at tabulated offsets
    int64_t rows = 0;          // rows per filter panel
    int64_t cols = 0;          // columns per B panel
};

// AVX-512: 8 x 32 (16 accumulators; CNN channel counts are multiples of 8).  AVX2: 6 x 16 (12 of 16 registers).
TileKernel select_tile_kernel() {
#if TESSERA_CPU_X86
    if (cpu_allows(CpuIsa::Avx512)) return {tile_avx512<8, false>, tile_avx512<8, true>, 8, 32};
    if (cpu_allows(CpuIsa::Avx2)) return {tile_avx2<6, false>, tile_avx2<6, true>, 6, 16};
#endif
    return {};
}

const TileKernel& tile_kernel() {
    static const TileKernel kernel = select_tile_kernel();
    return kernel;
}

}  // namespace

bool packed_gemm_supported() { return tile_kernel().strided != nullptr; }
int64_t packed_gemm_panel_rows() { return tile_kernel().rows; }
int64_t packed_gemm_panel_width() { return tile_kernel().cols; }

PackedFilters::PackedFilters(const float* A, int64_t rows, int64_t depth, int64_t lda)
    : rows_(rows), depth_(depth), panel_rows_(std::max<int64_t>(1, packed_gemm_panel_rows())) {
    data_.assign(static_cast<size_t>(panels() * depth * panel_rows_), 0.0f);
    for (int64_t p = 0; p < panels(); ++p) {
        float* dst = data_.data() + p * depth * panel_rows_;
        for (int64_t r = 0; r < panel_rows_ && p * panel_rows_ + r < rows; ++r) {
            const float* src = A + (p * panel_rows_ + r) * lda;
            for (int64_t k = 0; k < depth; ++k) dst[k * panel_rows_ + r] = src[k];
        }
    }
}

namespace {

// The loops around the micro-kernel.  Depth blocks outermost so that a [kDepthBlock x width] block of B stays in L1
// while every filter panel sweeps it; each block after the first accumulates into C.  b_block(n0, k0) is where row
// k0 of the B block starting at column n0 begins.
template <typename BlockStart>
void packed_gemm_loops(const PackedFilters& A, int64_t panel_begin, int64_t panel_end, TileFn fn, int64_t ldb,
                       const int64_t* row_offsets, int64_t N, const float* bias, float* C, int64_t ldc,
                       BlockStart&& b_block) {
    const int64_t depth = A.depth(), width = tile_kernel().cols, panel_rows = A.panel_rows();
    panel_end = std::min(panel_end, A.panels());
    if (depth == 0) {
        for (int64_t m = panel_begin * panel_rows; m < std::min(A.rows(), panel_end * panel_rows); ++m) {
            std::fill(C + m * ldc, C + m * ldc + N, bias != nullptr ? bias[m] : 0.0f);
        }
        return;
    }
    // Columns go in chunks so that the chunk of C the depth blocks accumulate into stays in cache.  Within a depth
    // block, the larger operand is streamed once: with more filter rows than columns, each filter panel sweeps every
    // column block; otherwise each column block meets every filter panel.
    const int64_t column_blocks = (N + width - 1) / width;
    for (int64_t chunk = 0; chunk < column_blocks; chunk += kColumnChunkBlocks) {
        const int64_t chunk_end = std::min(column_blocks, chunk + kColumnChunkBlocks);
        const bool panels_outer = (panel_end - panel_begin) * panel_rows > (chunk_end - chunk) * width;
        for (int64_t k0 = 0; k0 < depth; k0 += kDepthBlock) {
            const int64_t kc = std::min(kDepthBlock, depth - k0);
            const int64_t* offsets = row_offsets != nullptr ? row_offsets + k0 : nullptr;
            auto tile = [&](int64_t p, int64_t block) {
                const int64_t m0 = p * panel_rows, n0 = block * width;
                fn(kc, A.panel(p) + k0 * panel_rows, b_block(n0, k0), ldb, offsets, C + m0 * ldc + n0, ldc,
                   std::min(panel_rows, A.rows() - m0), std::min(width, N - n0), bias != nullptr ? bias + m0 : nullptr,
                   k0 == 0);
            };
            if (panels_outer) {
                for (int64_t p = panel_begin; p < panel_end; ++p) {
                    for (int64_t block = chunk; block < chunk_end; ++block) tile(p, block);
                }
            } else {
                for (int64_t block = chunk; block < chunk_end; ++block) {
                    for (int64_t p = panel_begin; p < panel_end; ++p) tile(p, block);
                }
            }
        }
    }
}

}  // namespace

void packed_gemm(const PackedFilters& A, int64_t panel_begin, int64_t panel_end, const float* B, int64_t N,
                 const float* bias, float* C, int64_t ldc) {
    const int64_t depth = A.depth(), width = tile_kernel().cols;
    packed_gemm_loops(A, panel_begin, panel_end, tile_kernel().strided, width, nullptr, N, bias, C, ldc,
                      [&](int64_t n0, int64_t k0) { return B + n0 * depth + k0 * width; });
}

void packed_gemm_rows(const PackedFilters& A, int64_t panel_begin, int64_t panel_end, const float* B,
                      const int64_t* row_offsets, int64_t N, const float* bias, float* C, int64_t ldc) {
    packed_gemm_loops(A, panel_begin, panel_end, tile_kernel().table, 0, row_offsets, N, bias, C, ldc,
                      [&](int64_t n0, int64_t) { return B + n0; });
}

// ---- Float GEMM on the packed micro-kernels ---------------------------------------------------------------------

namespace {

// Column chunk and depth block of packed_sgemm: a [kc x chunk] block of packed B (<= 512 KB) stays in L2 while the
// row panels sweep it; each row panel's [kc x 8] slice and one [kc x 32] column panel stay in L1.
constexpr int64_t kSgemmChunk = 512;
constexpr int64_t kSgemmDepth = 256;

// Columns [n0, n0 + cols) of op(B), rows [k0, k0 + kc), into one panel [kc][width] (lanes past cols left as they
// are: the micro-kernel masks them).
void pack_b_panel(bool trans_b, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t cols,
                  int64_t width, float* dst) {
    if (!trans_b && cols == width && width == 32) {
        // The common case as a fixed-size copy the compiler turns into two vector moves (a memcpy call per
        // 128-byte row costs more than the copy).
        for (int64_t k = 0; k < kc; ++k) {
            const float* src = B + (k0 + k) * ldb + n0;
            float* row = dst + k * 32;
#pragma GCC unroll 32
            for (int i = 0; i < 32; ++i) row[i] = src[i];
        }
    } else if (!trans_b) {
        for (int64_t k = 0; k < kc; ++k)
            std::memcpy(dst + k * width, B + (k0 + k) * ldb + n0, static_cast<size_t>(cols) * sizeof(float));
    } else {
        for (int64_t j = 0; j < cols; ++j) {
            const float* src = B + (n0 + j) * ldb + k0;
            for (int64_t k = 0; k < kc; ++k) dst[k * width + j] = src[k];
        }
    }
}

// Rows [m0, m0 + rows) of alpha * op(A), depth [k0, k0 + kc), into one panel [kc][panel_rows] (missing rows zero).
void pack_a_panel(bool trans_a, const float* A, int64_t lda, float alpha, int64_t k0, int64_t kc, int64_t m0,
                  int64_t rows, int64_t panel_rows, float* dst) {
    if (rows < panel_rows) std::fill(dst, dst + kc * panel_rows, 0.0f);
    if (trans_a) {
        for (int64_t k = 0; k < kc; ++k) {
            const float* src = A + (k0 + k) * lda + m0;
            for (int64_t r = 0; r < rows; ++r) dst[k * panel_rows + r] = alpha * src[r];
        }
    } else {
        for (int64_t r = 0; r < rows; ++r) {
            const float* src = A + (m0 + r) * lda + k0;
            for (int64_t k = 0; k < kc; ++k) dst[k * panel_rows + r] = alpha * src[k];
        }
    }
}

}  // namespace

namespace {

// y[r * incy] = alpha * dot(mat row r, x) + beta * y (beta 0: y not read), rows of `depth` contiguous elements.
// Sixteen partial sums per row: the products are memory-bound anyway, and the split keeps the rounding error of long
// dot products near BLAS's (one chain over K loses digits when the sum cancels).
void gemv_dots(int64_t rows, int64_t depth, const float* mat, int64_t ld, const float* x, int64_t incx, float alpha,
               float beta, float* y, int64_t incy) {
    constexpr int kLanes = 16;
    thread_local std::vector<float> packed_x;
    if (incx != 1) {
        packed_x.resize(static_cast<size_t>(depth));
        for (int64_t k = 0; k < depth; ++k) packed_x[k] = x[k * incx];
        x = packed_x.data();
    }
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = mat + r * ld;
        float acc[kLanes] = {};
        int64_t k = 0;
        for (; k + kLanes <= depth; k += kLanes)
            for (int l = 0; l < kLanes; ++l) acc[l] += row[k + l] * x[k + l];
        for (int l = 0; k < depth; ++k, ++l) acc[l] += row[k] * x[k];
        float sum = 0.0f;
        for (int l = 0; l < kLanes; ++l) sum += acc[l];
        float& out = y[r * incy];
        out = alpha * sum + (beta == 0.0f ? 0.0f : beta * out);
    }
}

// y[n] = alpha * sum_k x[k * incx] * mat[k * ld + n] + beta * y[n] (beta 0: y not read), as four interleaved partial
// sums over k for the same reason.
void gemv_axpys(int64_t depth, int64_t cols, const float* mat, int64_t ld, const float* x, int64_t incx, float alpha,
                float beta, float* y) {
    constexpr int kSplit = 4;
    constexpr int64_t kBlock = 256;
    float partial[kSplit][kBlock];
    for (int64_t n0 = 0; n0 < cols; n0 += kBlock) {
        const int64_t nb = std::min(kBlock, cols - n0);
        for (auto& p : partial) std::fill(p, p + nb, 0.0f);
        for (int64_t k = 0; k < depth; ++k) {
            const float xk = x[k * incx];
            const float* row = mat + k * ld + n0;
            float* p = partial[k % kSplit];
            for (int64_t n = 0; n < nb; ++n) p[n] += xk * row[n];
        }
        for (int64_t n = 0; n < nb; ++n) {
            const float sum = (partial[0][n] + partial[1][n]) + (partial[2][n] + partial[3][n]);
            y[n0 + n] = alpha * sum + (beta == 0.0f ? 0.0f : beta * y[n0 + n]);
        }
    }
}

// The loops of a float GEMM on the micro-kernel: column chunks, depth blocks, then every (row panel, column
// panel) tile.  op(A)'s rows are packed here, per depth block; prepare_b(n0, nc, k0, kc) readies the column panels of
// chunk [n0, n0 + nc) for depth block k0 and b_panel(j, k0, kc) gives column panel j (counted from column 0; rows
// `width` apart).
template <typename PrepareB, typename BPanel>
void sgemm_blocked(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, float beta,
                   float* C, int64_t ldc, PrepareB&& prepare_b, BPanel&& b_panel) {
    const TileKernel& kernel = tile_kernel();
    const int64_t width = kernel.cols, panel_rows = kernel.rows;
    if (beta != 0.0f && beta != 1.0f) {
        fill_scaled(C, ldc, M, N, beta);
        beta = 1.0f;
    }
    thread_local std::vector<float> a_scratch;
    const int64_t row_panels = (M + panel_rows - 1) / panel_rows;
    const int64_t depth = std::min(kSgemmDepth, K);
    if (a_scratch.size() < static_cast<size_t>(row_panels * panel_rows * depth))
        a_scratch.resize(static_cast<size_t>(row_panels * panel_rows * depth));
    float* packed_a = a_scratch.data();
    for (int64_t n0 = 0; n0 < N; n0 += kSgemmChunk) {
        const int64_t nc = std::min(kSgemmChunk, N - n0);
        const int64_t col_panels = (nc + width - 1) / width;
        for (int64_t k0 = 0; k0 < K; k0 += kSgemmDepth) {
            const int64_t kc = std::min(kSgemmDepth, K - k0);
            prepare_b(n0, nc, k0, kc);
            for (int64_t p = 0; p < row_panels; ++p) {
                pack_a_panel(trans_a, A, lda, alpha, k0, kc, p * panel_rows, std::min(panel_rows, M - p * panel_rows),
                             panel_rows, packed_a + p * kc * panel_rows);
            }
            const bool first_pass = k0 == 0 && beta == 0.0f;
            for (int64_t j = 0; j < col_panels; ++j) {
                const int64_t col = n0 + j * width, cols = std::min(width, N - col);
                const float* b = b_panel(n0 / width + j, k0, kc);
                for (int64_t p = 0; p < row_panels; ++p) {
                    const int64_t row = p * panel_rows;
                    kernel.strided(kc, packed_a + p * kc * panel_rows, b, width, nullptr, C + row * ldc + col, ldc,
                                   std::min(panel_rows, M - row), cols, nullptr, first_pass);
                }
            }
        }
    }
}

}  // namespace

void packed_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    // Matrix-vector shapes: a 1-row (or 1-column) product would fill one row of the 8-row register tile.
    if (M == 1) {
        if (trans_b) gemv_dots(N, K, B, ldb, A, trans_a ? lda : 1, alpha, beta, C, 1);
        else gemv_axpys(K, N, B, ldb, A, trans_a ? lda : 1, alpha, beta, C);
        return;
    }
    if (N == 1) {
        const int64_t incb = trans_b ? 1 : ldb;
        if (!trans_a) {
            gemv_dots(M, K, A, lda, B, incb, alpha, beta, C, ldc);
        } else {
            thread_local std::vector<float> column;
            column.resize(static_cast<size_t>(M));
            gemv_axpys(K, M, A, lda, B, incb, alpha, 0.0f, column.data());
            for (int64_t m = 0; m < M; ++m) C[m * ldc] = column[m] + (beta == 0.0f ? 0.0f : beta * C[m * ldc]);
        }
        return;
    }
    thread_local std::vector<float> b_scratch;
    const int64_t width = tile_kernel().cols;
    float* packed_b = nullptr;
    int64_t chunk_first_panel = 0;
    sgemm_blocked(
        trans_a, M, N, K, alpha, A, lda, beta, C, ldc,
        [&](int64_t n0, int64_t nc, int64_t k0, int64_t kc) {
            const int64_t panels = (nc + width - 1) / width;
            chunk_first_panel = n0 / width;
            if (b_scratch.size() < static_cast<size_t>(panels * kc * width))
                b_scratch.resize(static_cast<size_t>(panels * kc * width));
            packed_b = b_scratch.data();
            for (int64_t j = 0; j < panels; ++j)
                pack_b_panel(trans_b, B, ldb, k0, kc, n0 + j * width, std::min(width, nc - j * width), width,
                             packed_b + j * kc * width);
        },
        [&](int64_t j, int64_t, int64_t kc) -> const float* { return packed_b + (j - chunk_first_panel) * kc * width; });
}

PackedColumns::PackedColumns(const float* B, bool trans_b, int64_t K, int64_t N, int64_t ldb)
    : K_(K), N_(N), width_(std::max<int64_t>(1, packed_gemm_panel_width())) {
    const int64_t panels = (N + width_ - 1) / width_;
    data_.assign(static_cast<size_t>(panels * K * width_), 0.0f);
    for (int64_t j = 0; j < panels; ++j)
        pack_b_panel(trans_b, B, ldb, 0, K, j * width_, std::min(width_, N - j * width_), width_,
                     data_.data() + j * K * width_);
}

void packed_sgemm_prepacked(bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda,
                            const PackedColumns& B, int64_t n_begin, int64_t n_end, float beta, float* C,
                            int64_t ldc) {
    const int64_t width = B.panel_width(), first_panel = n_begin / width;
    // Columns [n_begin, n_end) of C: the blocked loops see them as a product of n_end - n_begin columns.
    sgemm_blocked(
        trans_a, M, n_end - n_begin, K, alpha, A, lda, beta, C + n_begin, ldc, [](int64_t, int64_t, int64_t, int64_t) {},
        [&](int64_t j, int64_t k0, int64_t) -> const float* { return B.panel(first_panel + j) + k0 * width; });
}

void gemm_prepacked(ThreadPool& pool, bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda,
                    const PackedColumns& B, float beta, float* C, int64_t ldc) {
    const int64_t N = B.cols(), width = B.panel_width();
    if (M <= 0 || N <= 0) return;
    const int64_t panels = B.panels();
    const int64_t work = M * N * std::max<int64_t>(K, 1);
    const int64_t tasks = std::min<int64_t>(pool.size(), std::max<int64_t>(1, work / kWorkPerTask));
    // Column panels split first (each task then packs all of A's rows, a small share of its work); rows split
    // when there are fewer panels than tasks.
    const int64_t col_tasks = std::min(tasks, panels), row_tasks = std::max<int64_t>(1, tasks / col_tasks);
    const int64_t panels_per_task = ceil_div(panels, col_tasks), rows_per_task = ceil_div(M, row_tasks);
    pool.parallel_for(col_tasks * row_tasks, 1, [&](int64_t first, int64_t last) {
        for (int64_t t = first; t < last; ++t) {
            const int64_t n0 = (t % col_tasks) * panels_per_task * width;
            const int64_t n1 = std::min(N, n0 + panels_per_task * width);
            const int64_t m0 = (t / col_tasks) * rows_per_task, m1 = std::min(M, m0 + rows_per_task);
            if (n0 >= n1 || m0 >= m1) continue;
            const float* a = trans_a ? A + m0 : A + m0 * lda;
            packed_sgemm_prepacked(trans_a, m1 - m0, K, alpha, a, lda, B, n0, n1, beta, C + m0 * ldc, ldc);
        }
    });
}

MatMulPlan plan_matmul(const Shape& a, const Shape& b, std::string_view op) {
    auto fail = [&](const std::string& why) -> KernelError {
        return KernelError(std::string(op) + ": " + why + " (A " + shape_string(a) + ", B " + shape_string(b) + ")");
    };
    if (a.empty() || b.empty()) throw fail("operands must have rank >= 1");
    const bool a_vector = a.size() == 1, b_vector = b.size() == 1;
    const Shape as = a_vector ? Shape{1, a[0]} : a;
    const Shape bs = b_vector ? Shape{b[0], 1} : b;

    MatMulPlan plan;
    plan.M = as[as.size() - 2];
    plan.K = as[as.size() - 1];
    plan.N = bs[bs.size() - 1];
    if (bs[bs.size() - 2] != plan.K) throw fail("inner dimensions differ");

    const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
    const size_t rank = std::max(a_batch.size(), b_batch.size());
    Shape batch_shape(rank);
    // Batch dimension i of an operand, right-aligned; 1 where the operand has fewer dimensions.
    auto dim_of = [rank](const Shape& s, size_t i) { return i + s.size() < rank ? 1 : s[i + s.size() - rank]; };
    for (size_t i = 0; i < rank; ++i) {
        const int64_t da = dim_of(a_batch, i), db = dim_of(b_batch, i);
        if (da != db && da != 1 && db != 1) throw fail("batch dimensions do not broadcast");
        batch_shape[i] = da == 1 ? db : da;
    }
    plan.batch = shape_size(batch_shape);
    plan.output_shape = batch_shape;
    if (!a_vector) plan.output_shape.push_back(plan.M);
    if (!b_vector) plan.output_shape.push_back(plan.N);

    const int64_t a_batches = shape_size(a_batch), b_batches = shape_size(b_batch);
    plan.fold_batch_into_rows = b_batches == 1 && a_batches == plan.batch;
    if (plan.fold_batch_into_rows || plan.batch == 0) return plan;

    // Element strides of each operand's batch dimensions (0 where broadcast).
    std::vector<int64_t> a_stride(rank, 0), b_stride(rank, 0);
    int64_t sa = plan.M * plan.K, sb = plan.K * plan.N;
    for (size_t i = rank; i-- > 0;) {
        const int64_t da = dim_of(a_batch, i), db = dim_of(b_batch, i);
        if (da != 1) a_stride[i] = sa;
        if (db != 1) b_stride[i] = sb;
        sa *= da;
        sb *= db;
    }
    plan.a_offsets.resize(plan.batch);
    plan.b_offsets.resize(plan.batch);
    std::vector<int64_t> index(rank, 0);
    int64_t a_offset = 0, b_offset = 0;
    for (int64_t p = 0; p < plan.batch; ++p) {
        plan.a_offsets[p] = a_offset;
        plan.b_offsets[p] = b_offset;
        for (size_t i = rank; i-- > 0;) {
            a_offset += a_stride[i];
            b_offset += b_stride[i];
            if (++index[i] < batch_shape[i]) break;
            a_offset -= a_stride[i] * batch_shape[i];
            b_offset -= b_stride[i] * batch_shape[i];
            index[i] = 0;
        }
    }
    return plan;
}

template <typename T>
void run_matmul(ThreadPool& pool, const MatMulPlan& plan, const T* A, const T* B, T* C) {
    const int64_t M = plan.M, N = plan.N, K = plan.K;
    if (plan.batch == 0 || M == 0 || N == 0) return;
    if (plan.fold_batch_into_rows) {
        gemm<T>(pool, false, false, plan.batch * M, N, K, T(1), A, K, B, N, T(0), C, N);
        return;
    }
    const int64_t product_work = M * N * std::max<int64_t>(K, 1);
    if (plan.batch > 1 && (product_work < kWorkPerTask * pool.size() || plan.batch >= 2 * pool.size())) {
        // Many small products, or products enough to give every thread two or more: one product per task beats
        // splitting each one (BERT-base's attention, 12 heads of [128, 64] x [64, 128] on 2 threads: 1.16x faster
        // than on one when each product was split, ~2x now).
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            check_blas_range(M, N, K, K, N, N);
        }
        const int64_t grain = std::max<int64_t>(1, kWorkPerTask / product_work);
        pool.parallel_for(plan.batch, grain, [&](int64_t first, int64_t last) {
            for (int64_t p = first; p < last; ++p) {
                gemm_serial<T>(false, false, M, N, K, T(1), A + plan.a_offsets[p], K, B + plan.b_offsets[p], N, T(0),
                               C + p * M * N, N);
            }
        });
        return;
    }
    for (int64_t p = 0; p < plan.batch; ++p) {
        gemm<T>(pool, false, false, M, N, K, T(1), A + plan.a_offsets[p], K, B + plan.b_offsets[p], N, T(0),
                C + p * M * N, N);
    }
}

#define TESSERA_INSTANTIATE_GEMM(T)                                                                                    \
    template void gemm<T>(ThreadPool&, bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, \
                          T, T*, int64_t, const GemmEpilogue&);                                                        \
    template void gemm_serial<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T,    \
                                 T*, int64_t);                                                                         \
    template void run_matmul<T>(ThreadPool&, const MatMulPlan&, const T*, const T*, T*);
TESSERA_INSTANTIATE_GEMM(float)
TESSERA_INSTANTIATE_GEMM(double)
TESSERA_INSTANTIATE_GEMM(int32_t)
TESSERA_INSTANTIATE_GEMM(int64_t)
TESSERA_INSTANTIATE_GEMM(uint32_t)
TESSERA_INSTANTIATE_GEMM(uint64_t)
#undef TESSERA_INSTANTIATE_GEMM

}  // namespace tessera::cpu
