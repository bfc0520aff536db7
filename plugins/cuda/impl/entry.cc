// CUDA provider implementation: the availability probe and the provider functions behind the thin plugin's table
// (impl_api.h).  Every function here is an ABI boundary: exceptions become status objects.
#include <dlfcn.h>

#include <cstdio>
#include <new>
#include <string>
#include <utility>

#include "../impl_api.h"
#include "graph.h"
#include "instance.h"

using namespace tessera::cuda;

namespace {

template <typename Fn> TessStatus* guarded(Fn&& fn) noexcept {
    return tessera::support::guarded(&host(), "cuda", std::forward<Fn>(fn));
}

Instance& instance_of(TessProviderInstance* p) { return *reinterpret_cast<Instance*>(p); }
CompiledGraph& compiled_of(TessCompiled* p) { return *reinterpret_cast<CompiledGraph*>(p); }

std::string version_string(int v) {  // CUDA encodes 13.0 as 13000
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string dlerror_text() {
    const char* e = dlerror();
    return e != nullptr ? e : "unknown dynamic loader error";
}

// Empty when this machine can run the provider; otherwise the reason.  Fills `description` on success.
std::string probe(std::string& description) {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        std::string reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
        if (driver > 0 && driver < runtime)
            reason += " (the driver supports CUDA " + version_string(driver) + ", this build needs CUDA " +
                      version_string(runtime) + ")";
        cudaGetLastError();
        return reason;
    }
    if (count == 0) return "cudaGetDeviceCount: no CUDA-capable device is detected";

    std::string devices;
    int usable = 0;
    for (int d = 0; d < count; ++d) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        char line[400];
        std::snprintf(line, sizeof line, "%sdevice %d: %s (sm_%d%d, %.1f GiB)", devices.empty() ? "" : "; ", d,
                      prop.name, prop.major, prop.minor, static_cast<double>(prop.totalGlobalMem) / (1 << 30));
        devices += line;
        if (prop.major >= 8) ++usable;
    }
    if (usable == 0)
        return "no CUDA device of compute capability 8.0 or newer (" + devices +
               "); the plugin carries code for sm_80, sm_90 and compute_90";

