// CPU provider: complex discrete Fourier transforms of any length, for DFT and STFT.
//
// A plan fixes the length n >= 1 and computes X[k] = sum_j x[j] e^(-2 pi i jk / n) (or the unnormalized inverse,
// with e^(+...)) in O(n log n) and in double precision: mixed-radix Cooley-Tukey when every prime factor of n is
// small, Bluestein's chirp-z transform (a convolution done with a power-of-two FFT) otherwise, so that prime and
// awkward lengths keep both the speed and the accuracy of a fast transform.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tessera::cpu {

class FftPlan {
public:
    using Complex = std::complex<double>;

    // Throws KernelError when n < 1.
    explicit FftPlan(int64_t n);
    ~FftPlan();
    FftPlan(FftPlan&&) noexcept;
    FftPlan& operator=(FftPlan&&) noexcept;

    int64_t size() const { return n_; }
    // Complex elements of scratch memory transform() needs.
    size_t scratch_size() const;

    // out[0, n) = the DFT (inverse: unnormalized inverse DFT) of in[0, n).  `in` and `out` must not overlap;
    // `scratch` holds scratch_size() elements.  Const and allocation-free: one plan serves many threads, each with
    // its own buffers.  Never throws.
    void transform(const Complex* in, Complex* out, Complex* scratch, bool inverse) const;

private:
    // One recursion level of the mixed-radix transform: combines `radix` sub-transforms of length `span`.
    void mixed_radix(const Complex* in, Complex* out, int64_t in_stride, size_t level, int64_t twiddle_stride,
                     bool inverse) const;
    void butterfly(Complex* out, int64_t radix, int64_t span, int64_t twiddle_stride, bool inverse) const;
    void bluestein(const Complex* in, Complex* out, Complex* scratch, bool inverse) const;

    int64_t n_ = 0;
    std::vector<int64_t> radices_;   // mixed radix: the factors of n, outermost first
    std::vector<Complex> twiddles_;  // e^(-2 pi i k / n), k < n
    // Bluestein: chirp[k] = e^(-pi i k^2 / n), the transformed convolution kernel, and the power-of-two plan.
    std::vector<Complex> chirp_;
    std::vector<Complex> kernel_spectrum_;
    std::unique_ptr<FftPlan> convolution_plan_;
};

}  // namespace tessera::cpu
