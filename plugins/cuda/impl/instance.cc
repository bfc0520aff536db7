// CUDA provider: provider instances (instance.h).
#include "instance.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tessera::cuda {

namespace {

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// The value of `key` from the options' config pairs, else from environment variable `env`; empty when neither.
std::string setting(const TessProviderOptions* options, const char* key, const char* env) {
    if (options != nullptr && TESS_HAS_FIELD(options, TessProviderOptions, config_values) &&
        options->config_keys != nullptr && options->config_values != nullptr) {
        for (size_t i = 0; i < options->config_count; ++i) {
            if (options->config_keys[i] != nullptr && std::strcmp(options->config_keys[i], key) == 0)
                return options->config_values[i] != nullptr ? options->config_values[i] : "";
        }
    }
    const char* value = std::getenv(env);
    return value != nullptr ? value : "";
}

size_t parse_bytes(const std::string& text, const char* key) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long number = std::strtoull(text.c_str(), &end, 10);
    std::string suffix = lower(end != nullptr ? end : "");
    suffix.erase(std::remove_if(suffix.begin(), suffix.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }),
                 suffix.end());
    unsigned long long scale = 1;
    if (suffix.empty() || suffix == "b") scale = 1;
    else if (suffix == "k" || suffix == "kb" || suffix == "kib") scale = 1ull << 10;
    else if (suffix == "m" || suffix == "mb" || suffix == "mib") scale = 1ull << 20;
    else if (suffix == "g" || suffix == "gb" || suffix == "gib") scale = 1ull << 30;
    else scale = 0;
    if (end == text.c_str() || errno != 0 || scale == 0 || text[0] == '-')
        fail(TESS_STATUS_INVALID_ARGUMENT,
             std::string("cuda: ") + key + " '" + text + "' is not a byte count (e.g. 4294967296, 512M, 6G)");
    return static_cast<size_t>(number * scale);
}

bool parse_bool(const std::string& text, const char* key) {
    const std::string v = lower(text);
    if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
    if (v == "0" || v == "false" || v == "off" || v == "no") return false;
    fail(TESS_STATUS_INVALID_ARGUMENT, std::string("cuda: ") + key + " '" + text + "' is not 0 or 1");
}

}  // namespace

Config Config::parse(const TessProviderOptions* options) {
    Config c;
    if (std::string v = setting(options, "device_id", "TESSERA_CUDA_DEVICE"); !v.empty()) {
        char* end = nullptr;
        const long id = std::strtol(v.c_str(), &end, 10);
        if (end == v.c_str() || *end != '\0' || id < 0 || id > 1024)
            fail(TESS_STATUS_INVALID_ARGUMENT, "cuda: device_id '" + v + "' is not a device number");
        c.device = static_cast<int>(id);
    }
    if (std::string v = setting(options, "memory_limit", "TESSERA_CUDA_MEMORY_LIMIT"); !v.empty())
        c.memory_limit = parse_bytes(v, "memory_limit");
    if (std::string v = setting(options, "use_tf32", "TESSERA_CUDA_USE_TF32"); !v.empty())
        c.tf32 = parse_bool(v, "use_tf32");
    if (std::string v = setting(options, "conv_algo_search", "TESSERA_CUDA_CONV_ALGO_SEARCH"); !v.empty()) {
        const std::string s = lower(v);
        if (s == "exhaustive") c.exhaustive_conv_search = true;
        else if (s == "heuristic") c.exhaustive_conv_search = false;
        else fail(TESS_STATUS_INVALID_ARGUMENT, "cuda: conv_algo_search '" + v + "' is not exhaustive or heuristic");
    }
    return c;
}

DeviceScope::DeviceScope(int device, bool nothrow) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
        cudaGetLastError();
        previous_ = -1;
    }
    if (previous_ != device) {
        const cudaError_t status = cudaSetDevice(device);
        if (status != cudaSuccess && nothrow) {
            cudaGetLastError();
            return;
        }
        check_cuda(status, "cudaSetDevice");
        changed_ = true;
    }
}

DeviceScope::~DeviceScope() {
    if (changed_ && previous_ >= 0) cudaSetDevice(previous_);
}

