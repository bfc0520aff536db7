// CPU provider: axis handling shared by reductions, Softmax-like ops, ArgMax/ArgMin, and anything else that takes
// ONNX "axis"/"axes" arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/kernel.h"

namespace tessera::cpu {

// Maps an axis in [-rank, rank) to [0, rank); throws KernelError naming `op` when it is out of range.
size_t normalize_axis(std::string_view op, int64_t axis, size_t rank);

// Normalizes every axis, sorts them and rejects duplicates (KernelError).
std::vector<size_t> normalize_axes(std::string_view op, std::span<const int64_t> axes, size_t rank);

// Reads a 1-D int64 (or int32) axes tensor, e.g. the optional "axes" input of reductions and Unsqueeze.
std::vector<int64_t> read_axes_tensor(std::string_view op, const Tensor& axes);

// How a reduction over `axes` applies to an input shape, following the ONNX Reduce* rules:
//  - empty axes reduce every dimension, unless noop_with_empty_axes is set (then the output is the input);
//  - keepdims keeps reduced dimensions as size 1, otherwise they are dropped.
struct ReductionAxes {
    std::vector<bool> reduced;  // per input dimension
    Shape output_shape;
    bool noop = false;          // noop_with_empty_axes with empty axes: output = input unchanged
    int64_t reduced_count = 1;  // number of input elements folded into each output element
};

ReductionAxes resolve_reduction_axes(std::string_view op, const Shape& input, std::span<const int64_t> axes,
                                     bool keepdims, bool noop_with_empty_axes);

// The input viewed as alternating groups of kept and reduced dimensions (size-1 dimensions dropped, adjacent
// dimensions of the same kind merged), outermost first.  A reduction of the trailing dimensions becomes
// {kept K, reduced R}; a reduction of the middle becomes {kept O, reduced R, kept I}.  Always non-empty: an
// input without any dimension > 1 gives a single kept group of size 1 (or of size 0 for an empty input).
struct AxisGroup {
    int64_t size;
    bool reduced;
};
std::vector<AxisGroup> collapse_reduction(const Shape& input, const std::vector<bool>& reduced);

}  // namespace tessera::cpu
