// CPU provider: cumulative scans along one axis (CumSum, CumProd) with ONNX's `exclusive` and `reverse` flags.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/thread_pool.h"
#include "util/data_movement.h"
#include "util/element_convert.h"
#include "util/thread_scratch.h"

namespace tessera::cpu {

// A tensor viewed as [outer, dim, inner] and scanned along `dim`: out[o, a, i] combines in[o, b, i] over b <= a
// (b >= a when `reverse`; b < a / b > a when `exclusive`, which gives `identity` at the first step).
// T is the element type and Acc the type the running value is kept in (float for float16/bfloat16).  The running
// value is rounded to T after every step, as a scan computed in T does.  `in` may equal `out`: each element is read
// before it is written.  `combine(Acc, Acc) -> Acc` must not throw.
template <typename T, typename Acc, typename Combine>
void cumulative_along_axis(ThreadPool& pool, const T* in, T* out, int64_t outer, int64_t dim, int64_t inner,
                           bool exclusive, bool reverse, Acc identity, const Combine& combine) {
    if (outer == 0 || dim == 0 || inner == 0) return;
    movement::parallel_range(pool, outer, dim * inner * int64_t(sizeof(T)), [&](int64_t begin, int64_t end) {
        Acc* running = thread_scratch_buffer<Acc>(inner);
        for (int64_t o = begin; o < end; ++o) {
            std::fill(running, running + inner, identity);
            for (int64_t step = 0; step < dim; ++step) {
                const int64_t a = reverse ? dim - 1 - step : step;
                const T* src = in + (o * dim + a) * inner;
                T* dst = out + (o * dim + a) * inner;
                for (int64_t j = 0; j < inner; ++j) {
                    const T next = convert::convert_value<T>(combine(running[j], convert::convert_value<Acc>(src[j])));
                    dst[j] = exclusive ? convert::convert_value<T>(running[j]) : next;
                    running[j] = convert::convert_value<Acc>(next);
                }
            }
        }
    });
}

}  // namespace tessera::cpu
