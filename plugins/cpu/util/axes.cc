#include "util/axes.h"

#include <algorithm>
#include <string>

namespace tessera::cpu {

size_t normalize_axis(std::string_view op, int64_t axis, size_t rank) {
    const int64_t r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r) {
        throw KernelError(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for rank " +
                          std::to_string(rank));
    }
    return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

std::vector<size_t> normalize_axes(std::string_view op, std::span<const int64_t> axes, size_t rank) {
    std::vector<size_t> out;
    out.reserve(axes.size());
    for (int64_t a : axes) out.push_back(normalize_axis(op, a, rank));
    std::sort(out.begin(), out.end());
    if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
        throw KernelError(std::string(op) + ": axes contain a duplicate");
    }
    return out;
}

std::vector<int64_t> read_axes_tensor(std::string_view op, const Tensor& axes) {
    if (axes.rank() > 1) {
        throw KernelError(std::string(op) + ": axes must be a 1-D tensor, got shape " + shape_string(axes.shape));
    }
    const int64_t n = axes.size();
    std::vector<int64_t> out(static_cast<size_t>(n));
    if (axes.type == TESS_ELEMENT_INT64) {
        std::copy_n(axes.ptr<int64_t>(), n, out.begin());
    } else if (axes.type == TESS_ELEMENT_INT32) {
        std::copy_n(axes.ptr<int32_t>(), n, out.begin());
    } else {
        throw_unsupported_type(std::string(op) + " axes", axes.type);
    }
    return out;
}

ReductionAxes resolve_reduction_axes(std::string_view op, const Shape& input, std::span<const int64_t> axes,
                                     bool keepdims, bool noop_with_empty_axes) {
    ReductionAxes result;
    const size_t rank = input.size();
    if (axes.empty() && noop_with_empty_axes) {
        result.reduced.assign(rank, false);
        result.output_shape = input;
        result.noop = true;
        return result;
    }
    result.reduced.assign(rank, axes.empty());
    for (size_t a : normalize_axes(op, axes, rank)) result.reduced[a] = true;
    for (size_t d = 0; d < rank; ++d) {
        if (result.reduced[d]) {
            result.reduced_count *= input[d];
            if (keepdims) result.output_shape.push_back(1);
        } else {
            result.output_shape.push_back(input[d]);
        }
    }
    return result;
}

std::vector<AxisGroup> collapse_reduction(const Shape& input, const std::vector<bool>& reduced) {
    std::vector<AxisGroup> groups;
    for (size_t d = 0; d < input.size(); ++d) {
        if (input[d] == 1) continue;
        if (!groups.empty() && groups.back().reduced == reduced[d]) {
            groups.back().size *= input[d];
        } else {
            groups.push_back({input[d], static_cast<bool>(reduced[d])});
        }
    }
    if (groups.empty()) groups.push_back({1, false});
    return groups;
}

}  // namespace tessera::cpu
