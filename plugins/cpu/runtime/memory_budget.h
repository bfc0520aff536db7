// CPU provider: the session's memory limit (TessProviderOptions::memory_limit_bytes) over the buffers the provider
// allocates for a session: partition outputs, run arenas and the intermediates of first runs.  Per-thread kernel
// scratch and the weights the core loaded are not counted.  A run that would pass the limit fails with an
// OUT_OF_MEMORY status naming it, and the session stays usable.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tessera/support/status.hpp"

namespace tessera::cpu {

struct MemoryLimitExceeded : support::Error {
    explicit MemoryLimitExceeded(const std::string& message) : support::Error(TESS_STATUS_OUT_OF_MEMORY, message) {}
};

class MemoryBudget {
public:
    explicit MemoryBudget(uint64_t limit_bytes = 0) : limit_(limit_bytes) {}

    // A 64-byte aligned buffer of at least `bytes`, charged to the budget; throws MemoryLimitExceeded when the
    // limit would be passed and std::bad_alloc when the system has no memory.
    void* allocate(size_t bytes);
    // Returns a buffer from allocate() (NULL is ignored).
    void free(void* pointer);

    uint64_t limit() const { return limit_; }
    uint64_t used() const { return used_.load(std::memory_order_relaxed); }

private:
    const uint64_t limit_;  // 0: no limit (the buffers are still counted)
    std::atomic<uint64_t> used_{0};
};

// A 64-byte aligned buffer charged to `budget`, or a plain one when `budget` is NULL (code paths without a session);
// free it with free_buffer and the same budget.
void* allocate_buffer(MemoryBudget* budget, size_t bytes);
void free_buffer(MemoryBudget* budget, void* pointer);

}  // namespace tessera::cpu
