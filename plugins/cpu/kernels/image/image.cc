// CPU provider: image and detection operators: GridSample, AffineGrid, RoiAlign, CenterCropPad, Col2Im, MaxUnpool
// and NonMaxSuppression.  Floating-point kernels compute float16/bfloat16 in float and double in double
// (util/compute_cast.h); the data-movement ones (CenterCropPad, MaxUnpool) work on element bytes for every type.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/all_kernels.h"
#include "util/axes.h"
#include "util/compute_cast.h"
#include "util/data_movement.h"
#include "util/float16_compute.h"
#include "util/im2col.h"
#include "util/interpolation.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"

namespace tessera::cpu {

namespace {

using movement::contiguous_strides;
using movement::parallel_range;
using movement::product;
using movement::read_integers;

// Runs fn.template operator()<C>() with the compute type of a floating-point tensor: double for double, float for
// float, float16 and bfloat16.
template <typename Fn> void with_compute_type(int32_t type, Fn&& fn) {
    if (type == TESS_ELEMENT_FLOAT64) {
        fn.template operator()<double>();
    } else if (type == TESS_ELEMENT_FLOAT32 || is_16bit_float(type)) {
        fn.template operator()<float>();
    } else {
        throw_unsupported_type("image kernel", type);
    }
}

// ---- GridSample --------------------------------------------------------------------------------------------------

enum class SampleMode { Nearest, Linear, Cubic };
enum class SamplePadding { Zeros, Border, Reflection };

struct SampleOptions {
    SampleMode mode = SampleMode::Linear;
    SamplePadding padding = SamplePadding::Zeros;
    bool align_corners = false;
};

// One spatial axis of the sampled image.  Coordinates outside [low, high] are padding; reflection mirrors them at
// these borders (the pixel centres at the ends with align_corners, the image edges without).
template <typename F> struct SampleAxis {
    int64_t size;
    F low, high;
};

template <typename F> F reflect_coordinate(F x, F low, F high) {
    const F range = high - low;
    if (!(range > F(0))) return low;
    const bool below = x < low;
    const F distance = below ? low - x : x - high;
    if (!(distance > F(0))) return x;
    const F flips = std::floor(distance / range);
    const F rest = distance - flips * range;
    const bool even = std::fmod(flips, F(2)) == F(0);
    if (below) return even ? low + rest : high - rest;
    return even ? high - rest : low + rest;
}

constexpr int kMaxSampleTaps = 64;  // 4^3: bicubic over three spatial axes

int taps_per_axis(SampleMode mode) { return mode == SampleMode::Nearest ? 1 : mode == SampleMode::Linear ? 2 : 4; }

// The taps of one axis for a normalized grid coordinate: input indices and weights, a zero weight for a tap in
// zero padding.  Returns the tap count.  Follows the ONNX reference, which follows PyTorch's grid_sampler except for
// bicubic with border padding: the reference clamps the coordinate (the spec's "border values for out-of-bound
// locations"), PyTorch and ONNX Runtime clamp each tap.
template <typename F>
int axis_taps(const SampleOptions& o, const SampleAxis<F>& a, F normalized, int64_t* index, F* weight) {
    const F size = F(a.size);
    F x = o.align_corners ? (normalized + F(1)) / F(2) * (size - F(1)) : ((normalized + F(1)) * size - F(1)) / F(2);
    if (std::isnan(x)) x = F(-1);
    if (o.mode == SampleMode::Nearest) x = std::nearbyint(x);  // half to even, as PyTorch
    if (x < a.low || x > a.high) {
        if (o.padding == SamplePadding::Border) x = std::clamp(x, F(0), size - F(1));
        if (o.padding == SamplePadding::Reflection) x = reflect_coordinate(x, a.low, a.high);
    }
    // Only zero padding can leave x far outside (or NaN, from infinite coordinates); every tap then stays outside,
    // and the conversions stay defined.
    if (std::isnan(x)) x = F(-1);
    x = std::clamp(x, F(-4), size + F(3));
    const auto place = [&](int k, int64_t i, F w) {
        if (o.padding == SamplePadding::Reflection) i = int64_t(reflect_coordinate(F(i), a.low, a.high));
        if (o.padding == SamplePadding::Zeros && (i < 0 || i >= a.size)) {
            index[k] = 0;
            weight[k] = F(0);
            return;
        }
        index[k] = std::clamp<int64_t>(i, 0, a.size - 1);
        weight[k] = w;
    };
    switch (o.mode) {
        case SampleMode::Nearest: place(0, int64_t(x), F(1)); return 1;
        case SampleMode::Linear: {
            const F x0 = std::floor(x), t = x - x0;
            place(0, int64_t(x0), F(1) - t);
            place(1, int64_t(x0) + 1, t);
            return 2;
        }
        case SampleMode::Cubic: {
            const F x0 = std::floor(x), t = x - x0, alpha = F(-0.75);
            const int64_t i0 = int64_t(x0);
            place(0, i0 - 1, cubic_convolution_weight(t + F(1), alpha));
            place(1, i0, cubic_convolution_weight(t, alpha));
            place(2, i0 + 1, cubic_convolution_weight(F(1) - t, alpha));
            place(3, i0 + 2, cubic_convolution_weight(F(2) - t, alpha));
            return 4;
        }
    }
    return 0;
}

template <typename F>
void grid_sample(const SampleOptions& o, const Shape& x_shape, const Shape& grid_shape, const F* x, const F* grid,
                 F* y, ThreadPool& pool) {
    const size_t k = x_shape.size() - 2;
    const int64_t batches = x_shape[0], channels = x_shape[1];
    const int64_t plane = product(x_shape, 2, x_shape.size());
    const int64_t points = product(grid_shape, 1, grid_shape.size() - 1);
    const std::vector<int64_t> strides = contiguous_strides(Shape(x_shape.begin() + 2, x_shape.end()));
    std::vector<SampleAxis<F>> axes;
    for (size_t d = 0; d < k; ++d) {
        const F size = F(x_shape[d + 2]);
        axes.push_back(o.align_corners ? SampleAxis<F>{x_shape[d + 2], F(0), size - F(1)}
                                       : SampleAxis<F>{x_shape[d + 2], F(-0.5), size - F(0.5)});
    }
    int taps_per_point = 1;
    for (size_t d = 0; d < k; ++d) taps_per_point *= taps_per_axis(o.mode);

    // Points are handled in blocks: their taps are computed once, then applied to every channel.
    constexpr int64_t kBlock = 16;
    const int64_t blocks = (points + kBlock - 1) / kBlock;
    parallel_range(pool, batches * blocks, kBlock * taps_per_point * channels * 8, [&](int64_t begin, int64_t end) {
        std::array<int64_t, kBlock * kMaxSampleTaps> offsets;
        std::array<F, kBlock * kMaxSampleTaps> weights;
        for (int64_t item = begin; item < end; ++item) {
            const int64_t n = item / blocks;
            const int64_t first = (item % blocks) * kBlock;
            const int64_t count = std::min(kBlock, points - first);
            for (int64_t p = 0; p < count; ++p) {
                const F* g = grid + (n * points + first + p) * int64_t(k);
                int64_t* off = offsets.data() + p * kMaxSampleTaps;
                F* w = weights.data() + p * kMaxSampleTaps;
                off[0] = 0;
                w[0] = F(1);
                int taps = 1;
                for (size_t d = 0; d < k; ++d) {
                    // The grid lists coordinates innermost axis first: (x, y[, z]).
                    int64_t index[4];
                    F weight[4];
                    const int axis_count = axis_taps(o, axes[d], g[k - 1 - d], index, weight);
                    for (int t = taps; t-- > 0;) {
                        for (int a = axis_count; a-- > 0;) {
                            off[t * axis_count + a] = off[t] + index[a] * strides[d];
                            w[t * axis_count + a] = w[t] * weight[a];
                        }
                    }
                    taps *= axis_count;
                }
            }
            for (int64_t c = 0; c < channels; ++c) {
                const F* image = x + (n * channels + c) * plane;
                F* out = y + (n * channels + c) * points + first;
                for (int64_t p = 0; p < count; ++p) {
                    const int64_t* off = offsets.data() + p * kMaxSampleTaps;
                    const F* w = weights.data() + p * kMaxSampleTaps;
                    F sum = F(0);
                    for (int t = 0; t < taps_per_point; ++t) sum += w[t] * image[off[t]];
                    out[p] = sum;
                }
            }
        }
    });
}

class GridSampleKernel final : public Kernel {
public:
    explicit GridSampleKernel(const NodeInfo& info) : opset_(info.opset()) {
        // Opset 20 renamed bilinear/bicubic to linear/cubic (the interpolation became N-dimensional).
        const std::string mode = info.attr_string("mode", opset_ >= 20 ? "linear" : "bilinear");
        if (mode == "nearest") {
            options_.mode = SampleMode::Nearest;
        } else if (mode == (opset_ >= 20 ? "linear" : "bilinear")) {
            options_.mode = SampleMode::Linear;
        } else if (mode == (opset_ >= 20 ? "cubic" : "bicubic")) {
            options_.mode = SampleMode::Cubic;
        } else {
            throw KernelError("GridSample: unsupported mode '" + mode + "' in opset " + std::to_string(opset_));
        }
        const std::string padding = info.attr_string("padding_mode", "zeros");
        if (padding == "zeros") {
            options_.padding = SamplePadding::Zeros;
        } else if (padding == "border") {
            options_.padding = SamplePadding::Border;
        } else if (padding == "reflection") {
            options_.padding = SamplePadding::Reflection;
        } else {
            throw KernelError("GridSample: unsupported padding_mode '" + padding + "'");
        }
        options_.align_corners = info.attr_int("align_corners", 0) != 0;
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& grid = ctx.input(1);
        const size_t rank = x.rank();
        if (opset_ < 20 ? rank != 4 : rank < 3) {
            throw KernelError("GridSample: X must be " + std::string(opset_ < 20 ? "4-D" : "at least 3-D") + ", got " +
                              shape_string(x.shape));
        }
        const size_t k = rank - 2;
        if (grid.rank() != rank || grid.shape[0] != x.shape[0] || grid.shape.back() != int64_t(k)) {
            throw KernelError("GridSample: grid " + shape_string(grid.shape) + " does not match X " +
                              shape_string(x.shape) + " (expected [N, spatial..., " + std::to_string(k) + "])");
        }
        if (std::pow(double(taps_per_axis(options_.mode)), double(k)) > kMaxSampleTaps) {
            throw KernelError("GridSample: too many spatial dimensions (" + std::to_string(k) + ") for this mode");
        }
        Shape out_shape{x.shape[0], x.shape[1]};
        out_shape.insert(out_shape.end(), grid.shape.begin() + 1, grid.shape.end() - 1);
        Tensor& y = ctx.output(0, x.type, out_shape);
        if (y.size() == 0) return;
        if (x.size() == 0) throw KernelError("GridSample: cannot sample an empty image");
        with_compute_type(x.type, [&]<typename C>() {
            const ConvertedInput<C> image(x, ctx.pool());
            const ConvertedInput<C> coordinates(grid, ctx.pool());
            ConvertedOutput<C> result(y);
            grid_sample(options_, x.shape, grid.shape, image.data(), coordinates.data(), result.data(), ctx.pool());
            result.finish(ctx.pool());
        });
    }

private:
    int64_t opset_;
    SampleOptions options_;
};

// ---- AffineGrid --------------------------------------------------------------------------------------------------

class AffineGridKernel final : public Kernel {
public:
    explicit AffineGridKernel(const NodeInfo& info) : align_corners_(info.attr_int("align_corners", 0) != 0) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& theta = ctx.input(0);
        const std::vector<int64_t> size = read_integers(ctx.input(1), "AffineGrid size");
        if (size.size() != 4 && size.size() != 5) {
            throw KernelError("AffineGrid: size must have 4 (2-D) or 5 (3-D) entries, got " +
                              std::to_string(size.size()));
        }
        const int64_t k = int64_t(size.size()) - 2;  // spatial dimensions
        if (theta.rank() != 3 || theta.shape[0] != size[0] || theta.shape[1] != k || theta.shape[2] != k + 1) {
            throw KernelError("AffineGrid: theta " + shape_string(theta.shape) + " does not match size (expected [" +
                              std::to_string(size[0]) + ", " + std::to_string(k) + ", " + std::to_string(k + 1) + "])");
        }
        for (int64_t s : size) {
            if (s < 0) throw KernelError("AffineGrid: size must not be negative");
        }
        Shape out_shape{size[0]};
        out_shape.insert(out_shape.end(), size.begin() + 2, size.end());
        out_shape.push_back(k);
        Tensor& grid = ctx.output(0, theta.type, out_shape);
        if (grid.size() == 0) return;

