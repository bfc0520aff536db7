// CPU provider: 3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2016), on AVX-512.
//
// Each 2x2 block of outputs ("tile") is computed from the 4x4 input patch under it: V = B^T d B per channel, 16
// products M = U . V summed over channels (U = G g G^T, the filters transformed once), then Y = A^T M A.  The 16
// sums over channels are matrix products, [filters x channels] x [channels x tiles] each, run on the lane kernels
// (util/lane_gemm.h); 16 products of one multiply-add per tile replace 36 per 2x2 outputs, 2.25x fewer.  Tiles go in
// blocks sized so that a block's transformed inputs and products stay in L2.  Rounding differs from the direct sum
// by a few float32 ulps of the largest terms.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/thread_pool.h"
#include "util/conv_epilogue.h"
#include "util/im2col.h"
#include "util/lane_gemm.h"

namespace tessera::cpu {

// Whether winograd_conv2d runs this convolution: 2-D, 3x3, unit strides and dilations, one group, on a CPU with the
// lane kernels and a filter count that fills their panels.
bool winograd_applies(const WindowGeometry& g, int64_t filters, int64_t group);

// Whether it is also faster than the direct lane kernels for this output size and filter count (measured).
bool winograd_pays_off(const WindowGeometry& g, int64_t filters);

// The filters [K, C, 3, 3] transformed (U = G g G^T, 16 values per filter and channel) and packed once: point i's
// [K, C] matrix as lane panels.
class WinogradFilters {
public:
    WinogradFilters() = default;
    WinogradFilters(const float* w, int64_t filters, int64_t channels);

    bool empty() const { return filters_ == 0; }
    int64_t filters() const { return filters_; }
    int64_t channels() const { return channels_; }
    const LanePackedFilters& point(int i) const { return points_[static_cast<size_t>(i)]; }

private:
    int64_t filters_ = 0;
    int64_t channels_ = 0;
    std::array<LanePackedFilters, 16> points_;
};

// One image: y [K, OH, OW] = epilogue(conv(x [C, H, W], filters) + bias [K] (may be NULL) + z [K, OH, OW] (may be
// NULL)).  g must satisfy winograd_applies.  Splits the work across the pool (call it outside any parallel region);
// never throws.
void winograd_conv2d(ThreadPool& pool, const WindowGeometry& g, const float* x, const WinogradFilters& filters,
                     const float* bias, const ConvEpilogue& epilogue, const float* z, float* y);

}  // namespace tessera::cpu
