#include "runtime/allocator.h"

#include <cstdlib>
#include <new>

namespace tessera::cpu {

namespace {
constexpr size_t kAlignment = 64;
}

CachingAllocator::~CachingAllocator() {
    for (auto& [size, p] : cached_) free_buffer(budget_, p);
    // Live buffers belong to values the core still holds; the core releases them before the instance.
}

void* CachingAllocator::allocate(size_t bytes, size_t alignment) {
    if (alignment > kAlignment) throw std::bad_alloc();
    size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    {
        std::lock_guard lock(mutex_);
        auto it = cached_.find(rounded);
        if (it != cached_.end()) {
            void* p = it->second;
            cached_.erase(it);
            cached_bytes_ -= rounded;
            live_[p] = rounded;
            return p;
        }
    }
    void* p = nullptr;
    try {
        p = allocate_buffer(budget_, rounded);
    } catch (const MemoryLimitExceeded&) {
        // Cached buffers count against the limit too: give them back and try once more.
        {
            std::lock_guard lock(mutex_);
            for (auto& [size, cached] : cached_) free_buffer(budget_, cached);
            cached_.clear();
            cached_bytes_ = 0;
        }
        p = allocate_buffer(budget_, rounded);
    }
    std::lock_guard lock(mutex_);
    live_[p] = rounded;
    return p;
}

void CachingAllocator::free(void* pointer) {
    if (pointer == nullptr) return;
    std::lock_guard lock(mutex_);
    auto it = live_.find(pointer);
    if (it == live_.end()) return;  // not ours: ignore rather than corrupt the heap
    size_t size = it->second;
    live_.erase(it);
    if (cached_bytes_ + size <= max_cached_) {
        cached_.emplace(size, pointer);
        cached_bytes_ += size;
    } else {
        free_buffer(budget_, pointer);
    }
}

size_t CachingAllocator::live_allocations() const {
    std::lock_guard lock(mutex_);
    return live_.size();
}

}  // namespace tessera::cpu
