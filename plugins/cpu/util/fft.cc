#include "util/fft.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "runtime/kernel.h"

namespace tessera::cpu {

namespace {

using Complex = FftPlan::Complex;

// Largest prime handled by a direct radix butterfly (O(p) work per element); lengths with a larger prime factor
// go through Bluestein, whose cost does not depend on the factors.
constexpr int64_t kMaxDirectRadix = 31;

// n's factors for the mixed-radix recursion: fours first (the cheapest butterfly per element), then two, then the
// odd primes in increasing order.
std::vector<int64_t> factorize(int64_t n) {
    std::vector<int64_t> factors;
    while (n % 4 == 0) {
        factors.push_back(4);
        n /= 4;
    }
    if (n % 2 == 0) {
        factors.push_back(2);
        n /= 2;
    }
    for (int64_t p = 3; p * p <= n; p += 2) {
        while (n % p == 0) {
            factors.push_back(p);
            n /= p;
        }
    }
    if (n > 1) factors.push_back(n);
    return factors;
}

// -i * z (a quarter turn clockwise) without a complex multiplication.
inline Complex times_minus_i(Complex z) { return {z.imag(), -z.real()}; }

}  // namespace

FftPlan::FftPlan(int64_t n) : n_(n) {
    if (n < 1) throw KernelError("FFT: length must be at least 1, got " + std::to_string(n));
    std::vector<int64_t> factors = factorize(n);
    const bool direct = factors.empty() || *std::max_element(factors.begin(), factors.end()) <= kMaxDirectRadix;
    if (direct) {
        radices_ = std::move(factors);
        twiddles_.resize(static_cast<size_t>(n));
        for (int64_t k = 0; k < n; ++k) {
            const double angle = -2.0 * std::numbers::pi * double(k) / double(n);
            twiddles_[size_t(k)] = {std::cos(angle), std::sin(angle)};
        }
        return;
    }
    // Bluestein: jk = (j^2 + k^2 - (k - j)^2) / 2 turns the DFT into a convolution with the chirp, done circularly
    // at a power-of-two length that holds the full linear convolution (2n - 1 terms).
    int64_t m = 1;
    while (m < 2 * n - 1) m *= 2;
    chirp_.resize(size_t(n));
    for (int64_t k = 0; k < n; ++k) {
        // k^2 mod 2n keeps the angle small, so it stays exact for long transforms.
        const int64_t square = (k * k) % (2 * n);
        const double angle = -std::numbers::pi * double(square) / double(n);
        chirp_[size_t(k)] = {std::cos(angle), std::sin(angle)};
    }
    convolution_plan_ = std::make_unique<FftPlan>(m);
    std::vector<Complex> kernel(size_t(m), Complex{});
    kernel[0] = std::conj(chirp_[0]);
    for (int64_t k = 1; k < n; ++k) kernel[size_t(k)] = kernel[size_t(m - k)] = std::conj(chirp_[size_t(k)]);
    kernel_spectrum_.resize(size_t(m));
    convolution_plan_->transform(kernel.data(), kernel_spectrum_.data(), nullptr, false);
}

FftPlan::~FftPlan() = default;
FftPlan::FftPlan(FftPlan&&) noexcept = default;
FftPlan& FftPlan::operator=(FftPlan&&) noexcept = default;

size_t FftPlan::scratch_size() const {
    if (!convolution_plan_) return 0;
    return 2 * size_t(convolution_plan_->size()) + convolution_plan_->scratch_size();
}

void FftPlan::transform(const Complex* in, Complex* out, Complex* scratch, bool inverse) const {
    if (convolution_plan_) {
        bluestein(in, out, scratch, inverse);
    } else if (radices_.empty()) {
        out[0] = in[0];  // n == 1
    } else {
        mixed_radix(in, out, 1, 0, 1, inverse);
    }
}

// Decimation in time: the transform of x[j] = in[j * in_stride] (length radix * span) is assembled from the
// transforms of its `radix` interleaved subsequences, written to out + q * span, then combined by butterflies.
void FftPlan::mixed_radix(const Complex* in, Complex* out, int64_t in_stride, size_t level, int64_t twiddle_stride,
                          bool inverse) const {
    const int64_t radix = radices_[level];
    const int64_t span = n_ / (twiddle_stride * radix);
    if (span == 1) {
        for (int64_t q = 0; q < radix; ++q) out[q] = in[q * in_stride];
    } else {
        for (int64_t q = 0; q < radix; ++q) {
            mixed_radix(in + q * in_stride, out + q * span, in_stride * radix, level + 1, twiddle_stride * radix,
                        inverse);
        }
    }
    butterfly(out, radix, span, twiddle_stride, inverse);
}

// X[u + r * span] = sum_q W^(q u) F_q[u] * W_radix^(q r), where F_q[u] = out[u + q * span] and W = e^(-2 pi i /
// (radix * span)) = twiddles_[twiddle_stride].
void FftPlan::butterfly(Complex* out, int64_t radix, int64_t span, int64_t twiddle_stride, bool inverse) const {
    auto twiddle = [&](int64_t k) { return inverse ? std::conj(twiddles_[size_t(k)]) : twiddles_[size_t(k)]; };
    switch (radix) {
        case 2:
            for (int64_t u = 0; u < span; ++u) {
                const Complex a = out[u];
                const Complex b = out[u + span] * twiddle(u * twiddle_stride);
                out[u] = a + b;
                out[u + span] = a - b;
            }
            return;
        case 3: {
            // W_3 = -1/2 -+ i sqrt(3)/2.
            const double s = (inverse ? 1.0 : -1.0) * std::numbers::sqrt3 / 2.0;
            for (int64_t u = 0; u < span; ++u) {
                const Complex a0 = out[u];
                const Complex a1 = out[u + span] * twiddle(u * twiddle_stride);
                const Complex a2 = out[u + 2 * span] * twiddle(2 * u * twiddle_stride);
                const Complex sum = a1 + a2;
                const Complex diff = a1 - a2;
                const Complex mid = a0 - 0.5 * sum;
                const Complex rotated{-s * diff.imag(), s * diff.real()};  // i * s * diff
                out[u] = a0 + sum;
                out[u + span] = mid + rotated;
                out[u + 2 * span] = mid - rotated;
            }
            return;
        }
        case 4:
            for (int64_t u = 0; u < span; ++u) {
                const Complex a0 = out[u];
                const Complex a1 = out[u + span] * twiddle(u * twiddle_stride);
                const Complex a2 = out[u + 2 * span] * twiddle(2 * u * twiddle_stride);
                const Complex a3 = out[u + 3 * span] * twiddle(3 * u * twiddle_stride);
                const Complex s02 = a0 + a2, d02 = a0 - a2, s13 = a1 + a3;
                // W_4 = -i forward, +i inverse.
                const Complex d13 = inverse ? -times_minus_i(a1 - a3) : times_minus_i(a1 - a3);
                out[u] = s02 + s13;
                out[u + span] = d02 + d13;
                out[u + 2 * span] = s02 - s13;
                out[u + 3 * span] = d02 - d13;
            }
            return;
        default: {
            Complex t[kMaxDirectRadix];
            const int64_t root_stride = span * twiddle_stride;  // W_radix = twiddles_[n / radix]
            for (int64_t u = 0; u < span; ++u) {
                for (int64_t q = 0; q < radix; ++q) t[q] = out[u + q * span] * twiddle(q * u * twiddle_stride);
                for (int64_t r = 0; r < radix; ++r) {
                    Complex sum = t[0];
                    for (int64_t q = 1; q < radix; ++q) sum += t[q] * twiddle((q * r % radix) * root_stride);
                    out[u + r * span] = sum;
                }
            }
            return;
        }
    }
}

void FftPlan::bluestein(const Complex* in, Complex* out, Complex* scratch, bool inverse) const {
    // The inverse transform is conj(DFT(conj(x))).
    const int64_t m = convolution_plan_->size();
    Complex* a = scratch;
    Complex* spectrum = scratch + m;
    Complex* inner_scratch = scratch + 2 * m;
    for (int64_t j = 0; j < n_; ++j) a[j] = (inverse ? std::conj(in[j]) : in[j]) * chirp_[size_t(j)];
    std::fill(a + n_, a + m, Complex{});
    convolution_plan_->transform(a, spectrum, inner_scratch, false);
    for (int64_t k = 0; k < m; ++k) spectrum[k] *= kernel_spectrum_[size_t(k)];
    convolution_plan_->transform(spectrum, a, inner_scratch, true);
    const double scale = 1.0 / double(m);
    for (int64_t k = 0; k < n_; ++k) {
        const Complex y = chirp_[size_t(k)] * a[k] * scale;
        out[k] = inverse ? std::conj(y) : y;
    }
}

}  // namespace tessera::cpu
