// The CUDA execution provider's entry library (libtessera_cuda.so): plain C++, no CUDA header and no link
// dependency on any CUDA library, so it loads on every machine.  Everything that needs CUDA lives in
// libtessera_cuda_impl.so, in the `cuda/` folder next to this file (a folder plugin discovery does not scan), which
// this library dlopens when the core asks whether the provider is available.  Whatever stops it -- no driver, a
// missing cuBLAS/cuDNN, no device, a device too old -- becomes the UNAVAILABLE reason shown by `tessera plugins`.
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "impl_api.h"
#include "tessera/support/plugin_entry.hpp"
#include "tessera/version.h"

namespace {

const TessHostApi* g_host = nullptr;
std::once_flag g_load_once;
TessCudaImpl g_impl{};
bool g_ready = false;
std::string g_reason = "the CUDA implementation was not loaded";

std::string dlerror_text() {
    const char* e = dlerror();
    return e != nullptr ? e : "unknown dynamic loader error";
}

bool complete(const TessCudaImpl& t) {
    return t.version == TESS_CUDA_IMPL_VERSION && t.struct_size >= sizeof(TessCudaImpl) &&
           t.create_instance && t.release_instance && t.get_capability && t.compile && t.release_compiled &&
           t.compute && t.memory_kind && t.allocate && t.free && t.copy_to_host && t.copy_from_host;
}

void load_implementation() {
    try {
        // The driver first: the CUDA runtime would only say "driver version is insufficient" without it.  The handle
        // stays open (the runtime opens the same library).
        dlerror();
        if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) == nullptr) {
            g_reason = "no CUDA driver: " + dlerror_text();
            return;
        }
        // The implementation and, through its run path, libcublas/libcublasLt/libcudnn.  Never unloaded: CUDA
        // libraries do not support being unloaded while a process keeps running.
        const void* self = reinterpret_cast<const void*>(&load_implementation);
        const std::string path = tessera::support::library_directory(self) + "/cuda/" TESS_CUDA_IMPL_FILE;
        void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (library == nullptr) {
            g_reason = "cannot load the CUDA implementation: " + dlerror_text();
            return;
        }
        auto open = reinterpret_cast<TessCudaImplOpenFn>(dlsym(library, TESS_CUDA_IMPL_OPEN_NAME));
        if (open == nullptr) {
            g_reason = path + " has no symbol " TESS_CUDA_IMPL_OPEN_NAME;
            return;
        }
        TessCudaImpl impl{};
        impl.struct_size = sizeof(impl);
        if (TessStatus* status = open(g_host, &impl)) {
            g_reason = g_host->status_message(status);
            g_host->status_release(status);
            if (g_reason.empty()) g_reason = "the CUDA implementation refused to start";
            return;
        }
        if (!complete(impl)) {
            g_reason = path + " is from another build (its function table does not match)";
            return;
        }
        g_impl = impl;
        g_ready = true;
        g_reason.clear();
        if (impl.description != nullptr) g_host->log(TESS_LOG_INFO, "cuda", impl.description);
    } catch (...) {
        g_ready = false;
        g_reason = "unexpected exception while loading the CUDA implementation";
    }
}

bool ready() {
    std::call_once(g_load_once, load_implementation);
    return g_ready;
}

TessStatus* unavailable() { return g_host->status_create(TESS_STATUS_UNAVAILABLE, g_reason.c_str()); }

// ---- The provider table: forwards to the implementation ---------------------------------------------------------

TessStatus* check_available(void*) { return ready() ? nullptr : unavailable(); }

TessStatus* create_instance(void*, const TessProviderOptions* options, TessProviderInstance** out) {
    return ready() ? g_impl.create_instance(options, out) : unavailable();
}
void release_instance(TessProviderInstance* instance) {
    if (ready()) g_impl.release_instance(instance);
}
TessStatus* get_capability(TessProviderInstance* instance, const TessGraphView* graph, TessCapabilityContext* ctx) {
    return ready() ? g_impl.get_capability(instance, graph, ctx) : unavailable();
}
TessStatus* compile(TessProviderInstance* instance, const TessGraphView* graph, TessCompiled** out) {
    return ready() ? g_impl.compile(instance, graph, out) : unavailable();
}
void release_compiled(TessCompiled* compiled) {
    if (ready()) g_impl.release_compiled(compiled);
}
TessStatus* compute(TessCompiled* compiled, TessComputeContext* context) {
    return ready() ? g_impl.compute(compiled, context) : unavailable();
}
const TessMemoryKind* memory_kind(TessProviderInstance* instance) {
    static const TessMemoryKind kNone = {sizeof(TessMemoryKind), "cuda", 0, 0};
    return ready() ? g_impl.memory_kind(instance) : &kNone;
}
TessStatus* allocate(TessProviderInstance* instance, size_t bytes, size_t alignment, void** out) {
    return ready() ? g_impl.allocate(instance, bytes, alignment, out) : unavailable();
}
void free_memory(TessProviderInstance* instance, void* pointer) {
    if (ready()) g_impl.free(instance, pointer);
}
TessStatus* copy_to_host(TessProviderInstance* instance, void* dst, const void* src, size_t bytes) {
    return ready() ? g_impl.copy_to_host(instance, dst, src, bytes) : unavailable();
}
TessStatus* copy_from_host(TessProviderInstance* instance, void* dst, const void* src, size_t bytes) {
    return ready() ? g_impl.copy_from_host(instance, dst, src, bytes) : unavailable();
}

const TessProviderApi kCudaProvider = [] {
    TessProviderApi api{};
    api.struct_size = sizeof(TessProviderApi);
    api.name = "cuda";
    api.provider_data = nullptr;
    api.check_available = check_available;
    api.create_instance = create_instance;
    api.release_instance = release_instance;
    api.get_capability = get_capability;
    api.compile = compile;
    api.release_compiled = release_compiled;
    api.compute = compute;
    api.memory_kind = memory_kind;
    api.allocate = allocate;
    api.free = free_memory;
    api.copy_to_host = copy_to_host;
    api.copy_from_host = copy_from_host;
    api.is_fallback = 0;
    return api;
}();

const TessProviderApi* const kProviders[] = {&kCudaProvider};

const auto kPlugin =
    tessera::support::PluginDescription::of_providers("tessera-cuda", TESS_VERSION_STRING, kProviders);

}  // namespace

extern "C" TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    // Written by the first entry only: later ones (one per environment) may come while sessions of other
    // environments use the provider (provider.h).
    static std::once_flag initialized;
    return tessera::support::enter_plugin(host, exports, kPlugin, initialized, [host] { g_host = host; });
}
