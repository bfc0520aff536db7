// CPU provider: per-thread scratch memory for work inside parallel regions, where allocating per task would be
// slow and nothing may throw.  One buffer per thread and element type, grown on demand and reused: a task asks
// once for everything it needs (tasks on one thread never nest, so the buffer is never shared).
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::cpu {

// At least `count` elements of scratch for the calling thread; the contents are whatever the last user left.
template <typename T> T* thread_scratch_buffer(int64_t count) {
    thread_local std::vector<T> scratch;
    if (scratch.size() < static_cast<size_t>(count)) scratch.resize(static_cast<size_t>(count));
    return scratch.data();
}

}  // namespace tessera::cpu