        // Normalized base coordinates per spatial axis (outermost first), in the reference's double arithmetic.
        std::vector<std::vector<double>> base(static_cast<size_t>(k));
        for (int64_t d = 0; d < k; ++d) {
            const int64_t s = size[size_t(d + 2)];
            for (int64_t i = 0; i < s; ++i) {
                double v;
                if (align_corners_) {
                    v = s == 1 ? -1.0 : -1.0 + double(i) * (2.0 / double(s - 1));
                } else {
                    const double step = 2.0 / double(s);
                    v = -1.0 + step / 2 + double(i) * step;
                }
                base[size_t(d)].push_back(v);
            }
        }
        const ConvertedInput<double> matrices(theta, ctx.pool());
        ConvertedOutput<double> out(grid);
        const int64_t points = product(out_shape, 1, out_shape.size() - 1);
        const Shape spatial(size.begin() + 2, size.end());
        parallel_range(ctx.pool(), size[0] * points, k * (k + 1) * 8, [&](int64_t begin, int64_t end) {
            for (int64_t item = begin; item < end; ++item) {
                const double* m = matrices.data() + (item / points) * k * (k + 1);
                // The homogeneous point (x, y[, z], 1): innermost axis first.
                double point[4];
                int64_t rest = item % points;
                for (int64_t d = k; d-- > 0;) {
                    point[k - 1 - d] = base[size_t(d)][size_t(rest % spatial[size_t(d)])];
                    rest /= spatial[size_t(d)];
                }
                point[k] = 1.0;
                double* g = out.data() + item * k;
                for (int64_t r = 0; r < k; ++r) {
                    double sum = 0.0;
                    for (int64_t c = 0; c <= k; ++c) sum += m[r * (k + 1) + c] * point[c];
                    g[r] = sum;
                }
            }
        });
        out.finish(ctx.pool());
    }

private:
    bool align_corners_;
};

// ---- RoiAlign ----------------------------------------------------------------------------------------------------

// One bilinear sample of a region: four input offsets within a plane and their weights.
template <typename F> struct RoiSample {
    int64_t offset[4];
    F weight[4];
};

// A region of interest mapped onto the feature map.
template <typename F> struct RoiGeometry {
    int64_t batch;
    F start_h, start_w, bin_h, bin_w;
    int64_t grid_h, grid_w;  // samples per bin along each axis
};

class RoiAlignKernel final : public Kernel {
public:
    explicit RoiAlignKernel(const NodeInfo& info)
        : output_height_(info.attr_int("output_height", 1)),
          output_width_(info.attr_int("output_width", 1)),
          sampling_ratio_(info.attr_int("sampling_ratio", 0)),
          spatial_scale_(info.attr_float("spatial_scale", 1.0f)) {
        const std::string mode = info.attr_string("mode", "avg");
        if (mode != "avg" && mode != "max") throw KernelError("RoiAlign: unsupported mode '" + mode + "'");
        max_mode_ = mode == "max";
        // Opset 16 added the mode attribute with default half_pixel; before it, coordinates were not shifted.
        const std::string transform =
            info.attr_string("coordinate_transformation_mode", info.opset() >= 16 ? "half_pixel" : "output_half_pixel");
        if (transform != "half_pixel" && transform != "output_half_pixel") {
            throw KernelError("RoiAlign: unsupported coordinate_transformation_mode '" + transform + "'");
        }
        half_pixel_ = transform == "half_pixel";
        if (output_height_ <= 0 || output_width_ <= 0) throw KernelError("RoiAlign: output size must be positive");
        if (sampling_ratio_ < 0) throw KernelError("RoiAlign: sampling_ratio must not be negative");
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& rois = ctx.input(1);
        const Tensor& batch_indices = ctx.input(2);
        if (x.rank() != 4) throw KernelError("RoiAlign: X must be 4-D, got " + shape_string(x.shape));
        if (rois.rank() != 2 || rois.shape[1] != 4) {
            throw KernelError("RoiAlign: rois must be [num_rois, 4], got " + shape_string(rois.shape));
        }
        if (batch_indices.rank() != 1 || batch_indices.shape[0] != rois.shape[0]) {
            throw KernelError("RoiAlign: batch_indices " + shape_string(batch_indices.shape) + " does not match rois " +
                              shape_string(rois.shape));
        }
        const std::vector<int64_t> batches = read_integers(batch_indices, "RoiAlign batch_indices");
        Tensor& y = ctx.output(0, x.type, {rois.shape[0], x.shape[1], output_height_, output_width_});
        if (y.size() == 0) return;
        with_compute_type(x.type, [&]<typename C>() {
            const ConvertedInput<C> image(x, ctx.pool());
            const ConvertedInput<C> regions(rois, ctx.pool());
            ConvertedOutput<C> result(y);
            run<C>(x.shape, image.data(), regions.data(), batches, result.data(), ctx.pool());
            result.finish(ctx.pool());
        });
    }

private:
    template <typename F>
    void run(const Shape& x_shape, const F* x, const F* rois, const std::vector<int64_t>& batches, F* y,
             ThreadPool& pool) const {
        const int64_t channels = x_shape[1], height = x_shape[2], width = x_shape[3];
        const int64_t bins = output_height_ * output_width_;
        std::vector<RoiGeometry<F>> regions;
        for (size_t r = 0; r < batches.size(); ++r) {
            if (batches[r] < 0 || batches[r] >= x_shape[0]) {
                throw KernelError("RoiAlign: batch index " + std::to_string(batches[r]) + " is out of range");
            }
            regions.push_back(geometry(rois + r * 4, batches[r]));
        }
        if (height == 0 || width == 0) throw KernelError("RoiAlign: X has an empty spatial dimension");

        // Work items are (region, block of channels); each computes its region's samples once for its channels.
        // Regions split into channel blocks only as far as needed to give every thread a few items.
        const int64_t regions_count = std::max<int64_t>(int64_t(regions.size()), 1);
        const int64_t splits = std::clamp<int64_t>((4 * int64_t(pool.size()) + regions_count - 1) / regions_count, 1,
                                                   std::max<int64_t>(channels, 1));
        const int64_t channel_block = std::max<int64_t>((channels + splits - 1) / splits, 1);
        const int64_t blocks = (channels + channel_block - 1) / channel_block;
        const int64_t items = int64_t(regions.size()) * blocks;
        parallel_range(pool, items, channel_block * bins * 64, [&](int64_t begin, int64_t end) {
            for (int64_t item = begin; item < end; ++item) {
                const RoiGeometry<F>& g = regions[size_t(item / blocks)];
                const int64_t first = (item % blocks) * channel_block;
                const int64_t last = std::min(channels, first + channel_block);
                const int64_t per_bin = g.grid_h * g.grid_w;
                RoiSample<F>* samples = thread_scratch_buffer<RoiSample<F>>(bins * per_bin);
                fill_samples(g, height, width, samples);
                const F count = F(std::max<int64_t>(per_bin, 1));
                for (int64_t c = first; c < last; ++c) {
                    const F* plane = x + (g.batch * channels + c) * height * width;
                    F* out = y + ((item / blocks) * channels + c) * bins;
                    for (int64_t b = 0; b < bins; ++b) {
                        const RoiSample<F>* s = samples + b * per_bin;
                        F value = F(0);
                        for (int64_t i = 0; i < per_bin; ++i) {
                            if (max_mode_) {
                                // ONNX takes the largest weighted corner, not the interpolated value.
                                F v = s[i].weight[0] * plane[s[i].offset[0]];
                                for (int q = 1; q < 4; ++q) v = std::max(v, s[i].weight[q] * plane[s[i].offset[q]]);
                                value = i == 0 ? v : std::max(value, v);
                            } else {
                                for (int q = 0; q < 4; ++q) value += s[i].weight[q] * plane[s[i].offset[q]];
                            }
                        }
                        out[b] = max_mode_ ? value : value / count;
                    }
                }
            }
        });
    }

