// CPU provider: Conv (float, double; float16 and bfloat16 computed in float), N-d spatial, grouped.
//
// Float convolutions on CPUs with AVX2 or AVX-512 run on the packed-filter micro-kernels of util/gemm.h, with the
// filters packed once when they are constants and the bias as the accumulators' starting value:
//  - 2-D convolutions read their columns straight from phase planes of the padded image (DirectPlan), no im2col;
//  - other ranks, and images so small that the direct grid would waste work, build im2col panels (per
//    cache-sized tile for wide images);
//  - depthwise 2-D convolutions (one input channel per group) run as per-plane loops over the same phase grid.
// Doubles, and CPUs without AVX2, use im2col + OpenBLAS gemm.  (ConvTranspose: conv_transpose.cc.)
// float16/bfloat16 inputs are widened to float, the result rounded back; constant weights are widened (and packed)
// once, when the kernel is created.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "kernels/all_kernels.h"
#include "kernels/nn/conv_support.h"
#include "util/blocked_conv.h"
#include "util/compute_cast.h"
#include "util/conv_epilogue.h"
#include "util/conv_epilogue_avx512.h"
#include "util/float16_compute.h"
#include "util/gemm.h"
#include "util/im2col.h"
#include "util/lane_gemm.h"
#include "util/pointwise_conv.h"
#include "util/thread_scratch.h"
#include "util/type_list.h"
#include "util/window2d.h"
#include "util/winograd.h"

