// CPU provider: requantization of integer products' tiles and 8-bit table lookups (see requantize.h).
#include "kernels/quantization/requantize.h"

#include <algorithm>
#include <type_traits>

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>

#include "util/transpose_avx512.h"
#endif

// GCC 12 reports the _mm512_undefined_*() inside the unmasked intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tessera::cpu::quant {

namespace {

void lookup_plain(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = table[x[i]];
}

#if TESSERA_CPU_X86
// 64 bytes at a time: the table's two 128-byte halves are two-register byte permutes (vpermi2b, which reads the
// index's low 7 bits), and the index's top bit picks between their results.
[[gnu::target("avx512f,avx512bw,avx512vbmi")]] void lookup_vbmi(const uint8_t* table, const uint8_t* x, uint8_t* y,
                                                                 int64_t n) {
    const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    for (int64_t i = 0; i < n; i += 64) {
        const __mmask64 mask = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
        const __m512i index = _mm512_maskz_loadu_epi8(mask, x + i);
        const __m512i low = _mm512_permutex2var_epi8(t0, index, t1);
        const __m512i high = _mm512_permutex2var_epi8(t2, index, t3);
        _mm512_mask_storeu_epi8(y + i, mask, _mm512_mask_blend_epi8(_mm512_movepi8_mask(index), low, high));
    }
}

// requantize_rows on AVX-512: per 16 sums, add the bias, convert, multiply (rounded to float as requantize_row
// does), clamp to [low - zero, high - zero] (max first: NaN ends at low, as saturate_round), round half to even
// (the MXCSR default, as the rounding trick of saturate_round) and add the zero point; the clamp before the
// rounding equals saturate_round's clamp after it because the bounds are integers and rounding is monotone.  The
// values, in range already, narrow 64 at a time (packs, which cannot saturate them, and one dword permute), and
// with tables each row's 64 bytes then map through its table in registers (two VBMI byte permutes).
// 16 requantized values of sums[0 ...] (lanes past `mask` read as zero sums).
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512i requantized(const int32_t* sums, __mmask16 mask,
                                                                         __m512i bias, __m512 multiplier, __m512 low,
                                                                         __m512 high, __m512i zero) {
    const __m512i sum = _mm512_add_epi32(_mm512_maskz_loadu_epi32(mask, sums), bias);
    const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), multiplier), low), high);
    return _mm512_add_epi32(_mm512_cvtps_epi32(v), zero);
}

template <bool Tables>
[[gnu::target("avx512f,avx512bw,avx512vl,avx512vbmi")]] void requantize_tile_avx512(
    const int32_t* sums, int64_t ld, int64_t rows, int64_t n, const int32_t* bias, const float* multipliers,
    const OutputQuantization& q, uint8_t* y, int64_t ldy, const uint8_t* tables, bool tables_per_row) {
    const float zero = static_cast<float>(q.zero_point);
    const __m512 low = _mm512_set1_ps(static_cast<float>(q.range.low) - zero);
    const __m512 high = _mm512_set1_ps(static_cast<float>(q.range.high) - zero);
    const __m512i zero_int = _mm512_set1_epi32(static_cast<int32_t>(q.zero_point));
    const bool unsigned_out = q.range.low >= 0;
    // After the packs, lane L holds dwords L of the four source vectors: put each source's dwords back together.
    const __m512i regroup = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    // (Loads written out rather than in a lambda: a lambda does not inherit this function's target.)
    __m512i t0{}, t1{}, t2{}, t3{};
    for (int64_t r = 0; r < rows; ++r) {
        const __m512i row_bias = _mm512_set1_epi32(bias ? bias[r] : 0);
        const __m512 multiplier = _mm512_set1_ps(multipliers[r]);
        if (Tables && (r == 0 || tables_per_row)) {
            const uint8_t* table = tables + (tables_per_row ? r * 256 : 0);
            t0 = _mm512_loadu_si512(table);
            t1 = _mm512_loadu_si512(table + 64);
            t2 = _mm512_loadu_si512(table + 128);
            t3 = _mm512_loadu_si512(table + 192);
        }
        const int32_t* s = sums + r * ld;
        uint8_t* out = y + r * ldy;
        int64_t k = 0;
        for (; k + 64 <= n; k += 64) {
            const __m512i a = requantized(s + k, 0xFFFF, row_bias, multiplier, low, high, zero_int);
            const __m512i b = requantized(s + k + 16, 0xFFFF, row_bias, multiplier, low, high, zero_int);
            const __m512i c = requantized(s + k + 32, 0xFFFF, row_bias, multiplier, low, high, zero_int);
            const __m512i d = requantized(s + k + 48, 0xFFFF, row_bias, multiplier, low, high, zero_int);
            const __m512i ab = _mm512_packs_epi32(a, b), cd = _mm512_packs_epi32(c, d);
            __m512i bytes = unsigned_out ? _mm512_packus_epi16(ab, cd) : _mm512_packs_epi16(ab, cd);
            bytes = _mm512_permutexvar_epi32(regroup, bytes);
            if constexpr (Tables) {
                const __m512i from_low = _mm512_permutex2var_epi8(t0, bytes, t1);
                const __m512i from_high = _mm512_permutex2var_epi8(t2, bytes, t3);
                bytes = _mm512_mask_blend_epi8(_mm512_movepi8_mask(bytes), from_low, from_high);
            }
            _mm512_storeu_si512(out + k, bytes);
        }
        for (; k < n; k += 16) {
            const __mmask16 mask = n - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - k)) - 1);
            // In range already: a plain narrowing.
            __m128i bytes = _mm512_cvtepi32_epi8(requantized(s + k, mask, row_bias, multiplier, low, high, zero_int));
            if constexpr (Tables) {
                const __m512i index = _mm512_zextsi128_si512(bytes);
                const __m512i from_low = _mm512_permutex2var_epi8(t0, index, t1);
                const __m512i from_high = _mm512_permutex2var_epi8(t2, index, t3);
                bytes = _mm512_castsi512_si128(_mm512_mask_blend_epi8(_mm512_movepi8_mask(index), from_low, from_high));
            }
            _mm_mask_storeu_epi8(out + k, mask, bytes);
        }
    }
}

