// DFT (opsets 17 and 20) and STFT against a naive O(n^2) discrete Fourier transform in double: real and complex
// inputs, forward and inverse, one-sided spectra (and the inverse of one, a real signal), dft_length padding and
// truncation, and every axis, with lengths that are prime, odd, even and powers of two (util/fft.h has a separate
// algorithm for each).
#include <complex>
#include <numbers>

#include "op_test_reference.h"

namespace tessera::cpu {
namespace {

using namespace op_tests;
using Cx = std::complex<double>;

const KernelRegistry& signal_registry() { return testing::registry_with<register_signal_kernels>(); }

// y[k] = sum_j x[j] e^(-+2 pi i j k / n) for k < out_len (divided by n when inverse).  x holds n values (already
// padded or truncated).
std::vector<Cx> naive_dft(const std::vector<Cx>& x, int64_t out_len, bool inverse) {
    const int64_t n = int64_t(x.size());
    std::vector<Cx> y(static_cast<size_t>(out_len));
    for (int64_t k = 0; k < out_len; ++k) {
        Cx sum = 0;
        for (int64_t j = 0; j < n; ++j) {
            // j * k mod n keeps the angle small, so the reference itself stays accurate for long transforms.
            const double angle = 2 * std::numbers::pi * double((j * k) % n) / double(n);
            sum += x[size_t(j)] * Cx(std::cos(angle), inverse ? std::sin(angle) : -std::sin(angle));
        }
        y[size_t(k)] = inverse ? sum / double(n) : sum;
    }
    return y;
}

struct DftCase {
    Shape shape;             // input, last dimension 1 (real) or 2 (complex)
    int64_t axis;            // as given to the node (may be negative)
    bool inverse = false, onesided = false;
    int64_t dft_length = 0;  // 0: input absent
    int64_t opset = 20;
};

template <typename T> void check_dft(const DftCase& c, uint32_t seed) {
    const int64_t rank = int64_t(c.shape.size());
    const int64_t axis = c.axis < 0 ? c.axis + rank : c.axis;
    const int64_t in_len = c.shape[size_t(axis)], comps = c.shape.back();
    const bool real_output = c.inverse && c.onesided;
    const int64_t n = c.dft_length ? c.dft_length : (real_output ? 2 * (in_len - 1) : in_len);
    const int64_t out_len = c.onesided && !c.inverse ? n / 2 + 1 : n;
    const int64_t out_comps = real_output ? 1 : 2;
    const auto x = random_values<T>(shape_size(c.shape), seed);

    NodeBuilder node("DFT", c.opset);
    node.input(element_type_of<T>()).attr_int("inverse", c.inverse).attr_int("onesided", c.onesided);
    std::vector<ValueHandle> inputs{tensor<T>(c.shape, x)};
    if (c.opset < 20) node.attr_int("axis", c.axis);
    if (c.dft_length) {
        node.input(TESS_ELEMENT_INT64);
        inputs.push_back(testing::scalar<int64_t>(c.dft_length));
    } else if (c.opset >= 20) {
        node.omitted_input();
        inputs.push_back(nullptr);
    }
    if (c.opset >= 20) {
        node.input(TESS_ELEMENT_INT64);
        inputs.push_back(testing::scalar<int64_t>(c.axis));
    }
    node.output(element_type_of<T>());
    const auto out = run_node(signal_registry(), node, inputs);
    Shape out_shape = c.shape;
    out_shape[size_t(axis)] = out_len;
    out_shape.back() = out_comps;
    const std::string what = "DFT shape=" + shape_string(c.shape) + " axis=" + std::to_string(c.axis) +
                             " inverse=" + std::to_string(c.inverse) + " onesided=" + std::to_string(c.onesided) +
                             " dft_length=" + std::to_string(c.dft_length) + " opset=" + std::to_string(c.opset);
    ASSERT_EQ(dims_of(out[0]), out_shape) << what;

    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= c.shape[size_t(d)];
    for (int64_t d = axis + 1; d < rank - 1; ++d) inner *= c.shape[size_t(d)];
    std::vector<double> expected(size_t(shape_size(out_shape)));
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
            std::vector<Cx> line(static_cast<size_t>(n));  // zero-padded or truncated to n
            const int64_t used = std::min(in_len, real_output ? n / 2 + 1 : n);
            for (int64_t j = 0; j < used; ++j) {
                const T* v = &x[size_t(((o * in_len + j) * inner + i) * comps)];
                line[size_t(j)] = Cx(double(v[0]), comps == 2 ? double(v[1]) : 0.0);
            }
            // The inverse of a one-sided spectrum: the rest follows from conjugate symmetry (numpy.fft.irfft).
            if (real_output) {
                for (int64_t k = n / 2 + 1; k < n; ++k) line[size_t(k)] = std::conj(line[size_t(n - k)]);
            }
            const auto y = naive_dft(line, out_len, c.inverse);
            for (int64_t k = 0; k < out_len; ++k) {
                double* dst = &expected[size_t(((o * out_len + k) * inner + i) * out_comps)];
                dst[0] = y[size_t(k)].real();
                if (out_comps == 2) dst[1] = y[size_t(k)].imag();
            }
        }
    }
    // Sums of n values in [-1, 1]: the error scales with sqrt(n) (FFT in double, rounded to T once).
    const double tolerance = (std::is_same_v<T, float> ? 2e-6 : 1e-12) * std::sqrt(double(n));
    expect_near_all(values_of<T>(*out[0]), expected, tolerance, what);
}

