// CPU provider: the requantization that ends an integer product (QLinearConv, QLinearMatMul): int32 sums to 8-bit
// outputs, y = saturate(round_half_even(f32(float(sum + bias) * multiplier)) + zero_point), and the per-channel byte
// tables (QuantizedLookup) a fused convolution applies to its requantized outputs.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quantization/quantize_support.h"
#include "util/vec_math.h"

namespace tessera::cpu::quant {

// The quantization parameters of a requantized output: y = saturate(round(sum * multiplier) + zero_point).
struct OutputQuantization {
    int32_t type = TESS_ELEMENT_UINT8;
    double zero_point = 0;
    IntegerRange range{0, 255};
};

// y[i] = saturate(round_half_even(f32(float(sums[i] + bias) * multiplier)) + zero_point) for i < n, the sum wrapping
// to 32 bits; the multiplier (a float) is multipliers[i], or multipliers[0] for all when `uniform`.  The product is
// rounded to float, as onnxruntime's requantization rounds it (in double, the rare product that lands within half a
// float ulp of a .5 rounds the other way, and a quantized network then disagrees with onnxruntime from that layer
// on); then it is rounded and saturated as saturate_round does.  Inlined into each ISA copy of its callers.
template <typename Out>
[[gnu::always_inline]] inline void requantize_row(const int32_t* sums, int32_t bias, const float* multipliers,
                                                  bool uniform, int64_t n, const OutputQuantization& q, Out* y) {
    using Vu = uint32_t __attribute__((vector_size(vec::kLanes * sizeof(uint32_t))));
    const vec::Vf zero = vec::splat(static_cast<float>(q.zero_point)), low = vec::splat(static_cast<float>(q.range.low)),
                  high = vec::splat(static_cast<float>(q.range.high));
    const vec::Vf uniform_multiplier = vec::splat(multipliers[0]);
    // Lanes [k, k + kLanes) of the sums and multipliers at these pointers, written to out_ptr.
    auto block = [&](const int32_t* s_ptr, const float* m_ptr, Out* out_ptr) {
        vec::Vi s;
        std::memcpy(&s, s_ptr, sizeof s);
        s = reinterpret_cast<vec::Vi>(reinterpret_cast<Vu>(s) + static_cast<uint32_t>(bias));
        const vec::Vf m = uniform ? uniform_multiplier : vec::load(m_ptr);
        const auto out = saturate_round<Out>(__builtin_convertvector(s, vec::Vf) * m, zero, low, high);
        std::memcpy(out_ptr, &out, sizeof out);
    };
    int64_t k = 0;
    for (; k + vec::kLanes <= n; k += vec::kLanes) block(sums + k, multipliers + k, y + k);
    if (k < n) {  // the tail through padded copies
        const size_t rest = static_cast<size_t>(n - k);
        int32_t s_tail[vec::kLanes] = {};
        float m_tail[vec::kLanes] = {};
        Out out_tail[vec::kLanes];
        std::memcpy(s_tail, sums + k, rest * sizeof(int32_t));
        if (!uniform) std::memcpy(m_tail, multipliers + k, rest * sizeof(float));
        block(s_tail, m_tail, out_tail);
        std::memcpy(y + k, out_tail, rest * sizeof(Out));
    }
}

template <typename Out> void requantize_run(const int32_t* sums, int32_t bias, const float* multipliers, bool uniform,
                                            int64_t n, const OutputQuantization& q, Out* y) {
    vec::run_best_isa([=] { requantize_row(sums, bias, multipliers, uniform, n, q, y); });
}

// y[i] = table[x[i]] for i < n (x and y may be the same): a QuantizedLookup's bytes, 64 at a time with AVX-512 VBMI.
void lookup_bytes(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n);

// A QuantizedLookup's table, held by the kernel that applies it (QuantizedLookup itself, or the QLinearConv or
// QuantizeLinear it joined): [rows][256] bytes of `type`, indexed by the input byte's bits, one row per channel or
// one for all; empty when there is none.
struct ByteTable {
    std::vector<uint8_t> bytes;
    int64_t rows = 1;
    int32_t type = TESS_ELEMENT_UINT8;

    bool empty() const { return bytes.empty(); }
    const uint8_t* data() const { return bytes.data(); }
    const uint8_t* row(int64_t channel) const { return bytes.data() + (rows == 1 ? 0 : channel * 256); }

    // The node's constant input `input`, checked ([C, 256] or [1, 256], 8-bit), the model's copy then released.
    static ByteTable load(const NodeInfo& info, size_t input, const std::string& op);
};

// Rows r < rows of n sums each (row stride ld) into y (row stride ldy), row r with bias[r] (bias may be null) and
// the multiplier multipliers[r]; with `tables`, each output byte of row r then maps through tables[r * 256 ...]
// (tables_per_row false: every row through tables[0 ...]).  One call for a whole tile of a product: on AVX-512 the
// constants are set up once per tile, not per row.
template <typename Out>
void requantize_rows(const int32_t* sums, int64_t ld, int64_t rows, int64_t n, const int32_t* bias,
                     const float* multipliers, const OutputQuantization& q, Out* y, int64_t ldy,
                     const uint8_t* tables = nullptr, bool tables_per_row = false);

// How a dynamically quantized convolution ends (ConvIntegerToFloat, the fused ConvInteger -> Cast -> Mul ->
// [BatchNormalization] -> [Clip/Relu] chain of quantize_dynamic): y = clamp((float(sum) * scale) * a[m] + b[m]),
// each step rounded as its node rounds it (a multiply, then an add: no FMA) and clamped as Clip clamps (x < low ?
// low : x, then > high ? high : ...; NaN stays).
struct FloatRange;
struct FloatEpilogue {
    float scale = 1.0f;                    // the product of the input's and the weights' scales
    const float* channel_scale = nullptr;  // a[m] of a folded BatchNormalization, or null
    const float* channel_shift = nullptr;  // b[m]
    bool clamp = false;
    float low = 0.0f, high = 0.0f;
    FloatRange* range = nullptr;  // or where the least and greatest value written are gathered
};

// The range of every value float_rows writes, as DynamicQuantizeLinear finds it (from 0, each value taken in by
// min(low, v) = low < v ? low : v and max(high, v) likewise), so that the quantization of the output needs no pass
// of its own.  Without NaNs the result does not depend on the order the threads' parts arrive in; `unordered`
// says a NaN was written (DynamicQuantizeLinear's range then depends on its own order: the caller's own pass).
// Shared by the threads writing the output.
struct FloatRange {
    std::atomic<float> low{0.0f}, high{0.0f};
    std::atomic<bool> unordered{false};
    void merge(float part_low, float part_high, bool part_unordered);
};

// Rows r < rows of n sums each (row stride ld) into y (row stride ldy) as above, row r being channel m0 + r.
void float_rows(const int32_t* sums, int64_t ld, int64_t rows, int64_t n, int64_t m0, const FloatEpilogue& e,
                float* y, int64_t ldy);
// The same from sums already held as floats (exact integers: float(sum) is the value itself); y may be sums.
void float_rows(const float* sums, int64_t ld, int64_t rows, int64_t n, int64_t m0, const FloatEpilogue& e, float* y,
                int64_t ldy);
// The same for the 16 channels m0 .. m0 + 15 of `count` positions held blocked (src[p * 16 + c], exact integers),
// into rows of y (channel m0 + c at y + c * ldy): a blocked depthwise convolution's rows into NCHW planes.
void float_rows_from_blocked(const float* src, int64_t count, int64_t m0, const FloatEpilogue& e, float* y,
                             int64_t ldy);

}  // namespace tessera::cpu::quant
