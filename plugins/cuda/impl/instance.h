// CUDA provider: one provider instance (one per session) -- its device, stream, library handles, memory arena and
// host staging buffers.
//
// Concurrency: the core may call compute on one compiled partition from several threads, and copies at any time.
// All of an instance's device work goes to its one stream, and `exec_mutex` serializes everything that submits work
// or uses the cuBLAS/cuDNN handles (handles are not safe to share between threads at once).  The arena has its own
// mutex, taken inside exec_mutex (never the other way round).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "allocator.h"
#include "common.h"

namespace tessera::cuda {

// Instance settings: TessProviderOptions config pairs first, then environment variables, then defaults.
//   device_id          TESSERA_CUDA_DEVICE            0
//   memory_limit       TESSERA_CUDA_MEMORY_LIMIT      0 = unlimited (bytes; K/M/G suffixes, powers of 1024)
//   use_tf32           TESSERA_CUDA_USE_TF32          1: float32 GEMM/convolution may use TF32 tensor cores
//   conv_algo_search   TESSERA_CUDA_CONV_ALGO_SEARCH  exhaustive (benchmark once per shape) or heuristic
struct Config {
    int device = 0;
    size_t memory_limit = 0;
    bool tf32 = true;
    bool exhaustive_conv_search = true;

    static Config parse(const TessProviderOptions* options);
};

// Makes the instance's device current on the calling thread for a scope, restoring the previous one.
class DeviceScope {
public:
    // Throws when the device cannot be made current, unless `nothrow` (for destructors).
    explicit DeviceScope(int device, bool nothrow = false);
    ~DeviceScope();
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

private:
    int previous_ = -1;
    bool changed_ = false;
};

class Instance {
public:
    explicit Instance(const Config& config);
    ~Instance();
    Instance(const Instance&) = delete;
    Instance& operator=(const Instance&) = delete;

    const Config config;
    const int device;
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    cudnnHandle_t cudnn = nullptr;
    DeviceArena arena;
    std::mutex exec_mutex;
    TessMemoryKind memory_kind{};

    // An arena block owned by a shared pointer (freed into the arena when the last owner lets go).
    std::shared_ptr<void> allocate_shared(size_t bytes);

    // Blocking copies through the pinned staging buffers (double-buffered, on the instance's stream, so they are
    // ordered after every kernel queued before).  Take exec_mutex themselves.
    void copy_to_host(void* host_dst, const void* device_src, size_t bytes);
    void copy_from_host(void* device_dst, const void* host_src, size_t bytes);
    // The same without taking the lock (for callers that hold exec_mutex).
    void copy_to_host_locked(void* host_dst, const void* device_src, size_t bytes);
    void copy_from_host_locked(void* device_dst, const void* host_src, size_t bytes);

private:
    void ensure_staging();

    std::string memory_name_;
    static constexpr size_t kStagingBytes = size_t{4} << 20;
    void* staging_[2] = {nullptr, nullptr};
    cudaEvent_t staging_done_[2] = {nullptr, nullptr};
    bool staging_tried_ = false;
};

}  // namespace tessera::cuda
