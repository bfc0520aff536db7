// CPU provider: QuantizedAdd (TESS_FUSED_OPS_DOMAIN), which the core's optimizer writes for the residual additions of
// a QDQ model, DequantizeLinear(a) + DequantizeLinear(b) -> QuantizeLinear (core/optimizer/fuse_quantized_lookup.cc):
//
//   y = saturate(round_half_even(((float(a) - a_zero) * a_scale + (float(b) - b_zero) * b_scale) / y_scale) + y_zero)
//
// with every step rounded as the three nodes round it (the differences exact, a product, a product, their sum, the
// quotient: no FMA), so the results are theirs bit for bit; one pass and one step instead of four.  Inputs as
// com.microsoft QLinearAdd's (a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero), per-tensor, same shapes.
// Attribute activation = "Relu": a Relu between the addition and the quantization (ResNet's residual blocks),
// sum < 0 ? 0 : sum as the Relu kernel computes it.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "kernels/quantization/quantize_support.h"
#include "runtime/host.h"
#include "util/cpu_isa.h"
#include "util/type_list.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

namespace tessera::cpu {

namespace {

using namespace quant;

struct AddParams {
    float a_scale, a_zero, b_scale, b_zero, y_scale, y_zero, low, high;
    bool relu;
};

// One lane: quant::saturate_round's steps (max first: NaN ends at low), on the exact sum of the two products.
template <typename TA, typename TB, typename TY>
[[gnu::optimize("fp-contract=off")]] void add_plain(const TA* a, const TB* b, TY* y, int64_t n, const AddParams& p) {
    constexpr float kMagic = 12582912.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float va = (static_cast<float>(a[i]) - p.a_zero) * p.a_scale;
        const float vb = (static_cast<float>(b[i]) - p.b_zero) * p.b_scale;
        float v = va + vb;
        if (p.relu) v = v < 0.0f ? 0.0f : v;
        v = v / p.y_scale;
        v = v > (p.low - 1.0f) - p.y_zero ? v : (p.low - 1.0f) - p.y_zero;
        v = v < (p.high + 1.0f) - p.y_zero ? v : (p.high + 1.0f) - p.y_zero;
        v = ((v + kMagic) - kMagic) + p.y_zero;
        v = v > p.low ? v : p.low;
        v = v < p.high ? v : p.high;
        y[i] = static_cast<TY>(static_cast<int32_t>(v));
    }
}

#if TESSERA_CPU_X86
template <typename T> [[gnu::target("avx512f,avx512bw,avx512vl")]] inline __m512 load_bytes(const T* at, __mmask16 mask) {
    const __m128i bytes = _mm_maskz_loadu_epi8(mask, at);
    return _mm512_cvtepi32_ps(std::is_same_v<T, uint8_t> ? _mm512_cvtepu8_epi32(bytes) : _mm512_cvtepi8_epi32(bytes));
}

// 16 lanes at a time; the clamp to [low - zero, high - zero] before rounding equals saturate_round's after it (the
// bounds are integers), max first so that NaN ends at low; cvtps2dq rounds half to even (the MXCSR default).
template <typename TA, typename TB, typename TY>
[[gnu::target("avx512f,avx512bw,avx512vl"), gnu::optimize("fp-contract=off")]] void add_avx512(
    const TA* a, const TB* b, TY* y, int64_t n, const AddParams& p) {
    const __m512 sa = _mm512_set1_ps(p.a_scale), za = _mm512_set1_ps(p.a_zero);
    const __m512 sb = _mm512_set1_ps(p.b_scale), zb = _mm512_set1_ps(p.b_zero), sy = _mm512_set1_ps(p.y_scale);
    const __m512 lo = _mm512_set1_ps(p.low - p.y_zero), hi = _mm512_set1_ps(p.high - p.y_zero);
    const __m512i zy = _mm512_set1_epi32(static_cast<int32_t>(p.y_zero));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mask = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 va = _mm512_mul_ps(_mm512_sub_ps(load_bytes(a + i, mask), za), sa);
        const __m512 vb = _mm512_mul_ps(_mm512_sub_ps(load_bytes(b + i, mask), zb), sb);
        __m512 sum = _mm512_add_ps(va, vb);
        if (p.relu) sum = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(sum, _mm512_setzero_ps(), _CMP_LT_OQ), sum,
                                              _mm512_setzero_ps());
        const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(sum, sy), lo), hi);
        _mm_mask_storeu_epi8(y + i, mask, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(v), zy)));
    }
}
#endif

