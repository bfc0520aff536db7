// CPU provider: Resize (opsets 10 to 19) and the deprecated Upsample (7, 9).
//
// Resizing is separable.  Every resized axis gets a tap table (per output position: source indices, weights, and
// whether the position falls outside a tf_crop_and_resize crop), built per run from the ONNX coordinate
// transformation in double, the way the ONNX reference computes it.  Nearest mode is then a pure gather (exact for
// every type); linear over the two innermost axes (the common image case) runs in a single pass; everything else
// resamples one axis at a time through float buffers (double for double and integer tensors).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/data_movement.h"
#include "util/element_convert.h"
#include "util/float16_compute.h"
#include "util/interpolation.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"

namespace tessera::cpu {

namespace {

using movement::contiguous_strides;
using movement::parallel_range;
using movement::product;

enum class Interpolation { Nearest, Linear, Cubic };

enum class CoordinateMode {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize
};

// How nearest mode rounds a fractional source coordinate.  Legacy is Resize-10 and Upsample: floor when the axis is
// upsampled, ceil when it is downsampled (the opset-10 examples, and what ONNX Runtime does).
enum class NearestRounding { RoundPreferFloor, RoundPreferCeil, Floor, Ceil, Legacy };

enum class AspectPolicy { Stretch, NotLarger, NotSmaller };

struct ResizeOptions {
    Interpolation mode = Interpolation::Nearest;
    CoordinateMode coordinates = CoordinateMode::HalfPixel;
    NearestRounding rounding = NearestRounding::RoundPreferFloor;
    double cubic_a = -0.75;
    bool exclude_outside = false;
    double extrapolation_value = 0.0;
    bool antialias = false;
    AspectPolicy policy = AspectPolicy::Stretch;
};

// One dimension of a resize.
struct AxisResize {
    int64_t in = 0;
    int64_t out = 0;
    double scale = 1.0;  // ONNX's scale factor; from sizes it is out / in (or the aspect policy's common scale)
    double roi_start = 0.0;
    double roi_end = 1.0;
    bool roi_float32 = false;  // the reference does the roi arithmetic in the roi's own precision
    bool identity = true;      // the output along this axis is the input
};

double roi_precision(const AxisResize& a, double v) { return a.roi_float32 ? double(float(v)) : v; }

// The input coordinate that output position y maps to.  The output length in these formulas is scale * in, not the
// rounded output size, as in the reference (they differ only when a scale does not divide evenly).
double source_coordinate(const ResizeOptions& o, const AxisResize& a, int64_t y) {
    const double in = double(a.in);
    const double length = a.scale * in;
    const double yd = double(y);
    switch (o.coordinates) {
        case CoordinateMode::HalfPixel: return (yd + 0.5) / a.scale - 0.5;
        case CoordinateMode::HalfPixelSymmetric: {
            const double adjustment = double(a.out) / length;
            const double offset = in / 2 * (1 - adjustment);
            return offset + (yd + 0.5) / a.scale - 0.5;
        }
        case CoordinateMode::PytorchHalfPixel: return length == 1 ? -0.5 : (yd + 0.5) / a.scale - 0.5;
        case CoordinateMode::AlignCorners: return length == 1 ? 0.0 : yd * (in - 1) / (length - 1);
        case CoordinateMode::Asymmetric: return yd / a.scale;
        case CoordinateMode::TfHalfPixelForNn: return (yd + 0.5) / a.scale;
        case CoordinateMode::TfCropAndResize: {
            const double span = roi_precision(a, a.roi_end - a.roi_start);
            const double start = roi_precision(a, a.roi_start * (in - 1));
            if (length == 1) return roi_precision(a, span * (in - 1)) / 2 + start;
            return yd * span * (in - 1) / (length - 1) + start;
        }
    }
    return 0.0;
}

int64_t nearest_index(NearestRounding rounding, double x, double scale) {
    const double whole = std::floor(x);
    if (x == whole) return int64_t(whole);
    const double fraction = x - whole;
    bool up = false;
    switch (rounding) {
        case NearestRounding::RoundPreferFloor: up = fraction > 0.5; break;
        case NearestRounding::RoundPreferCeil: up = fraction >= 0.5; break;
        case NearestRounding::Floor: up = false; break;
        case NearestRounding::Ceil: up = true; break;
        case NearestRounding::Legacy: up = scale < 1.0; break;
    }
    return int64_t(whole) + (up ? 1 : 0);
}

// Per output position of one axis: `taps` source indices (clamped into the input) and weights, row-major, and
// whether the position lies outside a tf_crop_and_resize crop (it then takes extrapolation_value).
struct TapTable {
    int64_t taps = 1;
    std::vector<int64_t> index;
    std::vector<double> weight;
    std::vector<uint8_t> outside;
    bool any_outside = false;
};

TapTable build_taps(const ResizeOptions& o, const AxisResize& a) {
    TapTable t;
    // Taps run from base + first to base + first + taps - 1 around the source coordinate.  Antialiasing stretches
    // the filter by 1 / scale when downsampling, which widens it.
    int64_t first = 0;
    double filter_scale = 1.0;
    if (o.mode != Interpolation::Nearest) {
        const double support = o.mode == Interpolation::Linear ? 1.0 : 2.0;
        if (o.antialias) {
            filter_scale = std::min(a.scale, 1.0);
            first = int64_t(std::floor(-support / filter_scale)) + 1;
        } else {
            first = int64_t(1.0 - support);
        }
        t.taps = 2 - 2 * first;
    }
    const size_t taps = size_t(t.taps);
    t.index.resize(size_t(a.out) * taps);
    t.weight.resize(size_t(a.out) * taps);
    t.outside.assign(size_t(a.out), 0);
    const bool crop = o.coordinates == CoordinateMode::TfCropAndResize;
    // Beyond these bounds every tap lies outside the input on the same side, so clamping x changes nothing (and
    // keeps the integer conversions defined).
    const double low = -double(t.taps + 2), high = double(a.in + t.taps + 2);
    for (int64_t y = 0; y < a.out; ++y) {
        double x = source_coordinate(o, a, y);
        if (std::isnan(x)) x = 0.0;
        const bool outside = crop && (x < 0 || x > double(a.in - 1));
        t.outside[size_t(y)] = outside;
        t.any_outside = t.any_outside || outside;
        x = std::clamp(x, low, high);
        int64_t* index = &t.index[size_t(y) * taps];
        double* weight = &t.weight[size_t(y) * taps];
        if (o.mode == Interpolation::Nearest) {
            index[0] = std::clamp<int64_t>(nearest_index(o.rounding, x, a.scale), 0, a.in - 1);
            weight[0] = 1.0;
            continue;
        }
        // The fraction lies in (0, 1]: a coordinate on a pixel is the right end of the interval before it.
        const double whole = std::floor(x);
        const int64_t base = x == whole ? int64_t(whole) - 1 : int64_t(whole);
        const double ratio = x == whole ? 1.0 : x - whole;
        double sum = 0.0;
        for (int64_t k = 0; k < t.taps; ++k) {
            const double distance = (double(first + k) - ratio) * filter_scale;
            weight[k] = o.mode == Interpolation::Linear ? linear_weight(distance)
                                                        : cubic_convolution_weight(distance, o.cubic_a);
            index[k] = base + first + k;
            sum += weight[k];
        }
        if (o.antialias && sum != 0.0) {
            for (int64_t k = 0; k < t.taps; ++k) weight[k] /= sum;
        }
        if (o.exclude_outside) {
            sum = 0.0;
            for (int64_t k = 0; k < t.taps; ++k) {
                if (index[k] < 0 || index[k] >= a.in) weight[k] = 0.0;
                sum += weight[k];
            }
            if (sum != 0.0) {
                for (int64_t k = 0; k < t.taps; ++k) weight[k] /= sum;
            }
        }
        for (int64_t k = 0; k < t.taps; ++k) index[k] = std::clamp<int64_t>(index[k], 0, a.in - 1);
    }
    return t;
}

TapTable identity_taps(int64_t n) {
    TapTable t;
    t.index.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) t.index[size_t(i)] = i;
    t.weight.assign(size_t(n), 1.0);
    t.outside.assign(size_t(n), 0);
    return t;
}

// ---- execution ---------------------------------------------------------------------------------------------------

// Nearest: every output element copies one input element, or takes the extrapolation value.  `tables` has one
// nearest table per dimension.
template <typename T>
void resize_nearest(const ResizeOptions& o, const Shape& in, const Shape& out, const std::vector<TapTable>& tables,
                    const T* x, T* y, ThreadPool& pool) {
    const size_t rank = in.size();
    const std::vector<int64_t> strides = contiguous_strides(in);
    // Source offsets per dimension, so that a row's offset is a sum of table lookups.
    std::vector<std::vector<int64_t>> offsets(rank);
    for (size_t d = 0; d < rank; ++d) {
        offsets[d].resize(size_t(out[d]));
        for (int64_t j = 0; j < out[d]; ++j) offsets[d][size_t(j)] = tables[d].index[size_t(j)] * strides[d];
    }
    const T fill = store_interpolated<T>(o.extrapolation_value);
    const int64_t width = out.back();
    bool last_identity = out.back() == in.back();
    for (int64_t i = 0; last_identity && i < width; ++i) last_identity = offsets.back()[size_t(i)] == i;
    const TapTable& last = tables.back();
    parallel_range(pool, shape_size(out) / width, width * int64_t(sizeof(T)), [&](int64_t begin, int64_t end) {
        int64_t previous_offset = -1;  // source row of the previous output row; upsampling repeats rows
        for (int64_t row = begin; row < end; ++row) {
            int64_t offset = 0;
            bool outside = false;
            int64_t rest = row;
            for (size_t d = rank - 1; d-- > 0;) {
                const size_t j = size_t(rest % out[d]);
                rest /= out[d];
                offset += offsets[d][j];
                outside = outside || tables[d].outside[j];
            }
            T* dst = y + row * width;
            if (outside) {
                std::fill(dst, dst + width, fill);
                previous_offset = -1;
                continue;
            }
            if (offset == previous_offset) {
                std::copy(dst - width, dst, dst);
                continue;
            }
            previous_offset = offset;
            const T* src = x + offset;
            if (last_identity) {
                std::copy(src, src + width, dst);
            } else {
                const int64_t* column = offsets.back().data();
                for (int64_t i = 0; i < width; ++i) dst[i] = src[column[i]];
            }
            if (last.any_outside) {
                for (int64_t i = 0; i < width; ++i) {
                    if (last.outside[size_t(i)]) dst[i] = fill;
                }
            }
        }
    });
}

// Linear interpolation over the two innermost axes (both resized with 2 taps, every outer axis unchanged): each
// output row blends two input rows after resampling them horizontally.  A task keeps the last two resampled rows,
// so that upsampling resamples every input row about once.
template <typename T>
void resize_bilinear_2d(const ResizeOptions& o, const Shape& in, const Shape& out, const TapTable& rows_table,
                        const TapTable& columns_table, const T* x, T* y, ThreadPool& pool) {
    const size_t rank = in.size();
    const int64_t in_h = in[rank - 2], in_w = in[rank - 1];
    const int64_t out_h = out[rank - 2], out_w = out[rank - 1];
    const size_t columns = size_t(out_w);
    std::vector<int64_t> c0(columns), c1(columns);
    std::vector<T> w0(columns), w1(columns);
    for (size_t i = 0; i < columns; ++i) {
        c0[i] = columns_table.index[2 * i];
        c1[i] = columns_table.index[2 * i + 1];
        w0[i] = T(columns_table.weight[2 * i]);
        w1[i] = T(columns_table.weight[2 * i + 1]);
    }
    const T fill = T(o.extrapolation_value);
    parallel_range(pool, shape_size(out) / out_w, 3 * out_w * int64_t(sizeof(T)), [&](int64_t begin, int64_t end) {
        T* cache = thread_scratch_buffer<T>(2 * out_w);
        int64_t cached[2] = {-1, -1};  // input row (plane * in_h + row) held by each cache slot
        // The horizontally resampled input row `key`, computed into the slot not holding `keep`.
        const auto resampled = [&](int64_t key, int64_t keep) -> const T* {
            for (int slot = 0; slot < 2; ++slot) {
                if (cached[slot] == key) return cache + slot * out_w;
            }
            const int slot = cached[0] == keep ? 1 : 0;
            cached[slot] = key;
            T* h = cache + slot * out_w;
            const T* s = x + key * in_w;
            for (size_t i = 0; i < columns; ++i) h[i] = s[c0[i]] * w0[i] + s[c1[i]] * w1[i];
            return h;
        };
        for (int64_t row = begin; row < end; ++row) {
            const int64_t plane = row / out_h;
            const size_t j = size_t(row % out_h);
            T* dst = y + row * out_w;
            if (rows_table.outside[j]) {
                std::fill(dst, dst + out_w, fill);
                continue;
            }
            const int64_t key0 = plane * in_h + rows_table.index[2 * j];
            const int64_t key1 = plane * in_h + rows_table.index[2 * j + 1];
            const T a0 = T(rows_table.weight[2 * j]), a1 = T(rows_table.weight[2 * j + 1]);
            if (a0 == T(0) || a1 == T(0)) {  // on an input row: one row suffices
                const int64_t key = a0 == T(0) ? key1 : key0;
                const T a = a0 == T(0) ? a1 : a0;
                const T* h = resampled(key, -1);
                for (int64_t i = 0; i < out_w; ++i) dst[i] = a * h[i];
            } else {
                const T* h0 = resampled(key0, key1);
                const T* h1 = resampled(key1, key0);
                for (int64_t i = 0; i < out_w; ++i) dst[i] = a0 * h0[i] + a1 * h1[i];
            }
            if (columns_table.any_outside) {
                for (int64_t i = 0; i < out_w; ++i) {
                    if (columns_table.outside[size_t(i)]) dst[i] = fill;
                }
            }
        }
    });
}

// One separable pass: the tensor seen as [outer, in_len, inner] becomes [outer, out_len, inner].
template <typename Acc, typename Src>
void resample_axis(const Src* src, Acc* dst, int64_t outer, int64_t in_len, int64_t out_len, int64_t inner,
                   const TapTable& t, Acc fill, ThreadPool& pool) {
    const int64_t taps = t.taps;
    const std::vector<Acc> weights(t.weight.begin(), t.weight.end());
    if (inner == 1) {
        parallel_range(pool, outer, out_len * taps * 8, [&](int64_t begin, int64_t end) {
            for (int64_t o = begin; o < end; ++o) {
                const Src* s = src + o * in_len;
                Acc* d = dst + o * out_len;
                for (int64_t j = 0; j < out_len; ++j) {
                    const int64_t* index = &t.index[size_t(j * taps)];
                    const Acc* w = &weights[size_t(j * taps)];
                    Acc sum = 0;
                    for (int64_t k = 0; k < taps; ++k) sum += w[k] * Acc(s[index[k]]);
                    d[j] = t.outside[size_t(j)] ? fill : sum;
                }
            }
        });
        return;
    }
    parallel_range(pool, outer * out_len, inner * taps * 8, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t o = row / out_len;
            const int64_t j = row % out_len;
            Acc* d = dst + row * inner;
            if (t.outside[size_t(j)]) {
                std::fill(d, d + inner, fill);
                continue;
            }
            const int64_t* index = &t.index[size_t(j * taps)];
            const Acc* w = &weights[size_t(j * taps)];
            const Src* s0 = src + (o * in_len + index[0]) * inner;
            for (int64_t i = 0; i < inner; ++i) d[i] = w[0] * Acc(s0[i]);
            for (int64_t k = 1; k < taps; ++k) {
                if (w[k] == Acc(0)) continue;
                const Src* s = src + (o * in_len + index[k]) * inner;
                const Acc wk = w[k];
                for (int64_t i = 0; i < inner; ++i) d[i] += wk * Acc(s[i]);
            }
        }
    });
}

