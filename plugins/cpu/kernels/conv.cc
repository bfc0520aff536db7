// CPU provider: Conv and ConvTranspose (float, double), N-d spatial, grouped.
//
// Conv runs as im2col + gemm per image and group (the column matrix is skipped for 1x1 unit-stride unpadded
// kernels, where the image already is the column matrix), with the bias added by the gemm workers while their block
// is in cache.  Depthwise 2-D convolutions (one input channel per group) run as direct loops, since their per-group
// products are too thin for gemm.  ConvTranspose runs as gemm (W^T x image) + col2im.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "kernels/all_kernels.h"
#include "util/gemm.h"
#include "util/im2col.h"

namespace tessera::cpu {

namespace {

template <typename T> std::unique_ptr<T[]> uninitialized_buffer(int64_t count) {
    return std::unique_ptr<T[]>(new T[static_cast<size_t>(std::max<int64_t>(count, 1))]);
}

std::string dims_string(const std::vector<int64_t>& v) { return shape_string(v); }

// A per-thread scratch buffer of at least `count` elements, reused across calls (tasks on one thread never nest).
template <typename T> T* thread_scratch(int64_t count) {
    thread_local std::vector<T> scratch;
    if (scratch.size() < static_cast<size_t>(count)) scratch.resize(static_cast<size_t>(count));
    return scratch.data();
}

// What Conv and ConvTranspose share: attributes, and weights/bias copied at creation when they are constants.
class ConvKernelBase : public Kernel {
protected:
    explicit ConvKernelBase(const NodeInfo& info)
        : op_(info.op_type()),
          attrs_(WindowAttributes::parse(info)),
          group_(info.attr_int("group", 1)),
          weights_(copy_constant_input(info, 1)),
          bias_(copy_constant_input(info, 2)) {
        if (group_ < 1) throw KernelError(op_ + ": group must be positive, got " + std::to_string(group_));
    }

    const Tensor& weights(const KernelContext& ctx) const { return weights_ ? weights_->tensor() : ctx.input(1); }
    const Tensor* bias(const KernelContext& ctx) const {
        if (bias_) return &bias_->tensor();
        return ctx.has_input(2) ? &ctx.input(2) : nullptr;
    }

    // Checks what both ops require of X, W and B; returns W's spatial dimensions (the kernel).
    Shape check_inputs(const Tensor& X, const Tensor& W, const Tensor* B, int64_t bias_size_of_w) const {
        if (X.type != TESS_ELEMENT_FLOAT32 && X.type != TESS_ELEMENT_FLOAT64) throw_unsupported_type(op_, X.type);
        if (W.type != X.type || (B != nullptr && B->type != X.type)) {
            throw KernelError(op_ + ": X, W and B must have the same element type");
        }
        if (X.rank() < 3) throw KernelError(op_ + ": X " + shape_string(X.shape) + " must be [N, C, D1, ...]");
        if (W.rank() != X.rank()) {
            throw KernelError(op_ + ": W " + shape_string(W.shape) + " must have the rank of X " +
                              shape_string(X.shape));
        }
        Shape kernel(W.shape.begin() + 2, W.shape.end());
        if (!attrs_.kernel_shape.empty() && attrs_.kernel_shape != kernel) {
            throw KernelError(op_ + ": kernel_shape " + dims_string(attrs_.kernel_shape) +
                              " does not match W " + shape_string(W.shape));
        }
        if (B != nullptr && (B->rank() != 1 || B->shape[0] != bias_size_of_w)) {
            throw KernelError(op_ + ": B " + shape_string(B->shape) + " must be [" + std::to_string(bias_size_of_w) +
                              "]");
        }
        return kernel;
    }

