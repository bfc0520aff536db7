// CPU provider: the last step of the layer normalizations (LayerNormalization, SkipLayerNormalization and their
// simplified forms): y = (x - mean) * inv_std * scale (+ bias) over one row, on vector lanes.
#pragma once

#include <cstdint>

#include "util/vec_math.h"

namespace tessera::cpu {

// `bias` may be NULL; y may equal x.
inline void normalize_row(const float* x, float* y, int64_t n, float mean, float inv_std, const float* scale,
                          const float* bias) {
    vec::run_best_isa([&] {
        const vec::Vf vm = vec::splat(mean), vi = vec::splat(inv_std);
        int64_t i = 0;
        for (; i + vec::kLanes <= n; i += vec::kLanes) {
            vec::Vf v = (vec::load(x + i) - vm) * vi * vec::load(scale + i);
            if (bias != nullptr) v += vec::load(bias + i);
            vec::store(y + i, v);
        }
        for (; i < n; ++i) y[i] = (x[i] - mean) * inv_std * scale[i] + (bias != nullptr ? bias[i] : 0.0f);
    });
}

// The same in double.
inline void normalize_row(const double* x, double* y, int64_t n, double mean, double inv_std, const double* scale,
                          const double* bias) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv_std * scale[i] + (bias != nullptr ? bias[i] : 0.0);
}

}  // namespace tessera::cpu
