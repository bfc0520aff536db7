// CPU provider: signal processing ops: DFT (opset 17 with an axis attribute, 20 with an axis input), STFT, the
// HannWindow / HammingWindow / BlackmanWindow generators and MelWeightMatrix (all opset 17).
//
// Transforms run in double through util/fft.h (O(n log n) for every length, prime ones included) and are rounded
// to the tensor type once at the end; float16/bfloat16 tensors are widened to float first.  Complex tensors are
// real tensors whose last dimension is 2 (real, imaginary); real signals have a last dimension of 1.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/data_movement.h"
#include "util/element_convert.h"
#include "util/fft.h"
#include "util/float16_compute.h"
#include "util/type_list.h"

namespace tessera::cpu {

namespace {

using Complex = FftPlan::Complex;

// Elements a parallel task should at least transform.
constexpr int64_t kGrainElements = 16384;

// The single value of a scalar (or one-element) integer input.
int64_t read_scalar_int(const Tensor& tensor, const std::string& what) {
    if (tensor.size() != 1) {
        throw KernelError(what + " must be a scalar, got shape " + shape_string(tensor.shape));
    }
    return movement::read_integers(tensor, what)[0];
}

double read_scalar_float(const Tensor& tensor, const std::string& what) {
    if (tensor.size() != 1) {
        throw KernelError(what + " must be a scalar, got shape " + shape_string(tensor.shape));
    }
    double value = 0;
    convert::load_doubles(tensor.type, tensor.data, 0, 1, &value);
    return value;
}

// Runs fn(line_begin, line_end, workspace) over `lines` independent lines of `line_cost` elements each, spread over
// the pool.  Every task gets its own workspace of `workspace_size` complex values, allocated here beforehand so
// that nothing inside the parallel region allocates (or throws).
template <typename Fn>
void for_each_line(ThreadPool& pool, int64_t lines, int64_t line_cost, size_t workspace_size, const Fn& fn) {
    if (lines <= 0) return;
    const int64_t by_work = std::max<int64_t>(1, lines * std::max<int64_t>(1, line_cost) / kGrainElements);
    const int64_t tasks = std::min({lines, int64_t(pool.size()), by_work});
    std::vector<std::vector<Complex>> workspaces(static_cast<size_t>(tasks), std::vector<Complex>(workspace_size));
    const int64_t per_task = (lines + tasks - 1) / tasks;
    pool.parallel_for(tasks, 1, [&](int64_t task_begin, int64_t task_end) {
        for (int64_t task = task_begin; task < task_end; ++task) {
            const int64_t begin = task * per_task, end = std::min(lines, begin + per_task);
            if (begin < end) fn(begin, end, workspaces[size_t(task)].data());
        }
    });
}

// Runs body.template operator()<T>(inputs, output) with the float tensors of `inputs` as T tensors: float and
// double directly, float16/bfloat16 widened to float (and the output narrowed back).  Non-float inputs (lengths,
// steps) pass through untouched.  `make_output` creates the real output tensor.
template <typename Body, typename MakeOutput>
void with_float_tensors(int32_t type, std::vector<const Tensor*> inputs, const MakeOutput& make_output,
                        const Body& body) {
    if (is_16bit_float(type)) {
        std::vector<std::optional<WidenedTensor>> widened(inputs.size());
        for (size_t i = 0; i < inputs.size(); ++i) {
            if (inputs[i] && inputs[i]->type == type) {
                widened[i].emplace(*inputs[i]);
                inputs[i] = &widened[i]->tensor();
            }
        }
        NarrowedOutput output(make_output());
        body.template operator()<float>(inputs, output.tensor());
        output.finish();
        return;
    }
    dispatch_list(FloatTypes{}, type, [&]<typename T>() { body.template operator()<T>(inputs, make_output()); });
}

// ---- DFT -------------------------------------------------------------------------------------------------------

class DftKernel final : public Kernel {
public:
    // Opset 17 reads the axis from an attribute (default 1); opset 20 from the optional input 2 (default -2).
    DftKernel(const NodeInfo& info, bool axis_from_input)
        : axis_from_input_(axis_from_input),
          axis_(axis_from_input ? -2 : info.attr_int("axis", 1)),
          inverse_(info.attr_int("inverse", 0) != 0),
          onesided_(info.attr_int("onesided", 0) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const int64_t rank = int64_t(x.rank());
        if (rank < 2 || (x.shape.back() != 1 && x.shape.back() != 2)) {
            throw KernelError("DFT: input must have at least 2 dimensions and a last dimension of 1 (real) or 2 "
                              "(complex), got shape " + shape_string(x.shape));
        }
        int64_t axis = axis_;
        if (axis_from_input_ && ctx.has_input(2)) axis = read_scalar_int(ctx.input(2), "DFT axis");
        // The last dimension holds the components, so the accepted axes are [-r, -2] and [0, r - 2].
        if (axis < -rank || axis > rank - 2 || axis == -1) {
            throw KernelError("DFT: axis " + std::to_string(axis) + " is out of range for an input of rank " +
                              std::to_string(rank));
        }
        if (axis < 0) axis += rank;

        Geometry g;
        g.input_length = x.shape[size_t(axis)];
        g.input_components = x.shape.back();
        g.real_output = inverse_ && onesided_;  // inverse of a one-sided spectrum: a real signal
        if (ctx.has_input(1)) {
            g.length = read_scalar_int(ctx.input(1), "DFT dft_length");
            if (g.length < 1) throw KernelError("DFT: dft_length must be positive, got " + std::to_string(g.length));
        } else {
            g.length = g.real_output ? 2 * (g.input_length - 1) : g.input_length;
            if (g.length < 1) {
                throw KernelError("DFT: the transform length would be " + std::to_string(g.length) +
                                  " for input shape " + shape_string(x.shape));
            }
        }
        g.output_length = (onesided_ && !inverse_) ? g.length / 2 + 1 : g.length;
        for (int64_t d = 0; d < axis; ++d) g.outer *= x.shape[size_t(d)];
        for (int64_t d = axis + 1; d < rank - 1; ++d) g.inner *= x.shape[size_t(d)];

        Shape output_shape = x.shape;
        output_shape[size_t(axis)] = g.output_length;
        output_shape.back() = g.real_output ? 1 : 2;
        with_float_tensors(
            x.type, {&x}, [&]() -> Tensor& { return ctx.output(0, x.type, output_shape); },
            [&]<typename T>(const std::vector<const Tensor*>& in, Tensor& y) {
                run<T>(ctx.pool(), g, in[0]->ptr<T>(), y.ptr<T>());
            });
    }

private:
    struct Geometry {
        int64_t outer = 1, inner = 1;  // lines: outer x inner, the transformed axis between them
        int64_t input_length = 0, input_components = 1;
        int64_t length = 0;         // transform length
        int64_t output_length = 0;  // kept output values (one-sided forward transforms keep length / 2 + 1)
        bool real_output = false;
    };

