// CPU provider: ConvIntegerToFloat's depthwise convolutions on the blocked float kernels (util/blocked_conv.h).  The
// 8-bit input centered on its zero point (x - x_zero, exact in float) and the centered filters make every partial
// sum an exact integer below 2^24 (at most 256 taps of products below 2^16), so the float kernels give the int32
// sums bit for bit; each band of output rows goes through the epilogue into NCHW planes while in cache.
#pragma once

#include <cstdint>

#include "kernels/quantization/quantize_support.h"
#include "kernels/quantization/requantize.h"
#include "runtime/kernel.h"
#include "runtime/thread_pool.h"
#include "util/im2col.h"

namespace tessera::cpu {

// Y [N, C, OH, OW] (NCHW) = epilogue(depthwise(X - x_zero)) for 8-bit X [N, C, H, W], C a multiple of 16, a 2-D
// geometry g and centered filters packed by pack_blocked_depthwise.  Splits the work across the pool.
void blocked_depthwise_to_float(ThreadPool& pool, const WindowGeometry& g, const float* packed_w, const Tensor& X,
                                int32_t x_zero, const quant::FloatEpilogue& epilogue, float* y);

// The same for float32 X standing for its uint8 quantization by q (DynamicQuantizeLinear's bytes): each image row
// the convolution reads is quantized and centered as it is needed, into the blocked ring for an input of 1 MB or
// more, else the whole input first (it stays in L2, and the convolution then splits by channel blocks), so that
// the bytes are never stored.
void blocked_depthwise_quantizing_to_float(ThreadPool& pool, const WindowGeometry& g, const float* packed_w,
                                           const Tensor& X, quant::DynamicQuantization q,
                                           const quant::FloatEpilogue& epilogue, float* y);

}  // namespace tessera::cpu
