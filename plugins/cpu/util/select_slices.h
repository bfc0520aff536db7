// CPU provider: gathering whole slices along one axis (Compress, Unique, ArrayFeatureExtractor), for every element
// type including strings and packed types.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "runtime/kernel.h"
#include "util/data_movement.h"

namespace tessera::cpu {

// With `input` viewed as [outer, dim, inner] and `output` as [outer, indices.size(), inner]:
// output[o, k, i] = input[o, indices[k], i].  Indices must be in [0, dim) (the caller checks).
inline void select_slices(const TessHostApi& host, ThreadPool& pool, const Tensor& input, Tensor& output, int64_t outer,
                          int64_t dim, int64_t inner, std::span<const int64_t> indices) {
    const int64_t count = int64_t(indices.size());
    if (outer == 0 || count == 0 || inner == 0) return;
    movement::move_elements(host, input, output, [&](const movement::MoveBuffers& b) {
        const size_t row_bytes = size_t(inner) * b.element_size;
        const std::byte* src = b.inputs[0];
        std::byte* dst = b.outputs[0];
        movement::parallel_range(pool, outer * count, int64_t(row_bytes), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                const int64_t o = r / count, k = r % count;
                std::memcpy(dst + size_t(r) * row_bytes, src + size_t(o * dim + indices[size_t(k)]) * row_bytes,
                            row_bytes);
            }
        });
    });
}

}  // namespace tessera::cpu