// Linear and cubic in general: one pass per resized axis, outermost first (the reference's order).
template <typename T>
void resize_separable(const ResizeOptions& o, const Shape& in, const Shape& out, const std::vector<size_t>& axes,
                      const std::vector<TapTable>& tables, const T* x, T* y, ThreadPool& pool) {
    using Acc = std::conditional_t<std::is_same_v<T, float>, float, double>;
    const Acc fill = Acc(o.extrapolation_value);
    Shape current = in;
    std::vector<Acc> buffers[2];
    const Acc* previous = nullptr;  // null: the source is the input
    for (size_t step = 0; step < axes.size(); ++step) {
        const size_t d = axes[step];
        const int64_t outer = product(current, 0, d);
        const int64_t inner = product(current, d + 1, current.size());
        Acc* dst = nullptr;
        if constexpr (std::is_same_v<T, Acc>) {
            if (step + 1 == axes.size()) dst = y;
        }
        if (dst == nullptr) {
            std::vector<Acc>& buffer = buffers[step % 2];
            buffer.resize(size_t(outer * out[d] * inner));
            dst = buffer.data();
        }
        if (previous == nullptr) {
            resample_axis<Acc>(x, dst, outer, current[d], out[d], inner, tables[d], fill, pool);
        } else {
            resample_axis<Acc>(previous, dst, outer, current[d], out[d], inner, tables[d], fill, pool);
        }
        current[d] = out[d];
        previous = dst;
    }
    if constexpr (!std::is_same_v<T, Acc>) {
        const int64_t n = shape_size(out);
        parallel_range(pool, n, 8, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) y[i] = store_interpolated<T>(previous[i]);
        });
    }
}

