// CPU provider: per-thread scratch memory for work inside parallel regions, where allocating per task would be
// slow and nothing may throw.  One buffer per thread and element type, grown on demand and reused: a task asks
// once for everything it needs (tasks on one thread never nest, so the buffer is never shared).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tessera::cpu {

// At least `count` elements of scratch for the calling thread; the contents are whatever the last user left.
// Buffers needed at the same time on one thread use different slots (a kernel's per-call buffers, kept for its
// next call, beside the tasks' slot 0).
template <typename T, int kSlot = 0> T* thread_scratch_buffer(int64_t count) {
    thread_local std::vector<T> scratch;
    if (scratch.size() < static_cast<size_t>(std::max<int64_t>(count, 1)))
        scratch.resize(static_cast<size_t>(std::max<int64_t>(count, 1)));
    return scratch.data();
}

}  // namespace tessera::cpu