    template <typename F> RoiGeometry<F> geometry(const F* roi, int64_t batch) const {
        for (int i = 0; i < 4; ++i) {
            if (!std::isfinite(roi[i])) throw KernelError("RoiAlign: roi coordinates must be finite");
        }
        const F scale = F(spatial_scale_);
        const F offset = half_pixel_ ? F(0.5) : F(0);
        RoiGeometry<F> g;
        g.batch = batch;
        g.start_w = roi[0] * scale - offset;
        g.start_h = roi[1] * scale - offset;
        F roi_w = (roi[2] * scale - offset) - g.start_w;
        F roi_h = (roi[3] * scale - offset) - g.start_h;
        if (!half_pixel_) {  // malformed regions become 1x1
            roi_w = std::max(roi_w, F(1));
            roi_h = std::max(roi_h, F(1));
        }
        g.bin_h = roi_h / F(output_height_);
        g.bin_w = roi_w / F(output_width_);
        // Adaptive sampling: about one sample per input pixel of a bin.
        const auto samples = [&](F extent, int64_t bins) -> int64_t {
            if (sampling_ratio_ > 0) return sampling_ratio_;
            const double n = std::ceil(double(extent) / double(bins));
            if (n > 1.0e6) throw KernelError("RoiAlign: region too large for adaptive sampling");
            return n > 0 ? int64_t(n) : 0;
        };
        g.grid_h = samples(roi_h, output_height_);
        g.grid_w = samples(roi_w, output_width_);
        if (double(g.grid_h) * double(g.grid_w) * double(output_height_ * output_width_) > 1.0e9) {
            throw KernelError("RoiAlign: too many samples per region");
        }
        return g;
    }