template <typename T>
void run_resize(const ResizeOptions& o, const std::vector<AxisResize>& plan, const T* x, T* y, ThreadPool& pool) {
    const size_t rank = plan.size();
    Shape in(rank), out(rank);
    std::vector<size_t> resized;
    std::vector<TapTable> tables(rank);
    for (size_t d = 0; d < rank; ++d) {
        in[d] = plan[d].in;
        out[d] = plan[d].out;
        if (plan[d].identity) {
            if (o.mode == Interpolation::Nearest) tables[d] = identity_taps(out[d]);
        } else {
            resized.push_back(d);
            tables[d] = build_taps(o, plan[d]);
        }
    }
    if (o.mode == Interpolation::Nearest) return resize_nearest(o, in, out, tables, x, y, pool);
    if constexpr (std::is_floating_point_v<T>) {
        const bool two_innermost = rank >= 2 && resized.size() == 2 && resized[0] == rank - 2 &&
                                   tables[rank - 2].taps == 2 && tables[rank - 1].taps == 2;
        if (two_innermost) return resize_bilinear_2d(o, in, out, tables[rank - 2], tables[rank - 1], x, y, pool);
    }
    resize_separable(o, in, out, resized, tables, x, y, pool);
}

// ---- the kernel --------------------------------------------------------------------------------------------------

