// CPU provider: the arithmetic of Winograd F(2x2, 3x3)'s input and output transforms on AVX-512 vectors, shared by
// the NCHW kernels (winograd.cc: a vector is 16 tiles of one channel) and the blocked ones (blocked_winograd.cc: 16
// channels of one tile).  Include only from code compiled for AVX-512F.
#pragma once

#include "util/cpu_isa.h"

#if TESSERA_CPU_X86  // AVX-512 code; absent elsewhere
#include <immintrin.h>

namespace tessera::cpu {

// v = B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]: point (r, s) of the 4x4 input patch d into v[r * 4 + s].
__attribute__((target("avx512f"))) inline void winograd_input_transform(const __m512 (&d)[4][4], __m512 (&v)[16]) {
    __m512 t[4][4];
    for (int s = 0; s < 4; ++s) {
        t[0][s] = _mm512_sub_ps(d[0][s], d[2][s]);
        t[1][s] = _mm512_add_ps(d[1][s], d[2][s]);
        t[2][s] = _mm512_sub_ps(d[2][s], d[1][s]);
        t[3][s] = _mm512_sub_ps(d[1][s], d[3][s]);
    }
    for (int r = 0; r < 4; ++r) {
        v[r * 4 + 0] = _mm512_sub_ps(t[r][0], t[r][2]);
        v[r * 4 + 1] = _mm512_add_ps(t[r][1], t[r][2]);
        v[r * 4 + 2] = _mm512_sub_ps(t[r][2], t[r][1]);
        v[r * 4 + 3] = _mm512_sub_ps(t[r][1], t[r][3]);
    }
}

// y = A^T m A, A^T = [1 1 1 0; 0 1 -1 -1]: the 2x2 outputs y[i][j] of the 16 products m[r][s], plus `bias`.
__attribute__((target("avx512f"))) inline void winograd_output_transform(const __m512 (&m)[4][4], const __m512& bias,
                                                                         __m512 (&y)[2][2]) {
    __m512 q[2][4];
    for (int s = 0; s < 4; ++s) {
        q[0][s] = _mm512_add_ps(_mm512_add_ps(m[0][s], m[1][s]), m[2][s]);
        q[1][s] = _mm512_sub_ps(_mm512_sub_ps(m[1][s], m[2][s]), m[3][s]);
    }
    for (int i = 0; i < 2; ++i) {
        y[i][0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(q[i][0], q[i][1]), q[i][2]), bias);
        y[i][1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(q[i][1], q[i][2]), q[i][3]), bias);
    }
}

}  // namespace tessera::cpu
#endif  // TESSERA_CPU_X86
