// CPU provider: encoding and decoding of the small floating-point and packed integer formats ONNX tensors use
// (float16, bfloat16, the float8 family, float6e2m3/float6e3m2, float4e2m1, float8e8m0, int4/uint4/int2/uint2).
// Rounding is round to nearest even everywhere unless a format's own rule says otherwise; the behaviour matches
// ONNX's reference implementation (numpy / ml_dtypes), which the conformance data was generated with.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tessera/common.h"
#include "tessera/support/float16.hpp"

namespace tessera::cpu::fp {

// float16 and bfloat16 come from the plugin support layer, shared with every other plugin.
using support::BFloat16;
using support::bfloat16_to_float;
using support::float_to_bfloat16;
using support::float_to_half;
using support::Half;
using support::half_to_float;

// ---- generic small float formats -----------------------------------------------------------------------------

// How a format spends its all-ones exponent and its negative zero.
enum class Specials {
    Ieee,       // all-ones exponent: inf (mantissa 0) and nan; overflow gives inf
    FiniteNan,  // "fn": no inf, S.1111.111 is nan, overflow gives nan
    Unsigned0,  // "fnuz": no inf, no negative zero, 0x80 is nan, overflow gives nan
    None        // float4e2m1, float6: every code is a finite number, overflow saturates
};

struct MiniFloat {
    int exponent_bits;
    int mantissa_bits;
    int bias;
    Specials specials;

