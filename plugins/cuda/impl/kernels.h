// CUDA provider: launchers of the provider's own kernels (kernels_elementwise.cu, kernels_nn.cu).  Every launcher
// enqueues work on `stream` and returns the launch status (cudaGetLastError); none synchronizes.  Element counts of
// zero launch nothing.  Kernels compute in float and store float32 or float16.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tessera::cuda {

enum class DType : int { F32 = 0, F16 = 1 };

constexpr int kMaxDims = 8;

// ---- Elementwise -------------------------------------------------------------------------------------------------

// alpha / beta carry the attributes: LeakyRelu/Elu alpha; Clip min/max; Selu alpha/gamma; HardSigmoid alpha/beta.
enum class UnaryOp : int {
    Relu, LeakyRelu, Sigmoid, Tanh, GeluErf, GeluTanh, Erf, Exp, Log, Sqrt, Neg, Abs, Reciprocal, Clip, Elu, Selu,
    HardSigmoid, HardSwish, Softplus, Softsign, Floor, Ceil, Sin, Cos
};
cudaError_t launch_unary(UnaryOp op, DType type, const void* x, void* y, int64_t n, float alpha, float beta,
                         cudaStream_t stream);

// y[i] = op(a[offset_a(i)], b[offset_b(i)]) over the output's (merged) dimensions; a broadcast dimension has stride 0.
struct BroadcastPlan {
    int rank = 0;  // 0: a single element
    int64_t n = 0; // output elements
    int64_t dims[kMaxDims] = {};
    int64_t a_strides[kMaxDims] = {};
    int64_t b_strides[kMaxDims] = {};
};
// First: y = a (broadcast copy; b is ignored).  PRelu: a < 0 ? a * b : a.
enum class BinaryOp : int { Add, Sub, Mul, Div, Pow, Max, Min, PRelu, First };
cudaError_t launch_binary(BinaryOp op, DType type, const void* a, const void* b, void* y, const BroadcastPlan& plan,
                          cudaStream_t stream);

// y = act(x * scale[c] + shift[c]) for x of shape [n, c, spatial]; scale/shift are float arrays of c entries (NULL:
// 1 and 0).  The epilogue of Conv (bias, ReLU) and inference BatchNormalization.
cudaError_t launch_channel_affine(DType type, const void* x, void* y, const float* scale, const float* shift,
                                  int64_t n, int64_t c, int64_t spatial, bool relu, cudaStream_t stream);

// ---- Data movement -----------------------------------------------------------------------------------------------

// y[i] = x[sum_d coord_d(i) * src_strides[d]] with coordinates over out_dims (merged).
struct TransposePlan {
    int rank = 0;
    int64_t n = 0;
    int64_t out_dims[kMaxDims] = {};
    int64_t src_strides[kMaxDims] = {};
};
cudaError_t launch_transpose(size_t element_size, const void* x, void* y, const TransposePlan& plan,
                             cudaStream_t stream);

// ---- Normalization -----------------------------------------------------------------------------------------------

// Softmax (or LogSoftmax) of x viewed as [outer, dim, inner] along `dim`.
cudaError_t launch_softmax(DType type, const void* x, void* y, int64_t outer, int64_t dim, int64_t inner,
                           bool log, cudaStream_t stream);

// LayerNormalization of x viewed as [rows, cols]: scale and bias (NULL: none) have cols elements of `type`; mean and
// inv_std (float, rows entries) are written when not NULL.
cudaError_t launch_layer_norm(DType type, const void* x, const void* scale, const void* bias, void* y, float* mean,
                              float* inv_std, int64_t rows, int64_t cols, float epsilon, cudaStream_t stream);

// LRN across channels of x [n, c, spatial].
cudaError_t launch_lrn(DType type, const void* x, void* y, int64_t n, int64_t c, int64_t spatial, int64_t size,
                       float alpha, float beta, float bias, cudaStream_t stream);

// ---- Pooling -----------------------------------------------------------------------------------------------------

// Sliding-window pooling over up to 3 spatial dimensions (unused leading ones have size 1, kernel 1, stride 1);
// planes = N * C.  A window entirely in the padding yields 0.  Average divides by the taps inside the input, or with
// count_include_pad by the taps inside the padded input.
struct PoolPlan {
    int64_t planes = 0;
    int64_t in[3] = {1, 1, 1};
    int64_t out[3] = {1, 1, 1};
    int64_t kernel[3] = {1, 1, 1};
    int64_t stride[3] = {1, 1, 1};
    int64_t dilation[3] = {1, 1, 1};
    int64_t pad_begin[3] = {0, 0, 0};
    int64_t pad_end[3] = {0, 0, 0};
    bool max = true;
    bool count_include_pad = false;
};
cudaError_t launch_pool(DType type, const void* x, void* y, const PoolPlan& plan, cudaStream_t stream);

// Mean or max of each row of x [rows, cols] into y [rows].
cudaError_t launch_global_pool(DType type, const void* x, void* y, int64_t rows, int64_t cols, bool max,
                               cudaStream_t stream);

}  // namespace tessera::cuda
