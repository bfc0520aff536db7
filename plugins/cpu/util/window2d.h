// CPU provider: direct 2-D window kernels for float on AVX-512, computed 16 output columns at a time from the input
// rows with masked loads (no padded copies): depthwise convolution (one input channel per group) and max pooling.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"
#include "util/conv_epilogue.h"
#include "util/im2col.h"

namespace tessera::cpu {

// Whether depthwise_conv2d_direct() runs this geometry on this CPU: 2-D, strides 1 or 2, AVX-512
// (TESSERA_CPU_MAX_ISA=avx2|none turns it off, for testing the fallback).
bool depthwise_direct_supported(const WindowGeometry& g);

// y[n, oc] = epilogue(bias[oc] + sum over taps of w[oc, tap] * x[n, oc / multiplier] at the tap) for every output
// channel oc of `out_channels` = in_channels * multiplier.  x is [batch, in_channels, H, W], w [out_channels, KH*KW],
// z (the epilogue's sum, may be NULL) and y [batch, out_channels, OH, OW].  Splits the planes across the pool.
void depthwise_conv2d_direct(ThreadPool& pool, const WindowGeometry& g, const float* x, const float* w,
                             const float* bias, int64_t batch, int64_t in_channels, int64_t out_channels, float* y,
                             const ConvEpilogue& epilogue, const float* z);

// Whether max_pool2d_direct() runs this geometry: 2-D, column stride 1 or 2, AVX-512.
bool max_pool2d_direct_supported(const WindowGeometry& g);

// y[p] = max over the window of x[p] for each of `planes` [H, W] planes (padding never wins; a window entirely in
// padding gives the lowest float, which MaxPool's windows never are).  Splits the planes across the pool.
void max_pool2d_direct(ThreadPool& pool, const WindowGeometry& g, const float* x, int64_t planes, float* y);

}  // namespace tessera::cpu