namespace tessera::cpu {

namespace {

using namespace conv_support;

// 2-D convolutions without im2col.  The zero-padded image is split into SH x SW phase planes,
// phase (a, b) holding padded rows a, a + SH, ... and columns b, b + SW, ... (for unit strides, just the padded
// image).  Tap (i, j) of output (oh, ow) then reads phase ((i*DH) % SH, (j*DW) % SW) at row oh + (i*DH) / SH,
// column ow + (j*DW) / SW, so over the "grid" of outputs n = oh * Wq + ow (Wq = a phase row) the column-matrix
// row of a tap is its phase plane shifted by a constant: the products read it in place through a table of row
// offsets.  The grid's extra columns per row are wasted work, cut away when copying to Y (no copy when there
// are none).  Only phases some tap reads are built.
struct DirectPlan {
    int64_t Hq = 0, Wq = 0;           // phase plane extent
    int64_t reach = 0;                // how far the last grid row reads past its plane
    std::vector<int64_t> phase_slot;  // per phase (a * SW + b): index among the built phases, or -1
    int64_t phases = 0;               // built phases per channel
    bool in_place = false;            // the image itself is the only phase (no padding, unit strides)
};

DirectPlan plan_direct(const WindowGeometry& g) {
    DirectPlan plan;
    const int64_t SH = g.strides[0], SW = g.strides[1];
    const int64_t shift_h = (g.kernel[0] - 1) * g.dilations[0] / SH;
    const int64_t shift_w = (g.kernel[1] - 1) * g.dilations[1] / SW;
    plan.Hq = g.output[0] + shift_h;
    plan.Wq = g.output[1] + shift_w;
    plan.reach = shift_w;
    plan.phase_slot.assign(static_cast<size_t>(SH * SW), -1);
    for (int64_t i = 0; i < g.kernel[0]; ++i) {
        for (int64_t j = 0; j < g.kernel[1]; ++j) {
            int64_t& slot = plan.phase_slot[((i * g.dilations[0]) % SH) * SW + (j * g.dilations[1]) % SW];
            if (slot < 0) slot = plan.phases++;
        }
    }
    plan.in_place = SH == 1 && SW == 1 && g.pads_begin[0] == 0 && g.pads_begin[1] == 0 && plan.Hq == g.input[0] &&
                    plan.Wq == g.input[1] && shift_w == 0;
    return plan;
}

// Worth it unless the grid wastes too much: a row of Wq grid columns holds OW outputs.
bool direct_pays_off(const WindowGeometry& g) {
    if (g.rank() != 2) return false;
    const DirectPlan plan = plan_direct(g);
    return (plan.Wq - g.output[1]) * 8 <= plan.Wq;
}

// Whether a 2-D convolution with `filters` output channels runs on the lane kernels (util/lane_gemm.h) rather
// than on packed_gemm_rows: on ResNet-50, DenseNet-121, MobileNetV2 and SqueezeNet every layer whose filters fill the
// lane panels ran as fast or faster there (the position-lane tiles waste lanes on short output rows).
// TESSERA_CONV_LANES=0|1 overrides the choice (tests and measurements).
bool lanes_pay_off(const WindowGeometry& g, int64_t filters) {
    if (g.rank() != 2 || !lane_gemm_supported()) return false;
    if (const char* force = std::getenv("TESSERA_CONV_LANES"); force != nullptr && force[0] != '\0' && force[0] != '1')
        return false;
    return lanes_fill(filters);
}

// Phase (a, b) of one [H, W] plane: element (i, j) of the [Hq, Wq] result is padded-image element
// (i * SH + a, j * SW + b), i.e. source (i * SH + a - top, j * SW + b - left), zero outside the source.
template <typename T>
void build_phase(const T* src, const WindowGeometry& g, int64_t a, int64_t b, int64_t Hq, int64_t Wq, T* dst) {
    const int64_t H = g.input[0], W = g.input[1], SH = g.strides[0], SW = g.strides[1];
    const int64_t column_offset = b - g.pads_begin[1];
    // Columns j with 0 <= j * SW + column_offset < W.
    const TapRange inside = taps_inside(column_offset, Wq, SW, W);
    for (int64_t i = 0; i < Hq; ++i) {
        T* row = dst + i * Wq;
        const int64_t sr = i * SH + a - g.pads_begin[0];
        if (sr < 0 || sr >= H || inside.first == inside.last) {
            std::fill(row, row + Wq, T(0));
            continue;
        }
        const T* srow = src + sr * W;
        std::fill(row, row + inside.first, T(0));
        if (SW == 1) {
            std::copy(srow + (inside.first + column_offset), srow + (inside.last + column_offset), row + inside.first);
        } else if (std::is_same_v<T, float> && SW == 2 && lane_gemm_supported()) {
            gather_even_columns(reinterpret_cast<const float*>(srow + (inside.first * 2 + column_offset)),
                                inside.last - inside.first, reinterpret_cast<float*>(row + inside.first));
        } else {
            for (int64_t j = inside.first; j < inside.last; ++j) row[j] = srow[j * SW + column_offset];
        }
        std::fill(row + inside.last, row + Wq, T(0));
    }
}

// Offsets of every (channel, tap) row into the phase planes: channel c's phases start at c * channel_stride.
std::vector<int64_t> tap_offsets(const DirectPlan& plan, const WindowGeometry& g, int64_t channels,
                                 int64_t channel_stride) {
    const int64_t SH = g.strides[0], SW = g.strides[1], DH = g.dilations[0], DW = g.dilations[1];
    const int64_t plane = plan.Hq * plan.Wq;
    std::vector<int64_t> offsets;
    offsets.reserve(static_cast<size_t>(channels * g.kernel_size()));
    for (int64_t c = 0; c < channels; ++c) {
        for (int64_t i = 0; i < g.kernel[0]; ++i) {
            for (int64_t j = 0; j < g.kernel[1]; ++j) {
                const int64_t slot = plan.phase_slot[((i * DH) % SH) * SW + (j * DW) % SW];
                offsets.push_back(c * channel_stride + slot * plane + (i * DH / SH) * plan.Wq + j * DW / SW);
            }
        }
    }
    return offsets;
}

// Builds the phase planes of one [H, W] image plane into dst (plan.phases planes of Hq x Wq).
template <typename T>
void build_phases(const T* src, const WindowGeometry& g, const DirectPlan& plan, T* dst) {
    const int64_t SH = g.strides[0], SW = g.strides[1], plane = plan.Hq * plan.Wq;
    for (int64_t a = 0; a < SH; ++a) {
        for (int64_t b = 0; b < SW; ++b) {
            const int64_t slot = plan.phase_slot[a * SW + b];
            if (slot >= 0) build_phase(src, g, a, b, plan.Hq, plan.Wq, dst + slot * plane);
        }
    }
}

// 2-D convolution with one input channel per group (depthwise, possibly with a channel multiplier): per input
// plane, its phase planes once, then each tap is one long multiply-add over the whole output grid (see DirectPlan),
// which vectorizes well even for small images; the grid is cropped into Y.
template <typename T>
void depthwise_conv2d(ThreadPool& pool, const WindowGeometry& g, const T* x, const T* w, const T* bias, int64_t batch,
                      int64_t in_channels, int64_t out_channels, T* y, const ConvEpilogue& epilogue, const T* z) {
    const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], OW = g.output[1];
    const int64_t taps = g.kernel_size();
    const int64_t multiplier = out_channels / in_channels;
    const DirectPlan plan = plan_direct(g);
    const int64_t Wq = plan.Wq, phase_size = plan.phases * plan.Hq * plan.Wq, grid_size = OH * Wq;
    const std::vector<int64_t> offsets = tap_offsets(plan, g, 1, phase_size);
    const int64_t plane_work = std::max<int64_t>(1, grid_size * taps * multiplier);
    pool.parallel_for(batch * in_channels, std::max<int64_t>(1, 65536 / plane_work), [&](int64_t first, int64_t last) {
        T* phases = thread_scratch_buffer<T>(phase_size + plan.reach + grid_size);
        T* grid = phases + phase_size + plan.reach;
        std::fill(phases + phase_size, phases + phase_size + plan.reach, T(0));
        for (int64_t plane = first; plane < last; ++plane) {
            const int64_t n = plane / in_channels, ic = plane % in_channels;
            build_phases(x + plane * H * W, g, plan, phases);
            for (int64_t oc = ic * multiplier; oc < (ic + 1) * multiplier; ++oc) {
                const T* wp = w + oc * taps;
                std::fill(grid, grid + grid_size, bias != nullptr ? bias[oc] : T(0));
                for (int64_t t = 0; t < taps; ++t) {
                    const T wv = wp[t];
                    const T* src = phases + offsets[t];
                    for (int64_t i = 0; i < grid_size; ++i) grid[i] += wv * src[i];
                }
                T* yp = y + (n * out_channels + oc) * OH * OW;
                for (int64_t oh = 0; oh < OH; ++oh) std::copy(grid + oh * Wq, grid + oh * Wq + OW, yp + oh * OW);
                if (epilogue.active())
                    epilogue.apply(yp, z != nullptr ? z + (n * out_channels + oc) * OH * OW : nullptr, OH * OW);
            }
        }
    });
}

class ConvKernel final : public ConvKernelBase,
                         public BlockedLayoutKernel,
                         public ProducerFusingKernel,
                         public BlockedConvSource,
                         public BlockedBandSource {
public:
    explicit ConvKernel(const NodeInfo& info) : ConvKernelBase(info), epilogue_(ConvEpilogue::parse(info)) {
        // Constant float filters are packed once for the packed-filter products; the plain copy is then dropped
        // (only its shape is kept for validation).  Depthwise filters stay plain for the direct loops.  Filters
        // that the blocked layout may use wait for set_layout, which packs them for the layout chosen.
        if (weights_ && weights_->tensor().type == TESS_ELEMENT_FLOAT32 && packed_gemm_supported()) {
            const Tensor& W = weights_->tensor();
            const bool depthwise = W.rank() == 4 && group_ > 1 && W.shape[1] == 1;
            if (W.rank() >= 3 && !depthwise && W.shape[0] % group_ == 0) {
                declared_ = declared_geometry(info, W);
                blocked_capable_ = group_ == 1 && declared_ && blocked_layout_enabled() &&
                                   (W.shape[0] % kChannelBlock == 0 || W.shape[1] % kChannelBlock == 0);
                if (!blocked_capable_) pack_weights(false);
            } else if (depthwise && W.shape[0] == group_ && group_ % kChannelBlock == 0 && blocked_layout_enabled()) {
                // Kept plain for the NCHW loops unless set_layout chooses the blocked kernel.
                declared_ = declared_geometry(info, W);
                blocked_capable_ = depthwise_ = declared_.has_value();
            }
        }
    }

    bool reads_blocked(size_t input) const override {
        if (!blocked_capable_) return false;
        const Shape& w = weights_->tensor().shape;
        if (input == 0) return depthwise_ || w[1] % kChannelBlock == 0;
        return input == 3 && epilogue_.has_sum && w[0] % kChannelBlock == 0;
    }
    bool writes_blocked() const override {
        return blocked_capable_ && weights_->tensor().shape[0] % kChannelBlock == 0;
    }
    // The depthwise kernel does not change layouts: its input is blocked when its output is.
    bool same_layout_as_output(size_t input) const override { return input == 3 || (depthwise_ && input == 0); }
    void set_layout(const std::vector<bool>& blocked_inputs, bool blocked_output) override {
        if (!blocked_capable_ || !weights_) return;
        layout_.x_blocked = !blocked_inputs.empty() && blocked_inputs[0];
        layout_.y_blocked = blocked_output;
        if (!depthwise_) {
            pack_weights(layout_.x_blocked || layout_.y_blocked);
        } else if (layout_.x_blocked && layout_.y_blocked) {
            const Tensor& W = weights_->tensor();
            depthwise_filters_ = pack_blocked_depthwise(W.ptr<float>(), W.shape[0], W.shape[2] * W.shape[3]);
            packed_shape_ = W.shape;
            weights_.reset();
        } else {
            layout_ = BlockedConvLayout{};  // both or neither (same_layout_as_output)
        }
    }

    // A blocked depthwise convolution takes over the blocked pointwise one feeding it, when the tensor between
    // them is large enough to leave the cache (blocked_conv_window2d); and a blocked pointwise one the depthwise one
    // feeding it when that one took over its own expansion, so that a whole inverted residual block runs as one
    // pass: the projection reads the depthwise rows from the cache as they are made.
    bool can_absorb(size_t input, const Kernel& producer) const override {
        if (const auto* window = dynamic_cast<const ConvKernel*>(&producer); window != nullptr && !depthwise_)
            return input == 0 && takes_over_window(*window);
        // A producer that makes its rows on request (an int8 pointwise convolution dequantized to floats).
        if (const auto* rows = dynamic_cast<const BlockedRowSource*>(&producer); rows != nullptr) {
            if (input != 0 || !depthwise_ || depthwise_filters_.empty() || epilogue_.has_sum || !declared_ ||
                declared_->rank() != 2)
                return false;
            const std::optional<WindowGeometry> g = rows->row_source_geometry();
            return g && g->is_pointwise() && rows->row_source_filters() == packed_shape_[0] &&
                   packed_shape_[0] * declared_->input_size() * int64_t(sizeof(float)) >= kTakenOverMinBytes;
        }
        const auto* source = dynamic_cast<const BlockedConvSource*>(&producer);
        if (input != 0 || source == nullptr || !depthwise_ || depthwise_filters_.empty() || epilogue_.has_sum ||
            !declared_ || declared_->rank() != 2)
            return false;
        const std::optional<WindowGeometry> g = source->blocked_source_geometry();
        return g && g->is_pointwise() && source->blocked_source_filters() == packed_shape_[0] &&
               packed_shape_[0] * declared_->input_size() * int64_t(sizeof(float)) >= kTakenOverMinBytes;
    }
    // A blocked output may take over the sum's buffer (ResNet's residual): every blocked kernel adds the sum of a
    // position to that position's result just before storing it, so the two tensors share their cache lines.
    int in_place_input() const override { return epilogue_.has_sum && layout_.y_blocked && !absorbed_ ? 3 : -1; }

    void absorb(size_t, std::unique_ptr<Kernel> producer, size_t first_producer_input) override {
        absorbed_ = std::move(producer);
        absorbed_inputs_ = first_producer_input;
    }

    // As a convolution taken over by the kernel reading its output: a blocked one with packed lane filters, no sum
    // and a vector activation.
    std::optional<WindowGeometry> blocked_source_geometry() const override {
        if (depthwise_ || lane_filters_.empty() || !layout_.y_blocked || !declared_ || declared_->rank() != 2 ||
            epilogue_.has_sum || (epilogue_.active() && !vector_activation(epilogue_)) || absorbed_)
            return std::nullopt;
        return declared_;
    }
    int64_t blocked_source_filters() const override { return packed_shape_.empty() ? 0 : packed_shape_[0]; }
    BlockedProducerConv blocked_source(const KernelContext& ctx, size_t first_input) const override {
        const Tensor& X = ctx.input(first_input);
        const int64_t M = packed_shape_[0], C = packed_shape_[1];
        if (X.type != TESS_ELEMENT_FLOAT32 || X.rank() != 4 || X.shape[1] != C)
            throw KernelError("Conv: X " + shape_string(X.shape) + " of the convolution taken over must be float [N, " +
                              std::to_string(C) + ", H, W]");
        const WindowGeometry g = resolve_window("Conv", attrs_, Shape(X.shape.begin() + 2, X.shape.end()),
                                                Shape(packed_shape_.begin() + 2, packed_shape_.end()));
        const Tensor* B = bias(ctx, first_input);
        if (B != nullptr && (B->type != TESS_ELEMENT_FLOAT32 || B->rank() != 1 || B->shape[0] != M))
            throw KernelError("Conv: B " + shape_string(B->shape) + " must be float [" + std::to_string(M) + "]");
        return BlockedProducerConv{&lane_filters_, g, C, layout_.x_blocked, B != nullptr ? B->ptr<float>() : nullptr,
                                   &epilogue_};
    }

    void compute(KernelContext& ctx) const override {
        if (absorbed_) {
            if (depthwise_ && dynamic_cast<const BlockedRowSource*>(absorbed_.get()) != nullptr) compute_with_rows(ctx);
            else if (depthwise_) compute_with_pointwise(ctx);
            else compute_with_window(ctx);
            return;
        }
        if (depthwise_ && layout_.x_blocked && layout_.y_blocked && !depthwise_filters_.empty() && !epilogue_.has_sum) {
            compute_blocked_depthwise(ctx, 0, nullptr);
            return;
        }
        const Tensor& X = ctx.input(0);
        const Tensor packed_view{TESS_ELEMENT_FLOAT32, packed_shape_, nullptr, nullptr};
        const bool packed = !packed_filters_.empty() || !lane_filters_.empty() || !winograd_.empty() ||
                            !pointwise_.empty() || !depthwise_filters_.empty();
        const Tensor& W = packed ? packed_view : weights(ctx);
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
        const Tensor* Z = epilogue_.has_sum ? &ctx.input(3) : nullptr;
        if (Z != nullptr && (Z->type != X.type || Z->shape != y_shape))
            throw KernelError("FusedConv: Z " + shape_string(Z->shape) + " must have Y's type and shape " +
                              shape_string(y_shape));
        Tensor& Y = ctx.output(0, X.type, y_shape);
        if (Y.size() == 0) return;
        ThreadPool& pool = ctx.pool();
        dispatch<float, double>(compute_type_of(X.type), [&]<typename T>() {
            // Views of the tensors when they hold T already (the packed view has no data and is never read).
            const ConvertedInput<T> x(X, pool), w(W, pool);
            const ConvertedInput<T> b = B != nullptr ? ConvertedInput<T>(*B, pool) : ConvertedInput<T>();
            const ConvertedInput<T> z = Z != nullptr ? ConvertedInput<T>(*Z, pool) : ConvertedInput<T>();
            ConvertedOutput<T> y(Y);
            bool epilogue_done = !epilogue_.active();  // the fast paths apply it block by block
            if constexpr (std::is_same_v<T, float>) {
                if (layout_.x_blocked || layout_.y_blocked) {
                    if (g.rank() != 2) throw KernelError("Conv: blocked layout for a convolution that is not 2-D");
                    if (depthwise_) {
                        blocked_depthwise2d(pool, g, depthwise_filters_.data(), N, C, x.data(), b.data(), &epilogue_,
                                            z.data(), y.data());
                    } else if (!winograd_.empty()) {
                        // Chosen at creation from the attributes, which do not change between runs.
                        if (!blocked_winograd_applies(g, C, M))
                            throw KernelError("Conv: Winograd filters for another geometry");
                        blocked_winograd_conv2d(pool, g, winograd_, N, x.data(), b.data(), &epilogue_, z.data(),
                                                y.data());
                    } else {
                        blocked_conv2d(pool, g, lane_filters_, layout_, x.data(), N, C, b.data(), &epilogue_,
                                       z.data(), y.data());
                    }
                    y.finish(pool);
                    return;
                }
            }
            if (group_ > 1 && C == group_ && g.rank() == 2) {
                if constexpr (std::is_same_v<T, float>) {
                    if (depthwise_direct_supported(g)) {
                        depthwise_conv2d_direct(pool, g, x.data(), w.data(), b.data(), N, C, M, y.data(), epilogue_,
                                                z.data());
                    } else {
                        depthwise_conv2d<T>(pool, g, x.data(), w.data(), b.data(), N, C, M, y.data(), epilogue_,
                                            z.data());
                    }
                } else {
                    depthwise_conv2d<T>(pool, g, x.data(), w.data(), b.data(), N, C, M, y.data(), epilogue_, z.data());
                }
                epilogue_done = true;
            } else if constexpr (std::is_same_v<T, float>) {
                if (!pointwise_.empty() && g.is_pointwise()) {
                    const int64_t P = g.output_size();
                    for (int64_t n = 0; n < N; ++n) {
                        pointwise_conv(pool, pointwise_, x.data() + n * C * P, P, b.data(), epilogue_,
                                       z.data() != nullptr ? z.data() + n * M * P : nullptr, y.data() + n * M * P);
                    }
                    epilogue_done = true;
                } else if (!pointwise_.empty()) {
                    throw KernelError("Conv: pointwise filters for a geometry that is not pointwise");
                } else if (!winograd_.empty()) {
                    // Chosen at creation from the attributes, which do not change between runs.
                    if (!winograd_applies(g, M, group_)) throw KernelError("Conv: Winograd filters for another geometry");
                    const int64_t in_image = C * g.input_size(), out_image = M * g.output_size();
                    for (int64_t n = 0; n < N; ++n) {
                        winograd_conv2d(pool, g, x.data() + n * in_image, winograd_, b.data(), epilogue_,
                                        z.data() != nullptr ? z.data() + n * out_image : nullptr,
                                        y.data() + n * out_image);
                    }
                    epilogue_done = true;
                } else if (!lane_filters_.empty() && g.rank() == 2) {
                    run_lanes(pool, g, x.data(), b.data(), N, C, M, y.data(), z.data());
                    epilogue_done = true;
                } else if (!packed_gemm_supported()) {
                    run_gemm<T>(pool, g, x.data(), w.data(), b.data(), N, C, M, y.data());
                } else {
                    std::vector<PackedFilters> packed_now;
                    if (packed_filters_.empty()) packed_now = pack_filters(w.data(), M, W.size() / M);
                    const std::vector<PackedFilters>& filters = packed_filters_.empty() ? packed_now : packed_filters_;
                    if (direct_pays_off(g)) {
                        run_direct(pool, g, x.data(), filters, b.data(), N, C, M, y.data(), z.data());
                    } else {
                        run_packed(pool, g, x.data(), filters, b.data(), N, C, M, y.data(), z.data());
                    }
                    epilogue_done = true;
                }
            } else {
                run_gemm<T>(pool, g, x.data(), w.data(), b.data(), N, C, M, y.data());
            }
            if (!epilogue_done) {
                T* out = y.data();
                const T* sum = z.data();
                pool.parallel_for(static_cast<int64_t>(Y.size()), 16384, [&](int64_t first, int64_t last) {
                    epilogue_.apply(out + first, sum != nullptr ? sum + first : nullptr, last - first);
                });
            }
            y.finish(pool);
        });
    }

private:
    // A depthwise convolution with its expansion taken over, as the step of a pointwise convolution that took it
    // over in turn: what the three need to run as one (blocked_conv_window2d with a consumer).
    struct TakenOverWindow {
        std::optional<BlockedProducerConv> producer;  // its expansion, when it took one over
        const Tensor* x;  // the expansion's input, else the depthwise convolution's
        WindowGeometry g;  // the depthwise convolution's
        const float* bias;
    };

    // Whether this pointwise convolution takes over `window`: a blocked depthwise convolution (with its expansion
    // taken over or not), no sum and a vector activation (the tiles apply it), feeding this blocked 1x1 stride-1
    // unpadded convolution of one group, whose input is large enough to leave the cache.
    bool takes_over_window(const ConvKernel& window) const {
        if (!window.depthwise_ || window.depthwise_filters_.empty() || window.epilogue_.has_sum ||
            (window.epilogue_.active() && !vector_activation(window.epilogue_)) || absorbed_ || lane_filters_.empty() ||
            !layout_.x_blocked || group_ != 1 || !declared_ || declared_->rank() != 2 || !declared_->is_pointwise() ||
            !window.declared_ || packed_shape_[1] != window.packed_shape_[0])
            return false;
        // Only a window whose own producer, if it took one over, is a lane-filter convolution (the band path
        // drives that one; an int8 expansion making its rows on request runs only under the window itself).
        if (window.absorbed_ && dynamic_cast<const BlockedConvSource*>(window.absorbed_.get()) == nullptr) return false;
        const char* env = std::getenv("TESSERA_CPU_FUSE_PROJECTIONS");
        if (env != nullptr && env[0] == '0') return false;
        return packed_shape_[1] * declared_->input_size() * int64_t(sizeof(float)) >= kTakenOverMinBytes;
    }

    // This depthwise convolution (with its expansion taken over) as seen from the step of the pointwise convolution
    // that took it over, its inputs from `first` on there.
    TakenOverWindow taken_over_window(const KernelContext& ctx, size_t first) const {
        const int64_t M = packed_shape_[0];
        const Tensor* B = bias(ctx, first);
        if (B != nullptr && (B->type != TESS_ELEMENT_FLOAT32 || B->rank() != 1 || B->shape[0] != M))
            throw KernelError("Conv: B " + shape_string(B->shape) + " must be float [" + std::to_string(M) + "]");
        if (!absorbed_) {
            const Tensor& X = ctx.input(first);
            if (X.type != TESS_ELEMENT_FLOAT32 || X.rank() != 4 || X.shape[1] != M)
                throw KernelError("Conv: X " + shape_string(X.shape) + " of the depthwise convolution taken over must "
                                  "be float [N, " + std::to_string(M) + ", H, W]");
            const WindowGeometry g = resolve_window("Conv", attrs_, Shape(X.shape.begin() + 2, X.shape.end()),
                                                    Shape(packed_shape_.begin() + 2, packed_shape_.end()));
            return TakenOverWindow{std::nullopt, &X, g, B != nullptr ? B->ptr<float>() : nullptr};
        }
        const size_t producer_first = first + absorbed_inputs_;
        const BlockedProducerConv producer =
            dynamic_cast<const BlockedConvSource&>(*absorbed_).blocked_source(ctx, producer_first);
        const Tensor& X = ctx.input(producer_first);
        if (!producer.g.is_pointwise() || producer.g.rank() != 2)
            throw KernelError("Conv: the convolution before it is not pointwise for X " + shape_string(X.shape));
        const WindowGeometry g = resolve_window("Conv", attrs_, producer.g.output,
                                                Shape(packed_shape_.begin() + 2, packed_shape_.end()));
        return TakenOverWindow{producer, &X, g, B != nullptr ? B->ptr<float>() : nullptr};
    }

    // The depthwise convolution of the convolution it took over (absorb): X is that convolution's input.  Into Y
    // or the sink.
    void compute_with_pointwise(KernelContext& ctx, size_t first = 0, const BlockedBandSink* sink = nullptr) const {
        const TakenOverWindow window = taken_over_window(ctx, first);
        const Tensor& X = *window.x;
        const int64_t N = X.shape[0], M = packed_shape_[0];
        float* y = nullptr;
        if (sink == nullptr) {
            Tensor& Y = ctx.output(0, X.type, Shape{N, M, window.g.output[0], window.g.output[1]});
            if (Y.size() == 0) return;
            y = Y.ptr<float>();
        }
        blocked_conv_window2d(ctx.pool(), *window.producer, window.g, depthwise_filters_.data(), window.bias,
                              &epilogue_, N, X.ptr<float>(), y, nullptr, sink);
    }

    // As a producer a QuantizeLinear takes over (BlockedBandSource): a blocked depthwise convolution without a
    // sum, with its own producer taken over or not, hands its output rows to the QuantizeLinear's sink.
    bool band_source_ready() const override {
        return depthwise_ && layout_.x_blocked && layout_.y_blocked && !depthwise_filters_.empty() &&
               !epilogue_.has_sum && declared_ && declared_->rank() == 2;
    }
    Shape band_source_shape(const KernelContext& ctx, size_t first) const override {
        const int64_t M = packed_shape_[0];
        const Tensor& X = ctx.input(first + (absorbed_ ? absorbed_inputs_ : 0));
        if (X.rank() != 4) throw KernelError("Conv: X " + shape_string(X.shape) + " must be [N, C, H, W]");
        const WindowGeometry g =
            absorbed_ && dynamic_cast<const BlockedRowSource*>(absorbed_.get()) == nullptr
                ? taken_over_window(ctx, first).g
                : resolve_window("Conv", attrs_, Shape(X.shape.begin() + 2, X.shape.end()),
                                 Shape(packed_shape_.begin() + 2, packed_shape_.end()));
        return Shape{X.shape[0], M, g.output[0], g.output[1]};
    }
    void run_to_sink(KernelContext& ctx, size_t first, const BlockedBandSink& sink) const override {
        if (!absorbed_) compute_blocked_depthwise(ctx, first, &sink);
        else if (dynamic_cast<const BlockedRowSource*>(absorbed_.get()) != nullptr) compute_with_rows(ctx, first, &sink);
        else compute_with_pointwise(ctx, first, &sink);
    }

    // The blocked depthwise convolution of a blocked X (this step's inputs from `first` on), into Y or the sink.
    void compute_blocked_depthwise(KernelContext& ctx, size_t first, const BlockedBandSink* sink) const {
        const Tensor& X = ctx.input(first);
        const int64_t M = packed_shape_[0];
        if (X.type != TESS_ELEMENT_FLOAT32 || X.rank() != 4 || X.shape[1] != M)
            throw KernelError("Conv: X " + shape_string(X.shape) + " of a blocked depthwise convolution must be "
                              "float [N, " + std::to_string(M) + ", H, W]");
        const Tensor* B = bias(ctx, first);
        if (B != nullptr && (B->type != TESS_ELEMENT_FLOAT32 || B->rank() != 1 || B->shape[0] != M))
            throw KernelError("Conv: B " + shape_string(B->shape) + " must be float [" + std::to_string(M) + "]");
        const WindowGeometry g = resolve_window("Conv", attrs_, Shape(X.shape.begin() + 2, X.shape.end()),
                                                Shape(packed_shape_.begin() + 2, packed_shape_.end()));
        const int64_t N = X.shape[0];
        float* y = nullptr;
        if (sink == nullptr) {
            Tensor& Y = ctx.output(0, TESS_ELEMENT_FLOAT32, Shape{N, M, g.output[0], g.output[1]});
            if (Y.size() == 0) return;
            y = Y.ptr<float>();
        }
        blocked_depthwise2d(ctx.pool(), g, depthwise_filters_.data(), N, M, X.ptr<float>(),
                            B != nullptr ? B->ptr<float>() : nullptr, &epilogue_, nullptr, y, sink);
    }

    // The depthwise convolution of a producer that makes its rows on request (BlockedRowSource), whose inputs
    // (its X first) follow this step's own (which start at `first`); into Y or the sink.
    void compute_with_rows(KernelContext& ctx, size_t first = 0, const BlockedBandSink* sink = nullptr) const {
        const auto& source = dynamic_cast<const BlockedRowSource&>(*absorbed_);
        const std::unique_ptr<BlockedRowMaker> maker = source.row_maker(ctx, first + absorbed_inputs_);
        const Tensor& X = ctx.input(first + absorbed_inputs_);
        const int64_t N = X.shape[0], M = packed_shape_[0];
        const Tensor* B = bias(ctx, first);
        if (B != nullptr && (B->type != TESS_ELEMENT_FLOAT32 || B->rank() != 1 || B->shape[0] != M))
            throw KernelError("Conv: B " + shape_string(B->shape) + " must be float [" + std::to_string(M) + "]");
        // The producer is pointwise: its output has X's positions.
        const WindowGeometry g = resolve_window("Conv", attrs_, Shape(X.shape.begin() + 2, X.shape.end()),
                                                Shape(packed_shape_.begin() + 2, packed_shape_.end()));
        float* y = nullptr;
        if (sink == nullptr) {
            Tensor& Y = ctx.output(0, TESS_ELEMENT_FLOAT32, Shape{N, M, g.output[0], g.output[1]});
            if (Y.size() == 0) return;
            y = Y.ptr<float>();
        }
        blocked_rows_window2d(ctx.pool(), *maker, M, g, depthwise_filters_.data(),
                              B != nullptr ? B->ptr<float>() : nullptr, &epilogue_, N, y, sink);
    }

    // This pointwise convolution of the depthwise convolution it took over (and of that one's expansion, if it took
    // one over).
    void compute_with_window(KernelContext& ctx) const {
        const auto& depthwise = static_cast<const ConvKernel&>(*absorbed_);
        const TakenOverWindow window = depthwise.taken_over_window(ctx, absorbed_inputs_);
        const Tensor& X = *window.x;
        const int64_t N = X.shape[0], M = packed_shape_[0];
        const Shape y_shape{N, M, window.g.output[0], window.g.output[1]};
        const Tensor* B = bias(ctx);
        if (B != nullptr && (B->type != TESS_ELEMENT_FLOAT32 || B->rank() != 1 || B->shape[0] != M))
            throw KernelError("Conv: B " + shape_string(B->shape) + " must be float [" + std::to_string(M) + "]");
        const Tensor* Z = epilogue_.has_sum ? &ctx.input(3) : nullptr;
        if (Z != nullptr && (Z->type != TESS_ELEMENT_FLOAT32 || Z->shape != y_shape))
            throw KernelError("FusedConv: Z " + shape_string(Z->shape) + " must have Y's type and shape " +
                              shape_string(y_shape));
        Tensor& Y = ctx.output(0, X.type, y_shape);
        if (Y.size() == 0) return;
        const BlockedConsumerConv consumer{&lane_filters_, B != nullptr ? B->ptr<float>() : nullptr, &epilogue_,
                                           Z != nullptr ? Z->ptr<float>() : nullptr, layout_.y_blocked};
        if (window.producer) {
            blocked_conv_window2d(ctx.pool(), *window.producer, window.g, depthwise.depthwise_filters_.data(),
                                  window.bias, &depthwise.epilogue_, N, X.ptr<float>(), Y.ptr<float>(), &consumer);
        } else {
            blocked_depthwise_pointwise2d(ctx.pool(), window.g, depthwise.depthwise_filters_.data(), window.bias,
                                          &depthwise.epilogue_, N, X.shape[1], X.ptr<float>(), consumer, Y.ptr<float>());
        }
    }

    // Packs the constant filters once, for the blocked layout's kernel or for the NCHW family the declared geometry
    // chooses, and drops the plain copy.
    void pack_weights(bool blocked) {
        const Tensor& W = weights_->tensor();
        const int64_t depth = W.size() / std::max<int64_t>(1, W.shape[0]);
        const std::optional<WindowGeometry>& declared = declared_;
        if (blocked && layout_.x_blocked && layout_.y_blocked && declared &&
            blocked_winograd_applies(*declared, W.shape[1], W.shape[0]) &&
            blocked_winograd_pays_off(*declared, W.shape[1], W.shape[0])) {
            winograd_ = WinogradFilters(W.ptr<float>(), W.shape[0], W.shape[1]);
        } else if (blocked) {
            const int64_t width = layout_.y_blocked ? blocked_panel_width(W.shape[0]) : 0;
            lane_filters_ = LanePackedFilters(W.ptr<float>(), W.shape[0], depth, depth, width);
        } else if (group_ == 1 && declared && pointwise_chosen(*declared, W.shape[1])) {
            pointwise_ = PointwiseFilters(W.ptr<float>(), W.shape[0], depth);
        } else if (group_ == 1 && declared && winograd_chosen(*declared, W.shape[0])) {
            winograd_ = WinogradFilters(W.ptr<float>(), W.shape[0], W.shape[1]);
        } else if (group_ == 1 && declared && lanes_pay_off(*declared, W.shape[0])) {
            lane_filters_ = LanePackedFilters(W.ptr<float>(), W.shape[0], depth, depth);
            lane_offsets_ = LaneOffsets{declared->input, W.shape[1], lane_tap_offsets(*declared, W.shape[1])};
        } else {
            packed_filters_ = pack_filters(W.ptr<float>(), W.shape[0], depth);
        }
        packed_shape_ = W.shape;
        weights_.reset();
    }

    // The geometry of the input shape the model declares, when it declares a whole 2-D one: the kernel family is
    // chosen from it once (the filters are packed for one family only, so that each weight is held once).
    std::optional<WindowGeometry> declared_geometry(const NodeInfo& info, const Tensor& W) const {
        const std::optional<Shape> x_shape = info.input_shape(0);
        if (!x_shape || x_shape->size() != 4 || W.rank() != 4) return std::nullopt;
        const Shape spatial(x_shape->begin() + 2, x_shape->end());
        if (std::any_of(spatial.begin(), spatial.end(), [](int64_t d) { return d <= 0; })) return std::nullopt;
        try {
            return resolve_window("Conv", attrs_, spatial, Shape(W.shape.begin() + 2, W.shape.end()));
        } catch (const KernelError&) {
            return std::nullopt;  // compute() reports the problem with the shapes it is given
        }
    }

    // 1x1 stride-1 unpadded layers straight from X (util/pointwise_conv.h).  TESSERA_CONV_POINTWISE=0 turns it off.
    static bool pointwise_chosen(const WindowGeometry& g, int64_t channels) {
        const char* env = std::getenv("TESSERA_CONV_POINTWISE");
        if (env != nullptr && env[0] == '0') return false;
        return g.rank() == 2 && g.is_pointwise() && pointwise_conv_supported() &&
               pointwise_conv_pays_off(channels, g.output_size());
    }

    // Winograd between blocked tensors (blocked_winograd.cc) where it measured faster than the direct blocked
    // kernel: outputs 13 wide and up (ResNet-50's 56x56 and 28x28 layers, 17-23% less time; its 14x14 ones, 20%
    // less once their 4 MB of transformed filters were read once per image, not once per tile block; SqueezeNet's
    // 13x13 ones, 17-18% less; at 7x7 the transformed filters, 1.8x the direct ones' bytes, cost more to read than
    // the products save: ResNet-50's 512-channel layers 11% slower), from 32 channels
    // up (SqueezeNet's 16-channel layers were 3% slower, their products too shallow), with 64 filters or more and
    // at least half as many filters as channels (DenseNet-121's 128 -> 32 layers took 1.7x as long: the
    // transforms, which grow with the channels, outweigh products that small).  TESSERA_CONV_WINOGRAD=0 turns it
    // off too.
    static bool blocked_winograd_pays_off(const WindowGeometry& g, int64_t channels, int64_t filters) {
        const char* env = std::getenv("TESSERA_CONV_WINOGRAD");
        if (env != nullptr && env[0] == '0') return false;
        return g.output[1] >= 13 && channels >= 32 && filters >= 64 && 2 * filters >= channels;
    }

    // Winograd for 3x3 stride-1 layers (util/winograd.h).  TESSERA_CONV_WINOGRAD=0 turns it off (measurements).
    static bool winograd_chosen(const WindowGeometry& g, int64_t filters) {
        const char* env = std::getenv("TESSERA_CONV_WINOGRAD");
        if (env != nullptr && env[0] == '0') return false;
        return winograd_applies(g, filters, 1) && winograd_pays_off(g, filters);
    }

    // 2-D float convolutions on the lane kernels (util/lane_gemm.h), reading the phase planes in place as
    // run_direct does.  Tasks are (filter panel, block of output rows); a panel stays in cache across its rows.
    void run_lanes(ThreadPool& pool, const WindowGeometry& g, const float* x, const float* bias, int64_t N, int64_t C,
                   int64_t M, float* y, const float* z) const {
        const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], OW = g.output[1], out_size = OH * OW;
        const DirectPlan plan = plan_direct(g);
        const int64_t plane = plan.Hq * plan.Wq;
        const int64_t channel_stride = plan.in_place ? H * W : plan.phases * plane;
        // The declared input's offsets were made with the kernel; another input shape makes its own.
        std::vector<int64_t> own_offsets;
        if (lane_offsets_.input != g.input || lane_offsets_.channels != C) own_offsets = lane_tap_offsets(g, C);
        const std::vector<int64_t>& offsets = own_offsets.empty() ? lane_offsets_.offsets : own_offsets;
        float* phase_buffer = plan.in_place ? nullptr : call_buffer<float, 0>(C * channel_stride + plan.reach);
        const int64_t panels = lane_filters_.panels(), width = lane_filters_.panel_width();
        // Enough tasks to keep every thread busy; whole panels when there are plenty.  With few panels (the narrow
        // layers that follow depthwise ones) each thread's chunk is one band of rows for all panels, the rows the
        // previous layer left in its cache (see ThreadPool); with many, each thread reads half the filters instead,
        // which then outweigh the activations.
        const int64_t threads = pool.size();
        const int64_t wanted = (4 * threads + panels - 1) / panels;
        const int64_t row_blocks = std::min(OH, (wanted + threads - 1) / threads * threads);
        const bool rows_outer = panels <= 2 * threads;
        for (int64_t n = 0; n < N; ++n) {
            const float* image = x + n * C * H * W;
            if (!plan.in_place) {
                float* dst = phase_buffer;
                pool.parallel_for(C, std::max<int64_t>(1, 16384 / channel_stride), [&](int64_t first, int64_t last) {
                    for (int64_t c = first; c < last; ++c) build_phases(image + c * H * W, g, plan, dst + c * channel_stride);
                });
                std::fill(dst + C * channel_stride, dst + C * channel_stride + plan.reach, 0.0f);
                image = dst;
            }
            pool.parallel_for(panels * row_blocks, 1, [&](int64_t first, int64_t last) {
                for (int64_t t = first; t < last; ++t) {
                    const int64_t p = rows_outer ? t % panels : t / row_blocks;
                    const int64_t block = rows_outer ? t / panels : t % row_blocks;
                    const int64_t oh0 = band_begin(OH, row_blocks, block), oh1 = band_begin(OH, row_blocks, block + 1);
                    if (oh0 == oh1) continue;
                    const int64_t at = (n * M + p * width) * out_size;
                    // Without grid columns to crop, the rows' positions follow each other: one run for all of them.
                    const int64_t run = plan.Wq == OW ? (oh1 - oh0) * OW : OW;
                    for (int64_t oh = oh0; oh < oh1; oh += run / OW) {
                        lane_gemm_positions(lane_filters_, p, image + oh * plan.Wq, offsets.data(), run, bias,
                                            y + at + oh * OW, out_size, &epilogue_,
                                            z != nullptr ? z + at + oh * OW : nullptr);
                    }
                }
            });
        }
    }

