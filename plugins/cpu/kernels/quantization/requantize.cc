// CPU provider: requantization of integer products' tiles and 8-bit table lookups (see requantize.h).
#include "kernels/quantization/requantize.h"

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
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
// (the MXCSR default, as the rounding trick of saturate_round), add the zero point and narrow; the clamp before
// the rounding equals saturate_round's clamp after it because the bounds are integers and rounding is monotone.
// With tables, each row's bytes then map through its table in registers (VBMI byte permutes).
template <bool Tables>
[[gnu::target("avx512f,avx512bw,avx512vl,avx512vbmi")]] void requantize_tile_avx512(
    const int32_t* sums, int64_t ld, int64_t rows, int64_t n, const int32_t* bias, const float* multipliers,
    const OutputQuantization& q, uint8_t* y, int64_t ldy, const uint8_t* tables, bool tables_per_row) {
    const float zero = static_cast<float>(q.zero_point);
    const __m512 low = _mm512_set1_ps(static_cast<float>(q.range.low) - zero);
    const __m512 high = _mm512_set1_ps(static_cast<float>(q.range.high) - zero);
    const __m512i zero_int = _mm512_set1_epi32(static_cast<int32_t>(q.zero_point));
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
        for (int64_t k = 0; k < n; k += 16) {
            const __mmask16 mask = n - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - k)) - 1);
            const __m512i sum = _mm512_add_epi32(_mm512_maskz_loadu_epi32(mask, s + k), row_bias);
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), multiplier);
            v = _mm512_min_ps(_mm512_max_ps(v, low), high);
            const __m512i value = _mm512_add_epi32(_mm512_cvtps_epi32(v), zero_int);
            __m128i bytes = _mm512_cvtepi32_epi8(value);  // in range already: a plain narrowing
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

template void requantize_rows<int8_t>(const int32_t*, int64_t, int64_t, int64_t, const int32_t*, const float*,
                                      const OutputQuantization&, int8_t*, int64_t, const uint8_t*, bool);
template void requantize_rows<uint8_t>(const int32_t*, int64_t, int64_t, int64_t, const int32_t*, const float*,
                                       const OutputQuantization&, uint8_t*, int64_t, const uint8_t*, bool);

}  // namespace tessera::cpu::quant
