// CPU provider: sliding-window geometry and im2col/col2im.
#include "util/im2col.h"

#include <algorithm>
#include <string>

namespace tessera::cpu {

namespace {

std::string ints_string(const std::vector<int64_t>& v) { return shape_string(v); }

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

}  // namespace

AutoPad parse_auto_pad(const NodeInfo& info) {
    const std::string value = info.attr_string("auto_pad", "NOTSET");
    if (value == "NOTSET" || value.empty()) return AutoPad::NotSet;
    if (value == "SAME_UPPER") return AutoPad::SameUpper;
    if (value == "SAME_LOWER") return AutoPad::SameLower;
    if (value == "VALID") return AutoPad::Valid;
    throw KernelError(std::string(info.op_type()) + ": unknown auto_pad value '" + value + "'");
}

WindowAttributes WindowAttributes::parse(const NodeInfo& info) {
    WindowAttributes a;
    const std::string op(info.op_type());
    a.auto_pad = parse_auto_pad(info);
    a.kernel_shape = info.attr_ints("kernel_shape");
    a.strides = info.attr_ints("strides");
    a.dilations = info.attr_ints("dilations");
    a.pads = info.attr_ints("pads");
    a.ceil_mode = info.attr_int("ceil_mode", 0) != 0;
    for (int64_t k : a.kernel_shape) {
        if (k <= 0) throw KernelError(op + ": kernel_shape " + ints_string(a.kernel_shape) + " must be positive");
    }
    for (int64_t s : a.strides) {
        if (s <= 0) throw KernelError(op + ": strides " + ints_string(a.strides) + " must be positive");
    }
    for (int64_t d : a.dilations) {
        if (d <= 0) throw KernelError(op + ": dilations " + ints_string(a.dilations) + " must be positive");
    }
    for (int64_t p : a.pads) {
        if (p < 0) throw KernelError(op + ": pads " + ints_string(a.pads) + " must not be negative");
    }
    if (a.pads.size() % 2 != 0) throw KernelError(op + ": pads " + ints_string(a.pads) + " has an odd length");
    return a;
}

bool WindowGeometry::is_pointwise() const {
    for (size_t d = 0; d < rank(); ++d) {
        if (kernel[d] != 1 || strides[d] != 1 || pads_begin[d] != 0 || pads_end[d] != 0) return false;
    }
    return true;
}

WindowGeometry resolve_window(std::string_view op_name, const WindowAttributes& attrs, const Shape& input_spatial,
                              const Shape& kernel) {
    const std::string op(op_name);
    const size_t rank = input_spatial.size();
    auto check_length = [&](const std::vector<int64_t>& v, size_t expected, const char* name) {
        if (!v.empty() && v.size() != expected) {
            throw KernelError(op + ": " + name + " " + ints_string(v) + " does not match " + std::to_string(rank) +
                              " spatial dimensions");
        }
    };
    if (rank == 0) throw KernelError(op + ": the input has no spatial dimensions");
    check_length(kernel, rank, "kernel_shape");
    check_length(attrs.strides, rank, "strides");
    check_length(attrs.dilations, rank, "dilations");
    check_length(attrs.pads, 2 * rank, "pads");

    WindowGeometry g;
    g.input = input_spatial;
    g.kernel = kernel;
    g.strides = attrs.strides.empty() ? Shape(rank, 1) : attrs.strides;
    g.dilations = attrs.dilations.empty() ? Shape(rank, 1) : attrs.dilations;
    g.pads_begin.assign(rank, 0);
    g.pads_end.assign(rank, 0);
    g.output.assign(rank, 0);
    for (size_t d = 0; d < rank; ++d) {
        const int64_t in = input_spatial[d], stride = g.strides[d];
        const int64_t span = (kernel[d] - 1) * g.dilations[d] + 1;  // extent of one dilated window
        int64_t out = 0;
        switch (attrs.auto_pad) {
            case AutoPad::SameUpper:
            case AutoPad::SameLower: {
                out = ceil_div(in, stride);
                const int64_t total = std::max<int64_t>(0, (out - 1) * stride + span - in);
                const int64_t smaller = total / 2, larger = total - total / 2;
                g.pads_begin[d] = attrs.auto_pad == AutoPad::SameUpper ? smaller : larger;
                g.pads_end[d] = attrs.auto_pad == AutoPad::SameUpper ? larger : smaller;
                break;
            }
            case AutoPad::Valid:
                out = floor_div(in - span, stride) + 1;
                break;
            case AutoPad::NotSet: {
                if (!attrs.pads.empty()) {
                    g.pads_begin[d] = attrs.pads[d];
                    g.pads_end[d] = attrs.pads[d + rank];
                }
                const int64_t room = in + g.pads_begin[d] + g.pads_end[d] - span;
                if (attrs.ceil_mode) {
                    out = ceil_div(room, stride) + 1;
                    // The last window must start inside the input or its leading padding.
                    if (out > 0 && (out - 1) * stride >= in + g.pads_begin[d]) --out;
                } else {
                    out = floor_div(room, stride) + 1;
                }
                break;
            }
        }
        if (out <= 0) {
            throw KernelError(op + ": input spatial shape " + shape_string(input_spatial) +
                              " is too small for kernel " + shape_string(kernel) + " (output dimension " +
                              std::to_string(out) + ")");
        }
        g.output[d] = out;
    }
    return g;
}

TapRange taps_inside(int64_t start, int64_t count, int64_t step, int64_t extent) {
    const int64_t first = start >= 0 ? 0 : std::min(count, ceil_div(-start, step));
    const int64_t last = extent - 1 - start < 0 ? 0 : std::min(count, (extent - 1 - start) / step + 1);
    return {first, std::max(first, last)};
}

namespace {

// Visits, for one kernel tap, the output positions [position_begin, position_end) run by run, a run being a stretch
// along the innermost output dimension: fn(run_start, lo, hi, taps, in_offset) for the positions run_start + o,
// o in [lo, hi), where position run_start + o reads image element in_offset + o * stride when o is in taps and
// padding otherwise.  Keeps the odometer in one place for im2col and col2im.
// `scratch` holds 3 * rank integers (so that the per-row calls allocate nothing).
template <typename Fn>
void for_each_row_run(const WindowGeometry& g, int64_t kernel_index, int64_t position_begin, int64_t position_end,
                      int64_t* scratch, Fn&& fn) {
    const size_t rank = g.rank();
    const size_t inner = rank - 1;
    int64_t* tap = scratch;  // kernel tap coordinates of this row
    int64_t* in_stride = scratch + rank;
    int64_t* position = scratch + 2 * rank;  // outer output coordinates of the current run
    for (size_t d = rank; d-- > 0;) {
        tap[d] = kernel_index % g.kernel[d];
        kernel_index /= g.kernel[d];
    }
    in_stride[inner] = 1;
    for (size_t d = inner; d-- > 0;) in_stride[d] = in_stride[d + 1] * g.input[d + 1];

    const int64_t out_inner = g.output[inner];
    const int64_t inner_offset = tap[inner] * g.dilations[inner] - g.pads_begin[inner];
    const TapRange inner_range = taps_inside(inner_offset, out_inner, g.strides[inner], g.input[inner]);

    int64_t run = position_begin / out_inner;
    int64_t outer = run;
    for (size_t d = inner; d-- > 0;) {
        position[d] = outer % g.output[d];
        outer /= g.output[d];
    }
    for (; run * out_inner < position_end; ++run) {
        const int64_t run_start = run * out_inner;
        const int64_t lo = std::max<int64_t>(position_begin - run_start, 0);
        const int64_t hi = std::min<int64_t>(position_end - run_start, out_inner);
        bool inside = true;
        int64_t base = 0;
        for (size_t d = 0; d < inner; ++d) {
            const int64_t x = position[d] * g.strides[d] + tap[d] * g.dilations[d] - g.pads_begin[d];
            if (x < 0 || x >= g.input[d]) {
                inside = false;
                break;
            }
            base += x * in_stride[d];
        }
        TapRange taps{lo, lo};  // all padding unless the outer coordinates are inside
        if (inside) {
            taps.first = std::clamp(inner_range.first, lo, hi);
            taps.last = std::clamp(inner_range.last, taps.first, hi);
        }
        fn(run_start, lo, hi, taps, base + inner_offset);
        for (size_t d = inner; d-- > 0;) {
            if (++position[d] < g.output[d]) break;
            position[d] = 0;
        }
    }
}

// Rows [row_begin, row_end) (of rows_total) and output positions [position_begin, position_end) of the column
// matrix, in the panel layout described at im2col_tile (relative to position_begin).
template <typename T>
void im2col_block(const WindowGeometry& g, const T* image, int64_t rows_total, int64_t row_begin, int64_t row_end,
                  int64_t position_begin, int64_t position_end, T* col, int64_t panel) {
    const int64_t kernel_size = g.kernel_size(), in_size = g.input_size();
    const int64_t stride = g.strides.back();
    std::vector<int64_t> scratch(3 * g.rank());
    for (int64_t row = row_begin; row < row_end; ++row) {
        const T* img = image + (row / kernel_size) * in_size;
        for_each_row_run(g, row % kernel_size, position_begin, position_end, scratch.data(),
                         [&](int64_t run_start, int64_t lo, int64_t hi, TapRange taps, int64_t in_offset) {
                             // Positions run_start + o for o in [from, to) go to d[o - from]: padding, image, padding.
                             auto write = [&](T* d, int64_t from, int64_t to) {
                                 const int64_t t0 = std::clamp(taps.first, from, to),
                                               t1 = std::clamp(taps.last, t0, to);
                                 std::fill(d, d + (t0 - from), T(0));
                                 if (t1 > t0) {
                                     if (stride == 1) {
                                         std::copy(img + (in_offset + t0), img + (in_offset + t1), d + (t0 - from));
                                     } else {
                                         for (int64_t o = t0; o < t1; ++o) d[o - from] = img[in_offset + o * stride];
                                     }
                                 }
                                 std::fill(d + (t1 - from), d + (to - from), T(0));
                             };
                             // Split the run where it crosses from one panel into the next.
                             for (int64_t o = lo; o < hi;) {
                                 const int64_t n = run_start - position_begin + o;
                                 const int64_t within = n % panel;
                                 const int64_t end = std::min(hi, o + (panel - within));
                                 write(col + (n / panel) * rows_total * panel + row * panel + within, o, end);
                                 o = end;
                             }
                         });
    }
}

// The whole column matrix in the panel layout, rows split across the pool.
template <typename T>
void im2col_all(ThreadPool& pool, const WindowGeometry& g, const T* image, int64_t channels, T* col, int64_t panel) {
    const int64_t rows = channels * g.kernel_size(), out_size = g.output_size();
    if (out_size == 0) return;
    const int64_t grain = std::max<int64_t>(1, 16384 / out_size);
    if (rows <= grain || pool.size() <= 1) {
        im2col_block(g, image, rows, 0, rows, 0, out_size, col, panel);
        return;
    }
    pool.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
        im2col_block(g, image, rows, begin, end, 0, out_size, col, panel);
    });
}

}  // namespace

