// CPU provider, com.microsoft: the integer matrix products that onnxruntime's quantization tools and its session
// optimizer write.
//
//   MatMulIntegerToFloat (A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?):
//       Y = float((A - a_zero) x (B - b_zero)) * (a_scale * b_scale) + bias        (uint8/int8 A and B)
//   DynamicQuantizeMatMul (A, B, b_scale, b_zero_point?, bias?): A (float) quantized to uint8 first, exactly as
//       DynamicQuantizeLinear does, then as MatMulIntegerToFloat.
//   QGemm (A, a_scale, a_zero, B, b_scale, b_zero, C?, y_scale?, y_zero?): Gemm with transA/transB and alpha over
//       8-bit operands and an int32 bias, float or requantized output.
//
// Both run on the exact int32 sums of util/int8_gemm.h (VNNI or AMX where the CPU has them) with B packed once
// when constant, and finish in onnxruntime's order: the int32 sum converted to float, multiplied by the float
// product of the scales, then the bias added, each step rounded to float.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "kernels/contrib/contrib_registry.h"
#include "kernels/quantization/integer_matmul.h"
#include "kernels/quantization/quantize_support.h"
#include "util/cpu_isa.h"
#include "util/thread_scratch.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

namespace tessera::cpu {

namespace {

using namespace quant;

// The float scale of an integer product's columns: a_scale (one value) times b_scale (one, or one per column of B).
struct ColumnScales {
    std::vector<float> values;  // one value, or one per column of the global B viewed by ParamIndex
    ParamIndex index;

    float at(int64_t b_row, int64_t column) const { return values[index(b_row, column)]; }
};

float scalar_float(const std::string& op, const char* name, const Tensor& t) {
    if (t.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(op + " " + name, t.type);
    if (t.size() != 1) throw KernelError(op + ": " + name + " must be a scalar, got " + shape_string(t.shape));
    return t.ptr<float>()[0];
}

ColumnScales column_scales(const std::string& op, float a_scale, const Tensor& b_scale, const Shape& b_shape) {
    if (b_scale.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(op + " b_scale", b_scale.type);
    ColumnScales scales;
    scales.index = matrix_param_index(op, "b_scale", b_scale.shape, b_shape, MatrixSide::B);
    scales.values.resize(static_cast<size_t>(b_scale.size()));
    for (size_t i = 0; i < scales.values.size(); ++i) scales.values[i] = a_scale * b_scale.ptr<float>()[i];
    return scales;
}

// One row: y[n] = float(sum[n]) * scale[n] + bias[n] (scale[0] for all when `uniform`; no bias when null), in place
// over the int32 sums.  A multiply, then an add, each rounded, as onnxruntime's output processor does: contraction
// into FMAs is off here, and the AVX-512 copy uses explicit multiply and add instructions.
[[gnu::optimize("fp-contract=off")]] void scale_row(float* y, int64_t n, const float* scale, bool uniform,
                                                     const float* bias) {
    for (int64_t i = 0; i < n; ++i) {
        int32_t sum;
        std::memcpy(&sum, y + i, sizeof sum);
        float v = static_cast<float>(sum) * scale[uniform ? 0 : i];
        if (bias != nullptr) v = v + bias[i];
        y[i] = v;
    }
}

#if TESSERA_CPU_X86
// The same on AVX-512.  Contraction must be off here too: GCC fuses the intrinsics' multiply and add otherwise.
[[gnu::target("avx512f"), gnu::optimize("fp-contract=off")]] void scale_row_avx512(float* y, int64_t n,
                                                                                  const float* scale, bool uniform,
                                                                                  const float* bias) {
    int64_t i = 0;
    const __m512 splat = _mm512_set1_ps(scale[0]);
    for (; i + 16 <= n; i += 16) {
        const __m512 sums = _mm512_cvtepi32_ps(_mm512_loadu_si512(y + i));
        __m512 v = _mm512_mul_ps(sums, uniform ? splat : _mm512_loadu_ps(scale + i));
        if (bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + i));
        _mm512_storeu_ps(y + i, v);
    }
    scale_row(y + i, n - i, uniform ? scale : scale + i, uniform, bias != nullptr ? bias + i : nullptr);  // the tail
}
#else  // never called: no Avx512 level
void scale_row_avx512(float*, int64_t, const float*, bool, const float*) { x86_kernel_unavailable(__func__); }
#endif

// Y (plan.output_shape, float) = float(sums) * scale + bias, in place over the int32 sums that Y's buffer holds.
void scale_sums_in_place(ThreadPool& pool, const MatMulPlan& plan, const ColumnScales& scales, const float* bias,
                         float* Y) {
    const int64_t M = plan.M, N = plan.N;
    const int64_t rows = plan.batch * M;
    const bool avx512 = cpu_allows(CpuIsa::Avx512);
    pool.parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, N)), [&](int64_t first, int64_t last) {
        float* row_scales = thread_scratch_buffer<float, 21>(N);
        for (int64_t r = first; r < last; ++r) {
            const int64_t product = r / M;
            const int64_t b_row = plan.fold_batch_into_rows ? 0 : plan.b_offsets[product] / std::max<int64_t>(1, N);
            const bool uniform = scales.values.size() == 1;
            if (!uniform)
                for (int64_t n = 0; n < N; ++n) row_scales[n] = scales.at(b_row, n);
            const float* s = uniform ? scales.values.data() : row_scales;
            if (avx512)
                scale_row_avx512(Y + r * N, N, s, uniform, bias);
            else
                scale_row(Y + r * N, N, s, uniform, bias);
        }
    });
}