    // The row offsets run_lanes reads the (phase planes of the) input through, for C channels.
    static std::vector<int64_t> lane_tap_offsets(const WindowGeometry& g, int64_t C) {
        const DirectPlan plan = plan_direct(g);
        const int64_t channel_stride = plan.in_place ? g.input[0] * g.input[1] : plan.phases * plan.Hq * plan.Wq;
        return tap_offsets(plan, g, C, channel_stride);
    }

    // One set of packed panels per group; W is [M, C / group, kernel...].
    std::vector<PackedFilters> pack_filters(const float* w, int64_t M, int64_t depth) const {
        const int64_t Mg = M / group_;
        std::vector<PackedFilters> packed;
        for (int64_t grp = 0; grp < group_; ++grp) packed.emplace_back(w + grp * Mg * depth, Mg, depth, depth);
        return packed;
    }

    // 2-D float convolutions without im2col (see DirectPlan): the products read the phase planes in place through
    // a table of row offsets, one per (channel, tap).  The grid's extra columns per row are wasted work, cut away
    // when copying to Y (no copy when there are none).
    void run_direct(ThreadPool& pool, const WindowGeometry& g, const float* x,
                    const std::vector<PackedFilters>& filters, const float* bias, int64_t N, int64_t C, int64_t M,
                    float* y, const float* z) const {
        const int64_t Cg = C / group_, Mg = M / group_;
        const int64_t H = g.input[0], W = g.input[1], OH = g.output[0], OW = g.output[1];
        const int64_t KH = g.kernel[0], KW = g.kernel[1];
        const DirectPlan plan = plan_direct(g);
        const int64_t Hq = plan.Hq, Wq = plan.Wq, plane = Hq * Wq, grid_size = OH * Wq;
        const int64_t channel_stride = plan.in_place ? H * W : plan.phases * plane;
        const bool cropped = Wq != OW;

        const std::vector<int64_t> offsets = tap_offsets(plan, g, Cg, channel_stride);
        float* phase_buffer = plan.in_place ? nullptr : call_buffer<float, 0>(Cg * channel_stride + plan.reach);
        float* grid_buffer = cropped ? call_buffer<float, 1>(Mg * grid_size) : nullptr;

        const int64_t width = packed_gemm_panel_width();
        const int64_t filter_panels = filters.empty() ? 0 : filters[0].panels();
        const int64_t column_panels = (grid_size + width - 1) / width;
        const Grid grid = split_grid(pool.size(), Mg * grid_size * std::max<int64_t>(Cg * KH * KW, 1), filter_panels,
                                     column_panels, width);
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t grp = 0; grp < group_; ++grp) {
                const float* image = x + (n * C + grp * Cg) * H * W;
                if (!plan.in_place) {
                    float* dst = phase_buffer;
                    pool.parallel_for(Cg, std::max<int64_t>(1, 16384 / channel_stride),
                                      [&](int64_t first, int64_t last) {
                                          for (int64_t c = first; c < last; ++c) {
                                              build_phases(image + c * H * W, g, plan, dst + c * channel_stride);
                                          }
                                      });
                    std::fill(dst + Cg * channel_stride, dst + Cg * channel_stride + plan.reach, 0.0f);
                    image = dst;
                }
                float* out = y + (n * M + grp * Mg) * OH * OW;
                const float* sum = z != nullptr ? z + (n * M + grp * Mg) * OH * OW : nullptr;
                float* target = cropped ? grid_buffer : out;
                const float* group_bias = bias != nullptr ? bias + grp * Mg : nullptr;
                const int64_t panel_rows = packed_gemm_panel_rows();
                pool.parallel_for(grid.row_blocks * grid.col_blocks, 1, [&](int64_t first, int64_t last) {
                    for (int64_t t = first; t < last; ++t) {
                        const int64_t p0 = (t / grid.col_blocks) * grid.panels_per_block;
                        const int64_t n0 = (t % grid.col_blocks) * grid.column_panels_per_block * width;
                        const int64_t n1 = std::min(grid_size, n0 + grid.column_panels_per_block * width);
                        packed_gemm_rows(filters[grp], p0, p0 + grid.panels_per_block, image + n0, offsets.data(),
                                         n1 - n0, group_bias, target + n0, grid_size);
                        if (!cropped && epilogue_.active()) {
                            const int64_t m1 = std::min(Mg, (p0 + grid.panels_per_block) * panel_rows);
                            for (int64_t m = p0 * panel_rows; m < m1; ++m) {
                                const int64_t at = m * grid_size + n0;
                                epilogue_.apply(out + at, sum != nullptr ? sum + at : nullptr, n1 - n0);
                            }
                        }
                    }
                });
                if (cropped) {
                    const float* from = grid_buffer;
                    pool.parallel_for(Mg, std::max<int64_t>(1, 16384 / grid_size), [&](int64_t first, int64_t last) {
                        for (int64_t m = first; m < last; ++m) {
                            for (int64_t oh = 0; oh < OH; ++oh) {
                                const float* src = from + m * grid_size + oh * Wq;
                                std::copy(src, src + OW, out + (m * OH + oh) * OW);
                            }
                            if (epilogue_.active())
                                epilogue_.apply(out + m * OH * OW, sum != nullptr ? sum + m * OH * OW : nullptr, OH * OW);
                        }
                    });
                }
            }
        }
    }

    // Float convolutions on CPUs with the packed-filter micro-kernels: im2col writes straight into the panel layout
    // the micro-kernel reads, and the bias is the accumulators' starting value.
    void run_packed(ThreadPool& pool, const WindowGeometry& g, const float* x,
                    const std::vector<PackedFilters>& filters, const float* bias, int64_t N, int64_t C, int64_t M,
                    float* y, const float* z) const {
        const int64_t Cg = C / group_, Mg = M / group_;
        const int64_t in_size = g.input_size(), out_size = g.output_size();
        const int64_t depth = Cg * g.kernel_size();
        const int64_t width = packed_gemm_panel_width();
        if (out_size >= kTiledMinWidthPerFilter * Mg) {
            // Wide images: tasks are (image, group, tile of output positions); each builds its tile's columns in
            // its own cache-sized buffer and multiplies them right away.
            const int64_t per_thread = (out_size + pool.size() - 1) / pool.size();
            const int64_t tile =
                std::clamp<int64_t>((per_thread + width - 1) / width * width, width, std::max(kMaxTileWidth, width));
            const int64_t tiles = (out_size + tile - 1) / tile;
            pool.parallel_for(N * group_ * tiles, 1, [&](int64_t first, int64_t last) {
                float* columns = thread_scratch_buffer<float>(depth * tile);
                for (int64_t task = first; task < last; ++task) {
                    const int64_t t = task % tiles, image_group = task / tiles;
                    const int64_t n = image_group / group_, grp = image_group % group_;
                    const int64_t c0 = t * tile, c1 = std::min(out_size, c0 + tile);
                    im2col_tile(g, x + (n * C + grp * Cg) * in_size, Cg, c0, c1, columns, width);
                    const int64_t base = (n * M + grp * Mg) * out_size;
                    packed_gemm(filters[grp], 0, filters[grp].panels(), columns, c1 - c0,
                                bias != nullptr ? bias + grp * Mg : nullptr, y + base + c0, out_size);
                    if (epilogue_.active()) {
                        for (int64_t m = 0; m < Mg; ++m) {
                            const int64_t at = base + m * out_size + c0;
                            epilogue_.apply(y + at, z != nullptr ? z + at : nullptr, c1 - c0);
                        }
                    }
                }
            });
            return;
        }
        // Small images with many filters: the whole column matrix once, then a grid of (filter panels x column
        // panels) blocks across the pool.
        const int64_t column_panels = (out_size + width - 1) / width;
        float* col = call_buffer<float, 2>(depth * column_panels * width);
        const int64_t filter_panels = filters.empty() ? 0 : filters[0].panels();
        const Grid grid =
            split_grid(pool.size(), Mg * out_size * std::max<int64_t>(depth, 1), filter_panels, column_panels, width);
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t grp = 0; grp < group_; ++grp) {
                im2col_panels(pool, g, x + (n * C + grp * Cg) * in_size, Cg, col, width);
                float* out = y + (n * M + grp * Mg) * out_size;
                const float* sum = z != nullptr ? z + (n * M + grp * Mg) * out_size : nullptr;
                const float* group_bias = bias != nullptr ? bias + grp * Mg : nullptr;
                const int64_t panel_rows = packed_gemm_panel_rows();
                pool.parallel_for(grid.row_blocks * grid.col_blocks, 1, [&](int64_t first, int64_t last) {
                    for (int64_t t = first; t < last; ++t) {
                        const int64_t p0 = (t / grid.col_blocks) * grid.panels_per_block;
                        const int64_t j0 = (t % grid.col_blocks) * grid.column_panels_per_block;
                        const int64_t n0 = j0 * width;
                        const int64_t n1 = std::min(out_size, (j0 + grid.column_panels_per_block) * width);
                        packed_gemm(filters[grp], p0, p0 + grid.panels_per_block, col + j0 * depth * width,
                                    n1 - n0, group_bias, out + n0, out_size);
                        if (epilogue_.active()) {
                            const int64_t m1 = std::min(Mg, (p0 + grid.panels_per_block) * panel_rows);
                            for (int64_t m = p0 * panel_rows; m < m1; ++m) {
                                const int64_t at = m * out_size + n0;
                                epilogue_.apply(out + at, sum != nullptr ? sum + at : nullptr, n1 - n0);
                            }
                        }
                    }
                });
            }
        }
    }

    // How a product of `panels` filter panels x `column_panels` column panels splits across `threads` tasks: each
    // task re-reads its filter panels and its columns, so blocks stay as square as the thread count allows.
    struct Grid {
        int64_t row_blocks = 1, col_blocks = 1;
        int64_t panels_per_block = 1, column_panels_per_block = 1;
    };
    static Grid split_grid(int64_t threads, int64_t work, int64_t panels, int64_t column_panels, int64_t width) {
        Grid best;
        best.panels_per_block = std::max<int64_t>(panels, 1);
        best.column_panels_per_block = std::max<int64_t>(column_panels, 1);
        const int64_t tasks = std::min<int64_t>(threads, std::max<int64_t>(1, work / kWorkPerTask));
        double best_cost = -1;
        for (int64_t row_tasks = 1; row_tasks <= tasks; ++row_tasks) {
            const int64_t col_tasks = std::max<int64_t>(1, tasks / row_tasks);
            const int64_t p = (panels + row_tasks - 1) / row_tasks;
            const int64_t q = (column_panels + col_tasks - 1) / col_tasks;
            const double m = double(p * packed_gemm_panel_rows()), n = double(q * width);
            const double cost = m * n + 16.0 * (m + n);
            if (best_cost < 0 || cost < best_cost) {
                best_cost = cost;
                best.panels_per_block = std::max<int64_t>(p, 1);
                best.column_panels_per_block = std::max<int64_t>(q, 1);
            }
        }
        best.row_blocks = (panels + best.panels_per_block - 1) / best.panels_per_block;
        best.col_blocks = (column_panels + best.column_panels_per_block - 1) / best.column_panels_per_block;
        return best;
    }

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
        T* col = pointwise ? nullptr : call_buffer<T, 2>(depth * out_size);
        for (int64_t n = 0; n < N; ++n) {
            for (int64_t grp = 0; grp < group_; ++grp) {
                const T* image = x + (n * C + grp * Cg) * in_size;
                const T* columns = image;
                if (!pointwise) {
                    im2col(pool, g, image, Cg, col);
                    columns = col;
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
                gemm<T>(pool, false, false, Mg, out_size, depth, T(1), w + grp * Mg * depth, depth, columns, out_size,
                        T(0), out, out_size, epilogue);
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
            T* columns = thread_scratch_buffer<T>(depth * tile);
            for (int64_t task = first; task < last; ++task) {
                const int64_t t = task % tiles, image_group = task / tiles;
                const int64_t n = image_group / group_, grp = image_group % group_;
                const int64_t c0 = t * tile, c1 = std::min(out_size, c0 + tile), width = c1 - c0;
                im2col_tile(g, x + (n * C + grp * Cg) * in_size, Cg, c0, c1, columns, width);
                T* out = y + (n * M + grp * Mg) * out_size;
                gemm_serial<T>(false, false, Mg, width, depth, T(1), w + grp * Mg * depth, depth, columns, width, T(0),
                               out + c0, out_size);
                add_bias(out, grp, c0, c1);
            }
        });
    }

    // Tiles are used when the image has at least this many output positions per filter (otherwise the filters,
    // packed once per tile, dominate and whole products split by filters do better).
    static constexpr int64_t kTiledMinWidthPerFilter = 4;
    static constexpr int64_t kMaxTileWidth = 256;
    // Multiply-adds below which a product is not split further.
    static constexpr int64_t kWorkPerTask = int64_t{1} << 18;

    std::vector<PackedFilters> packed_filters_;  // per group, when the filters are constant
    LanePackedFilters lane_filters_;             // or for the lane kernels (one group)
    struct LaneOffsets {
        Shape input;  // the declared input's spatial shape and channels they were made for
        int64_t channels = 0;
        std::vector<int64_t> offsets;
    };
    LaneOffsets lane_offsets_;                   // the lane kernels' row offsets for the declared input
    WinogradFilters winograd_;                   // or transformed for Winograd (3x3, stride 1, one group)
    PointwiseFilters pointwise_;                 // or packed for pointwise layers (1x1, stride 1, no padding)
    Shape packed_shape_;                         // W's shape when packed_filters_ or lane_filters_ holds it
    std::optional<WindowGeometry> declared_;     // the declared input's geometry, when the model states it
    bool blocked_capable_ = false;               // filters wait for set_layout (BlockedLayoutKernel)
    bool depthwise_ = false;                     // ... for the blocked depthwise kernel
    std::vector<float> depthwise_filters_;       // packed for it (pack_blocked_depthwise)
    BlockedConvLayout layout_;                   // what set_layout chose
    ConvEpilogue epilogue_;                      // FusedConv's sum and activation (none for Conv)
    std::unique_ptr<Kernel> absorbed_;           // the pointwise convolution this depthwise one took over
    size_t absorbed_inputs_ = 0;                 // where its inputs start among this step's
};