template <typename T>
void im2col(ThreadPool& pool, const WindowGeometry& g, const T* image, int64_t channels, T* col) {
    im2col_all(pool, g, image, channels, col, std::max<int64_t>(1, g.output_size()));
}

template <typename T>
void im2col_panels(ThreadPool& pool, const WindowGeometry& g, const T* image, int64_t channels, T* col, int64_t panel) {
    im2col_all(pool, g, image, channels, col, panel);
}

template <typename T>
void im2col_tile(const WindowGeometry& g, const T* image, int64_t channels, int64_t position_begin,
                 int64_t position_end, T* col, int64_t panel) {
    const int64_t rows = channels * g.kernel_size();
    im2col_block(g, image, rows, 0, rows, position_begin, position_end, col, panel);
}

template <typename T>
void col2im_channels(const WindowGeometry& g, const T* col, int64_t channel_begin, int64_t channel_end, T* image) {
    const int64_t kernel_size = g.kernel_size(), in_size = g.input_size(), out_size = g.output_size();
    if (out_size == 0) return;
    const int64_t stride = g.strides.back();
    std::vector<int64_t> scratch(3 * g.rank());
    for (int64_t c = channel_begin; c < channel_end; ++c) {
        T* img = image + c * in_size;
        for (int64_t k = 0; k < kernel_size; ++k) {
            const T* src = col + (c * kernel_size + k) * out_size;
            for_each_row_run(g, k, 0, out_size, scratch.data(),
                             [&](int64_t run_start, int64_t, int64_t, TapRange taps, int64_t in_offset) {
                                 for (int64_t o = taps.first; o < taps.last; ++o) {
                                     img[in_offset + o * stride] += src[run_start + o];
                                 }
                             });
        }
    }
}

template void im2col_tile<float>(const WindowGeometry&, const float*, int64_t, int64_t, int64_t, float*, int64_t);
template void im2col_tile<double>(const WindowGeometry&, const double*, int64_t, int64_t, int64_t, double*, int64_t);
template void im2col<float>(ThreadPool&, const WindowGeometry&, const float*, int64_t, float*);
template void im2col_panels<float>(ThreadPool&, const WindowGeometry&, const float*, int64_t, float*, int64_t);
template void im2col<double>(ThreadPool&, const WindowGeometry&, const double*, int64_t, double*);
template void col2im_channels<float>(const WindowGeometry&, const float*, int64_t, int64_t, float*);
template void col2im_channels<double>(const WindowGeometry&, const double*, int64_t, int64_t, double*);

}  // namespace tessera::cpu
