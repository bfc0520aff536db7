// CPU provider: the blocked channel layout (NCHW16c) and the convolution that reads and writes it (float, AVX-512).
//
// A blocked tensor keeps its logical NCHW shape (so elementwise kernels, Concat on channels and the memory plan see
// nothing new) but stores channel c of position p of image n at ((n * C/16 + c/16) * H*W + p) * 16 + c % 16: one
// cache line holds the 16 channels of a position.  Only tensors whose channel count is a multiple of 16 are held
// this way; the compiled graph chooses them at creation (blocked_layout.h).
//
// The convolution is the lane kernels' register tile (util/lane_gemm.h: a few output positions x 64 filters,
// filters in the lanes) with the layouts changed at both ends: each position of a tile has its own input address,
// so strides and either input layout are offsets, and a blocked output is stored straight from the registers: full
// cache lines, no transposes, as in oneDNN's and ONNX Runtime's NCHWc kernels.  An NCHW output goes through the
// lane kernels' 16x16 transposes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/thread_pool.h"
#include "util/conv_epilogue.h"
#include "util/im2col.h"
#include "util/lane_gemm.h"
#include "util/winograd.h"

namespace tessera::cpu {

constexpr int64_t kChannelBlock = 16;

// Whether kernels may offer the blocked layout: AVX-512F, and TESSERA_CPU_BLOCKED_LAYOUT not 0 (which keeps every
// tensor NCHW, for measurements and tests).  Read when a kernel is created.
bool blocked_layout_enabled();

// Whether a kernel may offer the layout for input 0 of this node: blocked_layout_enabled() and a declared input of
// shape [N, C, H, W] with C a whole number of blocks (which the graph also requires of every blocked value).
bool blocked_input_declared(const NodeInfo& info);

// dst (blocked) from src (NCHW) and back, for N images of C channels (a multiple of 16) and `positions` each.
void to_blocked(ThreadPool& pool, const float* src, int64_t N, int64_t C, int64_t positions, float* dst);
void from_blocked(ThreadPool& pool, const float* src, int64_t N, int64_t C, int64_t positions, float* dst);

// DequantizeLinear into the blocked layout, for one block of 16 channels: x holds them NCHW (channel c's positions
// from x + c * positions), and dst[p * 16 + c] = (float(x) - zero) * scale for `count` positions from x's first.
// QuantizeLinear out of it: y (NCHW likewise) = saturate(round_half_even(src[p * 16 + c] / scale) + zero).  The
// arithmetic of the NCHW paths (kernels/quantization), bit for bit; In and Out are uint8_t or int8_t.  AVX-512 only,
// as the layout is.
template <typename In>
void dequantize_to_blocked(const In* x, int64_t positions, int64_t count, float scale, float zero, float* dst);
template <typename Out>
void quantize_from_blocked(const float* src, int64_t count, float scale, float zero, int64_t positions, Out* y);

// The uint8 QuantizeLinear of x (NCHW as above) centered on its zero point, into the blocked layout:
// dst[p * 16 + c] = saturate(round_half_even(x / scale) + zero) - zero, exact in float (a dynamically quantized
// depthwise convolution's input, made from the floats the quantization reads).  AVX-512 only, as the layout is.
void quantize_centered_to_blocked(const float* x, int64_t positions, int64_t count, float scale, float zero,
                                  float* dst);

// The 16 channels of `count` positions of one blocked channel block (src[p * 16 + c]) as rows of NCHW planes:
// y[c * positions + p].  AVX-512 only, as the layout is.
void blocked_to_planes(const float* src, int64_t count, int64_t positions, float* y);

// How the tensors of one blocked_conv2d call are laid out.
struct BlockedConvLayout {
    bool x_blocked = false;  // X (C a multiple of 16 when set)
    bool y_blocked = false;  // Y, and Z with it (M a multiple of 16 when set)
};

// The panel width for `filters` output channels written blocked (a multiple of 16): 64, 48 or 32 when one of them
// divides it, so that no lane is wasted (MobileNetV2's 144 and 96 filters), 64 from 128 filters up, else 16.
int64_t blocked_panel_width(int64_t filters);

// A 2-D convolution with one group: Y [N, M, OH, OW] = epilogue(Conv(X [N, C, H, W], filters) + bias, Z).
// filters: LanePackedFilters of W [M, C * KH * KW] (ONNX order), any panel width (blocked_panel_width() suits a
// blocked Y).  bias: M values or NULL; z: NULL without a sum.
// Splits the work across the pool; call it outside any parallel region.  Requires lane_gemm_supported().
void blocked_conv2d(ThreadPool& pool, const WindowGeometry& g, const LanePackedFilters& filters,
                    BlockedConvLayout layout, const float* x, int64_t N, int64_t C, const float* bias,
                    const ConvEpilogue* epilogue, const float* z, float* y);

// Whether blocked_winograd_conv2d runs this convolution: 3x3, unit strides and dilations, padding of at most 2,
// channel and filter counts multiples of 16, on a CPU with the lane kernels.
bool blocked_winograd_applies(const WindowGeometry& g, int64_t channels, int64_t filters);

// The same convolution by Winograd F(2x2, 3x3) (util/winograd.h, blocked_winograd.cc), X and Y (and Z) blocked.
// Splits the work across the pool; call it outside any parallel region.
void blocked_winograd_conv2d(ThreadPool& pool, const WindowGeometry& g, const WinogradFilters& filters, int64_t N,
                             const float* x, const float* bias, const ConvEpilogue* epilogue, const float* z,
                             float* y);

// Depthwise filters W [C, 1, KH, KW] regrouped for blocked_depthwise2d: [C/16][KH * KW][16].
std::vector<float> pack_blocked_depthwise(const float* w, int64_t C, int64_t taps);

// Where a blocked window operation (a depthwise convolution) can hand its output rows instead of storing them:
// rows [oh0, oh1) of channel block `block` of image n, at rows + (oh - oh0) * OW * 16 (16 floats a position),
// on the worker that made them, while they are in cache (a QuantizeLinear that took the convolution over).
// Called concurrently for other rows and blocks; must not throw.
class BlockedBandSink {
public:
    virtual ~BlockedBandSink() = default;
    virtual void take(int64_t n, int64_t block, int64_t oh0, int64_t oh1, const float* rows) const = 0;
};

// A kernel whose blocked output a BlockedBandSink can take row by row instead (ProducerFusingKernel: a
// QuantizeLinear taking over the depthwise convolution before it, so that the floats never leave the cache).
class BlockedBandSource {
public:
    virtual ~BlockedBandSource() = default;
    // Whether it can hand its rows over (chosen with the layouts).
    virtual bool band_source_ready() const = 0;
    // Its output's shape, and its run handing every output row to `sink` (Y is not made), for a step whose inputs
    // from `first_input` on are this kernel's, in order.
    virtual Shape band_source_shape(const KernelContext& ctx, size_t first_input) const = 0;
    virtual void run_to_sink(KernelContext& ctx, size_t first_input, const BlockedBandSink& sink) const = 0;
};

// A 2-D depthwise convolution (C groups of one channel each, C a multiple of 16) from a blocked X to a blocked Y,
// Y = epilogue(Conv(X, W) + bias, Z) with Z blocked: each tap is one vector multiply-add on 16 channels of a
// position, no transposes and no padded copy (positions whose window leaves the image take the taps inside it).
// Splits the work across the pool by bands of output rows; call it outside any parallel region.
// With a sink (and no z), the rows go to it instead of Y (y unused).
void blocked_depthwise2d(ThreadPool& pool, const WindowGeometry& g, const float* packed_w, int64_t N, int64_t C,
                         const float* x, const float* bias, const ConvEpilogue* epilogue, const float* z, float* y,
                         const BlockedBandSink* sink = nullptr);

// The convolution feeding a window operation in blocked_conv_window2d: 2-D, one group, filters packed by
// blocked_panel_width, bias (or NULL) and an epilogue with no sum whose activation is a vector one
// (vector_activation), over `channels` input channels, X blocked or NCHW.
struct BlockedProducerConv {
    const LanePackedFilters* filters;
    WindowGeometry g;  // its geometry; its output is the window operation's input
    int64_t channels;
    bool x_blocked;
    const float* bias;
    const ConvEpilogue* epilogue;
};

// Convolution outputs from this size up are computed by the window operation reading them, when it can take the
// convolution over: MobileNetV2's 112x112 and 56x56 expansions (4.8 and 1.8 MB); smaller ones stay in L2 anyway
// and split better across threads as two steps.
constexpr int64_t kTakenOverMinBytes = int64_t(1) << 20;

// A convolution that another kernel can take over (ProducerFusingKernel) by computing its output rows itself.
class BlockedConvSource {
public:
    virtual ~BlockedConvSource() = default;
    // The geometry the model declares for it when it can be taken over (a blocked output, no sum, a vector
    // activation), else nullopt; and its filter count.
    virtual std::optional<WindowGeometry> blocked_source_geometry() const = 0;
    virtual int64_t blocked_source_filters() const = 0;
    // What blocked_conv_window2d needs of it for a run whose X (its input 0) is the taker's input `first_input`,
    // its other inputs following in order.  Checks X; the result refers to the kernel and the run's inputs.
    virtual BlockedProducerConv blocked_source(const KernelContext& ctx, size_t first_input) const = 0;
};

// A 1x1 stride-1 unpadded convolution with one group reading a window operation's output, which it takes over
// (blocked_conv_window2d): filters packed by blocked_panel_width when its output is blocked, else by any width;
// bias (or NULL); an epilogue whose sum, if any, is z (laid out like its output).
struct BlockedConsumerConv {
    const LanePackedFilters* filters;
    const float* bias;
    const ConvEpilogue* epilogue;
    const float* z;
    bool y_blocked;
};

// Y = consumer(blocked_depthwise2d(X)) (g, packed_w, bias and epilogue as there, no sum) without the depthwise
// convolution's output leaving the cache: each thread takes a run of output rows and, a few rows at a time, makes
// them into a band buffer and the consumer's positions from there.  MobileNetV2's first block.  Splits the work
// across the pool; call it outside any parallel region.
void blocked_depthwise_pointwise2d(ThreadPool& pool, const WindowGeometry& g, const float* packed_w, const float* bias,
                                   const ConvEpilogue* epilogue, int64_t N, int64_t C, const float* x,
                                   const BlockedConsumerConv& consumer, float* y);

// Y = window(conv(X)) without the convolution's output ever leaving the cache: each thread takes a run of output
// rows and, a few rows at a time, computes the convolution rows they read into a ring buffer and the window
// operation's rows from there.  The window operation is blocked_depthwise2d with g, packed_w, bias and epilogue (no
// sum), or with packed_w NULL, blocked_max_pool2d with g.  Y blocked.  MobileNetV2's expansions into its depthwise
// convolutions, and a first convolution into its MaxPool (SqueezeNet, ResNet), whose outputs are the networks'
// largest tensors.  With a consumer, the window operation's rows go to a band buffer of the thread instead, and Y
// is consumer(window(conv(X))), computed from the band as each step's rows are made: MobileNetV2's whole inverted
// residual blocks (expansion, depthwise, projection) in one pass.  Splits the work across the pool; call it outside
// any parallel region.
// With a sink instead of a consumer, the window's rows go to it (y unused).
void blocked_conv_window2d(ThreadPool& pool, const BlockedProducerConv& producer, const WindowGeometry& g,
                           const float* packed_w, const float* bias, const ConvEpilogue* epilogue, int64_t N,
                           const float* x, float* y, const BlockedConsumerConv* consumer = nullptr,
                           const BlockedBandSink* sink = nullptr);

// Where a producer taken over by a window operation writes its rows: image row r's channel block b (W positions
// of 16 floats) at rows + b * block_floats + (r % ring_rows) * W * 16.
struct BlockedRing {
    float* rows;
    int64_t block_floats;
    int64_t W;
    int64_t ring_rows;
    float* at(int64_t block, int64_t row, int64_t column) const {
        return rows + block * block_floats + ((row % ring_rows) * W + column) * kChannelBlock;
    }
};

// A producer whose rows a window operation's kernel computes itself, a few at a time, with the producer's own
// arithmetic (an int8 pointwise convolution whose requantized output is dequantized to floats): one run's maker.
class BlockedRowMaker {
public:
    virtual ~BlockedRowMaker() = default;
    // Image rows [row_begin, row_end) of image n, every channel, into the ring.  Called from the pool's workers
    // (inside a parallel region: whatever it splits runs inline), concurrently for different rows.
    virtual void make_rows(int64_t n, int64_t row_begin, int64_t row_end, const BlockedRing& ring) const = 0;
};

// A kernel that offers itself as such a producer (ProducerFusingKernel): the geometry the model declares for it
// when it can be taken over (a pointwise convolution with a blocked output, say), else nullopt; its output
// channels; and a maker for a run whose X (its input 0) is the taker's input `first_input`, the others following.
class BlockedRowSource {
public:
    virtual ~BlockedRowSource() = default;
    virtual std::optional<WindowGeometry> row_source_geometry() const = 0;
    virtual int64_t row_source_filters() const = 0;
    virtual std::unique_ptr<BlockedRowMaker> row_maker(const KernelContext& ctx, size_t first_input) const = 0;
};

// Y = depthwise(producer rows) as blocked_conv_window2d, the producer's rows made by `maker` (M channels, a
// multiple of 16); g is the depthwise convolution's geometry over them.  Y blocked.
void blocked_rows_window2d(ThreadPool& pool, const BlockedRowMaker& maker, int64_t M, const WindowGeometry& g,
                           const float* packed_w, const float* bias, const ConvEpilogue* epilogue, int64_t N,
                           float* y, const BlockedBandSink* sink = nullptr);

// MaxPool from a blocked X to a blocked Y (C a multiple of 16), on the depthwise kernel's loops; every window must
// hold at least one element of the image.  Splits the work across the pool.  (An AveragePool whose windows all lie
// inside the image is blocked_depthwise2d with every weight 1 / window size.)
void blocked_max_pool2d(ThreadPool& pool, const WindowGeometry& g, int64_t N, int64_t C, const float* x, float* y);

// The average (or, with `max`, the maximum) of each channel's `positions` values of a blocked X [N, C, ...]:
// y[n * C + c], which is NCHW and blocked alike.  Splits the work across the pool.
void blocked_plane_reduce(ThreadPool& pool, int64_t N, int64_t C, int64_t positions, const float* x, bool max,
                          float* y);

// y = x * a[c] + b[c] for every element of channel c of a blocked X [N, C, ...] (BatchNormalization in inference),
// Y blocked; x and y may be the same.  Splits the work across the pool.
void blocked_scale_shift(ThreadPool& pool, int64_t N, int64_t C, int64_t positions, const float* x, const float* a,
                         const float* b, float* y);

}  // namespace tessera::cpu