#endif

}  // namespace

void lookup_bytes(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
#if TESSERA_CPU_X86
    // Runs shorter than 16 bytes are not worth loading the table into four registers.
    if (n >= 16 && cpu_features().avx512_vbmi) {
        lookup_vbmi(table, x, y, n);
        return;
    }
#endif
    lookup_plain(table, x, y, n);
}

ByteTable ByteTable::load(const NodeInfo& info, size_t input, const std::string& op) {
    const std::optional<Tensor> table = info.constant_tensor(input);
    if (!table)
        throw KernelError(op + ": the lookup table (input " + std::to_string(input) + ") must be a constant");
    if (!is_8bit(table->type)) throw_unsupported_type(op + " lookup table", table->type);
    if (table->rank() != 2 || table->shape[1] != 256 || table->shape[0] < 1)
        throw KernelError(op + ": the lookup table " + shape_string(table->shape) + " must be [C, 256] or [1, 256]");
    ByteTable loaded;
    loaded.rows = table->shape[0];
    loaded.type = table->type;
    const auto* bytes = static_cast<const uint8_t*>(table->data);
    loaded.bytes.assign(bytes, bytes + table->size());
    info.release_constant(input);
    return loaded;
}

template <typename Out>
void requantize_rows(const int32_t* sums, int64_t ld, int64_t rows, int64_t n, const int32_t* bias,
                     const float* multipliers, const OutputQuantization& q, Out* y, int64_t ldy,
                     const uint8_t* tables, bool tables_per_row) {
#if TESSERA_CPU_X86
    // (VBMI comes with every AVX-512 CPU since Ice Lake and Zen 4; older ones take the portable loop.)
    if (vec::best_isa() == vec::Isa::Avx512 && cpu_features().avx512_vbmi) {
        auto* bytes = reinterpret_cast<uint8_t*>(y);
        if (tables) {
            requantize_tile_avx512<true>(sums, ld, rows, n, bias, multipliers, q, bytes, ldy, tables, tables_per_row);
        } else {
            requantize_tile_avx512<false>(sums, ld, rows, n, bias, multipliers, q, bytes, ldy, nullptr, false);
        }
        return;
    }
#endif
    const OutputQuantization local = q;  // not reloaded after each store through the 8-bit pointer
    vec::run_best_isa([=] {
        for (int64_t r = 0; r < rows; ++r)
            requantize_row(sums + r * ld, bias ? bias[r] : 0, multipliers + r, true, n, local, y + r * ldy);
    });
    if (tables) {
        for (int64_t r = 0; r < rows; ++r) {
            auto* row = reinterpret_cast<uint8_t*>(y + r * ldy);
            lookup_bytes(tables + (tables_per_row ? r * 256 : 0), row, row, n);
        }
    }
}