    template <typename T> void run(ThreadPool& pool, const Geometry& g, const T* x, T* y) const {
        if (g.outer * g.inner * g.output_length == 0) return;
        const FftPlan plan(g.length);
        const int64_t n = g.length;
        const int64_t in_c = g.input_components, out_c = g.real_output ? 1 : 2;
        const bool inverse = inverse_;
        const double scale = inverse ? 1.0 / double(n) : 1.0;
        // The input values that enter the transform: the first `used` ones (zero-padded or truncated to n); for a
        // one-sided inverse, the first n / 2 + 1 (the rest of the spectrum follows from conjugate symmetry).
        const int64_t used = std::min(g.input_length, g.real_output ? n / 2 + 1 : n);
        for_each_line(pool, g.outer * g.inner, n, 2 * size_t(n) + plan.scratch_size(),
                      [&](int64_t begin, int64_t end, Complex* workspace) {
                          Complex* line = workspace;
                          Complex* spectrum = workspace + n;
                          Complex* scratch = workspace + 2 * n;
                          for (int64_t l = begin; l < end; ++l) {
                              const int64_t o = l / g.inner, i = l % g.inner;
                              const T* src = x + (o * g.input_length * g.inner + i) * in_c;
                              for (int64_t j = 0; j < used; ++j) {
                                  const T* v = src + j * g.inner * in_c;
                                  line[j] = {double(v[0]), in_c == 2 ? double(v[1]) : 0.0};
                              }
                              const int64_t filled = g.real_output ? n / 2 + 1 : n;
                              std::fill(line + used, line + filled, Complex{});
                              if (g.real_output) {
                                  for (int64_t k = filled; k < n; ++k) line[k] = std::conj(line[n - k]);
                              }
                              plan.transform(line, spectrum, scratch, inverse);
                              T* dst = y + (o * g.output_length * g.inner + i) * out_c;
                              for (int64_t k = 0; k < g.output_length; ++k) {
                                  T* v = dst + k * g.inner * out_c;
                                  v[0] = T(spectrum[k].real() * scale);
                                  if (out_c == 2) v[1] = T(spectrum[k].imag() * scale);
                              }
                          }
                      });
    }