    std::string op_;
    WindowAttributes attrs_;
    int64_t group_;
    std::optional<OwnedTensor> weights_;
    std::optional<OwnedTensor> bias_;
};

// Direct 2-D convolution for one input channel per group (depthwise, possibly with a channel multiplier).
template <typename T>
void depthwise_conv2d(ThreadPool& pool, const WindowGeometry& g, const T* x, const T* w, const T* bias, int64_t batch,
                      int64_t in_channels, int64_t out_channels, T* y) {
    const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], OW = g.output[1];
    const int64_t KH = g.kernel[0], KW = g.kernel[1];
    const int64_t SH = g.strides[0], SW = g.strides[1], DH = g.dilations[0], DW = g.dilations[1];
    const int64_t PH = g.pads_begin[0], PW = g.pads_begin[1];
    const int64_t multiplier = out_channels / in_channels;
    const int64_t plane_work = std::max<int64_t>(1, OH * OW * KH * KW);
    pool.parallel_for(batch * out_channels, std::max<int64_t>(1, 65536 / plane_work), [&](int64_t begin,
                                                                                          int64_t end) {
        for (int64_t plane = begin; plane < end; ++plane) {
            const int64_t n = plane / out_channels, oc = plane % out_channels;
            const T* xp = x + (n * in_channels + oc / multiplier) * H * W;
            const T* wp = w + oc * KH * KW;
            T* yp = y + plane * OH * OW;
            const T b = bias != nullptr ? bias[oc] : T(0);
            for (int64_t oh = 0; oh < OH; ++oh) {
                T* yrow = yp + oh * OW;
                std::fill(yrow, yrow + OW, b);
                for (int64_t i = 0; i < KH; ++i) {
                    const int64_t ih = oh * SH - PH + i * DH;
                    if (ih < 0 || ih >= H) continue;
                    const T* xrow = xp + ih * W;
                    for (int64_t j = 0; j < KW; ++j) {
                        const T wv = wp[i * KW + j];
                        const int64_t offset = j * DW - PW;
                        const TapRange r = taps_inside(offset, OW, SW, W);
                        if (SW == 1) {
                            for (int64_t ow = r.first; ow < r.last; ++ow) yrow[ow] += wv * xrow[ow + offset];
                        } else {
                            for (int64_t ow = r.first; ow < r.last; ++ow) yrow[ow] += wv * xrow[ow * SW + offset];
                        }
                    }
                }
            }
        }
    });
}

class ConvKernel final : public ConvKernelBase {
public:
    explicit ConvKernel(const NodeInfo& info) : ConvKernelBase(info) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        const Tensor& W = weights(ctx);
        const Tensor* B = bias(ctx);
        const int64_t M = W.rank() > 0 ? W.shape[0] : 0;
        const Shape kernel = check_inputs(X, W, B, M);
        const int64_t N = X.shape[0], C = X.shape[1];
        if (C % group_ != 0 || C / group_ != W.shape[1] || M % group_ != 0) {
            throw KernelError("Conv: X " + shape_string(X.shape) + " and W " + shape_string(W.shape) +
                              " do not fit group=" + std::to_string(group_));
        }
        const WindowGeometry g = resolve_window("Conv", attrs_, Shape(X.shape.begin() + 2, X.shape.end()), kernel);
        Shape y_shape{N, M};
        y_shape.insert(y_shape.end(), g.output.begin(), g.output.end());
        Tensor& Y = ctx.output(0, X.type, y_shape);
        if (Y.size() == 0) return;
        dispatch<float, double>(X.type, [&]<typename T>() {
            const T* bias_data = B != nullptr ? B->ptr<T>() : nullptr;
            if (group_ > 1 && C == group_ && g.rank() == 2) {
                depthwise_conv2d<T>(ctx.pool(), g, X.ptr<T>(), W.ptr<T>(), bias_data, N, C, M, Y.ptr<T>());
            } else {
                run_gemm<T>(ctx.pool(), g, X.ptr<T>(), W.ptr<T>(), bias_data, N, C, M, Y.ptr<T>());
            }
        });
    }

private:
    template <typename T>
    void run_gemm(ThreadPool& pool, const WindowGeometry& g, const T* x, const T* w, const T* bias, int64_t N,
                  int64_t C, int64_t M, T* y) const {
        const int64_t Cg = C / group_, Mg = M / group_;
        const int64_t in_size = g.input_size(), out_size = g.output_size();
        const int64_t depth = Cg * g.kernel_size();  // the product's inner dimension
        auto add_bias = [&](T* out, int64_t grp, int64_t c0, int64_t c1) {
            if (bias == nullptr) return;
            for (int64_t r = 0; r < Mg; ++r) {
                T* row = out + r * out_size;
                const T v = bias[grp * Mg + r];
                for (int64_t c = c0; c < c1; ++c) row[c] += v;
            }
        };
        if (!g.is_pointwise() && out_size >= kTiledMinWidthPerFilter * Mg) {
            run_tiled<T>(pool, g, x, w, N, C, M, y, add_bias);
            return;
        }
        // Whole products split across the pool: 1x1 convolutions read the image directly; small images with many
        // filters build the whole column matrix and let gemm split the filters.
        const bool pointwise = g.is_pointwise();
        std::unique_ptr<T[]> col;
        if (!pointwise) col = uninitialized_buffer<T>(depth * out_size);
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t grp = 0; grp < group_; ++grp) {
                const T* image = x + (n * C + grp * Cg) * in_size;
                const T* columns = image;
                if (!pointwise) {
                    im2col(pool, g, image, Cg, col.get());
                    columns = col.get();
                }
                T* out = y + (n * M + grp * Mg) * out_size;
                GemmEpilogue epilogue;
                if (bias != nullptr) {
                    epilogue = [&, out, grp](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
                        for (int64_t r = r0; r < r1; ++r) {
                            T* row = out + r * out_size;
                            const T v = bias[grp * Mg + r];
                            for (int64_t c = c0; c < c1; ++c) row[c] += v;
                        }
                    };
                }
                gemm<T>(pool, false, false, Mg, out_size, depth, T(1), w + grp * Mg * depth, depth, columns,
                        out_size, T(0), out, out_size, epilogue);
            }
        }
    }

    // Wide images: every task builds the column matrix of a tile of output positions in its own cache-sized
    // buffer and multiplies it right away, so the column matrix never round-trips through memory.
    template <typename T, typename AddBias>
    void run_tiled(ThreadPool& pool, const WindowGeometry& g, const T* x, const T* w, int64_t N, int64_t C, int64_t M,
                   T* y, const AddBias& add_bias) const {
        const int64_t Cg = C / group_, Mg = M / group_;
        const int64_t in_size = g.input_size(), out_size = g.output_size();
        const int64_t depth = Cg * g.kernel_size();
        const int64_t per_thread = (out_size + pool.size() - 1) / pool.size();
        const int64_t tile = std::clamp<int64_t>((per_thread + 15) / 16 * 16, 16, kMaxTileWidth);
        const int64_t tiles = (out_size + tile - 1) / tile;
        check_gemm_dimensions(Mg, tile, depth);
        pool.parallel_for(N * group_ * tiles, 1, [&](int64_t first, int64_t last) {
            T* columns = thread_scratch<T>(depth * tile);
            for (int64_t task = first; task < last; ++task) {
                const int64_t t = task % tiles, image_group = task / tiles;
                const int64_t n = image_group / group_, grp = image_group % group_;
                const int64_t c0 = t * tile, c1 = std::min(out_size, c0 + tile), width = c1 - c0;
                im2col_tile(g, x + (n * C + grp * Cg) * in_size, Cg, c0, c1, columns, width);
                T* out = y + (n * M + grp * Mg) * out_size;
                gemm_serial<T>(false, false, Mg, width, depth, T(1), w + grp * Mg * depth, depth, columns, width,
                               T(0), out + c0, out_size);
                add_bias(out, grp, c0, c1);
            }
        });
    }

    // Tiles are used when the image has at least this many output positions per filter (otherwise the filters,
    // packed once per tile, dominate and whole products split by filters do better).
    static constexpr int64_t kTiledMinWidthPerFilter = 4;
    static constexpr int64_t kMaxTileWidth = 256;
};