    // cuDNN: the version, and the sub-libraries the legacy convolution API loads lazily (found next to libcudnn).
    const size_t cudnn = cudnnGetVersion();
    if (cudnn / 10000 != CUDNN_MAJOR)
        return "cuDNN " + std::to_string(cudnn) + " was loaded; this build needs cuDNN " + std::to_string(CUDNN_MAJOR);
    std::string cudnn_dir;
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void*>(&cudnnGetVersion), &info) != 0 && info.dli_fname != nullptr) {
        cudnn_dir = info.dli_fname;
        const size_t slash = cudnn_dir.rfind('/');
        cudnn_dir = slash == std::string::npos ? std::string() : cudnn_dir.substr(0, slash + 1);
    }
    const std::string cnn = "libcudnn_cnn.so." + std::to_string(CUDNN_MAJOR);
    dlerror();
    if (dlopen((cudnn_dir + cnn).c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr &&
        dlopen(cnn.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr)
        return "cuDNN is incomplete: " + dlerror_text();

    int blas_major = 0, blas_minor = 0, blas_patch = 0;
    cublasGetProperty(MAJOR_VERSION, &blas_major);
    cublasGetProperty(MINOR_VERSION, &blas_minor);
    cublasGetProperty(PATCH_LEVEL, &blas_patch);

    char text[256];
    std::snprintf(text, sizeof text, "CUDA runtime %s (driver %s), cuBLAS %d.%d.%d, cuDNN %zu.%zu.%zu; ",
                  version_string(runtime).c_str(), version_string(driver).c_str(), blas_major, blas_minor, blas_patch,
                  cudnn / 10000, (cudnn % 10000) / 100, cudnn % 100);
    description = text + devices;
    return "";
}

// ---- Provider functions ------------------------------------------------------------------------------------------

TessStatus* create_instance(const TessProviderOptions* options, TessProviderInstance** out) {
    return guarded([&] {
        const Config config = Config::parse(options);
        cudaDeviceProp prop{};
        check_cuda(cudaGetDeviceProperties(&prop, config.device), "cudaGetDeviceProperties");
        if (prop.major < 8)
            fail(TESS_STATUS_UNAVAILABLE, "cuda: device " + std::to_string(config.device) + " (" + prop.name +
                                              ") has compute capability " + std::to_string(prop.major) + "." +
                                              std::to_string(prop.minor) + "; 8.0 or newer is needed");
        auto instance = std::make_unique<Instance>(config);
        *out = reinterpret_cast<TessProviderInstance*>(instance.release());
    });
}

void release_instance(TessProviderInstance* instance) {
    try {
        delete &instance_of(instance);
    } catch (...) {
    }
}

TessStatus* get_capability(TessProviderInstance*, const TessGraphView* graph, TessCapabilityContext* context) {
    return guarded([&] {
        for (size_t n = 0; n < graph->node_count; ++n) {
            const TessNodeView& node = *graph->nodes[n];
            const std::string why = check_node(node);
            if (why.empty()) host().capability_claim(context, node.index);
            else host().capability_decline(context, node.index, why.c_str());
        }
    });
}

TessStatus* compile(TessProviderInstance* instance, const TessGraphView* graph, TessCompiled** out) {
    return guarded([&] {
        Instance& inst = instance_of(instance);
        DeviceScope scope(inst.device);
        auto compiled = std::make_unique<CompiledGraph>(inst, *graph);
        *out = reinterpret_cast<TessCompiled*>(compiled.release());
    });
}

void release_compiled(TessCompiled* compiled) {
    try {
        CompiledGraph* graph = &compiled_of(compiled);
        DeviceScope scope(graph->instance.device, true);
        delete graph;
    } catch (...) {
    }
}

TessStatus* compute(TessCompiled* compiled, TessComputeContext* context) {
    return guarded([&] {
        CompiledGraph& graph = compiled_of(compiled);
        DeviceScope scope(graph.instance.device);
        graph.run(context);
    });
}

const TessMemoryKind* memory_kind(TessProviderInstance* instance) { return &instance_of(instance).memory_kind; }

TessStatus* allocate(TessProviderInstance* instance, size_t bytes, size_t alignment, void** out) {
    return guarded([&] {
        if (alignment > 256 || (alignment & (alignment - 1)) != 0)
            fail(TESS_STATUS_INVALID_ARGUMENT, "cuda: alignment " + std::to_string(alignment) +
                                                   " is not supported (device memory is 256-byte aligned)");
        Instance& inst = instance_of(instance);
        DeviceScope scope(inst.device);
        *out = inst.arena.allocate(bytes);
    });
}

void free_memory(TessProviderInstance* instance, void* pointer) { instance_of(instance).arena.free(pointer); }

TessStatus* copy_to_host(TessProviderInstance* instance, void* dst, const void* src, size_t bytes) {
    return guarded([&] {
        Instance& inst = instance_of(instance);
        DeviceScope scope(inst.device);
        inst.copy_to_host(dst, src, bytes);
    });
}

TessStatus* copy_from_host(TessProviderInstance* instance, void* dst, const void* src, size_t bytes) {
    return guarded([&] {
        Instance& inst = instance_of(instance);
        DeviceScope scope(inst.device);
        inst.copy_from_host(dst, src, bytes);
    });
}

std::string g_description;

}  // namespace

extern "C" TESS_EXPORT TessStatus* tessera_cuda_impl_open(const TessHostApi* host_api, TessCudaImpl* impl) {
    if (host_api == nullptr) return nullptr;
    set_host(host_api);
    if (impl == nullptr || impl->struct_size < sizeof(TessCudaImpl))
        return host_api->status_create(TESS_STATUS_INTERNAL, "cuda: the plugin and its implementation do not match");
    try {
        const std::string reason = probe(g_description);
        if (!reason.empty()) return host_api->status_create(TESS_STATUS_UNAVAILABLE, reason.c_str());
    } catch (...) {
        return host_api->status_create(TESS_STATUS_UNAVAILABLE, "cuda: the device probe failed unexpectedly");
    }
    impl->version = TESS_CUDA_IMPL_VERSION;
    impl->description = g_description.c_str();
    impl->create_instance = create_instance;
    impl->release_instance = release_instance;
    impl->get_capability = get_capability;
    impl->compile = compile;
    impl->release_compiled = release_compiled;
    impl->compute = compute;
    impl->memory_kind = memory_kind;
    impl->allocate = allocate;
    impl->free = free_memory;
    impl->copy_to_host = copy_to_host;
    impl->copy_from_host = copy_from_host;
    return nullptr;
}
