// CPU provider: the cos/sin tables of onnxruntime's rotary position embedding, shared by RotaryEmbedding,
// GroupQueryAttention (decoder_attention.cc) and SparseAttention (sparse_attention.cc), which rotate alike.
//
// Rotation follows onnxruntime's x86 arithmetic: real = fma(x1, cos, -(x2 * sin)), imag = fma(x1, sin, x2 * cos);
// in interleaved mode with a rotary dimension that is not a multiple of 16, the pairs after the first one past the
// last whole 16-element block round each product separately, as its vector kernel's tail does.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/kernel.h"
#include "util/compute_cast.h"

namespace tessera::cpu {

// The cos/sin caches (max_position, rotary_dim / 2) in float.
struct RotaryTables {
    ConvertedInput<float> cos, sin;
    int64_t positions = 0, half = 0;

    RotaryTables(const std::string& op, const Tensor& cos_in, const Tensor& sin_in, ThreadPool& pool)
        : cos(cos_in, pool), sin(sin_in, pool) {
        if (cos_in.rank() != 2 || sin_in.shape != cos_in.shape)
            throw KernelError(op + ": cos_cache " + shape_string(cos_in.shape) + " and sin_cache " +
                              shape_string(sin_in.shape) + " must be one (max_position, rotary_dim / 2) shape");
        positions = cos_in.shape[0];
        half = cos_in.shape[1];
    }

    void check_position(const std::string& op, int64_t pos) const {
        if (pos < 0 || pos >= positions)
            throw KernelError(op + ": position " + std::to_string(pos) + " is outside the cos/sin caches' " +
                              std::to_string(positions) + " rows");
    }

    // Rotates the first 2 * half elements of x (one head) for position `pos` (checked by check_position).
    void rotate(float* x, int64_t pos, bool interleaved) const {
        const float* c = cos.data() + pos * half;
        const float* s = sin.data() + pos * half;
        const int64_t rotary_dim = 2 * half;
        const int64_t fused_pairs = interleaved && rotary_dim % 16 != 0 ? rotary_dim / 16 * 8 + 1 : half;
        for (int64_t k = 0; k < half; ++k) {
            float& a = x[interleaved ? 2 * k : k];
            float& b = x[interleaved ? 2 * k + 1 : k + half];
            const float x1 = a, x2 = b;
            if (k < fused_pairs) {
                a = std::fma(x1, c[k], -(x2 * s[k]));
                b = std::fma(x1, s[k], x2 * c[k]);
            } else {  // this file is built for the baseline ISA: each product rounds on its own
                a = x1 * c[k] - x2 * s[k];
                b = x2 * c[k] + x1 * s[k];
            }
        }
    }
};

// The tables of a decoder attention node with do_rotary set: its cos_cache and sin_cache at inputs cos_input and
// cos_input + 1, whose rotary dimension must fit the head size; none without do_rotary.
inline std::optional<RotaryTables> rotary_tables_of(const std::string& op, KernelContext& ctx, bool do_rotary,
                                                     size_t cos_input, int64_t head) {
    if (!do_rotary) return std::nullopt;
    if (!ctx.has_input(cos_input) || !ctx.has_input(cos_input + 1))
        throw KernelError(op + ": do_rotary needs cos_cache and sin_cache");
    std::optional<RotaryTables> tables;
    tables.emplace(op, ctx.input(cos_input), ctx.input(cos_input + 1), ctx.pool());
    if (2 * tables->half > head) throw KernelError(op + ": the rotary dimension exceeds the head size");
    return tables;
}

}  // namespace tessera::cpu
