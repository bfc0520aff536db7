// The smallest useful out-of-tree provider: "hello", which runs float32 Relu in host memory.  Host memory (the memory
// kind named "cpu") means the core never copies at its boundaries, and copy_to_host/copy_from_host may stay NULL.
// Built against the installed SDK only (Tessera::headers), in C++17 with the SDK's support layer
// (tessera/plugin_support.hpp): the entry function, the exception guard and typed tensor views come from there.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "tessera/plugin_support.hpp"

namespace support = tessera::support;

struct TessProviderInstance {};
struct TessCompiled {};

namespace {

const TessHostApi* g_host = nullptr;
const TessMemoryKind kHostMemory = {sizeof(TessMemoryKind), TESS_HOST_MEMORY_NAME, 1, 0};

template <typename Fn> TessStatus* guarded(Fn&& fn) noexcept { return support::guarded(g_host, "hello", fn); }

TessStatus* create_instance(void*, const TessProviderOptions*, TessProviderInstance** out) {
    return guarded([&] { *out = new TessProviderInstance; });
}
void release_instance(TessProviderInstance* instance) { delete instance; }

TessStatus* get_capability(TessProviderInstance*, const TessGraphView* graph, TessCapabilityContext* context) {
    return guarded([&] {
        for (size_t n = 0; n < graph->node_count; ++n) {
            const TessNodeView* node = graph->nodes[n];
            if (std::strcmp(node->op_type, "Relu") == 0 && node->domain[0] == '\0' && node->input_count == 1 &&
                node->inputs[0] != nullptr && node->inputs[0]->element_type == TESS_ELEMENT_FLOAT32)
                g_host->capability_claim(context, node->index);
            else
                g_host->capability_decline(context, node->index, "hello runs float32 Relu only");
        }
    });
}

// A partition here is a chain of Relu nodes, and Relu(Relu(x)) == Relu(x): nothing to remember.
TessStatus* compile(TessProviderInstance*, const TessGraphView* graph, TessCompiled** out) {
    return guarded([&] {
        if (graph->input_count != 1 || graph->output_count != 1)
            support::fail(TESS_STATUS_NOT_IMPLEMENTED, "hello compiles chains of Relu only");
        *out = new TessCompiled;
    });
}
void release_compiled(TessCompiled* compiled) { delete compiled; }

TessStatus* compute(TessCompiled*, TessComputeContext* context) {
    return guarded([&] {
        const support::TensorView x(g_host, g_host->compute_input(context, 0));
        TessValue* y = nullptr;
        support::throw_if_error(g_host, g_host->compute_allocate_output(context, 0, TESS_ELEMENT_FLOAT32, x.dims(),
                                                                        x.rank(), &y));
        const float* in = x.data<float>();
        float* out = support::TensorView(g_host, y).mutable_data<float>();
        for (size_t i = 0, count = x.element_count(); i < count; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
    });
}

const TessMemoryKind* memory_kind(TessProviderInstance*) { return &kHostMemory; }
TessStatus* allocate(TessProviderInstance*, size_t bytes, size_t alignment, void** out) {
    *out = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    return *out != nullptr ? nullptr : g_host->status_create(TESS_STATUS_OUT_OF_MEMORY, "hello: out of memory");
}
void free_memory(TessProviderInstance*, void* pointer) { std::free(pointer); }

const TessProviderApi kProvider = [] {
    TessProviderApi p{};
    p.struct_size = sizeof p;
    p.name = "hello";
    p.create_instance = create_instance;
    p.release_instance = release_instance;
    p.get_capability = get_capability;
    p.compile = compile;
    p.release_compiled = release_compiled;
    p.compute = compute;
    p.memory_kind = memory_kind;
    p.allocate = allocate;
    p.free = free_memory;
    return p;
}();
const TessProviderApi* const kProviders[] = {&kProvider};

const auto kPlugin = support::PluginDescription::of_providers("hello-relu", "0.1", kProviders);

}  // namespace

extern "C" TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    static std::once_flag once;
    return support::enter_plugin(host, exports, kPlugin, once, [host] { g_host = host; });
}
