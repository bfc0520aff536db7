// CUDA provider operators: sliding windows -- the attributes Conv and the pools share (kernel_shape, strides,
// dilations, pads, auto_pad, ceil_mode) and the output geometry they give.
#pragma once

#include <algorithm>
#include <string>

#include "ops/op_support.h"

namespace tessera::cuda::ops {

inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

struct Window {
    std::string auto_pad = "NOTSET";
    Shape kernel_shape, strides, dilations, pads;
    bool ceil_mode = false;

    static Window parse(const Node& n) {
        Window w;
        w.auto_pad = n.s("auto_pad", "NOTSET");
        if (w.auto_pad.empty()) w.auto_pad = "NOTSET";
        w.kernel_shape = n.ints("kernel_shape");
        w.strides = n.ints("strides");
        w.dilations = n.ints("dilations");
        w.pads = n.ints("pads");
        w.ceil_mode = n.i("ceil_mode", 0) != 0;
        return w;
    }

    std::string check(size_t spatial) const {
        if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
            return "auto_pad '" + auto_pad + "' is not valid";
        auto bad = [&](const Shape& v, size_t size, bool positive) {
            if (v.empty()) return false;
            if (v.size() != size) return true;
            for (int64_t x : v)
                if (positive ? x <= 0 : x < 0) return true;
            return false;
        };
        if (bad(kernel_shape, spatial, true)) return "kernel_shape " + shape_string(kernel_shape) + " is not valid";
        if (bad(strides, spatial, true)) return "strides " + shape_string(strides) + " are not valid";
        if (bad(dilations, spatial, true)) return "dilations " + shape_string(dilations) + " are not valid";
        if (bad(pads, 2 * spatial, false)) return "pads " + shape_string(pads) + " are not valid";
        return "";
    }

    struct Geometry {
        Shape out, pad_begin, pad_end, stride, dilation;
    };

    // The geometry for input spatial dims `in` and kernel `k` (the CPU provider's rule, shared with ONNX).
    Geometry resolve(const Shape& in, const Shape& k, const std::string& label) const {
        const size_t rank = in.size();
        Geometry g;
        g.stride = strides.empty() ? Shape(rank, 1) : strides;
        g.dilation = dilations.empty() ? Shape(rank, 1) : dilations;
        g.pad_begin.assign(rank, 0);
        g.pad_end.assign(rank, 0);
        g.out.assign(rank, 0);
        if (g.stride.size() != rank || g.dilation.size() != rank || (!pads.empty() && pads.size() != 2 * rank))
            fail(TESS_STATUS_INVALID_ARGUMENT, label + ": attributes do not match " + std::to_string(rank) +
                                                   " spatial dimensions");
        for (size_t d = 0; d < rank; ++d) {
            const int64_t span = (k[d] - 1) * g.dilation[d] + 1, s = g.stride[d];
            int64_t out = 0;
            if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
                out = ceil_div(in[d], s);
                const int64_t total = std::max<int64_t>(0, (out - 1) * s + span - in[d]);
                const int64_t smaller = total / 2, larger = total - smaller;
                g.pad_begin[d] = auto_pad == "SAME_UPPER" ? smaller : larger;
                g.pad_end[d] = auto_pad == "SAME_UPPER" ? larger : smaller;
            } else if (auto_pad == "VALID") {
                out = floor_div(in[d] - span, s) + 1;
            } else {
                if (!pads.empty()) {
                    g.pad_begin[d] = pads[d];
                    g.pad_end[d] = pads[d + rank];
                }
                const int64_t room = in[d] + g.pad_begin[d] + g.pad_end[d] - span;
                if (ceil_mode) {
                    out = ceil_div(room, s) + 1;
                    if (out > 0 && (out - 1) * s >= in[d] + g.pad_begin[d]) --out;
                } else {
                    out = floor_div(room, s) + 1;
                }
            }
            if (out <= 0)
                fail(TESS_STATUS_INVALID_ARGUMENT, label + ": input spatial shape " + shape_string(in) +
                                                       " is too small for kernel " + shape_string(k));
            g.out[d] = out;
        }
        return g;
    }
};

// Checks the window attributes of a Conv (pool = false: also W, B, group and cuDNN's symmetric padding) or of a
// MaxPool / AveragePool (pool = true).
std::string check_window(const Node& n, bool pool);

}  // namespace tessera::cuda::ops