using ResizeTypes = NumericTypes;

class ResizeKernel final : public Kernel {
public:
    explicit ResizeKernel(const NodeInfo& info) : op_(info.op_type()), opset_(info.opset()) {
        const bool upsample = op_ == "Upsample";
        const bool legacy = upsample || opset_ < 11;
        const std::string mode = info.attr_string("mode", "nearest");
        if (mode == "nearest") {
            options_.mode = Interpolation::Nearest;
        } else if (mode == "linear") {
            options_.mode = Interpolation::Linear;
        } else if (mode == "cubic" && !legacy) {
            options_.mode = Interpolation::Cubic;
        } else {
            throw KernelError(op_ + ": unsupported mode '" + mode + "'");
        }
        if (legacy) {
            options_.coordinates = CoordinateMode::Asymmetric;
            options_.rounding = NearestRounding::Legacy;
            scales_input_ = 1;
            if (upsample && opset_ < 9) {
                for (float s : info.attr_floats("scales")) attribute_scales_.push_back(s);
                if (attribute_scales_.empty()) throw KernelError("Upsample: attribute scales is required");
            }
            return;
        }
        roi_input_ = 1;
        scales_input_ = 2;
        sizes_input_ = 3;
        options_.coordinates = parse_coordinate_mode(info.attr_string("coordinate_transformation_mode", "half_pixel"));
        options_.rounding = parse_nearest_mode(info.attr_string("nearest_mode", "round_prefer_floor"));
        options_.cubic_a = info.attr_float("cubic_coeff_a", -0.75f);
        options_.exclude_outside = info.attr_int("exclude_outside", 0) != 0;
        options_.extrapolation_value = info.attr_float("extrapolation_value", 0.0f);
        if (opset_ >= 18) {
            options_.antialias = info.attr_int("antialias", 0) != 0;
            axes_ = info.attr_ints("axes");
            const std::string policy = info.attr_string("keep_aspect_ratio_policy", "stretch");
            if (policy == "stretch") {
                options_.policy = AspectPolicy::Stretch;
            } else if (policy == "not_larger") {
                options_.policy = AspectPolicy::NotLarger;
            } else if (policy == "not_smaller") {
                options_.policy = AspectPolicy::NotSmaller;
            } else {
                throw KernelError("Resize: unsupported keep_aspect_ratio_policy '" + policy + "'");
            }
        }
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const std::vector<AxisResize> plan = resolve(ctx, x.shape);
        Shape out_shape;
        bool identity = true;
        for (const AxisResize& a : plan) {
            out_shape.push_back(a.out);
            identity = identity && a.identity;
        }
        Tensor& y = ctx.output(0, x.type, out_shape);
        if (y.size() == 0) return;
        if (x.size() == 0) throw KernelError(op_ + ": cannot resize an empty input to " + shape_string(out_shape));
        if (identity) {
            copy_tensor(x, y);
            return;
        }
        if (is_16bit_float(x.type)) {
            const WidenedTensor wide(x);
            NarrowedOutput narrow(y);
            run_resize(options_, plan, wide.tensor().ptr<float>(), narrow.tensor().ptr<float>(), ctx.pool());
            narrow.finish();
            return;
        }
        dispatch_list(ResizeTypes{}, x.type,
                      [&]<typename T>() { run_resize(options_, plan, x.ptr<T>(), y.ptr<T>(), ctx.pool()); });
    }

private:
    CoordinateMode parse_coordinate_mode(const std::string& name) const {
        if (name == "half_pixel") return CoordinateMode::HalfPixel;
        if (name == "pytorch_half_pixel") return CoordinateMode::PytorchHalfPixel;
        if (name == "align_corners") return CoordinateMode::AlignCorners;
        if (name == "asymmetric") return CoordinateMode::Asymmetric;
        if (name == "tf_crop_and_resize") return CoordinateMode::TfCropAndResize;
        if (name == "tf_half_pixel_for_nn" && opset_ < 13) return CoordinateMode::TfHalfPixelForNn;
        if (name == "half_pixel_symmetric" && opset_ >= 19) return CoordinateMode::HalfPixelSymmetric;
        throw KernelError("Resize: unsupported coordinate_transformation_mode '" + name + "' in opset " +
                          std::to_string(opset_));
    }