    bool axis_from_input_;
    int64_t axis_;
    bool inverse_;
    bool onesided_;
};

// ---- STFT ------------------------------------------------------------------------------------------------------

// signal [batch, length, 1 or 2], frame_step, optional window [frame_length], optional frame_length ->
// [batch, frames, bins, 2] with frames = 1 + (length - frame_length) / frame_step.
class StftKernel final : public Kernel {
public:
    explicit StftKernel(const NodeInfo& info) : onesided_(info.attr_int("onesided", 1) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& signal = ctx.input(0);
        if (signal.rank() != 3 || (signal.shape[2] != 1 && signal.shape[2] != 2)) {
            throw KernelError("STFT: signal must have shape [batch, length, 1 or 2], got " +
                              shape_string(signal.shape));
        }
        const int64_t step = read_scalar_int(ctx.input(1), "STFT frame_step");
        if (step < 1) throw KernelError("STFT: frame_step must be positive, got " + std::to_string(step));
        const Tensor* window = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (window && window->rank() != 1) {
            throw KernelError("STFT: window must be 1-D, got shape " + shape_string(window->shape));
        }
        if (window && window->type != signal.type) throw KernelError("STFT: window and signal types differ");
        Geometry g;
        g.batch = signal.shape[0];
        g.signal_length = signal.shape[1];
        g.components = signal.shape[2];
        if (ctx.has_input(3)) {
            g.frame_length = read_scalar_int(ctx.input(3), "STFT frame_length");
            if (window && window->shape[0] != g.frame_length) {
                throw KernelError("STFT: window length " + std::to_string(window->shape[0]) +
                                  " differs from frame_length " + std::to_string(g.frame_length));
            }
        } else {
            g.frame_length = window ? window->shape[0] : g.signal_length;
        }
        if (g.frame_length < 1 || g.frame_length > g.signal_length) {
            throw KernelError("STFT: frame length " + std::to_string(g.frame_length) +
                              " must be between 1 and the signal length " + std::to_string(g.signal_length));
        }
        g.frames = 1 + (g.signal_length - g.frame_length) / step;
        g.step = step;
        g.bins = onesided_ ? g.frame_length / 2 + 1 : g.frame_length;

        const Shape output_shape{g.batch, g.frames, g.bins, 2};
        with_float_tensors(
            signal.type, {&signal, window}, [&]() -> Tensor& { return ctx.output(0, signal.type, output_shape); },
            [&]<typename T>(const std::vector<const Tensor*>& in, Tensor& y) {
                run<T>(ctx.pool(), g, in[0]->ptr<T>(), in[1] ? in[1]->ptr<T>() : nullptr, y.ptr<T>());
            });
    }

private:
    struct Geometry {
        int64_t batch = 0, signal_length = 0, components = 1;
        int64_t frame_length = 0, step = 1, frames = 0, bins = 0;
    };

    template <typename T>
    static void run(ThreadPool& pool, const Geometry& g, const T* signal, const T* window, T* y) {
        const int64_t n = g.frame_length;
        const FftPlan plan(n);
        for_each_line(pool, g.batch * g.frames, n, 2 * size_t(n) + plan.scratch_size(),
                      [&](int64_t begin, int64_t end, Complex* workspace) {
                          Complex* frame = workspace;
                          Complex* spectrum = workspace + n;
                          Complex* scratch = workspace + 2 * n;
                          for (int64_t l = begin; l < end; ++l) {
                              const int64_t b = l / g.frames, f = l % g.frames;
                              const T* src = signal + (b * g.signal_length + f * g.step) * g.components;
                              for (int64_t j = 0; j < n; ++j) {
                                  const double w = window ? double(window[j]) : 1.0;
                                  const T* v = src + j * g.components;
                                  frame[j] = {double(v[0]) * w, g.components == 2 ? double(v[1]) * w : 0.0};
                              }
                              plan.transform(frame, spectrum, scratch, false);
                              T* dst = y + l * g.bins * 2;
                              for (int64_t k = 0; k < g.bins; ++k) {
                                  dst[2 * k] = T(spectrum[k].real());
                                  dst[2 * k + 1] = T(spectrum[k].imag());
                              }
                          }
                      });
    }