// ConvTranspose.  Output size and padding follow the spec of the registered opset: with output_shape (or
// SAME_* auto_pad) the total padding is derived and split between the two sides, the odd element going to the
// start for opsets 1-10 under SAME_UPPER and to the end from opset 11.
class ConvTransposeKernel final : public ConvKernelBase {
public:
    explicit ConvTransposeKernel(const NodeInfo& info)
        : ConvKernelBase(info),
          output_padding_(info.attr_ints("output_padding")),
          output_shape_(info.attr_ints("output_shape")),
          legacy_padding_split_(info.opset() < 11) {}

    void compute(KernelContext& ctx) const override {
        const Tensor& X = ctx.input(0);
        const Tensor& W = weights(ctx);
        const Tensor* B = bias(ctx);
        const int64_t Mg = W.rank() > 1 ? W.shape[1] : 0;
        const Shape kernel = check_inputs(X, W, B, Mg * group_);
        const int64_t N = X.shape[0], C = X.shape[1], M = Mg * group_;
        if (C % group_ != 0 || W.shape[0] != C) {
            throw KernelError("ConvTranspose: X " + shape_string(X.shape) + " and W " + shape_string(W.shape) +
                              " do not fit group=" + std::to_string(group_));
        }
        const WindowGeometry g = geometry(Shape(X.shape.begin() + 2, X.shape.end()), kernel);
        Shape y_shape{N, M};
        y_shape.insert(y_shape.end(), g.input.begin(), g.input.end());
        Tensor& Y = ctx.output(0, X.type, y_shape);
        if (Y.size() == 0) return;
        dispatch<float, double>(X.type, [&]<typename T>() {
            run<T>(ctx.pool(), g, X.ptr<T>(), W.ptr<T>(), B != nullptr ? B->ptr<T>() : nullptr, N, C, M, Y.ptr<T>());
        });
    }

private:
    // The forward-convolution geometry whose input is ConvTranspose's output: col2im scatters into it.
    WindowGeometry geometry(const Shape& in, const Shape& kernel) const {
        const size_t rank = in.size();
        auto check_length = [&](const std::vector<int64_t>& v, size_t expected, const char* name) {
            if (!v.empty() && v.size() != expected) {
                throw KernelError("ConvTranspose: " + std::string(name) + " " + dims_string(v) + " does not match " +
                                  std::to_string(rank) + " spatial dimensions");
            }
        };
        check_length(attrs_.strides, rank, "strides");
        check_length(attrs_.dilations, rank, "dilations");
        check_length(attrs_.pads, 2 * rank, "pads");
        check_length(output_padding_, rank, "output_padding");
        // output_shape may also list N and C; only the spatial part counts.
        if (!output_shape_.empty() && output_shape_.size() != rank && output_shape_.size() != rank + 2) {
            check_length(output_shape_, rank, "output_shape");
        }
        WindowGeometry g;
        g.output = in;
        g.kernel = kernel;
        g.strides = attrs_.strides.empty() ? Shape(rank, 1) : attrs_.strides;
        g.dilations = attrs_.dilations.empty() ? Shape(rank, 1) : attrs_.dilations;
        g.input.assign(rank, 0);
        g.pads_begin.assign(rank, 0);
        g.pads_end.assign(rank, 0);
        const bool same = attrs_.auto_pad == AutoPad::SameUpper || attrs_.auto_pad == AutoPad::SameLower;
        for (size_t d = 0; d < rank; ++d) {
            const int64_t stride = g.strides[d];
            const int64_t adjustment = output_padding_.empty() ? 0 : output_padding_[d];
            const int64_t full = stride * (in[d] - 1) + adjustment + (kernel[d] - 1) * g.dilations[d] + 1;
            int64_t out = 0;
            if (!output_shape_.empty() || same) {
                out = !output_shape_.empty() ? output_shape_[output_shape_.size() - rank + d] : in[d] * stride;
                const int64_t total = full - out;
                // Python-style floor halves: a negative total (output larger than the full result) grows the end.
                const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
                const bool upper = attrs_.auto_pad == AutoPad::SameUpper;
                const bool odd_at_end = legacy_padding_split_ ? !upper : upper;
                g.pads_begin[d] = odd_at_end ? half : total - half;
                g.pads_end[d] = total - g.pads_begin[d];
            } else {
                if (attrs_.auto_pad != AutoPad::Valid && !attrs_.pads.empty()) {
                    g.pads_begin[d] = attrs_.pads[d];
                    g.pads_end[d] = attrs_.pads[d + rank];
                }
                out = full - g.pads_begin[d] - g.pads_end[d];
            }
            if (out <= 0) {
                throw KernelError("ConvTranspose: output dimension " + std::to_string(out) + " for input " +
                                  shape_string(in) + " is not positive");
            }
            g.input[d] = out;
        }
        return g;
    }

