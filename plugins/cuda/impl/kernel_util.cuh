// CUDA provider: device helpers shared by the kernel files (float/half conversion, grid sizing, reductions).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.h"

namespace tessera::cuda {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > (int64_t{1} << 16)) blocks = int64_t{1} << 16;
    return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// Blocks for one block per row (rows beyond the grid loop).
inline unsigned grid_for_rows(int64_t rows) {
    return static_cast<unsigned>(rows > (int64_t{1} << 20) ? (int64_t{1} << 20) : (rows < 1 ? 1 : rows));
}

#define TESS_GRID_STRIDE_LOOP(i, n)                                                                  \
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);          \
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum (or max) over the block; every thread gets the result.  `scratch` holds 32 floats in shared memory.  Every
// thread of the block must call it (it synchronizes).
template <bool kMax> __device__ float block_reduce(float v, float* scratch) {
    v = kMax ? warp_max(v) : warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // a previous call may still read scratch
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int warps = (blockDim.x + 31) >> 5;
    if (warp == 0) {
        v = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
        v = kMax ? warp_max(v) : warp_sum(v);
        if (lane == 0) scratch[0] = v;
    }
    __syncthreads();
    return scratch[0];
}

}  // namespace tessera::cuda
