#include "kernels.h"

#include <algorithm>
#include <cmath>

namespace sample {

size_t element_count(const Shape& shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
}

std::string format_shape(const Shape& shape) {
    std::string out = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i != 0) out += ',';
        out += std::to_string(shape[i]);
    }
    return out + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
    const size_t rank = std::max(a.size(), b.size());
    Shape out(rank);
    for (size_t i = 0; i < rank; ++i) {
        const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
        const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
        if (da != db && da != 1 && db != 1)
            throw KernelError("shapes " + format_shape(a) + " and " + format_shape(b) + " do not broadcast");
        out[rank - 1 - i] = da == 1 ? db : da;
    }
    return out;
}

namespace {

// Element strides of `in` seen through the broadcast shape `out` (0 along broadcast dimensions).
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
    std::vector<int64_t> strides(out.size(), 0);
    int64_t stride = 1;
    for (size_t i = 0; i < in.size(); ++i) {
        const size_t d = in.size() - 1 - i;
        strides[out.size() - 1 - i] = in[d] == 1 ? 0 : stride;
        stride *= in[d];
    }
    return strides;
}

template <typename Op>
void binary_loop(Op op, const float* a, const Shape& a_shape, const float* b, const Shape& b_shape, float* out,
                 const Shape& out_shape) {
    const size_t total = element_count(out_shape);
    if (total == 0) return;
    if (a_shape == out_shape && b_shape == out_shape) {
        for (size_t i = 0; i < total; ++i) out[i] = op(a[i], b[i]);
        return;
    }
    const size_t rank = out_shape.size();
    if (rank == 0) {
        out[0] = op(a[0], b[0]);
        return;
    }
    const std::vector<int64_t> as = broadcast_strides(a_shape, out_shape);
    const std::vector<int64_t> bs = broadcast_strides(b_shape, out_shape);
    // The innermost dimension is the inner loop; an odometer walks the outer ones.
    const int64_t inner = out_shape[rank - 1];
    const int64_t ai = as[rank - 1], bi = bs[rank - 1];
    std::vector<int64_t> index(rank, 0);
    int64_t a_offset = 0, b_offset = 0;
    const size_t outer = total / static_cast<size_t>(inner);
    for (size_t t = 0; t < outer; ++t) {
        for (int64_t j = 0; j < inner; ++j) out[j] = op(a[a_offset + j * ai], b[b_offset + j * bi]);
        out += inner;
        for (size_t d = rank - 1; d-- > 0;) {
            a_offset += as[d];
            b_offset += bs[d];
            if (++index[d] < out_shape[d]) break;
            a_offset -= as[d] * out_shape[d];
            b_offset -= bs[d] * out_shape[d];
            index[d] = 0;
        }
    }
}

// C (M x N) = A (M x K) * B (K x N), all row-major, blocked so that a block of B rows stays in cache.
void matmul_2d(const float* a, const float* b, float* c, size_t m, size_t k, size_t n) {
    constexpr size_t kBlockK = 128, kBlockN = 512;
    std::fill(c, c + m * n, 0.0f);
    for (size_t j0 = 0; j0 < n; j0 += kBlockN) {
        const size_t j1 = std::min(n, j0 + kBlockN);
        for (size_t k0 = 0; k0 < k; k0 += kBlockK) {
            const size_t k1 = std::min(k, k0 + kBlockK);
            for (size_t i = 0; i < m; ++i) {
                float* c_row = c + i * n;
                const float* a_row = a + i * k;
                for (size_t kk = k0; kk < k1; ++kk) {
                    const float a_ik = a_row[kk];
                    const float* b_row = b + kk * n;
                    for (size_t j = j0; j < j1; ++j) c_row[j] += a_ik * b_row[j];
                }
            }
        }
    }
}

// C (M x N) = A (M x K) * B^T where B is N x K row-major: dot products along contiguous rows.
void matmul_2d_bt(const float* a, const float* b, float* c, size_t m, size_t k, size_t n) {
    for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
            const float* a_row = a + i * k;
            const float* b_row = b + j * k;
            float sum = 0.0f;
            for (size_t kk = 0; kk < k; ++kk) sum += a_row[kk] * b_row[kk];
            c[i * n + j] = sum;
        }
}

}  // namespace

void binary(Binary op, const float* a, const Shape& a_shape, const float* b, const Shape& b_shape, float* out,
            const Shape& out_shape) {
    switch (op) {
        case Binary::Add: return binary_loop([](float x, float y) { return x + y; }, a, a_shape, b, b_shape, out, out_shape);
        case Binary::Sub: return binary_loop([](float x, float y) { return x - y; }, a, a_shape, b, b_shape, out, out_shape);
        case Binary::Mul: return binary_loop([](float x, float y) { return x * y; }, a, a_shape, b, b_shape, out, out_shape);
        case Binary::Div: return binary_loop([](float x, float y) { return x / y; }, a, a_shape, b, b_shape, out, out_shape);
    }
}

