/* The smallest useful out-of-tree provider: "hello", which runs float32 Relu in host memory.  Host memory (the
 * memory kind named "cpu") means the core never copies at its boundaries, and copy_to_host/copy_from_host may stay
 * NULL.  Built against the installed headers only (Tessera::headers). */
#include <stdlib.h>
#include <string.h>

#include "tessera/provider.h"

static const TessHostApi* host;
static const TessMemoryKind host_memory = {sizeof(TessMemoryKind), TESS_HOST_MEMORY_NAME, 1, 0};
struct TessProviderInstance { int unused; };
struct TessCompiled { int unused; };

static TessStatus* create_instance(void* data, const TessProviderOptions* options, TessProviderInstance** out) {
    (void)data; (void)options;
    *out = (TessProviderInstance*)calloc(1, sizeof(TessProviderInstance));
    return *out ? NULL : host->status_create(TESS_STATUS_OUT_OF_MEMORY, "hello: out of memory");
}
static void release_instance(TessProviderInstance* instance) { free(instance); }

static TessStatus* get_capability(TessProviderInstance* instance, const TessGraphView* graph,
                                  TessCapabilityContext* context) {
    size_t n;
    (void)instance;
    for (n = 0; n < graph->node_count; ++n) {
        const TessNodeView* node = graph->nodes[n];
        if (strcmp(node->op_type, "Relu") == 0 && node->domain[0] == '\0' && node->input_count == 1 &&
            node->inputs[0] != NULL && node->inputs[0]->element_type == TESS_ELEMENT_FLOAT32)
            host->capability_claim(context, node->index);
        else
            host->capability_decline(context, node->index, "hello runs float32 Relu only");
    }
    return NULL;
}

/* A partition here is a chain of Relu nodes, and Relu(Relu(x)) == Relu(x): nothing to remember. */
static TessStatus* compile(TessProviderInstance* instance, const TessGraphView* graph, TessCompiled** out) {
    (void)instance;
    if (graph->input_count != 1 || graph->output_count != 1)
        return host->status_create(TESS_STATUS_NOT_IMPLEMENTED, "hello compiles chains of Relu only");
    *out = (TessCompiled*)calloc(1, sizeof(TessCompiled));
    return *out ? NULL : host->status_create(TESS_STATUS_OUT_OF_MEMORY, "hello: out of memory");
}
static void release_compiled(TessCompiled* compiled) { free(compiled); }

static TessStatus* compute(TessCompiled* compiled, TessComputeContext* context) {
    const TessValue* x = host->compute_input(context, 0);
    TessValue* y = NULL;
    TessStatus* status;
    const float* in;
    float* out;
    size_t i, count = host->tensor_element_count(x);
    (void)compiled;
    status = host->compute_allocate_output(context, 0, TESS_ELEMENT_FLOAT32, host->tensor_dims(x),
                                           host->tensor_rank(x), &y);
    if (status != NULL) return status;
    in = (const float*)host->tensor_const_data(x);
    out = (float*)host->tensor_data(y);
    for (i = 0; i < count; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
    return NULL;
}

static const TessMemoryKind* memory_kind(TessProviderInstance* instance) { (void)instance; return &host_memory; }
static TessStatus* allocate(TessProviderInstance* instance, size_t bytes, size_t alignment, void** out) {
    (void)instance;
    *out = aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    return *out ? NULL : host->status_create(TESS_STATUS_OUT_OF_MEMORY, "hello: out of memory");
}
static void free_memory(TessProviderInstance* instance, void* pointer) { (void)instance; free(pointer); }

static TessProviderApi provider;
static const TessProviderApi* providers[1];

TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host_api, TessPluginExports* exports) {
    host = host_api;
    if (host_api->abi_version_min > 1 || host_api->abi_version_max < 1)
        return host_api->status_create(TESS_STATUS_ABI_MISMATCH, "hello speaks plugin ABI 1");
    memset(&provider, 0, sizeof provider);
    provider.struct_size = sizeof provider;
    provider.name = "hello";
    provider.create_instance = create_instance;
    provider.release_instance = release_instance;
    provider.get_capability = get_capability;
    provider.compile = compile;
    provider.release_compiled = release_compiled;
    provider.compute = compute;
    provider.memory_kind = memory_kind;
    provider.allocate = allocate;
    provider.free = free_memory;
    providers[0] = &provider;
    exports->abi_version = 1;
    exports->name = "hello-relu";
    exports->version = "0.1";
    exports->provider_count = 1;
    exports->providers = providers;
    return NULL;
}