    bool onesided_;
};

// ---- Window generators -----------------------------------------------------------------------------------------

// Output types of the window generators and MelWeightMatrix (the numeric types, float16/bfloat16 included).
bool is_numeric_output_type(int32_t type) { return convert::is_value_type(type) && type != TESS_ELEMENT_BOOL; }

int32_t read_output_datatype(const NodeInfo& info) {
    const int64_t type = info.attr_int("output_datatype", TESS_ELEMENT_FLOAT32);
    if (!is_numeric_output_type(int32_t(type))) {
        throw KernelError(std::string(info.op_type()) + ": unsupported output_datatype " + std::to_string(type));
    }
    return int32_t(type);
}

enum class WindowShape { Hann, Hamming, Blackman };

// Generalized cosine windows: w[k] = a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N), where N is the size for periodic
// windows (the default) and size - 1 for symmetric ones.
class WindowKernel final : public Kernel {
public:
    WindowKernel(const NodeInfo& info, WindowShape shape)
        : op_(info.op_type()),
          shape_(shape),
          periodic_(info.attr_int("periodic", 1) != 0),
          output_type_(read_output_datatype(info)) {}

    void compute(KernelContext& ctx) const override {
        const int64_t size = read_scalar_int(ctx.input(0), op_ + " size");
        if (size < 0) throw KernelError(op_ + ": size must not be negative, got " + std::to_string(size));
        double a0 = 0, a1 = 0, a2 = 0;
        switch (shape_) {
            case WindowShape::Hann:
                a0 = 0.5;
                a1 = 0.5;
                break;
            case WindowShape::Hamming:
                a0 = 25.0 / 46.0;
                a1 = 21.0 / 46.0;
                break;
            case WindowShape::Blackman:
                a0 = 0.42;
                a1 = 0.5;
                a2 = 0.08;
                break;
        }
        const int64_t period = periodic_ ? size : size - 1;
        std::vector<double> values(static_cast<size_t>(size));
        for (int64_t k = 0; k < size; ++k) {
            // A symmetric window of one sample has no period (the formula divides 0 by 0); it is the peak value 1,
            // as in NumPy and SciPy.
            if (period == 0) {
                values[size_t(k)] = 1.0;
                continue;
            }
            const double phase = 2.0 * std::numbers::pi * double(k) / double(period);
            values[size_t(k)] = a0 - a1 * std::cos(phase) + a2 * std::cos(2.0 * phase);
        }
        Tensor& y = ctx.output(0, output_type_, {size});
        convert::store_doubles(output_type_, y.data, 0, size, values.data(), convert::CastOptions{});
    }

private:
    std::string op_;
    WindowShape shape_;
    bool periodic_;
    int32_t output_type_;
};

// ---- MelWeightMatrix -------------------------------------------------------------------------------------------

// [dft_length / 2 + 1, num_mel_bins] triangular filters, spaced evenly on the mel scale (mel = 2595 log10(1 + hz /
// 700)) between the edge frequencies.  The band edges follow the ONNX reference computation step by step (mel
// edges in the precision of the frequency inputs, bin positions in double, floored), since a different rounding
// moves an edge to the neighbouring bin.
class MelWeightMatrixKernel final : public Kernel {
public:
    explicit MelWeightMatrixKernel(const NodeInfo& info) : output_type_(read_output_datatype(info)) {}

