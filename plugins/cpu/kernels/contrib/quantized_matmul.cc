// CPU provider, com.microsoft: the integer matrix products that onnxruntime's quantization tools and its session
// optimizer write.
//
//   MatMulIntegerToFloat (A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?):
//       Y = float((A - a_zero) x (B - b_zero)) * (a_scale * b_scale) + bias        (uint8/int8 A and B)
//   DynamicQuantizeMatMul (A, B, b_scale, b_zero_point?, bias?): A (float) quantized to uint8 first, exactly as
//       DynamicQuantizeLinear does, then as MatMulIntegerToFloat.
//
// Both run on the exact int32 sums of util/int8_gemm.h (VNNI or AMX where the CPU has them) with B packed once
// when constant, and finish in onnxruntime's order: the int32 sum converted to float, multiplied by the float
// product of the scales, then the bias added, each step rounded to float.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "kernels/quantization/integer_matmul.h"
#include "kernels/quantization/quantize_support.h"
#include "util/thread_scratch.h"

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

// Y (plan.output_shape, float) = float(sums) * scale + bias, in place over the int32 sums that Y's buffer holds.
// A multiply, then an add (this file is built for the baseline ISA, without FMA), as onnxruntime's output
// processor rounds them.
void scale_sums_in_place(ThreadPool& pool, const MatMulPlan& plan, const ColumnScales& scales, const float* bias,
                         float* Y) {
    const int64_t M = plan.M, N = plan.N;
    const int64_t rows = plan.batch * M;
    pool.parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, N)), [&](int64_t first, int64_t last) {
        for (int64_t r = first; r < last; ++r) {
            const int64_t product = r / M;
            const int64_t b_row = plan.fold_batch_into_rows ? 0 : plan.b_offsets[product] / std::max<int64_t>(1, N);
            float* y = Y + r * N;
            for (int64_t n = 0; n < N; ++n) {
                int32_t sum;
                std::memcpy(&sum, y + n, sizeof sum);
                float v = static_cast<float>(sum) * scales.at(b_row, n);
                if (bias != nullptr) v = v + bias[n];
                y[n] = v;
            }
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
    explicit MatMulIntegerToFloatKernel(const NodeInfo& info) : packed_b_(prepack_matmul_b(info, 1)) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "MatMulIntegerToFloat";
        const Tensor& A = ctx.input(0);
        check_8bit(op, "A", A);
        // onnxruntime takes A's quantization per tensor: one scale, one zero point.
        const float a_scale = scalar_float(op, "a_scale", ctx.input(2));
        ZeroPoints a_zero = ZeroPoints::load(op, ctx.has_input(4) ? &ctx.input(4) : nullptr, A);
        if (a_zero.values.size() != 1) throw KernelError(op + ": a_zero_point must be a scalar");
        integer_product_to_float(op, ctx, A, a_zero, a_scale, ctx.input(1), 3, 5, 6, packed_b_ ? &*packed_b_ : nullptr);
    }

private:
    std::optional<PackedMatMulB> packed_b_;
};

class DynamicQuantizeMatMulKernel final : public Kernel {
public:
    explicit DynamicQuantizeMatMulKernel(const NodeInfo& info) : packed_b_(prepack_matmul_b(info, 1)) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "DynamicQuantizeMatMul";
        const Tensor& A = ctx.input(0);
        if (A.type != TESS_ELEMENT_FLOAT32) throw_unsupported_type(op + " A", A.type);
        // A's uint8 copy: this thread's scratch, kept for the next run (slot 20 is this kernel's).
        Tensor quantized{TESS_ELEMENT_UINT8, A.shape, thread_scratch_buffer<uint8_t, 20>(A.size()), nullptr};
        const DynamicQuantization q = dynamic_quantize_uint8(ctx.pool(), A, quantized);
        ZeroPoints a_zero;
        a_zero.values = {q.zero_point};
        integer_product_to_float(op, ctx, quantized, a_zero, q.scale, ctx.input(1), 2, 3, 4,
                                 packed_b_ ? &*packed_b_ : nullptr);
    }

private:
    std::optional<PackedMatMulB> packed_b_;
};

}  // namespace

void register_contrib_quantized_matmul_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> k8bit{TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8};
    const std::vector<int32_t> kFloat{TESS_ELEMENT_FLOAT32};
    registry.add(KernelDef{.domain = "com.microsoft",
                           .op_type = "MatMulIntegerToFloat",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {1, k8bit}, {2, kFloat}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<MatMulIntegerToFloatKernel>()});
    registry.add(KernelDef{.domain = "com.microsoft",
                           .op_type = "DynamicQuantizeMatMul",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, kFloat}, {1, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<DynamicQuantizeMatMulKernel>()});
}

}  // namespace tessera::cpu