const float* checked_bias(const std::string& op, const KernelContext& ctx, size_t index, int64_t N) {
    if (!ctx.has_input(index)) return nullptr;
    const Tensor& bias = ctx.input(index);
    if (bias.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(op + " bias", bias.type);
    if (bias.size() != N || bias.rank() != 1)
        throw KernelError(op + ": bias " + shape_string(bias.shape) + " must be [" + std::to_string(N) + "]");
    return bias.ptr<float>();
}

ZeroPoints zero_points(const std::string& op, const KernelContext& ctx, size_t index, const Tensor& operand,
                       MatrixSide side, const char* name) {
    ZeroPoints zp = ZeroPoints::load(op, ctx.has_input(index) ? &ctx.input(index) : nullptr, operand);
    if (ctx.has_input(index)) zp.index = matrix_param_index(op, name, ctx.input(index).shape, operand.shape, side);
    return zp;
}

// (A - a_zero) x (B - b_zero) scaled into float: the part both operators share once A is 8-bit.
void integer_product_to_float(const std::string& op, KernelContext& ctx, const Tensor& A, const ZeroPoints& a_zero,
                              float a_scale, const Tensor& B, size_t b_scale_input, size_t b_zero_input,
                              size_t bias_input, const PackedMatMulB* packed_b) {
    check_8bit(op, "B", B);
    const MatMulPlan plan = plan_matmul(A.shape, B.shape, op);
    const ZeroPoints b_zero = zero_points(op, ctx, b_zero_input, B, MatrixSide::B, "b_zero_point");
    const ColumnScales scales = column_scales(op, a_scale, ctx.input(b_scale_input), B.shape);
    const float* bias = checked_bias(op, ctx, bias_input, plan.N);
    Tensor& Y = ctx.output(0, TESS_ELEMENT_FLOAT32, plan.output_shape);
    static_assert(sizeof(float) == sizeof(int32_t), "the int32 sums are held in Y's buffer");
    auto* sums = static_cast<int32_t*>(Y.data);
    integer_matmul(ctx.pool(), plan, A, a_zero, B, b_zero, packed_b, sums);
    scale_sums_in_place(ctx.pool(), plan, scales, bias, Y.ptr<float>());
}

class MatMulIntegerToFloatKernel final : public Kernel {
public:
    explicit MatMulIntegerToFloatKernel(const NodeInfo& info) : b_(info, 1) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "MatMulIntegerToFloat";
        const Tensor& A = ctx.input(0);
        check_8bit(op, "A", A);
        // onnxruntime takes A's quantization per tensor: one scale, one zero point.
        const float a_scale = scalar_float(op, "a_scale", ctx.input(2));
        ZeroPoints a_zero = ZeroPoints::load(op, ctx.has_input(4) ? &ctx.input(4) : nullptr, A);
        if (a_zero.values.size() != 1) throw KernelError(op + ": a_zero_point must be a scalar");
        integer_product_to_float(op, ctx, A, a_zero, a_scale, b_.tensor(ctx), 3, 5, 6, b_.get());
    }

private:
    PrepackedB b_;
};

class DynamicQuantizeMatMulKernel final : public Kernel {
public:
    explicit DynamicQuantizeMatMulKernel(const NodeInfo& info) : b_(info, 1) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "DynamicQuantizeMatMul";
        const Tensor& A = ctx.input(0);
        if (A.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(op + " A", A.type);
        // A's uint8 copy: this thread's scratch, kept for the next run (slot 20 is this kernel's).
        Tensor quantized{TESS_ELEMENT_UINT8, A.shape, thread_scratch_buffer<uint8_t, 20>(A.size()), nullptr};
        const DynamicQuantization q = dynamic_quantize_uint8(ctx.pool(), A, quantized);
        ZeroPoints a_zero;
        a_zero.values = {q.zero_point};
        integer_product_to_float(op, ctx, quantized, a_zero, q.scale, b_.tensor(ctx), 2, 3, 4, b_.get());
    }

private:
    PrepackedB b_;
};

