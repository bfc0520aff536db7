// CUDA provider: transpose, softmax, layer normalization, LRN and pooling kernels.
#include <cstdint>

#include "kernel_util.cuh"

namespace tessera::cuda {
namespace {

// ---- Transpose ---------------------------------------------------------------------------------------------------

template <typename W>
__global__ void transpose_kernel(const W* __restrict__ x, W* __restrict__ y, TransposePlan p) {
    TESS_GRID_STRIDE_LOOP(i, p.n) {
        int64_t rest = i, offset = 0;
        for (int d = p.rank - 1; d > 0; --d) {
            offset += (rest % p.out_dims[d]) * p.src_strides[d];
            rest /= p.out_dims[d];
        }
        if (p.rank > 0) offset += rest * p.src_strides[0];
        y[i] = x[offset];
    }
}

// ---- Softmax -----------------------------------------------------------------------------------------------------

// One block per row of `dim` contiguous elements.
template <typename T>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t dim, bool log) {
    __shared__ float scratch[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * dim;
        T* yr = y + row * dim;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) m = fmaxf(m, to_float(xr[j]));
        m = block_reduce<true>(m, scratch);
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) s += expf(to_float(xr[j]) - m);
        s = block_reduce<false>(s, scratch);
        if (log) {
            const float ls = logf(s);
            for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = from_float<T>(to_float(xr[j]) - m - ls);
        } else {
            const float inv = 1.0f / s;
            for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
                yr[j] = from_float<T>(expf(to_float(xr[j]) - m) * inv);
        }
    }
}

// One thread per (outer, inner) pair; the softmax axis has stride `inner`.
template <typename T>
__global__ void softmax_strided_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t dim,
                                       int64_t inner, bool log) {
    TESS_GRID_STRIDE_LOOP(idx, outer * inner) {
        const int64_t o = idx / inner, in = idx % inner;
        const T* xr = x + o * dim * inner + in;
        T* yr = y + o * dim * inner + in;
        float m = -INFINITY;
        for (int64_t j = 0; j < dim; ++j) m = fmaxf(m, to_float(xr[j * inner]));
        float s = 0.0f;
        for (int64_t j = 0; j < dim; ++j) s += expf(to_float(xr[j * inner]) - m);
        if (log) {
            const float ls = logf(s);
            for (int64_t j = 0; j < dim; ++j) yr[j * inner] = from_float<T>(to_float(xr[j * inner]) - m - ls);
        } else {
            const float inv = 1.0f / s;
            for (int64_t j = 0; j < dim; ++j) yr[j * inner] = from_float<T>(expf(to_float(xr[j * inner]) - m) * inv);
        }
    }
}

// ---- LayerNormalization ------------------------------------------------------------------------------------------

template <typename T>
__global__ void layer_norm_kernel(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias,
                                  T* __restrict__ y, float* mean_out, float* inv_std_out, int64_t rows, int64_t cols,
                                  float epsilon) {
    __shared__ float scratch[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        T* yr = y + row * cols;
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += to_float(xr[j]);
        const float mean = block_reduce<false>(s, scratch) / static_cast<float>(cols);
        float v = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const float d = to_float(xr[j]) - mean;
            v += d * d;
        }
        const float var = block_reduce<false>(v, scratch) / static_cast<float>(cols);
        const float inv_std = 1.0f / sqrtf(var + epsilon);
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            float out = (to_float(xr[j]) - mean) * inv_std;
            if (scale != nullptr) out *= to_float(scale[j]);
            if (bias != nullptr) out += to_float(bias[j]);
            yr[j] = from_float<T>(out);
        }
        if (threadIdx.x == 0) {
            if (mean_out != nullptr) mean_out[row] = mean;
            if (inv_std_out != nullptr) inv_std_out[row] = inv_std;
        }
    }
}

// ---- LRN ---------------------------------------------------------------------------------------------------------

template <typename T>
__global__ void lrn_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t c, int64_t spatial,
                           int64_t size, float alpha_over_size, float beta, float bias) {
    TESS_GRID_STRIDE_LOOP(i, n * c * spatial) {
        const int64_t s = i % spatial, ch = (i / spatial) % c, b = i / (spatial * c);
        const int64_t lo = ch - (size - 1) / 2, hi = ch + size / 2;  // ONNX: floor((size-1)/2), ceil((size-1)/2)
        float sum = 0.0f;
        for (int64_t k = lo < 0 ? 0 : lo; k <= hi && k < c; ++k) {
            const float v = to_float(x[(b * c + k) * spatial + s]);
            sum += v * v;
        }
        y[i] = from_float<T>(to_float(x[i]) / powf(bias + alpha_over_size * sum, beta));
    }
}

