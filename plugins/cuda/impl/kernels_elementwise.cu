// CUDA provider: elementwise kernels -- unary activations, broadcasting binary operators, per-channel affine.
// One kernel per element type with the operator as a (warp-uniform) argument keeps the compile time small.
#include "kernel_util.cuh"

namespace tessera::cuda {
namespace {

__device__ __forceinline__ float apply_unary(UnaryOp op, float x, float a, float b) {
    switch (op) {
        case UnaryOp::Relu: return x < 0.0f ? 0.0f : x;
        case UnaryOp::LeakyRelu: return x < 0.0f ? a * x : x;
        case UnaryOp::Sigmoid: return 1.0f / (1.0f + expf(-x));
        case UnaryOp::Tanh: return tanhf(x);
        case UnaryOp::GeluErf: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
        case UnaryOp::GeluTanh:
            return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
        case UnaryOp::Erf: return erff(x);
        case UnaryOp::Exp: return expf(x);
        case UnaryOp::Log: return logf(x);
        case UnaryOp::Sqrt: return sqrtf(x);
        case UnaryOp::Neg: return -x;
        case UnaryOp::Abs: return fabsf(x);
        case UnaryOp::Reciprocal: return 1.0f / x;
        case UnaryOp::Clip: return x < a ? a : (x > b ? b : x);  // NaN stays NaN
        case UnaryOp::Elu: return x < 0.0f ? a * expm1f(x) : x;
        case UnaryOp::Selu: return x > 0.0f ? b * x : b * (a * expf(x) - a);
        case UnaryOp::HardSigmoid: return fmaxf(0.0f, fminf(1.0f, a * x + b));
        case UnaryOp::HardSwish: return x * fmaxf(0.0f, fminf(1.0f, x * (1.0f / 6.0f) + 0.5f));
        case UnaryOp::Softplus: return x > 20.0f ? x : log1pf(expf(x));
        case UnaryOp::Softsign: return x / (1.0f + fabsf(x));
        case UnaryOp::Floor: return floorf(x);
        case UnaryOp::Ceil: return ceilf(x);
        case UnaryOp::Sin: return sinf(x);
        case UnaryOp::Cos: return cosf(x);
    }
    return x;
}

__device__ __forceinline__ float apply_binary(BinaryOp op, float a, float b) {
    switch (op) {
        case BinaryOp::Add: return a + b;
        case BinaryOp::Sub: return a - b;
        case BinaryOp::Mul: return a * b;
        case BinaryOp::Div: return a / b;
        case BinaryOp::Pow: return powf(a, b);
        case BinaryOp::Max: return (a != a || a > b) ? a : b;  // NaN propagates
        case BinaryOp::Min: return (a != a || a < b) ? a : b;
        case BinaryOp::PRelu: return a < 0.0f ? a * b : a;
        case BinaryOp::First: return a;
    }
    return a;
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* __restrict__ x, T* __restrict__ y, int64_t n, float a, float b) {
    TESS_GRID_STRIDE_LOOP(i, n) { y[i] = from_float<T>(apply_unary(op, to_float(x[i]), a, b)); }
}

template <typename T>
__global__ void binary_kernel(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y,
                              BroadcastPlan p) {
    TESS_GRID_STRIDE_LOOP(i, p.n) {
        int64_t rest = i, ao = 0, bo = 0;
        for (int d = p.rank - 1; d > 0; --d) {
            const int64_t c = rest % p.dims[d];
            rest /= p.dims[d];
            ao += c * p.a_strides[d];
            bo += c * p.b_strides[d];
        }
        if (p.rank > 0) {
            ao += rest * p.a_strides[0];
            bo += rest * p.b_strides[0];
        }
        y[i] = from_float<T>(apply_binary(op, to_float(a[ao]), to_float(b[bo])));
    }
}

template <typename T>
__global__ void channel_affine_kernel(const T* x, T* y,  // may be in place
                                      const float* __restrict__ scale,
                                      const float* __restrict__ shift, int64_t total, int64_t c, int64_t spatial,
                                      bool relu) {
    TESS_GRID_STRIDE_LOOP(i, total) {
        const int64_t ch = (i / spatial) % c;
        float v = to_float(x[i]);
        if (scale != nullptr) v *= scale[ch];
        if (shift != nullptr) v += shift[ch];
        if (relu && v < 0.0f) v = 0.0f;
        y[i] = from_float<T>(v);
    }
}

}  // namespace

cudaError_t launch_unary(UnaryOp op, DType type, const void* x, void* y, int64_t n, float alpha, float beta,
                         cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (type == DType::F32)
        unary_kernel<float><<<grid_for(n), kThreads, 0, stream>>>(op, static_cast<const float*>(x),
                                                                  static_cast<float*>(y), n, alpha, beta);
    else
        unary_kernel<__half><<<grid_for(n), kThreads, 0, stream>>>(op, static_cast<const __half*>(x),
                                                                   static_cast<__half*>(y), n, alpha, beta);
    return cudaGetLastError();
}

cudaError_t launch_binary(BinaryOp op, DType type, const void* a, const void* b, void* y, const BroadcastPlan& plan,
                          cudaStream_t stream) {
    if (plan.n <= 0) return cudaSuccess;
    if (type == DType::F32)
        binary_kernel<float><<<grid_for(plan.n), kThreads, 0, stream>>>(
            op, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(y), plan);
    else
        binary_kernel<__half><<<grid_for(plan.n), kThreads, 0, stream>>>(
            op, static_cast<const __half*>(a), static_cast<const __half*>(b), static_cast<__half*>(y), plan);
    return cudaGetLastError();
}

cudaError_t launch_channel_affine(DType type, const void* x, void* y, const float* scale, const float* shift,
                                  int64_t n, int64_t c, int64_t spatial, bool relu, cudaStream_t stream) {
    const int64_t total = n * c * spatial;
    if (total <= 0) return cudaSuccess;
    if (type == DType::F32)
        channel_affine_kernel<float><<<grid_for(total), kThreads, 0, stream>>>(
            static_cast<const float*>(x), static_cast<float*>(y), scale, shift, total, c, spatial, relu);
    else
        channel_affine_kernel<__half><<<grid_for(total), kThreads, 0, stream>>>(
            static_cast<const __half*>(x), static_cast<__half*>(y), scale, shift, total, c, spatial, relu);
    return cudaGetLastError();
}

}  // namespace tessera::cuda