    static NearestRounding parse_nearest_mode(const std::string& name) {
        if (name == "round_prefer_floor") return NearestRounding::RoundPreferFloor;
        if (name == "round_prefer_ceil") return NearestRounding::RoundPreferCeil;
        if (name == "floor") return NearestRounding::Floor;
        if (name == "ceil") return NearestRounding::Ceil;
        throw KernelError("Resize: unsupported nearest_mode '" + name + "'");
    }

    static bool present(const KernelContext& ctx, int index) {
        return index >= 0 && ctx.has_input(size_t(index)) && ctx.input(size_t(index)).size() > 0;
    }

    // Output size, scale and crop region of every dimension for this input.
    std::vector<AxisResize> resolve(const KernelContext& ctx, const Shape& in) const {
        const size_t rank = in.size();
        std::vector<size_t> axes;
        if (axes_.empty()) {
            for (size_t d = 0; d < rank; ++d) axes.push_back(d);
        } else {
            std::vector<bool> seen(rank, false);
            for (int64_t a : axes_) {
                const size_t d = normalize_axis(op_, a, rank);
                if (seen[d]) throw KernelError(op_ + ": axes contain a duplicate");
                seen[d] = true;
                axes.push_back(d);
            }
        }

        std::vector<double> scales = attribute_scales_;
        std::vector<int64_t> sizes;
        if (present(ctx, scales_input_)) {
            const Tensor& t = ctx.input(size_t(scales_input_));
            scales.resize(size_t(t.size()));
            convert::load_doubles(t.type, t.data, 0, t.size(), scales.data());
        }
        if (present(ctx, sizes_input_)) {
            sizes = movement::read_integers(ctx.input(size_t(sizes_input_)), op_ + " sizes");
        }
        if (!scales.empty() && !sizes.empty()) throw KernelError(op_ + ": only one of scales and sizes may be given");
        if (scales.empty() && sizes.empty()) throw KernelError(op_ + ": one of scales and sizes is required");
        const size_t given = scales.empty() ? sizes.size() : scales.size();
        if (given != axes.size()) {
            throw KernelError(op_ + ": " + (scales.empty() ? "sizes" : "scales") + " has " + std::to_string(given) +
                              " entries, expected " + std::to_string(axes.size()) + " for input " + shape_string(in));
        }

        std::vector<AxisResize> plan(rank);
        for (size_t d = 0; d < rank; ++d) plan[d].in = plan[d].out = in[d];
        if (!scales.empty()) {
            for (size_t i = 0; i < axes.size(); ++i) {
                AxisResize& a = plan[axes[i]];
                if (!(scales[i] > 0) || !std::isfinite(scales[i])) {
                    throw KernelError(op_ + ": scales must be positive, got " + std::to_string(scales[i]));
                }
                a.scale = scales[i];
                a.out = output_length(a.scale * double(a.in));
            }
        } else {
            for (size_t i = 0; i < axes.size(); ++i) {
                if (sizes[i] < 0) throw KernelError(op_ + ": sizes must not be negative");
                if (in[axes[i]] == 0 && sizes[i] > 0) {
                    throw KernelError(op_ + ": cannot resize an empty dimension to " + std::to_string(sizes[i]));
                }
            }
            if (options_.policy == AspectPolicy::Stretch) {
                for (size_t i = 0; i < axes.size(); ++i) {
                    AxisResize& a = plan[axes[i]];
                    a.out = sizes[i];
                    a.scale = a.in == 0 ? 1.0 : double(a.out) / double(a.in);
                }
            } else {
                // One scale for every listed axis: the largest that fits inside sizes (not_larger) or the smallest
                // that covers it (not_smaller); sizes are then rounded half up.
                const bool not_larger = options_.policy == AspectPolicy::NotLarger;
                double common = not_larger ? std::numeric_limits<double>::infinity() : 0.0;
                for (size_t i = 0; i < axes.size(); ++i) {
                    if (in[axes[i]] == 0) continue;
                    const double ratio = double(sizes[i]) / double(in[axes[i]]);
                    common = not_larger ? std::min(common, ratio) : std::max(common, ratio);
                }
                if (!std::isfinite(common)) common = 1.0;
                for (size_t d : axes) {
                    plan[d].scale = common;
                    plan[d].out = output_length(common * double(plan[d].in) + 0.5);
                }
            }
        }

        if (options_.coordinates == CoordinateMode::TfCropAndResize) {
            if (!present(ctx, roi_input_)) throw KernelError("Resize: tf_crop_and_resize requires the roi input");
            const Tensor& t = ctx.input(size_t(roi_input_));
            std::vector<double> roi(size_t(t.size()));
            convert::load_doubles(t.type, t.data, 0, t.size(), roi.data());
            if (roi.size() != 2 * axes.size()) {
                throw KernelError("Resize: roi has " + std::to_string(roi.size()) + " entries, expected " +
                                  std::to_string(2 * axes.size()));
            }
            for (size_t i = 0; i < axes.size(); ++i) {
                AxisResize& a = plan[axes[i]];
                a.roi_start = roi[i];
                a.roi_end = roi[axes.size() + i];
                a.roi_float32 = t.type == TESS_ELEMENT_FLOAT32;
            }
        }

        for (AxisResize& a : plan) {
            // The reference skips an axis whose scale is (close to) 1 and whose crop is the whole axis.
            const bool unit_scale = std::abs(a.scale - 1.0) <= 1e-9 * std::max(std::abs(a.scale), 1.0);
            const bool whole_roi = a.roi_start == 0.0 && a.roi_end == 1.0;
            a.identity = a.out == a.in && unit_scale && whole_roi &&
                         options_.coordinates != CoordinateMode::TfHalfPixelForNn;
        }
        return plan;
    }