namespace {

#if TESSERA_CPU_X86
// The epilogue on 16 lanes: explicit multiplies and adds (no contraction into an FMA), then the clamp.
[[gnu::target("avx512f"), gnu::always_inline, gnu::optimize("fp-contract=off")]] inline __m512 epilogue_lanes(
    __m512 value, __m512 scale, bool affine, __m512 a, __m512 b, bool clamp, __m512 low, __m512 high) {
    __m512 v = _mm512_mul_ps(value, scale);
    if (affine) v = _mm512_add_ps(_mm512_mul_ps(v, a), b);
    if (clamp) {
        v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, low, _CMP_LT_OQ), v, low);
        v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, high, _CMP_GT_OQ), v, high);
    }
    return v;
}

// The range a call gathers, 16 lanes at a time: range[0] and range[1] the least and greatest value taken in (min(least,
// v) = least < v ? least : v, as _mm512_min_ps(least, v) is; max likewise), range[2] set to 1 after a NaN.
struct RangeLanes {
    __m512 least, greatest;
    __mmask16 unordered = 0;

    [[gnu::target("avx512f"), gnu::always_inline]] explicit RangeLanes(const float* range)
        : least(_mm512_set1_ps(range ? range[0] : 0.0f)), greatest(_mm512_set1_ps(range ? range[1] : 0.0f)) {}
    [[gnu::target("avx512f"), gnu::always_inline]] void take(__m512 v, __mmask16 mask) {
        least = _mm512_mask_min_ps(least, mask, least, v);
        greatest = _mm512_mask_max_ps(greatest, mask, greatest, v);
        unordered |= _mm512_mask_cmp_ps_mask(mask, v, v, _CMP_UNORD_Q);
    }
    [[gnu::target("avx512f"), gnu::always_inline]] void store(float* range) const {
        range[0] = _mm512_reduce_min_ps(least);
        range[1] = _mm512_reduce_max_ps(greatest);
        if (unordered) range[2] = 1.0f;
    }
};

// One row of float_rows, 16 lanes at a time; with `range`, what it stores is taken into it (RangeLanes).
template <typename In>
[[gnu::target("avx512f"), gnu::optimize("fp-contract=off")]] void float_row_avx512(const In* sums, int64_t n,
                                                                                   float scale, bool affine, float a,
                                                                                   float b, bool clamp, float low,
                                                                                   float high, float* y,
                                                                                   float* range) {
    const __m512 s = _mm512_set1_ps(scale), va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    const __m512 lo = _mm512_set1_ps(low), hi = _mm512_set1_ps(high);
    RangeLanes lanes(range);
    for (int64_t k = 0; k < n; k += 16) {
        const __mmask16 mask = n - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - k)) - 1);
        const __m512 value = std::is_same_v<In, float> ? _mm512_maskz_loadu_ps(mask, sums + k)
                                                       : _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(mask, sums + k));
        const __m512 v = epilogue_lanes(value, s, affine, va, vb, clamp, lo, hi);
        _mm512_mask_storeu_ps(y + k, mask, v);
        if (range) lanes.take(v, mask);
    }
    if (range) lanes.store(range);
}

// float_rows of 16 channels held blocked (src[p * 16 + c]): 16 positions at a time transposed into rows, then the
// same arithmetic as float_row_avx512 on each channel's row.
[[gnu::target("avx512f"), gnu::optimize("fp-contract=off")]] void float_rows_blocked_avx512(
    const float* src, int64_t count, int64_t m0, const FloatEpilogue& e, float* y, int64_t ldy, float* range) {
    const bool affine = e.channel_scale != nullptr;
    const __m512 s = _mm512_set1_ps(e.scale), lo = _mm512_set1_ps(e.low), hi = _mm512_set1_ps(e.high);
    __m512 va[16], vb[16];
    for (int c = 0; c < 16; ++c) {
        va[c] = _mm512_set1_ps(affine ? e.channel_scale[m0 + c] : 1.0f);
        vb[c] = _mm512_set1_ps(affine ? e.channel_shift[m0 + c] : 0.0f);
    }
    RangeLanes lanes(range);
    for (int64_t p = 0; p < count; p += 16) {
        const int64_t rest = std::min<int64_t>(16, count - p);
        const __mmask16 mask = rest == 16 ? 0xFFFF : static_cast<__mmask16>((1u << rest) - 1);
        __m512 r[16];
        for (int64_t i = 0; i < 16; ++i) r[i] = i < rest ? _mm512_loadu_ps(src + (p + i) * 16) : _mm512_setzero_ps();
        transpose16x16(r);
        for (int c = 0; c < 16; ++c) {
            const __m512 v = epilogue_lanes(r[c], s, affine, va[c], vb[c], e.clamp, lo, hi);
            _mm512_mask_storeu_ps(y + c * ldy + p, mask, v);
            if (range) lanes.take(v, mask);
        }
    }
    if (range) lanes.store(range);
}
#endif