const int64_t kLengths[] = {1, 2, 3, 5, 7, 8, 12, 16, 17, 30, 31, 64, 97, 128, 255};

template <typename T> void check_all_lengths(uint32_t seed) {
    for (int64_t n : kLengths) {
        for (int64_t comps : {1, 2}) {
            for (int inverse = 0; inverse < 2; ++inverse) {
                check_dft<T>({.shape = {2, n, comps}, .axis = 1, .inverse = bool(inverse)}, ++seed);
                check_dft<T>({.shape = {n, 3, comps}, .axis = 0, .inverse = bool(inverse)}, ++seed);
                check_dft<T>({.shape = {2, n, 3, comps}, .axis = -3, .inverse = bool(inverse)}, ++seed);
                check_dft<T>({.shape = {3, 2, n, comps}, .axis = -2, .inverse = bool(inverse), .opset = 17}, ++seed);
            }
            // One-sided forward transforms are defined for real input only.
            if (comps == 1) {
                check_dft<T>({.shape = {3, n, 1}, .axis = 1, .onesided = true}, ++seed);
                check_dft<T>({.shape = {n, 2, 1}, .axis = 0, .onesided = true, .opset = 17}, ++seed);
            }
            if (::testing::Test::HasFatalFailure()) return;
        }
        // The inverse of a one-sided spectrum of n / 2 + 1 values, back to n real samples.
        if (n >= 2) {
            check_dft<T>({.shape = {2, n / 2 + 1, 2}, .axis = 1, .inverse = true, .onesided = true, .dft_length = n},
                         ++seed);
        }
    }
}

TEST(SignalOps, DftFloatMatchesNaiveTransform) { check_all_lengths<float>(10); }
TEST(SignalOps, DftDoubleMatchesNaiveTransform) { check_all_lengths<double>(20); }

TEST(SignalOps, DftLengthPadsAndTruncates) {
    uint32_t seed = 30;
    for (const auto& [in_len, n] : std::vector<std::pair<int64_t, int64_t>>{{5, 8}, {8, 5}, {7, 7}, {1, 13}, {30, 17}}) {
        for (int64_t comps : {1, 2}) {
            check_dft<float>({.shape = {2, in_len, comps}, .axis = 1, .dft_length = n}, ++seed);
            check_dft<float>({.shape = {2, in_len, comps}, .axis = 1, .inverse = true, .dft_length = n}, ++seed);
            check_dft<float>({.shape = {in_len, 2, comps}, .axis = 0, .dft_length = n, .opset = 17}, ++seed);
        }
        check_dft<float>({.shape = {3, in_len, 1}, .axis = -2, .onesided = true, .dft_length = n}, ++seed);
    }
    // The default length of a one-sided inverse: 2 * (input length - 1).
    check_dft<double>({.shape = {2, 9, 2}, .axis = 1, .inverse = true, .onesided = true}, ++seed);
}

