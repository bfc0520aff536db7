// CPU provider: a 16 x 16 float transpose in AVX-512 registers (unpack, in-lane shuffles, two rounds of cross-lane
// shuffles; 64 shuffles).  Include only from code compiled for, or dispatched to, AVX-512F.
#pragma once

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86  // AVX-512 code; absent elsewhere
#include <immintrin.h>

namespace tessera::cpu {

// r[i] lane j becomes r[j] lane i.
__attribute__((target("avx512f"), always_inline)) inline void transpose16x16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // u[4q + c], 128-bit lane l: rows 4q..4q+3 of column 4l + c.
    for (int q = 0; q < 4; ++q) {
        u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
        u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
        u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
    }
    for (int c = 0; c < 4; ++c) {
        const __m512 v = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        const __m512 w = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        const __m512 w2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_f32x4(v, v2, 0x88);
        r[c + 4] = _mm512_shuffle_f32x4(w, w2, 0x88);
        r[c + 8] = _mm512_shuffle_f32x4(v, v2, 0xDD);
        r[c + 12] = _mm512_shuffle_f32x4(w, w2, 0xDD);
    }
}

}  // namespace tessera::cpu
#endif  // TESSERA_CPU_X86
