// CUDA provider: the device memory arena of one provider instance.
//
// A caching allocator over cudaMalloc: freed blocks are kept by size and handed out again for requests that fit
// (a cached block is reused when it is at most twice the request), so steady-state runs call cudaMalloc rarely.
// Every block of an instance is only ever touched by work on the instance's one stream, so a block freed while
// kernels that read it are still queued can be reused at once: later work is ordered after them.
//
// The memory limit (0: none) bounds the bytes obtained from cudaMalloc.  When a request would pass it, or cudaMalloc
// fails, the cache is released and the request retried once; if it still cannot be met the allocation fails with an
// OUT_OF_MEMORY error that states the request, the limit and the arena's statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tessera::cuda {

struct ArenaStats {
    size_t in_use = 0;          // bytes of live blocks (rounded sizes)
    size_t peak_in_use = 0;
    size_t reserved = 0;        // bytes obtained from cudaMalloc (live + cached)
    size_t peak_reserved = 0;
    size_t limit = 0;           // 0: unlimited
    uint64_t allocations = 0;   // allocate calls that succeeded
    uint64_t cache_hits = 0;    // ... served from the cache
    uint64_t device_mallocs = 0;
    uint64_t device_frees = 0;
    uint64_t failures = 0;      // allocate calls that failed

    std::string to_string() const;
};

class DeviceArena {
public:
    explicit DeviceArena(size_t limit) { stats_.limit = limit; }
    ~DeviceArena();
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;

    // At least `bytes` (>= 1) bytes aligned to 256; throws tessera::cuda::Error (OUT_OF_MEMORY) on failure.  The
    // device must be current on the calling thread.
    void* allocate(size_t bytes);
    void free(void* pointer);
    // Returns every cached block to the driver.
    void release_cache();
    // Returns every block, cached or live, to the driver (the instance is going away).
    void release_all();
    ArenaStats stats() const;

    static size_t round_size(size_t bytes);

private:
    void release_cache_locked();

    mutable std::mutex mutex_;
    std::multimap<size_t, void*> cached_;       // free blocks by size
    std::unordered_map<void*, size_t> live_;    // block -> size
    ArenaStats stats_;
};

}  // namespace tessera::cuda