    int total_bits() const { return 1 + exponent_bits + mantissa_bits; }
    uint32_t sign_bit() const { return 1u << (exponent_bits + mantissa_bits); }
    int max_exponent_field() const {
        return specials == Specials::Ieee ? (1 << exponent_bits) - 2 : (1 << exponent_bits) - 1;
    }
    double max_value() const {
        int mantissa_max = (1 << mantissa_bits) - 1;
        if (specials == Specials::FiniteNan) mantissa_max -= 1;
        return std::ldexp(1.0 + std::ldexp(double(mantissa_max), -mantissa_bits), max_exponent_field() - bias);
    }
    uint32_t nan_code(bool negative) const {
        const uint32_t all = (1u << (exponent_bits + mantissa_bits)) - 1;
        switch (specials) {
            case Specials::Ieee:  // quiet nan
                return (negative ? sign_bit() : 0) | (all & ~((1u << (mantissa_bits - 1)) - 1));
            case Specials::FiniteNan: return (negative ? sign_bit() : 0) | all;
            case Specials::Unsigned0: return sign_bit();
            case Specials::None: return negative ? 0 : sign_bit();  // no nan code: ml_dtypes writes these zeros
        }
        return 0;
    }
};

inline constexpr MiniFloat kFloat8E4M3FN{4, 3, 7, Specials::FiniteNan};
inline constexpr MiniFloat kFloat8E4M3FNUZ{4, 3, 8, Specials::Unsigned0};
inline constexpr MiniFloat kFloat8E5M2{5, 2, 15, Specials::Ieee};
inline constexpr MiniFloat kFloat8E5M2FNUZ{5, 2, 16, Specials::Unsigned0};
inline constexpr MiniFloat kFloat4E2M1{2, 1, 1, Specials::None};
inline constexpr MiniFloat kFloat6E2M3{2, 3, 1, Specials::None};
inline constexpr MiniFloat kFloat6E3M2{3, 2, 3, Specials::None};
inline constexpr MiniFloat kFloat16{5, 10, 15, Specials::Ieee};
inline constexpr MiniFloat kBFloat16{8, 7, 127, Specials::Ieee};

// Rounds `x` to the format (round to nearest even) and returns its code.  With `saturate`, values beyond the
// largest finite number (infinities included) become that number; without it they overflow as the format says.
inline uint32_t encode_minifloat(const MiniFloat& fmt, double x, bool saturate) {
    const bool negative = std::signbit(x);
    const uint32_t sign = negative ? fmt.sign_bit() : 0;
    if (std::isnan(x)) return fmt.nan_code(negative);
    const double max_value = fmt.max_value();
    double a = std::fabs(x);
    if (a == 0) return fmt.specials == Specials::Unsigned0 ? 0 : sign;
    if (saturate && a > max_value) a = max_value;
    const int min_normal_exp = 1 - fmt.bias;
    int exp;  // a = m * 2^exp with m in [1, 2)
    (void)std::frexp(a, &exp);
    exp -= 1;
    if (exp < min_normal_exp) exp = min_normal_exp;  // subnormal range shares the smallest quantum
    // a / 2^(exp - M) is exact in double; rounding it to an integer rounds a to M mantissa bits.
    const double scaled = std::nearbyint(std::ldexp(a, fmt.mantissa_bits - exp));
    const double rounded = std::ldexp(scaled, exp - fmt.mantissa_bits);
    if (rounded > max_value) {
        switch (fmt.specials) {
            case Specials::Ieee: return sign | (uint32_t((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits);
            case Specials::FiniteNan:
            case Specials::Unsigned0: return fmt.nan_code(negative);
            case Specials::None: return sign | (fmt.sign_bit() - 1);
        }
    }
    if (rounded == 0) return fmt.specials == Specials::Unsigned0 ? 0 : sign;
    int rexp;
    (void)std::frexp(rounded, &rexp);
    rexp -= 1;
    uint32_t exponent_field;
    uint32_t mantissa_field;
    if (rexp < min_normal_exp) {
        exponent_field = 0;
        mantissa_field = uint32_t(std::ldexp(rounded, fmt.mantissa_bits - min_normal_exp));
    } else {
        exponent_field = uint32_t(rexp + fmt.bias);
        mantissa_field = uint32_t(std::ldexp(rounded, fmt.mantissa_bits - rexp)) - (1u << fmt.mantissa_bits);
    }
    return sign | (exponent_field << fmt.mantissa_bits) | mantissa_field;
}

inline float decode_minifloat(const MiniFloat& fmt, uint32_t code) {
    const bool negative = (code & fmt.sign_bit()) != 0;
    const uint32_t exponent_field = (code >> fmt.mantissa_bits) & ((1u << fmt.exponent_bits) - 1);
    const uint32_t mantissa_field = code & ((1u << fmt.mantissa_bits) - 1);
    const uint32_t all_exp = (1u << fmt.exponent_bits) - 1;
    switch (fmt.specials) {
        case Specials::Ieee:
            if (exponent_field == all_exp) {
                if (mantissa_field != 0) return std::numeric_limits<float>::quiet_NaN();
                return negative ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
            }
            break;
        case Specials::FiniteNan:
            if (exponent_field == all_exp && mantissa_field == (1u << fmt.mantissa_bits) - 1)
                return std::numeric_limits<float>::quiet_NaN();
            break;
        case Specials::Unsigned0:
            if (code == fmt.sign_bit()) return std::numeric_limits<float>::quiet_NaN();
            break;
        case Specials::None: break;
    }
    double value;
    if (exponent_field == 0)
        value = std::ldexp(double(mantissa_field), 1 - fmt.bias - fmt.mantissa_bits);
    else
        value = std::ldexp(double(mantissa_field + (1u << fmt.mantissa_bits)),
                           int(exponent_field) - fmt.bias - fmt.mantissa_bits);
    return float(negative ? -value : value);
}

inline uint16_t double_to_half(double d) { return uint16_t(encode_minifloat(kFloat16, d, false)); }
inline uint16_t double_to_bfloat16(double d) {
    if (std::isnan(d)) return float_to_bfloat16(float(d));
    return uint16_t(encode_minifloat(kBFloat16, d, false));
}

// ---- float8e8m0 (a power of two: 8 exponent bits, no sign, no mantissa; 0xff is nan) ---------------------------

enum class E8M0Rounding { Up, Down, Nearest };

// Follows ONNX's reference: the input is taken as float32 and rounded by its mantissa bits.
inline uint8_t float_to_e8m0(float f, bool saturate, E8M0Rounding mode) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    uint32_t exponent = (bits >> 23) & 0xffu;
    if (exponent == 0xffu) return 0xff;
    bool round_up = false;
    switch (mode) {
        case E8M0Rounding::Up: round_up = (bits & 0x7fffffu) != 0; break;
        case E8M0Rounding::Down: break;
        case E8M0Rounding::Nearest: {
            const bool guard = (bits & 0x400000u) != 0;
            const bool round = (bits & 0x200000u) != 0;
            const bool sticky = (bits & 0x1fffffu) != 0;
            const bool lsb = exponent > 0;
            round_up = guard && (round || sticky || lsb);
            break;
        }
    }
    if (round_up && saturate && exponent == 0xfeu) round_up = false;
    if (round_up) exponent += 1;
    return uint8_t(exponent);
}

inline float e8m0_to_float(uint8_t code) {
    if (code == 0xff) return std::numeric_limits<float>::quiet_NaN();
    if (code == 0) return std::ldexp(1.0f, -127);
    return std::bit_cast<float>(uint32_t(code) << 23);
}

// ---- packed sub-byte integers, float4 and float6 -------------------------------------------------------------

// Bits per element of a packed type, 0 for everything else.
inline int packed_bits(int32_t type) {
    switch (type) {
        case TESS_ELEMENT_FLOAT6E2M3:
        case TESS_ELEMENT_FLOAT6E3M2: return 6;
        case TESS_ELEMENT_UINT4:
        case TESS_ELEMENT_INT4:
        case TESS_ELEMENT_FLOAT4E2M1: return 4;
        case TESS_ELEMENT_UINT2:
        case TESS_ELEMENT_INT2: return 2;
        default: return 0;
    }
}

// Packed elements form one bit stream, low bits first: element `index` occupies bits [index * bits, + bits).
// A 6-bit element may straddle two bytes; 4- and 2-bit ones never do.

// Raw code of packed element `index`.
inline uint8_t load_packed(const void* data, int bits, int64_t index) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    const int64_t bit = index * bits;
    const int shift = int(bit % 8);
    uint32_t code = bytes[bit / 8] >> shift;
    if (shift + bits > 8) code |= uint32_t(bytes[bit / 8 + 1]) << (8 - shift);
    return uint8_t(code & ((1u << bits) - 1));
}

inline void store_packed(void* data, int bits, int64_t index, uint8_t code) {
    auto* bytes = static_cast<uint8_t*>(data);
    const int64_t bit = index * bits;
    const int shift = int(bit % 8);
    const uint32_t mask = ((1u << bits) - 1) << shift;
    const uint32_t field = (uint32_t(code) << shift) & mask;
    bytes[bit / 8] = uint8_t((bytes[bit / 8] & ~mask) | field);
    if (shift + bits > 8)
        bytes[bit / 8 + 1] = uint8_t((bytes[bit / 8 + 1] & ~(mask >> 8)) | (field >> 8));
}

// Sign-extends a packed code of a signed type.
inline int32_t packed_code_value(int32_t type, uint8_t code) {
    const int bits = packed_bits(type);
    if (type == TESS_ELEMENT_INT4 || type == TESS_ELEMENT_INT2) {
        const int32_t half_range = 1 << (bits - 1);
        return code >= half_range ? int32_t(code) - (1 << bits) : int32_t(code);
    }
    return code;
}

}  // namespace tessera::cpu::fp
