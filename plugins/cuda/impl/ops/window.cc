// CUDA provider operators: the sliding-window check (window.h).
#include "ops/window.h"

namespace tessera::cuda::ops {

std::string check_window(const Node& n, bool pool) {
    if (std::string why = float_input(n, 0); !why.empty()) return why;
    const Window w = Window::parse(n);
    const TessValueView* x = n.in(0);
    size_t spatial = w.kernel_shape.size();
    if (!pool) {
        const TessValueView* weight = n.in(1);
        if (weight == nullptr) return "W is missing";
        if (weight->element_type != x->element_type) return "W and X differ in type";
        if (weight->rank < 0) return "the rank of W is unknown";
        spatial = static_cast<size_t>(std::max<int64_t>(weight->rank - 2, 0));
        if (n.in(2) != nullptr && !is_constant(n.in(2))) return "the bias B must be a constant";
        if (n.in(2) != nullptr && n.in(2)->element_type != x->element_type) return "B and X differ in type";
    } else if (spatial == 0) {
        return "kernel_shape is missing";
    }
    if (spatial < 1 || spatial > 3) return std::to_string(spatial) + " spatial dimensions (1 to 3 are supported)";
    if (x->rank >= 0 && x->rank != static_cast<int64_t>(spatial) + 2)
        return "the input rank " + std::to_string(x->rank) + " does not match the kernel";
    if (std::string why = w.check(spatial); !why.empty()) return why;
    if (!pool) {
        // cuDNN pads symmetrically.
        if (w.auto_pad == "NOTSET" && !w.pads.empty()) {
            for (size_t d = 0; d < spatial; ++d)
                if (w.pads[d] != w.pads[d + spatial]) return "asymmetric pads " + shape_string(w.pads) + " (cuDNN pads symmetrically)";
        }
        if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
            const TessValueView* weight = n.in(1);
            if (x->rank < 0 || weight->dims == nullptr) return "auto_pad SAME with unknown shapes";
            for (size_t d = 0; d < spatial; ++d) {
                const int64_t in = x->dims[2 + d], k = weight->dims[2 + d];
                if (in < 0 || k < 0) return "auto_pad SAME with dynamic spatial dimensions";
                const int64_t s = w.strides.empty() ? 1 : w.strides[d], dil = w.dilations.empty() ? 1 : w.dilations[d];
                const int64_t out = (in + s - 1) / s;
                const int64_t total = std::max<int64_t>(0, (out - 1) * s + (k - 1) * dil + 1 - in);
                if (total % 2 != 0) return "auto_pad SAME needs asymmetric padding here (cuDNN pads symmetrically)";
            }
        }
        const int64_t group = n.i("group", 1);
        if (group < 1) return "group must be positive";
    }
    return "";
}

}  // namespace tessera::cuda::ops