// Why a FusedConv cannot run, from its attributes and declared shapes: an activation the epilogue lacks, or
// channels that do not divide into the groups.
std::string check_fused_conv(const NodeInfo& info) {
    ConvEpilogue::parse(info);  // throws KernelError naming the problem
    const int64_t group = info.attr_int("group", 1);
    if (group < 1) return "group must be positive";
    const TessNodeView& node = info.view();
    if (node.input_count < 2 || node.inputs[0] == nullptr || node.inputs[1] == nullptr) return "";
    const TessValueView &x = *node.inputs[0], &w = *node.inputs[1];
    if (x.rank >= 2 && x.dims[1] >= 0 && x.dims[1] % group != 0)
        return "input channels " + std::to_string(x.dims[1]) + " are not divisible by group " + std::to_string(group);
    if (w.rank >= 1 && w.dims[0] >= 0 && w.dims[0] % group != 0)
        return "output channels " + std::to_string(w.dims[0]) + " are not divisible by group " + std::to_string(group);
    if (x.rank >= 2 && w.rank >= 2 && x.dims[1] >= 0 && w.dims[1] >= 0 && w.dims[1] * group != x.dims[1])
        return "W " + shape_string(Shape(w.dims, w.dims + w.rank)) + " takes " + std::to_string(w.dims[1] * group) +
               " input channels, X has " + std::to_string(x.dims[1]);
    return "";
}

}  // namespace

