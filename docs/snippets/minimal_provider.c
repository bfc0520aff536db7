/* docs/plugins.md, "A provider in one file": the provider "docs_abs" runs float32 Abs in host memory.
 * Compiled, loaded and run by tests/docs (test_docs.sh); the regions between snippet markers are quoted in the doc. */
/* [snippet:state] */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/provider.h"

static const TessHostApi* host; /* lives as long as the plugin is loaded */

/* Host memory: the name "cpu" tells the core that no copy is needed to hand tensors to other host providers. */
static const TessMemoryKind memory = {sizeof(TessMemoryKind), TESS_HOST_MEMORY_NAME, 1, 0};

/* The opaque handles of the ABI are the provider's own structs. */
struct TessProviderInstance { int32_t threads; };     /* per session */
struct TessCompiled { size_t node_count; };           /* per fused subgraph */
/* [end:state] */

/* [snippet:instance] */
static TessStatus* create_instance(void* provider_data, const TessProviderOptions* options,
                                   TessProviderInstance** out) {
    TessProviderInstance* instance = (TessProviderInstance*)calloc(1, sizeof *instance);
    (void)provider_data;
    if (instance == NULL) return host->status_create(TESS_STATUS_OUT_OF_MEMORY, "docs_abs: out of memory");
    instance->threads = options->intra_op_threads; /* the most host threads this session may use */
    *out = instance;
    return NULL;
}

static void release_instance(TessProviderInstance* instance) { free(instance); }
/* [end:instance] */

/* [snippet:capability] */
static TessStatus* get_capability(TessProviderInstance* instance, const TessGraphView* graph,
                                  TessCapabilityContext* context) {
    size_t n;
    (void)instance;
    for (n = 0; n < graph->node_count; ++n) {
        const TessNodeView* node = graph->nodes[n];
        int is_abs = strcmp(node->op_type, "Abs") == 0 && node->domain[0] == '\0';
        if (is_abs && node->input_count == 1 && node->inputs[0] != NULL &&
            node->inputs[0]->element_type == TESS_ELEMENT_FLOAT32)
            host->capability_claim(context, node->index);
        else /* the reason is what the user sees when no provider takes the node */
            host->capability_decline(context, node->index, is_abs ? "docs_abs runs float32 only"
                                                                  : "docs_abs runs Abs only");
    }
    return NULL;
}
/* [end:capability] */

/* [snippet:compile] */
/* The view (and every pointer in it) is valid only during this call: copy what you keep. */
static TessStatus* compile(TessProviderInstance* instance, const TessGraphView* graph, TessCompiled** out) {
    TessCompiled* compiled;
    (void)instance;
    /* Claimed Abs nodes that touch fuse into one partition: a chain (Abs is idempotent, so once is enough). */
    if (graph->input_count != 1 || graph->output_count != 1)
        return host->status_create(TESS_STATUS_NOT_IMPLEMENTED, "docs_abs compiles chains of Abs only");
    compiled = (TessCompiled*)calloc(1, sizeof *compiled);
    if (compiled == NULL) return host->status_create(TESS_STATUS_OUT_OF_MEMORY, "docs_abs: out of memory");
    compiled->node_count = graph->node_count;
    *out = compiled;
    return NULL;
}

static void release_compiled(TessCompiled* compiled) { free(compiled); }
/* [end:compile] */

/* [snippet:compute] */
/* May run on several threads at once for one compiled object: keep per-call state on the stack. */
static TessStatus* compute(TessCompiled* compiled, TessComputeContext* context) {
    const TessValue* x = host->compute_input(context, 0);
    TessValue* y = NULL;
    size_t i, count = host->tensor_element_count(x);
    const float* in;
    float* out;
    TessStatus* status;
    (void)compiled;
    /* The output is allocated with this provider's allocator, in its memory kind, and owned by the core. */
    status = host->compute_allocate_output(context, 0, TESS_ELEMENT_FLOAT32, host->tensor_dims(x),
                                           host->tensor_rank(x), &y);
    if (status != NULL) return status;
    in = (const float*)host->tensor_const_data(x);
    out = (float*)host->tensor_data(y);
    for (i = 0; i < count; ++i) out[i] = fabsf(in[i]);
    return NULL;
}
/* [end:compute] */

/* [snippet:memory] */
static const TessMemoryKind* memory_kind(TessProviderInstance* instance) { (void)instance; return &memory; }

/* Thread-safe; alignment is a power of two >= 64. */
static TessStatus* allocate(TessProviderInstance* instance, size_t bytes, size_t alignment, void** out) {
    (void)instance;
    *out = aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    return *out != NULL ? NULL : host->status_create(TESS_STATUS_OUT_OF_MEMORY, "docs_abs: out of memory");
}

/* May be called after the session is gone: a value the provider allocated keeps its instance alive. */
static void free_memory(TessProviderInstance* instance, void* pointer) { (void)instance; free(pointer); }
/* [end:memory] */

/* [snippet:entry] */
static TessProviderApi provider;
static const TessProviderApi* providers[1];

TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host_api, TessPluginExports* exports) {
    /* ABI negotiation: this plugin speaks version 1 only; the core offers [abi_version_min, abi_version_max]. */
    if (host_api->abi_version_min > 1 || host_api->abi_version_max < 1)
        return host_api->status_create(TESS_STATUS_ABI_MISMATCH, "docs_abs speaks plugin ABI 1");
    /* Each environment that loads the plugin calls this, maybe while sessions of another one run the provider
     * (never two calls at once): the global tables are filled in by the first call only. */
    if (host == NULL) {
        host = host_api;
        memset(&provider, 0, sizeof provider);
        provider.struct_size = sizeof provider; /* the core reads only the fields this size covers */
        provider.name = "docs_abs";
        provider.create_instance = create_instance;
        provider.release_instance = release_instance;
        provider.get_capability = get_capability;
        provider.compile = compile;
        provider.release_compiled = release_compiled;
        provider.compute = compute;
        provider.memory_kind = memory_kind;
        provider.allocate = allocate;
        provider.free = free_memory;
        /* copy_to_host / copy_from_host stay NULL: host memory needs no transfer. */
        providers[0] = &provider;
    }
    exports->abi_version = 1;
    exports->name = "docs-abs";
    exports->version = "1.0";
    exports->provider_count = 1;
    exports->providers = providers;
    return NULL;
}
/* [end:entry] */