template <typename In>
[[gnu::optimize("fp-contract=off")]] void float_row_plain(const In* sums, int64_t n, float scale, bool affine, float a,
                                                          float b, bool clamp, float low, float high, float* y,
                                                          float* range) {
    for (int64_t k = 0; k < n; ++k) {
        float v = static_cast<float>(sums[k]) * scale;
        if (affine) v = v * a + b;
        if (clamp) {
            v = v < low ? low : v;
            v = v > high ? high : v;
        }
        y[k] = v;
        if (range) {
            range[0] = range[0] < v ? range[0] : v;
            range[1] = range[1] > v ? range[1] : v;
            if (v != v) range[2] = 1.0f;
        }
    }
}

template <typename In>
void float_rows_of(const In* sums, int64_t ld, int64_t rows, int64_t n, int64_t m0, const FloatEpilogue& e, float* y,
                   int64_t ldy) {
    const bool affine = e.channel_scale != nullptr;
    [[maybe_unused]] const bool avx512 = vec::best_isa() == vec::Isa::Avx512;
    float part[3] = {0.0f, 0.0f, 0.0f};  // this call's range, and whether it saw a NaN
    float* range = e.range != nullptr ? part : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
        const float a = affine ? e.channel_scale[m0 + r] : 1.0f, b = affine ? e.channel_shift[m0 + r] : 0.0f;
#if TESSERA_CPU_X86
        if (avx512) {
            float_row_avx512(sums + r * ld, n, e.scale, affine, a, b, e.clamp, e.low, e.high, y + r * ldy, range);
            continue;
        }
#endif
        float_row_plain(sums + r * ld, n, e.scale, affine, a, b, e.clamp, e.low, e.high, y + r * ldy, range);
    }
    if (range) e.range->merge(part[0], part[1], part[2] != 0.0f);
}

}  // namespace

void FloatRange::merge(float part_low, float part_high, bool part_unordered) {
    if (part_unordered) unordered.store(true, std::memory_order_relaxed);
    // (A failed exchange reloads `current`; a NaN part changes nothing.)
    for (float current = low.load(std::memory_order_relaxed);
         part_low < current && !low.compare_exchange_weak(current, part_low, std::memory_order_relaxed);) {
    }
    for (float current = high.load(std::memory_order_relaxed);
         part_high > current && !high.compare_exchange_weak(current, part_high, std::memory_order_relaxed);) {
    }
}

void float_rows_from_blocked(const float* src, int64_t count, int64_t m0, const FloatEpilogue& e, float* y,
                             int64_t ldy) {
#if TESSERA_CPU_X86
    if (vec::best_isa() == vec::Isa::Avx512) {
        float part[3] = {0.0f, 0.0f, 0.0f};
        float_rows_blocked_avx512(src, count, m0, e, y, ldy, e.range != nullptr ? part : nullptr);
        if (e.range != nullptr) e.range->merge(part[0], part[1], part[2] != 0.0f);
        return;
    }
#endif
    // (The blocked layout needs AVX-512: never reached in practice.)  A channel's values gathered a few at a time.
    float row[64];
    for (int64_t c = 0; c < 16; ++c) {
        for (int64_t p0 = 0; p0 < count; p0 += 64) {
            const int64_t n = std::min<int64_t>(64, count - p0);
            for (int64_t p = 0; p < n; ++p) row[p] = src[(p0 + p) * 16 + c];
            float_rows(row, n, 1, n, m0 + c, e, y + c * ldy + p0, ldy);
        }
    }
}

void float_rows(const int32_t* sums, int64_t ld, int64_t rows, int64_t n, int64_t m0, const FloatEpilogue& e,
                float* y, int64_t ldy) {
    float_rows_of(sums, ld, rows, n, m0, e, y, ldy);
}
void float_rows(const float* sums, int64_t ld, int64_t rows, int64_t n, int64_t m0, const FloatEpilogue& e, float* y,
                int64_t ldy) {
    float_rows_of(sums, ld, rows, n, m0, e, y, ldy);
}

template void requantize_rows<int8_t>(const int32_t*, int64_t, int64_t, int64_t, const int32_t*, const float*,
                                      const OutputQuantization&, int8_t*, int64_t, const uint8_t*, bool);
template void requantize_rows<uint8_t>(const int32_t*, int64_t, int64_t, int64_t, const int32_t*, const float*,
                                       const OutputQuantization&, uint8_t*, int64_t, const uint8_t*, bool);

}  // namespace tessera::cpu::quant
