// CPU provider: what the quantization kernels (quantize.cc) and the integer products (quantized_products.cc,
// integer_conv.cc) share: the quantized element types' ranges, the precision of a division by a scale, and reading
// small parameter tensors.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "runtime/kernel.h"
#include "util/element_convert.h"
#include "util/vec_math.h"

namespace tessera::cpu::quant {

// All elements of a small tensor (scales, zero points) as doubles.
inline std::vector<double> load_all(const Tensor& t) {
    std::vector<double> values(static_cast<size_t>(t.size()));
    convert::load_doubles(t.type, t.data, 0, t.size(), values.data());
    return values;
}

struct IntegerRange {
    double low, high;
};

inline std::optional<IntegerRange> integer_range(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_UINT8: return IntegerRange{0, 255};
        case TESS_ELEMENT_INT8: return IntegerRange{-128, 127};
        case TESS_ELEMENT_UINT16: return IntegerRange{0, 65535};
        case TESS_ELEMENT_INT16: return IntegerRange{-32768, 32767};
        case TESS_ELEMENT_UINT4: return IntegerRange{0, 15};
        case TESS_ELEMENT_INT4: return IntegerRange{-8, 7};
        case TESS_ELEMENT_UINT2: return IntegerRange{0, 3};
        case TESS_ELEMENT_INT2: return IntegerRange{-2, 1};
        default: return std::nullopt;
    }
}

inline bool is_8bit(int32_t type) { return type == TESS_ELEMENT_UINT8 || type == TESS_ELEMENT_INT8; }

// Integers of 2 to 16 bits and the small floats (float8, float6, float4).
inline bool is_quantized_type(int32_t type) {
    return integer_range(type).has_value() || convert::minifloat_of(type) != nullptr;
}

inline bool is_float_type(int32_t type) {
    return type == TESS_ELEMENT_FLOAT32 || type == TESS_ELEMENT_FLOAT16 || type == TESS_ELEMENT_BFLOAT16;
}

// The precision of the division x / scale.  The quotient is computed in float and rounded to the precision: for
// 16-bit operands that equals a division carried out in the 16-bit type (float has more than 2p+2 bits).
enum class Precision { Float, Half, BFloat16 };

inline Precision precision_of(const std::string& op, int32_t type) {
    switch (type) {
        case TESS_ELEMENT_FLOAT32: return Precision::Float;
        case TESS_ELEMENT_FLOAT16: return Precision::Half;
        case TESS_ELEMENT_BFLOAT16: return Precision::BFloat16;
        default: throw KernelError(op + ": unsupported precision " + std::string(element_type_name(type)));
    }
}

inline float round_to(Precision p, float v) {
    switch (p) {
        case Precision::Float: return v;
        case Precision::Half: return fp::half_to_float(fp::float_to_half(v));
        case Precision::BFloat16: return fp::bfloat16_to_float(fp::float_to_bfloat16(v));
    }
    return v;
}

// vec::kLanes lanes of an 8- or 16-bit integer type (vector_size cannot apply to a template parameter directly).
template <typename T> struct NarrowLanes;
template <> struct NarrowLanes<uint8_t> { using type = uint8_t __attribute__((vector_size(vec::kLanes))); };
template <> struct NarrowLanes<int8_t> { using type = int8_t __attribute__((vector_size(vec::kLanes))); };
template <> struct NarrowLanes<uint16_t> { using type = uint16_t __attribute__((vector_size(2 * vec::kLanes))); };
template <> struct NarrowLanes<int16_t> { using type = int16_t __attribute__((vector_size(2 * vec::kLanes))); };

// y = clamp(round_half_even(v) + zero, low, high) narrowed to Out, for quotients or products v of a quantization.
// v is limited to just outside the range first (max first: NaN ends at low), so that the rounding trick
// (v + 1.5 * 2^23) - 1.5 * 2^23 (exact round-half-even for |v| < 2^22) applies.  Inlined into the ISA copies of its
// callers (vec::run_best_isa).
template <typename Out>
[[gnu::always_inline]] inline typename NarrowLanes<Out>::type saturate_round(vec::Vf v, vec::Vf zero, vec::Vf low,
                                                                             vec::Vf high) {
    constexpr float kMagic = 12582912.0f;
    v = vec::min(vec::max(v, (low - 1.0f) - zero), (high + 1.0f) - zero);
    v = ((v + kMagic) - kMagic) + zero;
    v = vec::min(vec::max(v, low), high);
    return __builtin_convertvector(__builtin_convertvector(v, vec::Vi), typename NarrowLanes<Out>::type);
}

// DynamicQuantizeLinear's arithmetic: y (uint8, x's shape) = saturate(round(x / scale) + zero_point) with the scale
// and zero point chosen from x's float range widened to include 0 (quantize.cc).  DynamicQuantizeMatMul
// (kernels/contrib) quantizes its A the same way, as onnxruntime does.
struct DynamicQuantization {
    float scale;
    uint8_t zero_point;
};
DynamicQuantization dynamic_quantize_uint8(ThreadPool& pool, const Tensor& x, Tensor& y);
// The scale and zero point of the range [low, high] (low <= 0 <= high) of the values quantized.
DynamicQuantization dynamic_quantization_of_range(float low, float high);
// Its two halves: the scale and zero point of x's range, and y = the uint8 quantization of x with them.
DynamicQuantization dynamic_range_uint8(ThreadPool& pool, const Tensor& x);
void quantize_uint8(ThreadPool& pool, const Tensor& x, DynamicQuantization q, Tensor& y);

}  // namespace tessera::cpu::quant
