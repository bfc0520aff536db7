// CPU provider: 1x1 stride-1 convolutions without padding (pointwise), Y[K, P] = W[K, C] x X[C, P] per image, on
// AVX-512 with the output positions in the vector lanes.
//
// A register tile is 7 filters x 64 positions: each step loads 64 consecutive positions of one input channel (four
// vectors, straight from X: a pointwise convolution needs no im2col) and broadcasts 7 filter weights from a packed
// block; 28 accumulators, and the results land in Y's rows as they are, with the bias as starting value and the
// FusedConv epilogue applied in registers.  Unlike the lane kernels (util/lane_gemm.h), nothing is transposed, which
// matters for shallow layers (MobileNet's 16- to 32-channel expansions) where a transpose costs as much as the
// products.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/thread_pool.h"
#include "util/conv_epilogue.h"

namespace tessera::cpu {

// Whether this CPU runs pointwise_conv (AVX-512F, not capped by TESSERA_CPU_MAX_ISA).
bool pointwise_conv_supported();

// Whether pointwise_conv beats the lane kernels for `channels` input channels and images of `positions` outputs:
// shallow layers (the lane kernels' transposes weigh most there) whose outputs whole 64-position panels cover with at
// most 1/8 of the lanes empty (measured on MobileNetV2's, ResNet-50's and DenseNet-121's layers: 28x28 and up with
// at most 128 channels gain; 14x14, 7x7 and deep layers do not).
bool pointwise_conv_pays_off(int64_t channels, int64_t positions);

// W [K, C] packed once: blocks of kPointwiseBlock filters, each [C][kPointwiseBlock] (filters past K zero).
class PointwiseFilters {
public:
    static constexpr int64_t kBlock = 7;

    PointwiseFilters() = default;
    PointwiseFilters(const float* w, int64_t filters, int64_t channels);

    bool empty() const { return data_.empty(); }
    int64_t filters() const { return filters_; }
    int64_t channels() const { return channels_; }
    const float* block(int64_t b) const { return data_.data() + b * channels_ * kBlock; }

private:
    int64_t filters_ = 0;
    int64_t channels_ = 0;
    std::vector<float> data_;
};

// One image: y [K, P] = epilogue(W x [C, P] + bias (may be NULL) + z [K, P] (may be NULL)).  Splits the positions
// (and, for small images, the filters) across the pool; call it outside any parallel region; never throws.
void pointwise_conv(ThreadPool& pool, const PointwiseFilters& w, const float* x, int64_t positions, const float* bias,
                    const ConvEpilogue& epilogue, const float* z, float* y);

}  // namespace tessera::cpu