// ---- STFT ------------------------------------------------------------------------------------------------------

struct StftCase {
    int64_t batch, length, comps, step, frame_length;
    bool window, frame_length_input, onesided;
};

void check_stft(const StftCase& c, uint32_t seed) {
    const auto signal = random_values<float>(c.batch * c.length * c.comps, seed);
    const auto window = random_values<float>(c.frame_length, seed + 1, 0.0, 1.0);
    NodeBuilder node("STFT", 17);
    node.input(TESS_ELEMENT_FLOAT32).input(TESS_ELEMENT_INT64).attr_int("onesided", c.onesided);
    std::vector<ValueHandle> inputs{tensor<float>({c.batch, c.length, c.comps}, signal),
                                    testing::scalar<int64_t>(c.step)};
    if (c.window) node.input(TESS_ELEMENT_FLOAT32);
    else node.omitted_input();
    inputs.push_back(c.window ? tensor<float>({c.frame_length}, window) : nullptr);
    if (c.frame_length_input) {
        node.input(TESS_ELEMENT_INT64);
        inputs.push_back(testing::scalar<int64_t>(c.frame_length));
    }
    node.output(TESS_ELEMENT_FLOAT32);
    const auto out = run_node(signal_registry(), node, inputs);
    const int64_t frames = 1 + (c.length - c.frame_length) / c.step;
    const int64_t bins = c.onesided ? c.frame_length / 2 + 1 : c.frame_length;
    const std::string what = "STFT batch=" + std::to_string(c.batch) + " length=" + std::to_string(c.length) +
                             " comps=" + std::to_string(c.comps) + " step=" + std::to_string(c.step) +
                             " frame=" + std::to_string(c.frame_length) + " onesided=" + std::to_string(c.onesided);
    ASSERT_EQ(dims_of(out[0]), (Shape{c.batch, frames, bins, 2})) << what;
    std::vector<double> expected;
    for (int64_t b = 0; b < c.batch; ++b) {
        for (int64_t f = 0; f < frames; ++f) {
            std::vector<Cx> frame(size_t(c.frame_length));
            for (int64_t j = 0; j < c.frame_length; ++j) {
                const float* v = &signal[size_t((b * c.length + f * c.step + j) * c.comps)];
                const double w = c.window ? double(window[size_t(j)]) : 1.0;
                frame[size_t(j)] = Cx(v[0] * w, c.comps == 2 ? v[1] * w : 0.0);
            }
            for (const Cx& v : naive_dft(frame, bins, false)) {
                expected.push_back(v.real());
                expected.push_back(v.imag());
            }
        }
    }
    expect_near_all(values_of<float>(*out[0]), expected, 2e-6 * std::sqrt(double(c.frame_length)), what);
}

TEST(SignalOps, StftMatchesNaiveTransform) {
    const StftCase cases[] = {
        {1, 16, 1, 4, 8, true, false, true},   {2, 37, 1, 5, 12, true, true, true},
        {2, 30, 2, 3, 7, true, false, false},  {1, 100, 1, 10, 31, false, true, true},
        {3, 9, 1, 1, 9, false, true, false},   {1, 64, 2, 16, 16, true, true, false},
        {2, 50, 1, 7, 1, true, false, true},   {1, 257, 1, 64, 128, true, false, true},
    };
    uint32_t seed = 60;
    for (const StftCase& c : cases) check_stft(c, seed += 2);
}

}  // namespace
}  // namespace tessera::cpu