    template <typename T>
    void run(ThreadPool& pool, const WindowGeometry& g, const T* x, const T* w, const T* bias, int64_t N, int64_t C,
             int64_t M, T* y) const {
        const int64_t Cg = C / group_, Mg = M / group_;
        const int64_t in_size = g.output_size(), out_size = g.input_size();
        const int64_t rows = Mg * g.kernel_size();
        auto col = uninitialized_buffer<T>(rows * in_size);
        const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, out_size * g.kernel_size()));
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t grp = 0; grp < group_; ++grp) {
                const T* image = x + (n * C + grp * Cg) * in_size;
                T* out = y + (n * M + grp * Mg) * out_size;
                // col[Mg * kernel, in_size] = W_g^T [Mg * kernel, Cg] x image [Cg, in_size]
                gemm<T>(pool, true, false, rows, in_size, Cg, T(1), w + grp * Cg * rows, rows, image, in_size, T(0),
                        col.get(), in_size);
                pool.parallel_for(Mg, grain, [&](int64_t first, int64_t last) {
                    for (int64_t c = first; c < last; ++c) {
                        const T b = bias != nullptr ? bias[grp * Mg + c] : T(0);
                        std::fill(out + c * out_size, out + (c + 1) * out_size, b);
                    }
                    col2im_channels(g, col.get(), first, last, out);
                });
            }
        }
    }

    std::vector<int64_t> output_padding_;
    std::vector<int64_t> output_shape_;
    bool legacy_padding_split_;
};

}  // namespace

void register_conv_kernels(KernelRegistry& registry) {
    const std::vector<std::pair<size_t, std::vector<int32_t>>> float_inputs{
        {0, types::kFloats}, {1, types::kFloats}, {2, types::kFloats}};
    registry.add({"", "Conv", 1, 0, float_inputs, KernelMemory::Normal, make_factory<ConvKernel>()});
    registry.add({"", "ConvTranspose", 1, 10, float_inputs, KernelMemory::Normal, make_factory<ConvTransposeKernel>()});
    registry.add({"", "ConvTranspose", 11, 0, float_inputs, KernelMemory::Normal, make_factory<ConvTransposeKernel>()});
}

}  // namespace tessera::cpu