void register_conv_kernels(KernelRegistry& registry) {
    const std::vector<int32_t> conv_types = type_ids_with_16bit_floats(FloatTypes{});
    const std::vector<std::pair<size_t, std::vector<int32_t>>> float_inputs{
        {0, conv_types}, {1, conv_types}, {2, conv_types}};
    registry.add({"", "Conv", 1, 0, float_inputs, KernelMemory::Normal, make_factory<ConvKernel>()});
    // The optimizer's FusedConv (provider.h): float only.
    const std::vector<int32_t> f32{TESS_ELEMENT_FLOAT32};
    registry.add({TESS_FUSED_OPS_DOMAIN, "FusedConv", 1, 0, {{0, f32}, {1, f32}, {2, f32}, {3, f32}}, KernelMemory::Normal,
                  make_factory<ConvKernel>()});
    // onnxruntime's com.microsoft FusedConv, which its optimizer writes into saved models: the same operator (X, W,
    // B, Z; Conv's attributes; activation with activation_params), in every type Conv takes.
    registry.add({"com.microsoft", "FusedConv", 1, 0, {{0, conv_types}, {1, conv_types}, {2, conv_types}, {3, conv_types}},
                  KernelMemory::Normal, make_factory<ConvKernel>(), check_fused_conv});
}

}  // namespace tessera::cpu
