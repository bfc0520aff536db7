// CPU provider: interpolation filters shared by the resampling kernels (Resize/Upsample in kernels/image/resize.cc,
// GridSample in kernels/image/image.cc), and the rounding rule ONNX uses when an interpolated value is stored into an
// integer tensor.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

namespace tessera::cpu {

// Keys' cubic convolution kernel at distance x with coefficient a (-0.75 in PyTorch and GridSample, -0.5 in
// TensorFlow); zero from distance 2 on.
template <typename F> inline F cubic_convolution_weight(F x, F a) {
    x = std::abs(x);
    if (x <= F(1)) return ((a + F(2)) * x - (a + F(3))) * x * x + F(1);
    if (x < F(2)) return ((a * x - F(5) * a) * x + F(8) * a) * x - F(4) * a;
    return F(0);
}

// The triangle (linear interpolation) kernel at distance x.
template <typename F> inline F linear_weight(F x) {
    const F w = F(1) - std::abs(x);
    return w > F(0) ? w : F(0);
}

// An interpolated value stored into T: floating-point types take it as is, integer types round half to even and
// saturate (numpy's round-then-clip, which the ONNX reference uses); NaN becomes 0.
template <typename T, typename F> inline T store_interpolated(F value) {
    if constexpr (std::is_floating_point_v<T>) {
        return static_cast<T>(value);
    } else {
        if (std::isnan(value)) return T(0);
        const double rounded = std::nearbyint(static_cast<double>(value));
        // Compare in double: the bounds of 64-bit types round up to 2^63 / 2^64, so >= catches every overflow.
        if (rounded >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
        if (rounded <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
        return static_cast<T>(rounded);
    }
}

}  // namespace tessera::cpu
