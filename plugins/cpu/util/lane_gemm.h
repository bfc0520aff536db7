// CPU provider: convolution products with the output channels in the vector lanes (float, AVX-512).
//
// packed_gemm_rows() (gemm.h) puts output positions in the lanes: a register tile is 8 filters x 32 positions, so
// an image whose output rows are short wastes lanes on every tile (7x7 outputs use 49 of 64 lanes; the padded grid
// of a 3x3 convolution on a 7x7 image, 49 of 63 columns).  Late layers of CNNs are exactly that shape and carry
// most of the weights.  Here a register tile is a few consecutive output positions x 64 output channels (the layout
// of oneDNN's and ONNX Runtime's NCHW16c kernels, computed from and written to NCHW): each step loads four filter
// vectors and broadcasts one input value per position, so no lane is wasted whatever the image size, as long as
// the filter count is a multiple of 16.  The tile's results are transposed into the NCHW output row by row.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/thread_pool.h"
#include "util/conv_epilogue.h"
#include "util/gemm.h"

namespace tessera::cpu {

// Output channels per filter panel: four AVX-512 vectors, or two when the filter count is a multiple of 32 only
// and small (DenseNet's 32-filter layers), so that no panel is half empty.
constexpr int64_t kLanePanelWidth = 64;

// The panel width for `rows` filters: 64; 32 for multiples of 32 that are not multiples of 64 (96, 160) and for
// up to 128 filters, so that panels are full or nearly.
constexpr int64_t lane_panel_width_for(int64_t rows) {
    if (rows % kLanePanelWidth == 0) return kLanePanelWidth;
    return rows % (kLanePanelWidth / 2) == 0 || rows <= 2 * kLanePanelWidth ? kLanePanelWidth / 2 : kLanePanelWidth;
}

// Whether this CPU runs the lane kernels (AVX-512F; TESSERA_CPU_MAX_ISA=avx2|none disables them, for testing).
bool lane_gemm_supported();

// Filters A [rows, depth] (row stride lda) packed once: panel p holds filters [wp, wp + w) as [depth][w] (w =
// panel_width()), filters past `rows` zero.  64-byte aligned, so every filter vector is one cache line.
class LanePackedFilters {
public:
    LanePackedFilters() = default;
    // width: the panel width, a multiple of 16 up to kLanePanelWidth; 0 chooses lane_panel_width_for(rows).  The
    // lane kernels here take 64 and 32; blocked_conv2d (util/blocked_conv.h) any.
    LanePackedFilters(const float* A, int64_t rows, int64_t depth, int64_t lda, int64_t width = 0);
    // The same filters given depth-major: filter m's step k at B[k * ldb + m] (a MatMul's B [K, N], N filters).
    static LanePackedFilters from_depth_major(const float* B, int64_t rows, int64_t depth, int64_t ldb);
    // Zeros, for a caller that writes the panels itself (filter m's step k at panel(m / w)[k * w + m % w]).
    static LanePackedFilters zeros(int64_t rows, int64_t depth) { return LanePackedFilters(nullptr, rows, depth, 0); }
    // Packs other filters (as the constructor and from_depth_major do) into the memory it holds, growing it only
    // when they need more: products of operands made at run time (attention's keys and values) pack per call
    // without allocating once the memory is there.
    void assign(const float* A, int64_t rows, int64_t depth, int64_t lda, int64_t width = 0);
    void assign_depth_major(const float* B, int64_t rows, int64_t depth, int64_t ldb);
    float* mutable_panel(int64_t p) { return data_.get() + p * depth_ * width_; }