class QuantizedAddKernel final : public Kernel {
public:
    explicit QuantizedAddKernel(const NodeInfo& info) {
        const std::string activation = info.attr_string("activation", "");
        if (!activation.empty() && activation != "Relu")
            throw KernelError("QuantizedAdd: unsupported activation " + activation);
        relu_ = activation == "Relu";
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& A = ctx.input(0);
        const Tensor& B = ctx.input(3);
        if (A.shape != B.shape)
            throw KernelError("QuantizedAdd: a " + shape_string(A.shape) + " and b " + shape_string(B.shape) +
                              " must have one shape");
        AddParams p{};
        p.relu = relu_;
        p.a_scale = scalar(ctx, 1, "a_scale");
        p.b_scale = scalar(ctx, 4, "b_scale");
        p.y_scale = scalar(ctx, 6, "y_scale");
        p.a_zero = zero_point(ctx, 2, A.type);
        p.b_zero = zero_point(ctx, 5, B.type);
        const int32_t y_type = ctx.has_input(7) ? ctx.input(7).type : TESS_ELEMENT_UINT8;
        if (!is_8bit(A.type) || !is_8bit(B.type) || !is_8bit(y_type))
            throw KernelError("QuantizedAdd: a, b and y must be 8-bit");
        p.y_zero = zero_point(ctx, 7, y_type);
        const IntegerRange range = *integer_range(y_type);
        p.low = static_cast<float>(range.low);
        p.high = static_cast<float>(range.high);
        Tensor& Y = ctx.output(0, y_type, A.shape);
        const int64_t n = A.size();
        if (n == 0) return;
        dispatch<int8_t, uint8_t>(A.type, [&]<typename TA>() {
            dispatch<int8_t, uint8_t>(B.type, [&]<typename TB>() {
                dispatch<int8_t, uint8_t>(y_type, [&]<typename TY>() {
                    const TA* a = A.ptr<TA>();
                    const TB* b = B.ptr<TB>();
                    TY* y = Y.ptr<TY>();
                    constexpr int64_t kPiece = 16384;
                    ctx.pool().parallel_for((n + kPiece - 1) / kPiece, 1, [&](int64_t first, int64_t last) {
                        const int64_t begin = first * kPiece, count = std::min(n, last * kPiece) - begin;
#if TESSERA_CPU_X86
                        if (cpu_allows(CpuIsa::Avx512)) {
                            add_avx512(a + begin, b + begin, y + begin, count, p);
                            return;
                        }
#endif
                        add_plain(a + begin, b + begin, y + begin, count, p);
                    });
                });
            });
        });
    }

private:
    bool relu_ = false;

    static float scalar(const KernelContext& ctx, size_t i, const char* name) {
        const Tensor& t = ctx.input(i);
        if (t.type != TESS_ELEMENT_FLOAT32 || t.size() != 1)
            throw KernelError(std::string("QuantizedAdd: ") + name + " must be a float32 scalar");
        return t.ptr<float>()[0];
    }
    static float zero_point(const KernelContext& ctx, size_t i, int32_t type) {
        if (!ctx.has_input(i)) return 0.0f;
        const Tensor& t = ctx.input(i);
        if (t.type != type || t.size() != 1)
            throw KernelError("QuantizedAdd: a zero point must be one value of its data's type");
        return static_cast<float>(load_all(t)[0]);
    }
};

}  // namespace

void register_quantized_add_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> k8bit{TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8};
    registry.add(KernelDef{.domain = TESS_FUSED_OPS_DOMAIN,
                           .op_type = "QuantizedAdd",
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = {{0, k8bit}, {1, {TESS_ELEMENT_FLOAT32}}, {3, k8bit},
                                           {4, {TESS_ELEMENT_FLOAT32}}, {6, {TESS_ELEMENT_FLOAT32}}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<QuantizedAddKernel>()});
}

}  // namespace tessera::cpu
