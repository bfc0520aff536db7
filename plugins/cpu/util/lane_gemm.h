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

#include "util/conv_epilogue.h"

namespace tessera::cpu {

// Output channels per filter panel: four AVX-512 vectors, or two when the filter count is a multiple of 32 only
// and small (DenseNet's 32-filter layers), so that no panel is half empty.
constexpr int64_t kLanePanelWidth = 64;

// The panel width for `rows` filters: 64, or 32 for up to 128 filters that are not a multiple of 64.
constexpr int64_t lane_panel_width_for(int64_t rows) {
    return rows % kLanePanelWidth == 0 || rows > 2 * kLanePanelWidth ? kLanePanelWidth : kLanePanelWidth / 2;
}

// Whether this CPU runs the lane kernels (AVX-512F; TESSERA_CPU_MAX_ISA=avx2|none disables them, for testing).
bool lane_gemm_supported();

// Filters A [rows, depth] (row stride lda) packed once: panel p holds filters [wp, wp + w) as [depth][w] (w =
// panel_width()), filters past `rows` zero.  64-byte aligned, so every filter vector is one cache line.
class LanePackedFilters {
public:
    LanePackedFilters() = default;
    LanePackedFilters(const float* A, int64_t rows, int64_t depth, int64_t lda);

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

}  // namespace tessera::cpu