void unary(Unary op, const UnaryParams& params, const float* x, float* y, size_t count) {
    switch (op) {
        case Unary::Relu:
            for (size_t i = 0; i < count; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
            return;
        case Unary::Sigmoid:
            for (size_t i = 0; i < count; ++i) {
                // exp of a non-positive number only, so large |x| neither overflows nor loses the small side.
                const float e = std::exp(-std::fabs(x[i]));
                y[i] = x[i] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
            }
            return;
        case Unary::Tanh:
            for (size_t i = 0; i < count; ++i) y[i] = std::tanh(x[i]);
            return;
        case Unary::LeakyRelu:
            for (size_t i = 0; i < count; ++i) y[i] = x[i] >= 0.0f ? x[i] : params.alpha * x[i];
            return;
        case Unary::Clip:
            for (size_t i = 0; i < count; ++i) y[i] = x[i] < params.min ? params.min : x[i] > params.max ? params.max : x[i];
            return;
    }
}

Shape matmul_shape(const Shape& a, const Shape& b) {
    if (a.empty() || b.empty()) throw KernelError("MatMul operands must have rank >= 1");
    Shape pa = a, pb = b;
    if (pa.size() == 1) pa.insert(pa.begin(), 1);
    if (pb.size() == 1) pb.push_back(1);
    if (pa.back() != pb[pb.size() - 2])
        throw KernelError("MatMul of " + format_shape(a) + " and " + format_shape(b) + ": inner dimensions differ");
    Shape out = broadcast_shapes(Shape(pa.begin(), pa.end() - 2), Shape(pb.begin(), pb.end() - 2));
    if (a.size() > 1) out.push_back(pa[pa.size() - 2]);
    if (b.size() > 1) out.push_back(pb.back());
    return out;
}

void matmul(const float* a, const Shape& a_shape, const float* b, const Shape& b_shape, float* out,
            const Shape& out_shape) {
    Shape pa = a_shape, pb = b_shape;
    if (pa.size() == 1) pa.insert(pa.begin(), 1);
    if (pb.size() == 1) pb.push_back(1);
    const size_t m = static_cast<size_t>(pa[pa.size() - 2]), k = static_cast<size_t>(pa.back());
    const size_t n = static_cast<size_t>(pb.back());
    const Shape a_batch(pa.begin(), pa.end() - 2), b_batch(pb.begin(), pb.end() - 2);
    const Shape batch = broadcast_shapes(a_batch, b_batch);
    // Strides in whole matrices: a batch index maps to one A matrix and one B matrix.
    const std::vector<int64_t> as = broadcast_strides(a_batch, batch), bs = broadcast_strides(b_batch, batch);
    const size_t batches = element_count(batch);
    if (element_count(out_shape) == 0) return;
    for (size_t t = 0; t < batches; ++t) {
        size_t rest = t;
        int64_t a_index = 0, b_index = 0;
        for (size_t d = batch.size(); d-- > 0;) {
            const int64_t i = static_cast<int64_t>(rest % static_cast<size_t>(batch[d]));
            rest /= static_cast<size_t>(batch[d]);
            a_index += i * as[d];
            b_index += i * bs[d];
        }
        matmul_2d(a + a_index * static_cast<int64_t>(m * k), b + b_index * static_cast<int64_t>(k * n),
                  out + t * m * n, m, k, n);
    }
}

Shape gemm_shape(const GemmParams& params, const Shape& a, const Shape& b) {
    if (a.size() != 2 || b.size() != 2)
        throw KernelError("Gemm wants 2-D A and B, got " + format_shape(a) + " and " + format_shape(b));
    const int64_t m = params.trans_a ? a[1] : a[0], ka = params.trans_a ? a[0] : a[1];
    const int64_t kb = params.trans_b ? b[1] : b[0], n = params.trans_b ? b[0] : b[1];
    if (ka != kb)
        throw KernelError("Gemm of " + format_shape(a) + " and " + format_shape(b) + ": inner dimensions differ");
    return {m, n};
}

void gemm(const GemmParams& params, const float* a, const Shape& a_shape, const float* b, const Shape& /*b_shape*/,
          const float* c, const Shape& c_shape, float* y, const Shape& y_shape) {
    const size_t m = static_cast<size_t>(y_shape[0]), n = static_cast<size_t>(y_shape[1]);
    const size_t k = static_cast<size_t>(params.trans_a ? a_shape[0] : a_shape[1]);
    if (c != nullptr) {
        if (c_shape.size() > 2) throw KernelError("Gemm: C " + format_shape(c_shape) + " has rank above 2");
        for (size_t i = 0; i < c_shape.size(); ++i)
            if (c_shape[i] != 1 && c_shape[i] != y_shape[2 - c_shape.size() + i])
                throw KernelError("Gemm: C " + format_shape(c_shape) + " does not broadcast to " +
                                  format_shape(y_shape));
    }
    if (m * n == 0) return;
    std::vector<float> a_transposed;
    if (params.trans_a) {  // A is K x M: make it M x K
        a_transposed.resize(m * k);
        for (size_t i = 0; i < m; ++i)
            for (size_t kk = 0; kk < k; ++kk) a_transposed[i * k + kk] = a[kk * m + i];
        a = a_transposed.data();
    }
    if (params.trans_b) matmul_2d_bt(a, b, y, m, k, n);
    else matmul_2d(a, b, y, m, k, n);

    const std::vector<int64_t> cs = c != nullptr ? broadcast_strides(c_shape, y_shape) : std::vector<int64_t>{0, 0};
    for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
            float v = params.alpha * y[i * n + j];
            if (c != nullptr) v += params.beta * c[static_cast<int64_t>(i) * cs[0] + static_cast<int64_t>(j) * cs[1]];
            y[i * n + j] = v;
        }
}

}  // namespace sample