    template <typename F>
    void fill_samples(const RoiGeometry<F>& g, int64_t height, int64_t width, RoiSample<F>* samples) const {
        for (int64_t ph = 0; ph < output_height_; ++ph) {
            for (int64_t pw = 0; pw < output_width_; ++pw) {
                for (int64_t iy = 0; iy < g.grid_h; ++iy) {
                    const F yy = g.start_h + F(ph) * g.bin_h + (F(iy) + F(0.5)) * g.bin_h / F(g.grid_h);
                    for (int64_t ix = 0; ix < g.grid_w; ++ix) {
                        const F xx = g.start_w + F(pw) * g.bin_w + (F(ix) + F(0.5)) * g.bin_w / F(g.grid_w);
                        *samples++ = bilinear_sample(yy, xx, height, width);
                    }
                }
            }
        }
    }

    template <typename F> static RoiSample<F> bilinear_sample(F y, F x, int64_t height, int64_t width) {
        RoiSample<F> s{};
        if (y < F(-1) || y > F(height) || x < F(-1) || x > F(width)) return s;  // outside: contributes 0
        y = std::max(y, F(0));
        x = std::max(x, F(0));
        int64_t y_low = int64_t(y), x_low = int64_t(x), y_high, x_high;
        if (y_low >= height - 1) {
            y_high = y_low = height - 1;
            y = F(y_low);
        } else {
            y_high = y_low + 1;
        }
        if (x_low >= width - 1) {
            x_high = x_low = width - 1;
            x = F(x_low);
        } else {
            x_high = x_low + 1;
        }
        const F ly = y - F(y_low), lx = x - F(x_low), hy = F(1) - ly, hx = F(1) - lx;
        s.offset[0] = y_low * width + x_low;
        s.offset[1] = y_low * width + x_high;
        s.offset[2] = y_high * width + x_low;
        s.offset[3] = y_high * width + x_high;
        s.weight[0] = hy * hx;
        s.weight[1] = hy * lx;
        s.weight[2] = ly * hx;
        s.weight[3] = ly * lx;
        return s;
    }