// ---- Pooling -----------------------------------------------------------------------------------------------------

__device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
__device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

// Taps t in [first, last) of a window starting at `start` (step `step`, `count` taps) that fall inside [0, extent).
__device__ __forceinline__ void taps_inside(int64_t start, int64_t count, int64_t step, int64_t extent,
                                            int64_t& first, int64_t& last) {
    first = start >= 0 ? 0 : min(count, ceil_div(-start, step));
    last = extent - 1 - start < 0 ? 0 : min(count, (extent - 1 - start) / step + 1);
    if (last < first) last = first;
}

template <typename T>
__global__ void pool_kernel(const T* __restrict__ x, T* __restrict__ y, PoolPlan p) {
    const int64_t out_plane = p.out[0] * p.out[1] * p.out[2];
    const int64_t in_plane = p.in[0] * p.in[1] * p.in[2];
    TESS_GRID_STRIDE_LOOP(idx, p.planes * out_plane) {
        int64_t rest = idx;
        int64_t o[3];
        o[2] = rest % p.out[2];
        rest /= p.out[2];
        o[1] = rest % p.out[1];
        rest /= p.out[1];
        o[0] = rest % p.out[0];
        const int64_t plane = rest / p.out[0];
        int64_t start[3], first[3], last[3];
        int64_t valid = 1, padded = 1;
        for (int d = 0; d < 3; ++d) {
            start[d] = o[d] * p.stride[d] - p.pad_begin[d];
            taps_inside(start[d], p.kernel[d], p.dilation[d], p.in[d], first[d], last[d]);
            valid *= last[d] - first[d];
            int64_t pf, pl;
            taps_inside(start[d] + p.pad_begin[d], p.kernel[d], p.dilation[d], p.in[d] + p.pad_begin[d] + p.pad_end[d],
                        pf, pl);
            padded *= pl - pf;
        }
        if (valid == 0) {
            y[idx] = from_float<T>(0.0f);
            continue;
        }
        const T* xp = x + plane * in_plane;
        float acc = p.max ? -INFINITY : 0.0f;
        for (int64_t t0 = first[0]; t0 < last[0]; ++t0) {
            const int64_t i0 = start[0] + t0 * p.dilation[0];
            for (int64_t t1 = first[1]; t1 < last[1]; ++t1) {
                const int64_t i1 = start[1] + t1 * p.dilation[1];
                const T* row = xp + (i0 * p.in[1] + i1) * p.in[2];
                for (int64_t t2 = first[2]; t2 < last[2]; ++t2) {
                    const float v = to_float(row[start[2] + t2 * p.dilation[2]]);
                    if (p.max) acc = (v > acc || v != v) ? v : acc;
                    else acc += v;
                }
            }
        }
        if (!p.max) acc /= static_cast<float>(p.count_include_pad ? padded : valid);
        y[idx] = from_float<T>(acc);
    }
}

template <typename T>
__global__ void global_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols, bool max) {
    __shared__ float scratch[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        float acc = max ? -INFINITY : 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const float v = to_float(xr[j]);
            acc = max ? fmaxf(acc, v) : acc + v;
        }
        if (max) acc = block_reduce<true>(acc, scratch);
        else acc = block_reduce<false>(acc, scratch) / static_cast<float>(cols);
        if (threadIdx.x == 0) y[row] = from_float<T>(acc);
    }
}

// Threads per row-block: enough for the row, a multiple of the warp size.
int row_threads(int64_t cols) {
    if (cols >= 1024) return 512;
    if (cols >= 256) return 256;
    if (cols >= 64) return 128;
    return 32;
}

}  // namespace