// QGemm: Y = alpha * (A - a_zero)(B - b_zero) * a_scale * b_scale (+ C, an int32 bias in the product's scale),
// float when y_scale is absent, else requantized to y_scale / y_zero_point.  onnxruntime's arithmetic: the int32 C
// joins the exact sums, the column scale is f32(f32(alpha * a_scale) * b_scale[n]) (divided by y_scale for a
// quantized Y), and the output is f32(float(sum) * scale) or its requantization.
class QGemmKernel final : public Kernel {
public:
    explicit QGemmKernel(const NodeInfo& info)
        : alpha_(info.attr_float("alpha", 1.0f)),
          trans_a_(info.attr_int("transA", 0) != 0),
          trans_b_(info.attr_int("transB", 0) != 0) {
        if (const std::optional<Tensor> B = info.constant_tensor(3);
            B && B->rank() == 2 && (B->type == TESS_ELEMENT_INT8 || B->type == TESS_ELEMENT_UINT8))
        {
            packed_b_.emplace(pack_b(*B, nullptr));
            b_view_ = Tensor{B->type, B->shape, nullptr, nullptr};
            info.release_constant(3);  // held once, packed
        }
    }

    void compute(KernelContext& ctx) const override {
        const std::string op = "QGemm";
        const Tensor& A = ctx.input(0);
        const Tensor& B = packed_b_ ? b_view_ : ctx.input(3);
        check_8bit(op, "A", A);
        check_8bit(op, "B", B);
        if (A.rank() != 2 || B.rank() != 2) throw KernelError(op + ": A and B must be 2-D");
        const int64_t M = trans_a_ ? A.shape[1] : A.shape[0], K = trans_a_ ? A.shape[0] : A.shape[1];
        const int64_t N = trans_b_ ? B.shape[0] : B.shape[1];
        if ((trans_b_ ? B.shape[1] : B.shape[0]) != K)
            throw KernelError(op + ": A " + shape_string(A.shape) + " and B " + shape_string(B.shape) + " do not multiply");
        const float a_scale = scalar_float(op, "a_scale", ctx.input(1));
        ZeroPoints a_zero = ZeroPoints::load(op, &ctx.input(2), A);
        if (a_zero.values.size() != 1) throw KernelError(op + ": a_zero_point must be a scalar");
        const Tensor& b_scale = ctx.input(4);
        const Tensor& b_zero_in = ctx.input(5);
        if (b_scale.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(op + " b_scale", b_scale.type);
        if (b_scale.size() != 1 && b_scale.size() != N)
            throw KernelError(op + ": b_scale must be a scalar or hold N values");
        ZeroPoints b_zero = ZeroPoints::load(op, &b_zero_in, B);
        if (b_zero.values.size() != 1 && static_cast<int64_t>(b_zero.values.size()) != N)
            throw KernelError(op + ": b_zero_point must be a scalar or hold N values");
        if (b_zero.values.size() != 1) b_zero.index.column_step = 1;
        const bool quantized_output = ctx.has_input(7);
        std::vector<float> scales(static_cast<size_t>(b_scale.size()));
        const float y_scale = quantized_output ? scalar_float(op, "y_scale", ctx.input(7)) : 1.0f;
        for (size_t n = 0; n < scales.size(); ++n) {
            scales[n] = (alpha_ * a_scale) * b_scale.ptr<float>()[n];
            if (quantized_output) scales[n] = scales[n] / y_scale;
        }
        const Tensor* bias = ctx.has_input(6) ? &ctx.input(6) : nullptr;
        if (bias != nullptr && bias->type != TESS_ELEMENT_INT32) throw_unsupported_type(op + " C", bias->type);

        // A row-major [M, K] for int8_gemm: a transposed A is copied once per run into scratch.
        const auto* a_bytes = static_cast<const uint8_t*>(A.data);
        if (trans_a_) {
            auto* copy = thread_scratch_buffer<uint8_t, 24>(M * K);
            for (int64_t m = 0; m < M; ++m)
                for (int64_t k = 0; k < K; ++k) copy[m * K + k] = a_bytes[k * M + m];
            a_bytes = copy;
        }
        std::optional<Int8PackedB> packed_here;
        const Int8PackedB* packed = packed_b_ ? &*packed_b_ : nullptr;
        if (packed == nullptr || packed->depth() != K || packed->columns() != N ||
            packed->is_signed() != (B.type == TESS_ELEMENT_INT8)) {
            packed_here.emplace(pack_b(B, &ctx.pool()));
            packed = &*packed_here;
        }
        const std::vector<int32_t> za(static_cast<size_t>(M), a_zero.values[0]);
        const std::vector<int32_t> zb = b_zero.columns(0, N);

        int32_t y_zero = 0;
        int32_t y_type = TESS_ELEMENT_FLOAT32;
        if (quantized_output) {
            y_type = A.type;
            if (ctx.has_input(8)) {
                y_type = ctx.input(8).type;
                check_8bit(op, "y_zero_point", ctx.input(8));
                y_zero = static_cast<int32_t>(y_type == TESS_ELEMENT_INT8 ? ctx.input(8).ptr<int8_t>()[0]
                                                                          : ctx.input(8).ptr<uint8_t>()[0]);
            }
        }
        Tensor& Y = ctx.output(0, y_type, {M, N});
        int32_t* sums = quantized_output ? thread_scratch_buffer<int32_t, 25>(M * N) : static_cast<int32_t*>(Y.data);
        if (K == 0)
            std::fill(sums, sums + M * N, 0);
        else
            int8_gemm(ctx.pool(), M, a_bytes, A.type == TESS_ELEMENT_INT8, K, *packed, za.data(), zb.data(), sums, N);
        if (bias != nullptr) add_bias(op, *bias, M, N, sums);
        const bool per_column = scales.size() != 1;
        auto scale_at = [&](int64_t n) { return scales[per_column ? n : 0]; };
        if (!quantized_output) {
            float* y = Y.ptr<float>();
            for (int64_t i = 0; i < M * N; ++i) y[i] = static_cast<float>(sums[i]) * scale_at(i % N);
            return;
        }
        dispatch<int8_t, uint8_t>(y_type, [&]<typename T>() {
            T* y = Y.ptr<T>();
            constexpr float low = static_cast<float>(std::numeric_limits<T>::min());
            constexpr float high = static_cast<float>(std::numeric_limits<T>::max());
            for (int64_t i = 0; i < M * N; ++i) {
                // f32(sum * scale), limited to [qmin - zero, qmax - zero], rounded half to even, plus the zero.
                const float v = static_cast<float>(sums[i]) * scale_at(i % N);
                const float limited = std::min(std::max(v, low - y_zero), high - y_zero);
                y[i] = static_cast<T>(static_cast<int32_t>(std::nearbyint(limited)) + y_zero);
            }
        });
    }

private:
    Int8PackedB pack_b(const Tensor& B, ThreadPool* pool) const {
        const int64_t rows = B.shape[0], columns = B.shape[1];
        // Element (k, n): B[k, n], or B[n, k] when transposed.
        return trans_b_ ? Int8PackedB(B.data, B.type == TESS_ELEMENT_INT8, columns, rows, 1, columns, pool)
                        : Int8PackedB(B.data, B.type == TESS_ELEMENT_INT8, rows, columns, columns, 1, pool);
    }

    // sums[m, n] += C broadcast from (), (N), (1, N), (M, 1) or (M, N); wrapping as int32 sums do.
    static void add_bias(const std::string& op, const Tensor& C, int64_t M, int64_t N, int32_t* sums) {
        const int32_t* c = C.ptr<int32_t>();
        int64_t row_step = 0, column_step = 0;
        if (C.size() == 1) {
        } else if (C.size() == N && (C.rank() == 1 || C.shape[0] == 1)) {
            column_step = 1;
        } else if (C.rank() == 2 && C.shape[0] == M && C.shape[1] == 1) {
            row_step = 1;
        } else if (C.rank() == 2 && C.shape[0] == M && C.shape[1] == N) {
            row_step = N;
            column_step = 1;
        } else {
            throw KernelError(op + ": C " + shape_string(C.shape) + " does not broadcast to [" + std::to_string(M) +
                              ", " + std::to_string(N) + "]");
        }
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n)
                sums[m * N + n] = static_cast<int32_t>(static_cast<uint32_t>(sums[m * N + n]) +
                                                       static_cast<uint32_t>(c[m * row_step + n * column_step]));
    }

    float alpha_;
    bool trans_a_, trans_b_;
    std::optional<Int8PackedB> packed_b_;
    Tensor b_view_;  // the packed B's type and shape (its values are released)
};

}  // namespace

void register_contrib_quantized_matmul_kernels(KernelRegistry& registry) {
    using namespace contrib;
    add(registry, "MatMulIntegerToFloat", {{0, k8bit}, {1, k8bit}, {2, {TESS_ELEMENT_FLOAT32}}},
        make_factory<MatMulIntegerToFloatKernel>());
    add(registry, "DynamicQuantizeMatMul", {{0, {TESS_ELEMENT_FLOAT32}}, {1, k8bit}},
        make_factory<DynamicQuantizeMatMulKernel>());
    add(registry, "QGemm", {{0, k8bit}, {3, k8bit}}, make_factory<QGemmKernel>());
}

}  // namespace tessera::cpu