    int64_t output_length(double length) const {
        if (!(length < 9.0e15)) throw KernelError(op_ + ": output size is too large");
        return int64_t(std::floor(length));
    }

    std::string op_;
    int64_t opset_;
    ResizeOptions options_;
    std::vector<int64_t> axes_;
    std::vector<double> attribute_scales_;  // Upsample-7
    int roi_input_ = -1;
    int scales_input_ = -1;
    int sizes_input_ = -1;
};

}  // namespace

void register_resize_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> types = type_ids_with_16bit_floats(ResizeTypes{});
    const KernelFactory factory = make_factory<ResizeKernel>();
    registry.add({"", "Upsample", 7, 8, {{0, types}}, KernelMemory::Normal, factory});
    // Upsample-10 is Upsample-9 marked deprecated (Resize replaces it).
    registry.add({"", "Upsample", 9, 10, {{0, types}}, KernelMemory::Normal, factory});
    // One registration per Resize version: 11 adds roi/sizes and the coordinate modes, 13 drops
    // tf_half_pixel_for_nn, 18 adds antialias/axes/keep_aspect_ratio_policy, 19 adds half_pixel_symmetric.
    const std::pair<int, int> versions[] = {{10, 10}, {11, 12}, {13, 17}, {18, 18}, {19, 0}};
    for (const auto& [since, end] : versions) {
        registry.add({"", "Resize", since, end, {{0, types}}, KernelMemory::Normal, factory});
    }
}

}  // namespace tessera::cpu