    bool empty() const { return data_ == nullptr; }
    int64_t rows() const { return rows_; }
    int64_t depth() const { return depth_; }
    int64_t panel_width() const { return width_; }
    int64_t panels() const { return (rows_ + width_ - 1) / width_; }
    const float* panel(int64_t p) const { return data_.get() + p * depth_ * width_; }

private:
    struct Free {
        void operator()(float* p) const;
    };
    // Sets the shape and makes room for it (the contents are left as they are).
    void reserve(int64_t rows, int64_t depth, int64_t width);
    size_t capacity_ = 0;  // floats held
    int64_t rows_ = 0;
    int64_t depth_ = 0;
    int64_t width_ = kLanePanelWidth;
    std::unique_ptr<float[], Free> data_;
};

// Filters [wp, min(wp + w, rows)) of panel p (w = A.panel_width()) at `count` consecutive positions j:
//   y[(m - wp) * ldy + j] = (bias ? bias[m] : 0) + sum_k A[m, k] * x[row_offsets[k] + j].
// x is read in place (row k of the column matrix is x shifted by row_offsets[k]), y is NCHW-like (one row of ldy
// per filter).  With an epilogue, y = activation(y + z) as the results are stored (z laid out like y, NULL without a
// sum).  On the calling thread; requires lane_gemm_supported(); never throws.
void lane_gemm_positions(const LanePackedFilters& A, int64_t panel, const float* x, const int64_t* row_offsets,
                         int64_t count, const float* bias, float* y, int64_t ldy,
                         const ConvEpilogue* epilogue = nullptr, const float* z = nullptr);

// ---- Matrix products C[M, N] = A[M, K] x B[K, N] with B packed (LanePackedFilters::from_depth_major) ----------
// The same tiles with A's rows in place of positions: C is written row by row with no transpose.  A is first packed
// by pack_lane_rows into blocks of lane_row_block(B) rows, each [K][block] (rows past M zero), so that a tile's
// broadcasts read consecutive floats.

// Rows per packed block of A (the tile height for B's panel width).
int64_t lane_row_block(const LanePackedFilters& B);
// A [M, K] (row stride lda) into dst, which holds ceil(M / block) * block * K floats.
void pack_lane_rows(const float* A, int64_t M, int64_t K, int64_t lda, int64_t block, float* dst);
// Columns of panels [panel_begin, panel_end) of C (row stride ldc) = packed A x B.  On the calling thread; requires
// lane_gemm_supported(); never throws.
// bias: NULL, or B.panels() * B.panel_width() values (zero past B.rows()) that C's rows start from.
// next_panel: the panel (or -1) the caller computes next, fetched into L2 a slice per step of this call's tiles so
// that it streams in from memory meanwhile.
void lane_matmul(const LanePackedFilters& B, int64_t panel_begin, int64_t panel_end, const float* packed_a, int64_t M,
                 float* C, int64_t ldc, const float* bias = nullptr, int64_t next_panel = -1);

// C = A x B (A [M, K] with row stride lda) on the calling thread, A packed into its scratch: for products inside a
// parallel task.  Requires lane_gemm_supported(); never throws.
void lane_matmul_serial(const float* A, int64_t M, int64_t lda, const LanePackedFilters& B, float* C, int64_t ldc);

// The whole product C = A x B (+ bias, padded as above) (A [M, K] with row stride lda), A packed into the calling
// thread's scratch and the panels (and, for few panels, the rows) split across the pool; `epilogue` (may be NULL)
// runs on each task's block of C right after the task computed it.  Call it outside any parallel region.
void lane_matmul(ThreadPool& pool, const float* A, int64_t M, int64_t lda, const LanePackedFilters& B, float* C,
                 int64_t ldc, const float* bias = nullptr, const GemmEpilogue* epilogue = nullptr);

// y[m * ldy + j] = results[j * kLanePanelWidth + m] for m < filters, j < count (<= 96), then y = activation(y + z)
// when an epilogue with a vector activation is given (z laid out like y, NULL without a sum; other activations are
// left to the caller): 16 x 16 blocks transposed in registers, each filter's positions written as one masked store.
// Shallow convolutions spend as long here as in the products when this is done element by element.  Requires
// lane_gemm_supported().
void lane_store_transposed(const float* results, int64_t filters, int64_t count, float* y, int64_t ldy,
                           const ConvEpilogue* epilogue, const float* z);

// dst[j] = src[2 * j] for j < count: the stride-2 column gather of a convolution's phase planes, vectorized.
// Requires lane_gemm_supported(); reads src[0 .. 2 * count - 1] only.
void gather_even_columns(const float* src, int64_t count, float* dst);

// Whether a product or convolution with `filters` output columns fills the lane panels well enough to run here: at
// most 1/8 of the panel lanes empty (1000 classes use 1024 lanes).
bool lanes_fill(int64_t filters);

}  // namespace tessera::cpu
