// The sample provider's arithmetic: plain loops over float32 buffers, nothing that knows about Tessera.  A vendor
// replaces this file with calls into its device library; the rest of the provider stays as it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace sample {

using Shape = std::vector<int64_t>;

// A shape or argument problem found while running; the compute function turns it into a RUNTIME_ERROR status.
struct KernelError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

size_t element_count(const Shape& shape);
std::string format_shape(const Shape& shape);

// numpy broadcasting of two shapes; throws KernelError when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);

enum class Binary { Add, Sub, Mul, Div };
enum class Unary { Relu, Sigmoid, Tanh, LeakyRelu, Clip };

// out[out_shape] = a op b, with a and b broadcast to out_shape (which must be their broadcast shape).  `out` may be
// `a` itself when a already has out_shape.
void binary(Binary op, const float* a, const Shape& a_shape, const float* b, const Shape& b_shape, float* out,
            const Shape& out_shape);

struct UnaryParams {
    float alpha = 0.01f;  // LeakyRelu
    float min = 0.0f;     // Clip
    float max = 0.0f;
};
void unary(Unary op, const UnaryParams& params, const float* x, float* y, size_t count);

// numpy.matmul: 1-D operands are promoted (and the added dimension dropped again), batch dimensions broadcast.
Shape matmul_shape(const Shape& a, const Shape& b);
void matmul(const float* a, const Shape& a_shape, const float* b, const Shape& b_shape, float* out,
            const Shape& out_shape);

// ONNX Gemm: Y = alpha * A' * B' + beta * C, A' = transA ? A^T : A (M x K), B' = transB ? B^T : B (K x N), C (may
// be NULL) broadcast to M x N.
struct GemmParams {
    float alpha = 1.0f;
    float beta = 1.0f;
    bool trans_a = false;
    bool trans_b = false;
};
Shape gemm_shape(const GemmParams& params, const Shape& a, const Shape& b);
void gemm(const GemmParams& params, const float* a, const Shape& a_shape, const float* b, const Shape& b_shape,
          const float* c, const Shape& c_shape, float* y, const Shape& y_shape);

}  // namespace sample