    int64_t output_height_, output_width_, sampling_ratio_;
    float spatial_scale_;
    bool max_mode_ = false;
    bool half_pixel_ = false;
};

// ---- CenterCropPad -----------------------------------------------------------------------------------------------

class CenterCropPadKernel final : public Kernel {
public:
    explicit CenterCropPadKernel(const NodeInfo& info) : axes_(info.attr_ints("axes")) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const size_t rank = input.rank();
        const std::vector<int64_t> target = read_integers(ctx.input(1), "CenterCropPad shape");
        std::vector<size_t> axes;
        if (axes_.empty()) {
            for (size_t d = 0; d < rank; ++d) axes.push_back(d);
        } else {
            for (int64_t a : axes_) axes.push_back(normalize_axis("CenterCropPad", a, rank));
        }
        if (target.size() != axes.size()) {
            throw KernelError("CenterCropPad: shape has " + std::to_string(target.size()) + " entries, expected " +
                              std::to_string(axes.size()));
        }
        // Per dimension: the copied extent, where it starts in the input (crop) and in the output (pad).  An odd
        // difference puts the extra element at the end.
        Shape out_shape = input.shape, extent = input.shape;
        std::vector<int64_t> src_begin(rank, 0), dst_begin(rank, 0);
        for (size_t i = 0; i < axes.size(); ++i) {
            const size_t d = axes[i];
            if (target[i] < 0) throw KernelError("CenterCropPad: shape must not be negative");
            out_shape[d] = target[i];
            extent[d] = std::min(target[i], input.shape[d]);
            if (target[i] < input.shape[d]) src_begin[d] = (input.shape[d] - target[i]) / 2;
            if (target[i] > input.shape[d]) dst_begin[d] = (target[i] - input.shape[d]) / 2;
        }
        Tensor& output = ctx.output(0, input.type, out_shape);
        if (output.size() == 0) return;
        movement::move_elements(ctx.host(), input, output, [&](const movement::MoveBuffers& b) {
            copy_box(b, input.shape, out_shape, extent, src_begin, dst_begin, ctx.pool());
        });
    }

private:
    // Output = padding everywhere except the box `extent`, copied from the input.
    static void copy_box(const movement::MoveBuffers& b, const Shape& in_shape, const Shape& out_shape,
                         const Shape& extent, const std::vector<int64_t>& src_begin,
                         const std::vector<int64_t>& dst_begin, ThreadPool& pool) {
        const size_t es = b.element_size;
        movement::fill_elements(b.outputs[0], b.fill, es, shape_size(out_shape), pool);
        if (shape_size(extent) == 0) return;
        const size_t rank = in_shape.size();
        if (rank == 0) {
            std::memcpy(b.outputs[0], b.inputs[0], es);
            return;
        }
        const std::vector<int64_t> in_strides = contiguous_strides(in_shape);
        const std::vector<int64_t> out_strides = contiguous_strides(out_shape);
        const int64_t row = extent.back();
        const int64_t rows = shape_size(extent) / row;
        parallel_range(pool, rows, row * int64_t(es), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                int64_t src = src_begin.back(), dst = dst_begin.back();
                int64_t rest = r;
                for (size_t d = rank - 1; d-- > 0;) {
                    const int64_t i = rest % extent[d];
                    rest /= extent[d];
                    src += (i + src_begin[d]) * in_strides[d];
                    dst += (i + dst_begin[d]) * out_strides[d];
                }
                std::memcpy(b.outputs[0] + size_t(dst) * es, b.inputs[0] + size_t(src) * es, size_t(row) * es);
            }
        });
    }

    std::vector<int64_t> axes_;
};

