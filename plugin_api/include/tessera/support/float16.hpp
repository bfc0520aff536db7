/*
 * Tessera plugin support (header-only C++17, installed with the SDK): float16 and bfloat16 on the host.
 *
 * Scalar conversions with round to nearest even, NaN kept a (quiet) NaN, overflow to infinity: the rounding ONNX's
 * reference implementation and onnxruntime use, so a provider that converts through these agrees with both.  Half and
 * BFloat16 are storage types (raw bit patterns) that let templates tell the formats apart from uint16_t.
 */
#ifndef TESSERA_SUPPORT_FLOAT16_HPP_
#define TESSERA_SUPPORT_FLOAT16_HPP_

#include <cstdint>
#include <cstring>

namespace tessera::support {

struct Half {
    uint16_t bits;
};
struct BFloat16 {
    uint16_t bits;
};

namespace detail {
inline uint32_t float_bits(float f) noexcept {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
inline float bits_float(uint32_t u) noexcept {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
}  // namespace detail

inline float half_to_float(uint16_t h) noexcept {
    // Exponent and mantissa shift into float position and are re-biased; a subnormal half is renormalised by one
    // exact float subtraction.
    constexpr uint32_t kShiftedExp = 0x7c00u << 13;
    uint32_t bits = (uint32_t(h) & 0x7fffu) << 13;
    const uint32_t exp = bits & kShiftedExp;
    bits += uint32_t(127 - 15) << 23;
    if (exp == kShiftedExp) {
        bits += uint32_t(128 - 16) << 23;  // inf and NaN keep an all-ones exponent
    } else if (exp == 0) {
        bits += 1u << 23;
        bits = detail::float_bits(detail::bits_float(bits) - detail::bits_float(uint32_t(113) << 23));
    }
    bits |= (uint32_t(h) & 0x8000u) << 16;
    return detail::bits_float(bits);
}

inline uint16_t float_to_half(float f) noexcept {
    uint32_t bits = detail::float_bits(f);
    const uint32_t sign = bits & 0x80000000u;
    bits ^= sign;
    uint16_t out;
    if (bits >= (uint32_t(127 + 16) << 23)) {
        out = bits > 0x7f800000u ? 0x7e00 : 0x7c00;  // NaN -> quiet NaN, too large -> inf
    } else if (bits < (uint32_t(113) << 23)) {
        // Subnormal or zero half: adding this magic number lines the 10 mantissa bits up at the bottom of the
        // float, and the float addition performs the round to nearest even.
        constexpr uint32_t kMagic = uint32_t((127 - 15) + (23 - 10) + 1) << 23;
        const float sum = detail::bits_float(bits) + detail::bits_float(kMagic);
        out = uint16_t(detail::float_bits(sum) - kMagic);
    } else {
        const uint32_t mantissa_odd = (bits >> 13) & 1u;
        bits += (uint32_t(15 - 127) << 23) + 0xfffu + mantissa_odd;
        out = uint16_t(bits >> 13);
    }
    return uint16_t(out | (sign >> 16));
}

inline float bfloat16_to_float(uint16_t b) noexcept { return detail::bits_float(uint32_t(b) << 16); }

inline uint16_t float_to_bfloat16(float f) noexcept {
    const uint32_t bits = detail::float_bits(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet the NaN
    return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline float to_float(Half h) noexcept { return half_to_float(h.bits); }
inline float to_float(BFloat16 b) noexcept { return bfloat16_to_float(b.bits); }
inline Half to_half(float f) noexcept { return Half{float_to_half(f)}; }
inline BFloat16 to_bfloat16(float f) noexcept { return BFloat16{float_to_bfloat16(f)}; }

}  // namespace tessera::support

#endif  // TESSERA_SUPPORT_FLOAT16_HPP_
