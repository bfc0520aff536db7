// The CPU execution provider: the plugin entry point and the provider function table.
// Every function here is an ABI boundary: exceptions are caught and returned as status objects.
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "runtime/allocator.h"
#include "runtime/graph_executor.h"
#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "tessera/support/plugin_entry.hpp"
#include "tessera/version.h"
#include "util/gemm.h"

namespace tessera::cpu {

namespace {

const TessMemoryKind kHostMemory = {sizeof(TessMemoryKind), TESS_HOST_MEMORY_NAME, 1, 0};

struct Plugin {
    KernelRegistry registry;
};

Plugin& plugin() {
    static Plugin p;
    return p;
}

// Every ABI function's body: kernel, stop and memory-limit errors carry their own status codes (support::Error).
template <typename Fn> TessStatus* guarded(Fn&& fn) noexcept {
    return support::guarded(&host(), "cpu", std::forward<Fn>(fn));
}

}  // namespace

}  // namespace tessera::cpu

using namespace tessera::cpu;

// The opaque handles of the provider ABI, defined by this provider.
struct TessProviderInstance {
    explicit TessProviderInstance(uint64_t memory_limit) : budget(memory_limit), allocator(&budget) {}
    std::unique_ptr<ThreadPool> pool;
    MemoryBudget budget;  // the session's memory limit, over every buffer below
    CachingAllocator allocator;
    KernelSource kernels;  // the built-in registry plus the session's custom operators
};

struct TessCompiled {
    std::unique_ptr<CompiledGraph> graph;
    ThreadPool* pool = nullptr;  // the session's, owned by the instance
    MemoryBudget* budget = nullptr;  // likewise
};

namespace {

// Partition outputs are allocated by the core with this provider's allocator, so kernels write them in place.
class CoreOutputs final : public OutputSink {
public:
    explicit CoreOutputs(TessComputeContext* context) : context_(context) {}
    Tensor allocate(size_t index, int32_t type, const Shape& shape) override {
        TessValue* v = nullptr;
        check_status(host().compute_allocate_output(context_, index, type, shape.data(), shape.size(), &v), "output");
        return tensor_of(v);
    }
    void set(size_t index, TessValue* value) override {
        check_status(host().compute_set_output(context_, index, value), "output");
    }

private:
    TessComputeContext* context_;
};

// Whether the run this compute call belongs to is profiled (the profiling host functions were appended to
// TessHostApi: older cores lack them).
bool profiled(const TessComputeContext* context) {
    const TessHostApi& h = host();
    return TESS_HAS_FIELD(&h, TessHostApi, compute_profile_node) && h.compute_profiling != nullptr &&
           h.compute_profile_node != nullptr && h.compute_profiling(context) != 0;
}

}  // namespace

namespace {

TessStatus* create_instance(void*, const TessProviderOptions* options, TessProviderInstance** out) {
    return guarded([&] {
        int threads = options != nullptr && options->intra_op_threads > 0 ? options->intra_op_threads : 1;
        const uint64_t memory_limit =
            options != nullptr && TESS_HAS_FIELD(options, TessProviderOptions, memory_limit_bytes)
                ? options->memory_limit_bytes
                : 0;
        auto instance = std::make_unique<TessProviderInstance>(memory_limit);
        instance->pool = std::make_unique<ThreadPool>(threads);
        instance->kernels.registry = &plugin().registry;
        if (options != nullptr && TESS_HAS_FIELD(options, TessProviderOptions, custom_ops))
            instance->kernels.custom_ops.assign(options->custom_ops, options->custom_ops + options->custom_op_count);
        *out = instance.release();
    });
}

void release_instance(TessProviderInstance* instance) { delete instance; }

TessStatus* get_capability(TessProviderInstance* instance, const TessGraphView* graph, TessCapabilityContext* ctx) {
    return guarded([&] {
        for (size_t n = 0; n < graph->node_count; ++n) {
            const TessNodeView& node = *graph->nodes[n];
            std::string why;
            if (instance->kernels.find(node, &why)) host().capability_claim(ctx, node.index);
            else host().capability_decline(ctx, node.index, why.c_str());
        }
    });
}

TessStatus* compile(TessProviderInstance* instance, const TessGraphView* graph, TessCompiled** out) {
    return guarded([&] {
        auto compiled = std::make_unique<TessCompiled>();
        compiled->graph = std::make_unique<CompiledGraph>(*graph, instance->kernels);
        compiled->graph->remember_constant_shapes(*graph);
        compiled->pool = instance->pool.get();
        compiled->budget = &instance->budget;
        compiled->graph->set_memory_budget(compiled->budget);
        *out = compiled.release();
    });
}

void release_compiled(TessCompiled* compiled) { delete compiled; }

TessStatus* compute(TessCompiled* compiled, TessComputeContext* context) {
    return guarded([&] {
        std::vector<Binding> inputs(host().compute_input_count(context));
        for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = bind_value(host().compute_input(context, i));
        CoreOutputs outputs(context);
        const RunScope run(context, compiled->budget);
        compiled->graph->run(inputs, outputs, *compiled->pool, profiled(context) ? context : nullptr);
    });
}

const TessMemoryKind* memory_kind(TessProviderInstance*) { return &kHostMemory; }

TessStatus* allocate(TessProviderInstance* instance, size_t bytes, size_t alignment, void** out) {
    return guarded([&] { *out = instance->allocator.allocate(bytes, alignment); });
}

void free_memory(TessProviderInstance* instance, void* pointer) { instance->allocator.free(pointer); }

TessStatus* copy_bytes_to_host(TessProviderInstance*, void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return nullptr;
}

TessStatus* copy_bytes_from_host(TessProviderInstance*, void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return nullptr;
}

const TessProviderApi kCpuProvider = [] {
    TessProviderApi api{};
    api.struct_size = sizeof(TessProviderApi);
    api.name = "cpu";
    api.provider_data = nullptr;
    api.check_available = nullptr;
    api.create_instance = create_instance;
    api.release_instance = release_instance;
    api.get_capability = get_capability;
    api.compile = compile;
    api.release_compiled = release_compiled;
    api.compute = compute;
    api.memory_kind = memory_kind;
    api.allocate = allocate;
    api.free = free_memory;
    api.copy_to_host = copy_bytes_to_host;
    api.copy_from_host = copy_bytes_from_host;
    api.is_fallback = 1;
    return api;
}();

const TessProviderApi* const kProviders[] = {&kCpuProvider};

const auto kPlugin =
    tessera::support::PluginDescription::of_providers("tessera-cpu", TESS_VERSION_STRING, kProviders);

}  // namespace

extern "C" TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host_api, TessPluginExports* exports) {
    // Kernels read these globals while sessions of another environment run (provider.h), so they are written by
    // the first entry only.  (Rewriting the host table on each entry was a data race ThreadSanitizer found in
    // tests/core/test_concurrency.cc.)
    static std::once_flag initialized;
    return tessera::support::enter_plugin(host_api, exports, kPlugin, initialized, [&] {
        set_host(host_api);
        register_all_kernels(plugin().registry);
        set_subgraph_registry(&plugin().registry);
    });
}