// ---- Col2Im ------------------------------------------------------------------------------------------------------

class Col2ImKernel final : public Kernel {
public:
    explicit Col2ImKernel(const NodeInfo& info)
        : dilations_(info.attr_ints("dilations")), pads_(info.attr_ints("pads")), strides_(info.attr_ints("strides")) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& input = ctx.input(0);
        const std::vector<int64_t> image = read_integers(ctx.input(1), "Col2Im image_shape");
        const std::vector<int64_t> block = read_integers(ctx.input(2), "Col2Im block_shape");
        const size_t k = image.size();
        if (k == 0 || block.size() != k) {
            throw KernelError("Col2Im: image_shape and block_shape must be non-empty and of equal length");
        }
        if (input.rank() != 3) throw KernelError("Col2Im: input must be [N, C * prod(block_shape), L], got " +
                                                 shape_string(input.shape));
        WindowGeometry g;
        g.input = image;
        g.kernel = block;
        g.strides = strides_.empty() ? Shape(k, 1) : strides_;
        g.dilations = dilations_.empty() ? Shape(k, 1) : dilations_;
        const Shape pads = pads_.empty() ? Shape(2 * k, 0) : pads_;
        if (g.strides.size() != k || g.dilations.size() != k || pads.size() != 2 * k) {
            throw KernelError("Col2Im: strides, dilations and pads must match the image rank");
        }
        g.pads_begin.assign(pads.begin(), pads.begin() + int64_t(k));
        g.pads_end.assign(pads.begin() + int64_t(k), pads.end());
        for (size_t d = 0; d < k; ++d) {
            if (image[d] < 0 || block[d] <= 0 || g.strides[d] <= 0 || g.dilations[d] <= 0 || g.pads_begin[d] < 0 ||
                g.pads_end[d] < 0) {
                throw KernelError("Col2Im: invalid image, block, stride, dilation or pad values");
            }
            const int64_t span = g.dilations[d] * (block[d] - 1) + 1;
            const int64_t blocks = (image[d] + g.pads_begin[d] + g.pads_end[d] - span) / g.strides[d] + 1;
            if (image[d] + g.pads_begin[d] + g.pads_end[d] < span) {
                throw KernelError("Col2Im: the block does not fit into the padded image");
            }
            g.output.push_back(blocks);
        }
        const int64_t kernel_size = g.kernel_size();
        if (input.shape[1] % kernel_size != 0) {
            throw KernelError("Col2Im: input dimension 1 (" + std::to_string(input.shape[1]) +
                              ") is not a multiple of prod(block_shape) = " + std::to_string(kernel_size));
        }
        if (input.shape[2] != g.output_size()) {
            throw KernelError("Col2Im: input dimension 2 (" + std::to_string(input.shape[2]) + ") must equal the " +
                              std::to_string(g.output_size()) + " block positions");
        }
        const int64_t channels = input.shape[0] * (input.shape[1] / kernel_size);
        Shape out_shape{input.shape[0], input.shape[1] / kernel_size};
        out_shape.insert(out_shape.end(), image.begin(), image.end());
        Tensor& output = ctx.output(0, input.type, out_shape);
        if (output.size() == 0) return;
        with_compute_type(input.type, [&]<typename C>() {
            const ConvertedInput<C> columns(input, ctx.pool());
            ConvertedOutput<C> result(output);
            C* out = result.data();
            std::fill(out, out + output.size(), C(0));
            // The batch folds into the channels: image n, channel c is channel n * C + c of both layouts.
            parallel_range(ctx.pool(), channels, kernel_size * g.output_size() * int64_t(sizeof(C)),
                           [&](int64_t first, int64_t last) { col2im_channels(g, columns.data(), first, last, out); });
            result.finish(ctx.pool());
        });
    }

private:
    std::vector<int64_t> dilations_, pads_, strides_;
};

// ---- MaxUnpool ---------------------------------------------------------------------------------------------------

