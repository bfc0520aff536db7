// CPU provider: the allocator behind partition outputs.  Buffers handed back are kept by size and reused, so the
// boundary tensors of steady-state runs do not go to malloc.  Thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/memory_budget.h"

namespace tessera::cpu {

class CachingAllocator {
public:
    // Buffers are charged to `budget` (may be NULL), cached ones included.
    explicit CachingAllocator(MemoryBudget* budget = nullptr, size_t max_cached_bytes = size_t(1) << 30)
        : budget_(budget), max_cached_(max_cached_bytes) {}
    ~CachingAllocator();
    CachingAllocator(const CachingAllocator&) = delete;
    CachingAllocator& operator=(const CachingAllocator&) = delete;

    void* allocate(size_t bytes, size_t alignment);
    void free(void* pointer);

    size_t live_allocations() const;

private:
    mutable std::mutex mutex_;
    std::unordered_map<void*, size_t> live_;            // pointer -> rounded size
    std::multimap<size_t, void*> cached_;               // rounded size -> free buffer
    size_t cached_bytes_ = 0;
    MemoryBudget* budget_;
    size_t max_cached_;
};

}  // namespace tessera::cpu