cudaError_t launch_transpose(size_t element_size, const void* x, void* y, const TransposePlan& plan,
                             cudaStream_t stream) {
    if (plan.n <= 0) return cudaSuccess;
    const unsigned grid = grid_for(plan.n);
    switch (element_size) {
        case 1: transpose_kernel<uint8_t><<<grid, kThreads, 0, stream>>>(
                    static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), plan); break;
        case 2: transpose_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(
                    static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), plan); break;
        case 4: transpose_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(
                    static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), plan); break;
        case 8: transpose_kernel<uint64_t><<<grid, kThreads, 0, stream>>>(
                    static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), plan); break;
        default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t launch_softmax(DType type, const void* x, void* y, int64_t outer, int64_t dim, int64_t inner,
                           bool log, cudaStream_t stream) {
    if (outer * dim * inner <= 0) return cudaSuccess;
    if (inner == 1) {
        const unsigned grid = grid_for_rows(outer);
        const int threads = row_threads(dim);
        if (type == DType::F32)
            softmax_rows_kernel<float><<<grid, threads, 0, stream>>>(static_cast<const float*>(x),
                                                                     static_cast<float*>(y), outer, dim, log);
        else
            softmax_rows_kernel<__half><<<grid, threads, 0, stream>>>(static_cast<const __half*>(x),
                                                                      static_cast<__half*>(y), outer, dim, log);
    } else {
        const unsigned grid = grid_for(outer * inner);
        if (type == DType::F32)
            softmax_strided_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x),
                                                                         static_cast<float*>(y), outer, dim, inner, log);
        else
            softmax_strided_kernel<__half><<<grid, kThreads, 0, stream>>>(
                static_cast<const __half*>(x), static_cast<__half*>(y), outer, dim, inner, log);
    }
    return cudaGetLastError();
}

cudaError_t launch_layer_norm(DType type, const void* x, const void* scale, const void* bias, void* y, float* mean,
                              float* inv_std, int64_t rows, int64_t cols, float epsilon, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    const unsigned grid = grid_for_rows(rows);
    const int threads = row_threads(cols);
    if (type == DType::F32)
        layer_norm_kernel<float><<<grid, threads, 0, stream>>>(
            static_cast<const float*>(x), static_cast<const float*>(scale), static_cast<const float*>(bias),
            static_cast<float*>(y), mean, inv_std, rows, cols, epsilon);
    else
        layer_norm_kernel<__half><<<grid, threads, 0, stream>>>(
            static_cast<const __half*>(x), static_cast<const __half*>(scale), static_cast<const __half*>(bias),
            static_cast<__half*>(y), mean, inv_std, rows, cols, epsilon);
    return cudaGetLastError();
}

cudaError_t launch_lrn(DType type, const void* x, void* y, int64_t n, int64_t c, int64_t spatial, int64_t size,
                       float alpha, float beta, float bias, cudaStream_t stream) {
    const int64_t total = n * c * spatial;
    if (total <= 0) return cudaSuccess;
    const float alpha_over_size = alpha / static_cast<float>(size);
    if (type == DType::F32)
        lrn_kernel<float><<<grid_for(total), kThreads, 0, stream>>>(
            static_cast<const float*>(x), static_cast<float*>(y), n, c, spatial, size, alpha_over_size, beta, bias);
    else
        lrn_kernel<__half><<<grid_for(total), kThreads, 0, stream>>>(
            static_cast<const __half*>(x), static_cast<__half*>(y), n, c, spatial, size, alpha_over_size, beta, bias);
    return cudaGetLastError();
}

cudaError_t launch_pool(DType type, const void* x, void* y, const PoolPlan& plan, cudaStream_t stream) {
    const int64_t total = plan.planes * plan.out[0] * plan.out[1] * plan.out[2];
    if (total <= 0) return cudaSuccess;
    if (type == DType::F32)
        pool_kernel<float><<<grid_for(total), kThreads, 0, stream>>>(static_cast<const float*>(x),
                                                                     static_cast<float*>(y), plan);
    else
        pool_kernel<__half><<<grid_for(total), kThreads, 0, stream>>>(static_cast<const __half*>(x),
                                                                      static_cast<__half*>(y), plan);
    return cudaGetLastError();
}

cudaError_t launch_global_pool(DType type, const void* x, void* y, int64_t rows, int64_t cols, bool max,
                               cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    const unsigned grid = grid_for_rows(rows);
    const int threads = row_threads(cols);
    if (type == DType::F32)
        global_pool_kernel<float><<<grid, threads, 0, stream>>>(static_cast<const float*>(x), static_cast<float*>(y),
                                                                rows, cols, max);
    else
        global_pool_kernel<__half><<<grid, threads, 0, stream>>>(static_cast<const __half*>(x),
                                                                 static_cast<__half*>(y), rows, cols, max);
    return cudaGetLastError();
}

}  // namespace tessera::cuda