    void compute(KernelContext& ctx) const override {
        const int64_t mel_bins = read_scalar_int(ctx.input(0), "MelWeightMatrix num_mel_bins");
        const int64_t dft_length = read_scalar_int(ctx.input(1), "MelWeightMatrix dft_length");
        const int64_t sample_rate = read_scalar_int(ctx.input(2), "MelWeightMatrix sample_rate");
        const Tensor& lower_tensor = ctx.input(3);
        const double lower = read_scalar_float(lower_tensor, "MelWeightMatrix lower_edge_hertz");
        const double upper = read_scalar_float(ctx.input(4), "MelWeightMatrix upper_edge_hertz");
        if (mel_bins < 0 || dft_length < 1 || sample_rate < 1) {
            throw KernelError("MelWeightMatrix: num_mel_bins must not be negative and dft_length and sample_rate "
                              "must be positive");
        }
        if (!(lower >= 0) || !(upper >= lower) || !std::isfinite(upper)) {
            throw KernelError("MelWeightMatrix: edge frequencies must satisfy 0 <= lower_edge_hertz <= "
                              "upper_edge_hertz");
        }
        const int64_t spectrogram_bins = dft_length / 2 + 1;
        const std::vector<int64_t> edges =
            lower_tensor.type == TESS_ELEMENT_FLOAT64
                ? band_edges<double>(mel_bins, dft_length, sample_rate, lower, upper)
                : band_edges<float>(mel_bins, dft_length, sample_rate, lower, upper);

        std::vector<double> weights(size_t(spectrogram_bins * mel_bins), 0.0);
        auto set = [&](int64_t bin, int64_t band, double value) {
            if (bin < 0 || bin >= spectrogram_bins) {
                throw KernelError("MelWeightMatrix: band " + std::to_string(band) + " reaches spectrogram bin " +
                                  std::to_string(bin) + ", outside [0, " + std::to_string(spectrogram_bins) +
                                  "); upper_edge_hertz must not exceed the Nyquist frequency");
            }
            weights[size_t(bin * mel_bins + band)] = value;
        };
        for (int64_t band = 0; band < mel_bins; ++band) {
            const int64_t left = edges[size_t(band)], center = edges[size_t(band + 1)], right = edges[size_t(band + 2)];
            if (center == left) {
                set(center, band, 1.0);
            } else {
                for (int64_t j = left; j <= center; ++j) set(j, band, double(j - left) / double(center - left));
            }
            for (int64_t j = center; j < right; ++j) set(j, band, double(right - j) / double(right - center));
        }
        Tensor& y = ctx.output(0, output_type_, {spectrogram_bins, mel_bins});
        convert::store_doubles(output_type_, y.data, 0, y.size(), weights.data(), convert::CastOptions{});
    }

private:
    // The spectrogram bin of each of the num_mel_bins + 2 band edges.
    template <typename F>
    static std::vector<int64_t> band_edges(int64_t mel_bins, int64_t dft_length, int64_t sample_rate, double lower,
                                           double upper) {
        const auto to_mel = [](F hz) { return F(2595) * std::log10(F(1) + hz / F(700)); };
        const F low_mel = to_mel(F(lower));
        const F high_mel = to_mel(F(upper));
        const F mel_step = (high_mel - low_mel) / F(mel_bins + 2);
        std::vector<int64_t> edges(size_t(mel_bins + 2));
        for (int64_t i = 0; i < mel_bins + 2; ++i) {
            const double mel = double(i) * double(mel_step) + double(low_mel);
            const double hz = 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
            edges[size_t(i)] = int64_t(std::floor(double(dft_length + 1) * hz / double(sample_rate)));
        }
        return edges;
    }

    int32_t output_type_;
};

// ---- Registration ----------------------------------------------------------------------------------------------

const std::vector<int32_t> kIndexTypes{TESS_ELEMENT_INT32, TESS_ELEMENT_INT64};

}  // namespace

void register_signal_kernels(KernelRegistry& registry) {
    const auto floats = type_ids_with_16bit_floats(FloatTypes{});
    registry.add(KernelDef{.domain = "",
                           .op_type = "DFT",
                           .since_version = 17,
                           .end_version = 19,
                           .input_types = {{0, floats}, {1, kIndexTypes}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<DftKernel>(info, false);
                           }});
    registry.add(KernelDef{.domain = "",
                           .op_type = "DFT",
                           .since_version = 20,
                           .end_version = 0,
                           .input_types = {{0, floats}, {1, kIndexTypes}, {2, kIndexTypes}},
                           .memory = KernelMemory::Normal,
                           .factory = [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                               return std::make_unique<DftKernel>(info, true);
                           }});
    registry.add(KernelDef{.domain = "",
                           .op_type = "STFT",
                           .since_version = 17,
                           .end_version = 0,
                           .input_types = {{0, floats}, {1, kIndexTypes}, {2, floats}, {3, kIndexTypes}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<StftKernel>()});
    const std::pair<const char*, WindowShape> windows[] = {{"HannWindow", WindowShape::Hann},
                                                           {"HammingWindow", WindowShape::Hamming},
                                                           {"BlackmanWindow", WindowShape::Blackman}};
    for (const auto& [op, shape] : windows) {
        registry.add(KernelDef{.domain = "",
                               .op_type = op,
                               .since_version = 17,
                               .end_version = 0,
                               .input_types = {{0, kIndexTypes}},
                               .memory = KernelMemory::Normal,
                               // An init-capture: clang before 16 cannot capture a structured binding.
                               .factory = [shape = shape](const NodeInfo& info) -> std::unique_ptr<Kernel> {
                                   return std::make_unique<WindowKernel>(info, shape);
                               }});
    }
    registry.add(KernelDef{.domain = "",
                           .op_type = "MelWeightMatrix",
                           .since_version = 17,
                           .end_version = 0,
                           .input_types = {{0, kIndexTypes}, {1, kIndexTypes}, {2, kIndexTypes}, {3, floats},
                                           {4, floats}},
                           .memory = KernelMemory::Normal,
                           .factory = make_factory<MelWeightMatrixKernel>()});
}

}  // namespace tessera::cpu
