// CPU provider: integer arithmetic that wraps around like two's complement hardware (what ONNX Runtime and numpy
// produce on overflow) without C++'s undefined behaviour for signed overflow: the work happens in an unsigned type
// at least as wide as int.  For floating-point types these are the plain operations.
#pragma once

#include <cmath>
#include <type_traits>

namespace tessera::cpu {

template <typename T>
using WrappingType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T> constexpr bool kWraps = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <typename T> T wrapping_add(T a, T b) {
    if constexpr (kWraps<T>) return static_cast<T>(static_cast<WrappingType<T>>(a) + static_cast<WrappingType<T>>(b));
    else return a + b;
}

template <typename T> T wrapping_sub(T a, T b) {
    if constexpr (kWraps<T>) return static_cast<T>(static_cast<WrappingType<T>>(a) - static_cast<WrappingType<T>>(b));
    else return a - b;
}

template <typename T> T wrapping_mul(T a, T b) {
    if constexpr (kWraps<T>) return static_cast<T>(static_cast<WrappingType<T>>(a) * static_cast<WrappingType<T>>(b));
    else return a * b;
}

template <typename T> T wrapping_neg(T a) {
    if constexpr (kWraps<T>) return static_cast<T>(WrappingType<T>(0) - static_cast<WrappingType<T>>(a));
    else return -a;
}

// |a|; the most negative integer stays itself, as in two's complement.
template <typename T> T wrapping_abs(T a) {
    if constexpr (std::is_floating_point_v<T>) return std::abs(a);
    else if constexpr (std::is_unsigned_v<T>) return a;
    else return a < T(0) ? wrapping_neg(a) : a;
}

}  // namespace tessera::cpu
