// CUDA provider: the device memory arena (allocator.h).
#include "allocator.h"

#include <algorithm>
#include <cstdio>

#include "common.h"

namespace tessera::cuda {

namespace {

std::string mib(size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

}  // namespace

std::string ArenaStats::to_string() const {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "in use %s (peak %s), reserved %s (peak %s), limit %s; %llu allocations, %llu from the cache, "
                  "%llu cudaMalloc, %llu cudaFree, %llu failed",
                  mib(in_use).c_str(), mib(peak_in_use).c_str(), mib(reserved).c_str(), mib(peak_reserved).c_str(),
                  limit == 0 ? "none" : mib(limit).c_str(), static_cast<unsigned long long>(allocations),
                  static_cast<unsigned long long>(cache_hits), static_cast<unsigned long long>(device_mallocs),
                  static_cast<unsigned long long>(device_frees), static_cast<unsigned long long>(failures));
    return buf;
}

size_t DeviceArena::round_size(size_t bytes) {
    constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;  // 512 B granules below 1 MiB, 2 MiB above
    if (bytes == 0) bytes = 1;
    if (bytes < (size_t{1} << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
    return (bytes + kLarge - 1) / kLarge * kLarge;
}

DeviceArena::~DeviceArena() { release_all(); }

void DeviceArena::release_all() {
    std::lock_guard lock(mutex_);
    release_cache_locked();
    // Live blocks at this point belong to values nobody released; give them back too.
    for (auto& [pointer, size] : live_) {
        cudaFree(pointer);
        stats_.reserved -= size;
        stats_.in_use -= size;
        ++stats_.device_frees;
    }
    live_.clear();
}

void* DeviceArena::allocate(size_t bytes) {
    const size_t size = round_size(bytes);
    std::lock_guard lock(mutex_);
    auto it = cached_.lower_bound(size);
    if (it != cached_.end() && it->first <= 2 * size) {
        void* pointer = it->second;
        const size_t block = it->first;
        cached_.erase(it);
        live_.emplace(pointer, block);
        stats_.in_use += block;
        stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
        ++stats_.allocations;
        ++stats_.cache_hits;
        return pointer;
    }
    std::string why;
    for (int attempt = 0; attempt < 2; ++attempt) {
        if (attempt == 1) release_cache_locked();  // cached blocks of other sizes may be what stands in the way
        if (stats_.limit != 0 && stats_.reserved + size > stats_.limit) {
            why = "the memory limit would be exceeded";
            continue;
        }
        void* pointer = nullptr;
        cudaError_t status = cudaMalloc(&pointer, size);
        if (status == cudaSuccess) {
            live_.emplace(pointer, size);
            stats_.reserved += size;
            stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
            stats_.in_use += size;
            stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
            ++stats_.allocations;
            ++stats_.device_mallocs;
            return pointer;
        }
        cudaGetLastError();  // clear the (non-sticky) allocation error
        why = std::string("cudaMalloc: ") + cudaGetErrorString(status);
    }
    ++stats_.failures;
    fail(TESS_STATUS_OUT_OF_MEMORY, "cuda: cannot allocate " + std::to_string(bytes) + " bytes (" + why + "); " +
                                        stats_.to_string());
}

void DeviceArena::free(void* pointer) {
    if (pointer == nullptr) return;
    std::lock_guard lock(mutex_);
    auto it = live_.find(pointer);
    if (it == live_.end()) return;  // not ours: ignore rather than corrupt the cache
    stats_.in_use -= it->second;
    cached_.emplace(it->second, pointer);
    live_.erase(it);
}

void DeviceArena::release_cache() {
    std::lock_guard lock(mutex_);
    release_cache_locked();
}

void DeviceArena::release_cache_locked() {
    for (auto& [size, pointer] : cached_) {
        cudaFree(pointer);  // synchronizes with queued work that may still read the block
        stats_.reserved -= size;
        ++stats_.device_frees;
    }
    cached_.clear();
}

ArenaStats DeviceArena::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

}  // namespace tessera::cuda
