// CPU provider: the FusedConv epilogue (util/conv_epilogue.h) on AVX-512 registers, for kernels that apply it to
// results still in registers.  Include only from code compiled for, or dispatched to, AVX-512F.
#pragma once

#include "util/conv_epilogue.h"
#include "util/cpu_isa.h"

#if TESSERA_CPU_X86
#include <immintrin.h>
#endif

namespace tessera::cpu {

#if TESSERA_CPU_X86  // vector_activation below is portable: generic code asks it too
// The activation of 16 lanes; the transcendental ones (Sigmoid, Tanh, Silu) pass through unchanged: callers apply
// those with ConvEpilogue::apply afterwards (see vector_activation).
__attribute__((target("avx512f"))) inline __m512 activate(__m512 v, const ConvEpilogue& e) {
    switch (e.activation) {
        case ConvEpilogue::Activation::None: return v;
        case ConvEpilogue::Activation::Relu: return _mm512_max_ps(v, _mm512_setzero_ps());
        case ConvEpilogue::Activation::Clip:
            return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(e.alpha)), _mm512_set1_ps(e.beta));
        case ConvEpilogue::Activation::LeakyRelu: {
            const __mmask16 negative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
            return _mm512_mask_mul_ps(v, negative, v, _mm512_set1_ps(e.alpha));
        }
        case ConvEpilogue::Activation::HardSigmoid: {
            const __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(e.alpha), _mm512_set1_ps(e.beta));
            return _mm512_min_ps(_mm512_max_ps(t, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));
        }
        default: return v;  // transcendental activations: applied afterwards by the scalar epilogue
    }
}
#endif  // TESSERA_CPU_X86

inline bool vector_activation(const ConvEpilogue& e) {
    using A = ConvEpilogue::Activation;
    return e.activation == A::None || e.activation == A::Relu || e.activation == A::Clip ||
           e.activation == A::LeakyRelu || e.activation == A::HardSigmoid;
}

}  // namespace tessera::cpu
