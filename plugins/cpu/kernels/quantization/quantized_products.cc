// CPU provider: the integer products MatMulInteger and QLinearMatMul (the convolutions are in integer_conv.cc).
// They run on util/int8_gemm.h (exact int32 sums of the zero-point-corrected operands) and finish in an epilogue
// (int32 output, or requantization).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "kernels/quantization/integer_matmul.h"
#include "kernels/quantization/quantize_support.h"
#include "kernels/quantization/requantize.h"
#include "util/axes.h"
#include "util/blocked_conv.h"
#include "util/element_convert.h"
#include "util/gemm.h"
#include "util/im2col.h"
#include "util/int8_gemm.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"
#include "util/vec_math.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

namespace tessera::cpu {

namespace {

using namespace quant;

class MatMulIntegerKernel final : public Kernel {
public:
    explicit MatMulIntegerKernel(const NodeInfo& info) : b_(info, 1) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "MatMulInteger";
        const Tensor& A = ctx.input(0);
        const Tensor& B = b_.tensor(ctx);
        check_8bit(op, "A", A);
        check_8bit(op, "B", B);
        const MatMulPlan plan = plan_matmul(A.shape, B.shape, op);
        ZeroPoints a_zero = ZeroPoints::load(op, ctx.has_input(2) ? &ctx.input(2) : nullptr, A);
        ZeroPoints b_zero = ZeroPoints::load(op, ctx.has_input(3) ? &ctx.input(3) : nullptr, B);
        if (ctx.has_input(2))
            a_zero.index = matrix_param_index(op, "a_zero_point", ctx.input(2).shape, A.shape, MatrixSide::A);
        if (ctx.has_input(3))
            b_zero.index = matrix_param_index(op, "b_zero_point", ctx.input(3).shape, B.shape, MatrixSide::B);
        Tensor& Y = ctx.output(0, TESS_ELEMENT_INT32, plan.output_shape);
        integer_matmul(ctx.pool(), plan, A, a_zero, B, b_zero, b_.get(), Y.ptr<int32_t>());
    }

private:
    PrepackedB b_;
};

template <typename Fn> void dispatch_8bit(int32_t type, const Fn& fn) { dispatch<int8_t, uint8_t>(type, fn); }

// Scales of QLinearMatMul: float, float16 or bfloat16 (opset 21), all of one type.  The multiplier
// a_scale * b_scale / y_scale is computed in that type, as the reference does.
class QLinearMatMulKernel final : public Kernel {
public:
    explicit QLinearMatMulKernel(const NodeInfo& info)
        : declared_output_type_(info.output_type(0)), b_(info, 3) {}

    void compute(KernelContext& ctx) const override {
        const std::string op = "QLinearMatMul";
        const Tensor& A = ctx.input(0);
        const Tensor& a_scale = ctx.input(1);
        const Tensor& B = b_.tensor(ctx);
        const Tensor& b_scale = ctx.input(4);
        const Tensor& y_scale = ctx.input(6);
        check_8bit(op, "a", A);
        check_8bit(op, "b", B);
        for (const Tensor* s : {&a_scale, &b_scale, &y_scale}) {
            if (!is_float_type(s->type)) throw_unsupported_type(op + " scale", s->type);
            if (s->type != a_scale.type) throw KernelError(op + ": the scales must have one element type");
        }
        const Precision precision = precision_of(op, a_scale.type);
        const MatMulPlan plan = plan_matmul(A.shape, B.shape, op);
        const ParamIndex a_scale_index = matrix_param_index(op, "a_scale", a_scale.shape, A.shape, MatrixSide::A);
        const ParamIndex b_scale_index = matrix_param_index(op, "b_scale", b_scale.shape, B.shape, MatrixSide::B);
        ZeroPoints a_zero = ZeroPoints::load(op, ctx.has_input(2) ? &ctx.input(2) : nullptr, A);
        ZeroPoints b_zero = ZeroPoints::load(op, ctx.has_input(5) ? &ctx.input(5) : nullptr, B);
        if (ctx.has_input(2))
            a_zero.index = matrix_param_index(op, "a_zero_point", ctx.input(2).shape, A.shape, MatrixSide::A);
        if (ctx.has_input(5))
            b_zero.index = matrix_param_index(op, "b_zero_point", ctx.input(5).shape, B.shape, MatrixSide::B);
        if (y_scale.size() != 1)
            throw KernelError(op + ": y_scale must be a scalar, got " + shape_string(y_scale.shape));
        OutputQuantization out;
        out.type = ctx.has_input(7)
                       ? ctx.input(7).type
                       : (declared_output_type_ != TESS_ELEMENT_UNDEFINED ? declared_output_type_ : A.type);
        if (out.type != TESS_ELEMENT_INT8 && out.type != TESS_ELEMENT_UINT8)
            throw_unsupported_type(op + " y", out.type);
        if (ctx.has_input(7)) {
            if (ctx.input(7).size() != 1) throw KernelError(op + ": y_zero_point must be a scalar");
            out.zero_point = load_all(ctx.input(7))[0];
        }
        out.range = *integer_range(out.type);

        std::vector<float> a_scales, b_scales;
        for (double s : load_all(a_scale)) a_scales.push_back(static_cast<float>(s));
        for (double s : load_all(b_scale)) b_scales.push_back(static_cast<float>(s));
        const float y_scale_value = static_cast<float>(load_all(y_scale)[0]);

        int32_t* sums = thread_scratch_buffer<int32_t, 15>(shape_size(plan.output_shape));  // kept for the next run
        integer_matmul(ctx.pool(), plan, A, a_zero, B, b_zero, b_.get(), sums);
        Tensor& Y = ctx.output(0, out.type, plan.output_shape);
        const int64_t M = plan.M, N = plan.N;
        auto multiplier = [&](float as, float bs) {
            return round_to(precision, round_to(precision, as * bs) / y_scale_value);
        };
        const bool uniform = a_scales.size() == 1 && b_scales.size() == 1;
        const float uniform_multiplier = multiplier(a_scales[0], b_scales[0]);
        dispatch_8bit(out.type, [&]<typename Out>() {
            Out* y = Y.ptr<Out>();
            ctx.pool().parallel_for(
                plan.batch * M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, N)),
                [&](int64_t first, int64_t last) {
                    std::vector<float> row_multipliers(uniform ? 1 : static_cast<size_t>(N), uniform_multiplier);
                    for (int64_t r = first; r < last; ++r) {
                        if (!uniform) {
                            const ProductRows at = product_rows(plan, r / M);
                            const float as = a_scales[a_scale_index(at.a_row + r % M, 0)];
                            for (int64_t n = 0; n < N; ++n)
                                row_multipliers[n] = multiplier(as, b_scales[b_scale_index(at.b_row, n)]);
                        }
                        requantize_run(sums + r * N, 0, row_multipliers.data(), uniform, N, out, y + r * N);
                    }
                });
        });
    }

private:
    int32_t declared_output_type_;
    PrepackedB b_;
};

}  // namespace

void register_quantized_product_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> k8bit{TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8};
    registry.add(KernelDef{.domain = "",
                           .op_type = "MatMulInteger",
                           .since_version = 10,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {1, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<MatMulIntegerKernel>()});
    // Opset 21 adds float16/bfloat16 scales (handled) and float8 operands (not supported: rejected here).
    registry.add(KernelDef{.domain = "",
                           .op_type = "QLinearMatMul",
                           .since_version = 10,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {3, k8bit}, {7, k8bit}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<QLinearMatMulKernel>()});
}

}  // namespace tessera::cpu
