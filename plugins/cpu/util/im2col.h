// CPU provider: sliding-window geometry shared by Conv, ConvTranspose and the pooling ops (attribute parsing, output
// sizes, padding), and the im2col/col2im transforms that turn a convolution into a matrix product.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/kernel.h"
#include "runtime/thread_pool.h"

namespace tessera::cpu {

enum class AutoPad { NotSet, SameUpper, SameLower, Valid };

// Reads the "auto_pad" attribute; throws KernelError for an unknown value.
AutoPad parse_auto_pad(const NodeInfo& info);

// Window attributes as written in the node; empty vectors mean "not given" (resolved once the rank is known).
struct WindowAttributes {
    AutoPad auto_pad = AutoPad::NotSet;
    std::vector<int64_t> kernel_shape;
    std::vector<int64_t> strides;
    std::vector<int64_t> dilations;
    std::vector<int64_t> pads;  // [x1_begin, x2_begin, ..., x1_end, x2_end, ...]
    bool ceil_mode = false;

    // Reads auto_pad, kernel_shape, strides, dilations, pads and ceil_mode, checking what can be checked without
    // the input shape (positive strides/dilations, non-negative pads, matching lengths).
    static WindowAttributes parse(const NodeInfo& info);
};

// A window sweep over the spatial dimensions of one image: a convolution's (or pool's) input is `input`, its output
// positions `output`.  All vectors have one entry per spatial dimension.
struct WindowGeometry {
    Shape input;
    Shape output;
    Shape kernel;
    Shape strides;
    Shape dilations;
    Shape pads_begin;
    Shape pads_end;

    size_t rank() const { return input.size(); }
    int64_t input_size() const { return shape_size(input); }
    int64_t output_size() const { return shape_size(output); }
    int64_t kernel_size() const { return shape_size(kernel); }
    // A 1x1 window with unit strides and no padding: im2col would copy the image unchanged.
    bool is_pointwise() const;
};

// Resolves the attributes for a Conv/pool over `input_spatial` with the given kernel: defaults, auto_pad, output
// size (floor, or ceil with the rule that the last window must start inside the input or its leading padding).
// Throws KernelError naming `op` for ranks that do not match or an empty/negative output.
WindowGeometry resolve_window(std::string_view op, const WindowAttributes& attrs, const Shape& input_spatial,
                              const Shape& kernel);

// Along one dimension, the taps t in [0, count) at coordinate start + t * step that land inside [0, extent): the
// taps [first, last).  Serves both window taps (step = dilation) and output positions (step = stride).
struct TapRange {
    int64_t first;
    int64_t last;
};
TapRange taps_inside(int64_t start, int64_t count, int64_t step, int64_t extent);

// im2col: the column matrix [channels * kernel_size, output_size] built from the image [channels, input_size];
// entries whose window tap falls into padding are zero.  Rows are split across the pool.
template <typename T>
void im2col(ThreadPool& pool, const WindowGeometry& g, const T* image, int64_t channels, T* col);

// Column matrices in panel layout: the columns are cut into panels of `panel` columns, each panel stored as
// [rows][panel] (contiguous), panels one after another; column n of row r lives at
// col[(n / panel) * rows * panel + r * panel + n % panel].  A panel at least as wide as the matrix is the plain
// row-major layout with row stride `panel`.  The last panel's columns past the end are not written.

// The whole matrix, rows split across the pool.
template <typename T>
void im2col_panels(ThreadPool& pool, const WindowGeometry& g, const T* image, int64_t channels, T* col, int64_t panel);

// Output positions (columns) [position_begin, position_end), every row, on the calling thread: the tile a worker
// multiplies while it is still in cache.  Column n of the tile is output position position_begin + n.
template <typename T>
void im2col_tile(const WindowGeometry& g, const T* image, int64_t channels, int64_t position_begin,
                 int64_t position_end, T* col, int64_t panel);

// col2im for channels [channel_begin, channel_end): image[c] += the column rows of channel c scattered back to
// their window positions (taps in the padding are dropped).  Channels touch disjoint parts of the image, so callers
// may split channels across threads.
template <typename T>
void col2im_channels(const WindowGeometry& g, const T* col, int64_t channel_begin, int64_t channel_end, T* image);

}  // namespace tessera::cpu