class MaxUnpoolKernel final : public Kernel {
public:
    explicit MaxUnpoolKernel(const NodeInfo& info)
        : kernel_(info.attr_ints("kernel_shape")), pads_(info.attr_ints("pads")), strides_(info.attr_ints("strides")) {
        if (kernel_.empty()) throw KernelError("MaxUnpool: kernel_shape is required");
        if (!pads_.empty() && pads_.size() != 2 * kernel_.size()) {
            throw KernelError("MaxUnpool: pads must have 2 entries per kernel dimension");
        }
        if (!strides_.empty() && strides_.size() != kernel_.size()) {
            throw KernelError("MaxUnpool: strides must have one entry per kernel dimension");
        }
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        const size_t k = kernel_.size();
        if (x.rank() != k + 2) {
            throw KernelError("MaxUnpool: X " + shape_string(x.shape) + " does not match kernel_shape rank " +
                              std::to_string(k));
        }
        if (indices.shape != x.shape) {
            throw KernelError("MaxUnpool: I " + shape_string(indices.shape) + " must have X's shape " +
                              shape_string(x.shape));
        }
        // The shape MaxPool's input had, as far as the pooling geometry tells.
        Shape unpooled{x.shape[0], x.shape[1]};
        for (size_t d = 0; d < k; ++d) {
            const int64_t stride = strides_.empty() ? 1 : strides_[d];
            const int64_t pads = pads_.empty() ? 0 : pads_[d] + pads_[k + d];
            unpooled.push_back((x.shape[d + 2] - 1) * stride - pads + kernel_[d]);
            if (unpooled.back() < 0) throw KernelError("MaxUnpool: negative output size");
        }
        Shape out_shape = unpooled;
        if (ctx.has_input(2) && ctx.input(2).size() > 0) {
            out_shape = read_integers(ctx.input(2), "MaxUnpool output_shape");
            if (out_shape.size() != x.rank()) throw KernelError("MaxUnpool: output_shape must have X's rank");
            for (size_t d = 0; d < out_shape.size(); ++d) {
                if (out_shape[d] < unpooled[d]) {
                    throw KernelError("MaxUnpool: output_shape " + shape_string(out_shape) +
                                      " is smaller than the unpooled shape " + shape_string(unpooled));
                }
            }
        }
        const std::vector<int64_t> where = read_integers(indices, "MaxUnpool I");
        const int64_t unpooled_size = shape_size(unpooled);
        for (int64_t i : where) {
            if (i < 0 || i >= unpooled_size) {
                throw KernelError("MaxUnpool: index " + std::to_string(i) + " is out of range for " +
                                  shape_string(unpooled));
            }
        }
        Tensor& y = ctx.output(0, x.type, out_shape);
        if (y.size() == 0) return;
        const size_t es = movement::element_size(x.type);
        if (es == 0) throw_unsupported_type("MaxUnpool", x.type);
        std::memset(y.data, 0, y.byte_size());
        // Indices address the unpooled shape; a larger output_shape keeps that block at its origin.
        const bool same = out_shape == unpooled;
        const std::vector<int64_t> out_strides = contiguous_strides(out_shape);
        movement::with_word(es, [&]<typename W>() {
            const W* src = static_cast<const W*>(x.data);
            W* dst = static_cast<W*>(y.data);
            for (size_t e = 0; e < where.size(); ++e) {
                int64_t target = where[e];
                if (!same) {
                    int64_t rest = target;
                    target = 0;
                    for (size_t d = unpooled.size(); d-- > 0;) {
                        target += (rest % unpooled[d]) * out_strides[d];
                        rest /= unpooled[d];
                    }
                }
                dst[target] = src[e];
            }
        });
    }

private:
    std::vector<int64_t> kernel_, pads_, strides_;
};

// ---- NonMaxSuppression -------------------------------------------------------------------------------------------

// A box as corner extents and area, in float as the reference computes IoU.
struct NmsBox {
    float x_min, x_max, y_min, y_max, area;
};

class NonMaxSuppressionKernel final : public Kernel {
public:
    explicit NonMaxSuppressionKernel(const NodeInfo& info) : center_point_box_(info.attr_int("center_point_box", 0)) {
        if (center_point_box_ != 0 && center_point_box_ != 1) {
            throw KernelError("NonMaxSuppression: center_point_box must be 0 or 1");
        }
    }