Instance::Instance(const Config& cfg) : config(cfg), device(cfg.device), arena(cfg.memory_limit) {
    int count = 0;
    check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (device >= count)
        fail(TESS_STATUS_INVALID_ARGUMENT,
             "cuda: device_id " + std::to_string(device) + " does not exist (" + std::to_string(count) + " devices)");
    DeviceScope scope(device);
    try {
        check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        check_cublas(cublasCreate(&cublas), "cublasCreate");
        check_cublas(cublasSetStream(cublas, stream), "cublasSetStream");
        check_cublas(cublasSetMathMode(cublas, config.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                     "cublasSetMathMode");
        check_cudnn(cudnnCreate(&cudnn), "cudnnCreate");
        check_cudnn(cudnnSetStream(cudnn, stream), "cudnnSetStream");
    } catch (...) {
        if (cudnn != nullptr) cudnnDestroy(cudnn);
        if (cublas != nullptr) cublasDestroy(cublas);
        if (stream != nullptr) cudaStreamDestroy(stream);
        throw;
    }
    memory_name_ = "cuda:" + std::to_string(device);
    memory_kind.struct_size = sizeof(TessMemoryKind);
    memory_kind.name = memory_name_.c_str();
    memory_kind.host_accessible = 0;
    memory_kind.device_id = device;
}

Instance::~Instance() {
    DeviceScope scope(device, true);
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (int i = 0; i < 2; ++i) {
        if (staging_done_[i] != nullptr) cudaEventDestroy(staging_done_[i]);
        if (staging_[i] != nullptr) cudaFreeHost(staging_[i]);
    }
    if (cudnn != nullptr) cudnnDestroy(cudnn);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
    const ArenaStats s = arena.stats();
    arena.release_all();  // while the device is current
    try {
        const std::string line = "instance on device " + std::to_string(device) + " released: " + s.to_string();
        host().log(TESS_LOG_INFO, "cuda", line.c_str());
    } catch (...) {
    }
}

std::shared_ptr<void> Instance::allocate_shared(size_t bytes) {
    void* pointer = arena.allocate(bytes);
    DeviceArena* owner = &arena;
    try {
        return std::shared_ptr<void>(pointer, [owner](void* p) { owner->free(p); });
    } catch (...) {
        owner->free(pointer);
        throw;
    }
}

void Instance::ensure_staging() {
    if (staging_tried_) return;
    staging_tried_ = true;
    for (int i = 0; i < 2; ++i) {
        if (cudaHostAlloc(&staging_[i], kStagingBytes, cudaHostAllocDefault) != cudaSuccess ||
            cudaEventCreateWithFlags(&staging_done_[i], cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            for (int j = 0; j < 2; ++j) {
                if (staging_done_[j] != nullptr) cudaEventDestroy(staging_done_[j]);
                if (staging_[j] != nullptr) cudaFreeHost(staging_[j]);
                staging_done_[j] = nullptr;
                staging_[j] = nullptr;
            }
            host().log(TESS_LOG_WARNING, "cuda", "no pinned staging memory; copies use pageable memory");
            return;
        }
    }
}

void Instance::copy_from_host(void* dst, const void* src, size_t bytes) {
    std::lock_guard lock(exec_mutex);
    copy_from_host_locked(dst, src, bytes);
}

void Instance::copy_to_host(void* dst, const void* src, size_t bytes) {
    std::lock_guard lock(exec_mutex);
    copy_to_host_locked(dst, src, bytes);
}

void Instance::copy_from_host_locked(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    ensure_staging();
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    if (staging_[0] == nullptr) {
        check_cuda(cudaMemcpyAsync(d, s, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (to device)");
        check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        return;
    }
    // Chunk k goes through buffer k % 2: fill it once the copy that last used it has finished.
    int slot = 0;
    for (size_t offset = 0; offset < bytes; offset += kStagingBytes, slot ^= 1) {
        const size_t len = std::min(kStagingBytes, bytes - offset);
        check_cuda(cudaEventSynchronize(staging_done_[slot]), "cudaEventSynchronize");
        std::memcpy(staging_[slot], s + offset, len);
        check_cuda(cudaMemcpyAsync(d + offset, staging_[slot], len, cudaMemcpyHostToDevice, stream),
                   "cudaMemcpyAsync (to device)");
        check_cuda(cudaEventRecord(staging_done_[slot], stream), "cudaEventRecord");
    }
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void Instance::copy_to_host_locked(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    ensure_staging();
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    if (staging_[0] == nullptr) {
        check_cuda(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (to host)");
        check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        return;
    }
    // Queue chunk k + 1 into the other buffer before draining chunk k, so the copies overlap the host memcpy.
    const size_t chunks = (bytes + kStagingBytes - 1) / kStagingBytes;
    auto enqueue = [&](size_t k) {
        const size_t offset = k * kStagingBytes, len = std::min(kStagingBytes, bytes - offset);
        check_cuda(cudaMemcpyAsync(staging_[k % 2], s + offset, len, cudaMemcpyDeviceToHost, stream),
                   "cudaMemcpyAsync (to host)");
        check_cuda(cudaEventRecord(staging_done_[k % 2], stream), "cudaEventRecord");
    };
    enqueue(0);
    for (size_t k = 0; k < chunks; ++k) {
        if (k + 1 < chunks) enqueue(k + 1);  // buffer (k+1)%2 was drained in iteration k-1
        check_cuda(cudaEventSynchronize(staging_done_[k % 2]), "cudaEventSynchronize");
        const size_t offset = k * kStagingBytes, len = std::min(kStagingBytes, bytes - offset);
        std::memcpy(d + offset, staging_[k % 2], len);
    }
}

}  // namespace tessera::cuda
