#include "runtime/memory_budget.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <new>

namespace tessera::cpu {

namespace {
constexpr size_t kAlignment = 64;
}

void* MemoryBudget::allocate(size_t bytes) {
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded < bytes) throw std::bad_alloc();
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) throw std::bad_alloc();
    // The charge is what the heap really handed out, so that free() can return exactly it without a size.
    const uint64_t charge = ::malloc_usable_size(p);
    const uint64_t now = used_.fetch_add(charge, std::memory_order_relaxed) + charge;
    if (limit_ != 0 && now > limit_) {
        used_.fetch_sub(charge, std::memory_order_relaxed);
        std::free(p);
        throw MemoryLimitExceeded("the session's memory limit of " + std::to_string(limit_) + " bytes is reached (" +
                                  std::to_string(now - charge) + " in use, " + std::to_string(bytes) +
                                  " more needed)");
    }
    return p;
}

void MemoryBudget::free(void* pointer) {
    if (pointer == nullptr) return;
    used_.fetch_sub(::malloc_usable_size(pointer), std::memory_order_relaxed);
    std::free(pointer);
}

void* allocate_buffer(MemoryBudget* budget, size_t bytes) {
    if (budget != nullptr) return budget->allocate(bytes);
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded < bytes) throw std::bad_alloc();
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}

void free_buffer(MemoryBudget* budget, void* pointer) {
    if (budget != nullptr) budget->free(pointer);
    else std::free(pointer);
}

}  // namespace tessera::cpu