    void compute(KernelContext& ctx) const override {
        const Tensor& boxes = ctx.input(0);
        const Tensor& scores = ctx.input(1);
        if (boxes.rank() != 3 || boxes.shape[2] != 4) {
            throw KernelError("NonMaxSuppression: boxes must be [batches, boxes, 4], got " + shape_string(boxes.shape));
        }
        if (scores.rank() != 3 || scores.shape[0] != boxes.shape[0] || scores.shape[2] != boxes.shape[1]) {
            throw KernelError("NonMaxSuppression: scores " + shape_string(scores.shape) + " do not match boxes " +
                              shape_string(boxes.shape));
        }
        const auto present = [&](size_t i) { return ctx.has_input(i) && ctx.input(i).size() > 0; };
        const int64_t max_per_class =
            present(2) ? std::max<int64_t>(read_integers(ctx.input(2), "NonMaxSuppression max_output")[0], 0) : 0;
        const float iou_threshold = present(3) ? scalar(ctx.input(3)) : 0.0f;
        const bool filter_scores = present(4);
        const float score_threshold = filter_scores ? scalar(ctx.input(4)) : 0.0f;

        const int64_t batches = boxes.shape[0], count = boxes.shape[1], classes = scores.shape[1];
        const ConvertedInput<float> box_data(boxes, ctx.pool());
        const ConvertedInput<float> score_data(scores, ctx.pool());
        std::vector<NmsBox> extents(size_t(batches * count));
        for (size_t i = 0; i < extents.size(); ++i) extents[i] = extent(box_data.data() + i * 4);

        // Each (batch, class) selects at most `cap` boxes into its own slot; the slots are concatenated afterwards.
        const int64_t cap = std::min(max_per_class, count);
        std::vector<int64_t> selected(size_t(batches * classes * cap));
        std::vector<int64_t> selected_count(size_t(batches * classes), 0);
        if (cap > 0) {
            parallel_range(ctx.pool(), batches * classes, count * 64, [&](int64_t begin, int64_t end) {
                int64_t* order = thread_scratch_buffer<int64_t>(count);
                for (int64_t bc = begin; bc < end; ++bc) {
                    const float* s = score_data.data() + bc * count;
                    const NmsBox* batch_boxes = extents.data() + (bc / classes) * count;
                    int64_t candidates = 0;
                    for (int64_t i = 0; i < count; ++i) {
                        if (!filter_scores || s[i] > score_threshold) order[candidates++] = i;
                    }
                    // Highest score first, ties by box index; NaN scores rank last.
                    constexpr float kLowest = -std::numeric_limits<float>::infinity();
                    const auto key = [&](int64_t i) { return std::isnan(s[i]) ? kLowest : s[i]; };
                    std::sort(order, order + candidates, [&](int64_t a, int64_t b) {
                        const float ka = key(a), kb = key(b);
                        return ka != kb ? ka > kb : a < b;
                    });
                    int64_t* chosen = selected.data() + bc * cap;
                    int64_t chosen_count = 0;
                    for (int64_t c = 0; c < candidates && chosen_count < cap; ++c) {
                        const NmsBox& box = batch_boxes[order[c]];
                        bool keep = true;
                        for (int64_t j = 0; j < chosen_count && keep; ++j) {
                            keep = !overlaps(box, batch_boxes[chosen[j]], iou_threshold);
                        }
                        if (keep) chosen[chosen_count++] = order[c];
                    }
                    selected_count[size_t(bc)] = chosen_count;
                }
            });
        }
        int64_t total = 0;
        for (int64_t n : selected_count) total += n;
        Tensor& out = ctx.output(0, TESS_ELEMENT_INT64, {total, 3});
        int64_t* row = out.ptr<int64_t>();
        for (int64_t bc = 0; bc < batches * classes; ++bc) {
            for (int64_t j = 0; j < selected_count[size_t(bc)]; ++j) {
                *row++ = bc / classes;
                *row++ = bc % classes;
                *row++ = selected[size_t(bc * cap + j)];
            }
        }
    }

private:
    static float scalar(const Tensor& t) {
        double v = 0.0;
        convert::load_doubles(t.type, t.data, 0, 1, &v);
        return float(v);
    }

    NmsBox extent(const float* b) const {
        NmsBox box;
        if (center_point_box_ == 0) {  // [y1, x1, y2, x2], corners in either order
            box.x_min = std::min(b[1], b[3]);
            box.x_max = std::max(b[1], b[3]);
            box.y_min = std::min(b[0], b[2]);
            box.y_max = std::max(b[0], b[2]);
        } else {  // [x_center, y_center, width, height]
            const float half_w = b[2] / 2, half_h = b[3] / 2;
            box.x_min = b[0] - half_w;
            box.x_max = b[0] + half_w;
            box.y_min = b[1] - half_h;
            box.y_max = b[1] + half_h;
        }
        box.area = (box.x_max - box.x_min) * (box.y_max - box.y_min);
        return box;
    }

    // Whether two boxes overlap by more than the IoU threshold.
    static bool overlaps(const NmsBox& a, const NmsBox& b, float threshold) {
        const float x_min = std::max(a.x_min, b.x_min), x_max = std::min(a.x_max, b.x_max);
        if (!(x_max > x_min)) return false;
        const float y_min = std::max(a.y_min, b.y_min), y_max = std::min(a.y_max, b.y_max);
        if (!(y_max > y_min)) return false;
        const float intersection = (x_max - x_min) * (y_max - y_min);
        if (!(intersection > 0) || !(a.area > 0) || !(b.area > 0)) return false;
        const float union_area = a.area + b.area - intersection;
        if (!(union_area > 0)) return false;
        return intersection / union_area > threshold;
    }

    int64_t center_point_box_;
};

}  // namespace

void register_image_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> floats = type_ids_with_16bit_floats(FloatTypes{});
    registry.add({"", "GridSample", 16, 19, {{0, floats}, {1, floats}}, KernelMemory::Normal,
                  make_factory<GridSampleKernel>()});
    registry.add({"", "GridSample", 20, 0, {{0, floats}, {1, floats}}, KernelMemory::Normal,
                  make_factory<GridSampleKernel>()});
    registry.add({"", "AffineGrid", 20, 0, {{0, floats}}, KernelMemory::Normal, make_factory<AffineGridKernel>()});
    registry.add({"", "RoiAlign", 10, 15, {{0, floats}, {1, floats}}, KernelMemory::Normal,
                  make_factory<RoiAlignKernel>()});
    registry.add({"", "RoiAlign", 16, 0, {{0, floats}, {1, floats}}, KernelMemory::Normal,
                  make_factory<RoiAlignKernel>()});
    registry.add({"", "CenterCropPad", 18, 0, {}, KernelMemory::Normal, make_factory<CenterCropPadKernel>()});
    registry.add({"", "Col2Im", 18, 0, {{0, floats}}, KernelMemory::Normal, make_factory<Col2ImKernel>()});
    registry.add({"", "MaxUnpool", 9, 0, {{0, type_ids_with_16bit_floats(NumericTypes{})}}, KernelMemory::Normal,
                  make_factory<MaxUnpoolKernel>()});
    registry.add({"", "NonMaxSuppression", 10, 0, {{0, types::kFloat}, {1, types::kFloat}}, KernelMemory::Normal,
                  make_factory<NonMaxSuppressionKernel>()});
}

}  // namespace tessera::cpu
