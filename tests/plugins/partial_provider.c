/* A test provider written in plain C against the public headers only.  It claims float32 Relu and Add (without
 * broadcasting) and keeps its tensors in its own memory kind, so the core must copy at every boundary.  It exists to
 * give the partitioner tests plans with several partitions and copies. */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/provider.h"

static const TessHostApi* g_host;
static const TessMemoryKind g_memory = {sizeof(TessMemoryKind), "partial", 1, 0};

struct TessProviderInstance { int unused; };

static int claims(const TessNodeView* node) {
    if (node->domain[0] != '\0') return 0;
    int relu = strcmp(node->op_type, "Relu") == 0, add = strcmp(node->op_type, "Add") == 0;
    if (!relu && !add) return 0;
    for (size_t i = 0; i < node->input_count; ++i) {
        if (node->inputs[i] == NULL || node->inputs[i]->element_type != TESS_ELEMENT_FLOAT32) return 0;
        if (node->inputs[i]->constant != NULL) return 0;
    }
    return 1;
}

static TessStatus* create_instance(void* data, const TessProviderOptions* options, TessProviderInstance** out) {
    (void)data; (void)options;
    *out = (TessProviderInstance*)calloc(1, sizeof(TessProviderInstance));
    return NULL;
}
static void release_instance(TessProviderInstance* instance) { free(instance); }

static TessStatus* get_capability(TessProviderInstance* instance, const TessGraphView* graph,
                                  TessCapabilityContext* ctx) {
    (void)instance;
    for (size_t n = 0; n < graph->node_count; ++n) {
        if (claims(graph->nodes[n])) g_host->capability_claim(ctx, graph->nodes[n]->index);
        else g_host->capability_decline(ctx, graph->nodes[n]->index, "partial runs only float32 Relu and Add");
    }
    return NULL;
}

/* Only single-node partitions or chains are compiled; a partition with several nodes is evaluated node by node on
 * temporary buffers, which keeps this test provider tiny. */
struct Step { int is_add; int in0, in1, out; }; /* indices: >= 0 partition input, < 0 -(k+1) = step k output */
struct Compiled { size_t steps; struct Step* step; size_t outputs; int* output_step; };

static int find_input(const TessGraphView* g, const char* name) {
    for (size_t i = 0; i < g->input_count; ++i) if (strcmp(g->inputs[i]->name, name) == 0) return (int)i;
    return -1;
}

static TessStatus* compile(TessProviderInstance* instance, const TessGraphView* g, TessCompiled** out) {
    (void)instance;
    struct Compiled* c = (struct Compiled*)calloc(1, sizeof(struct Compiled));
    c->steps = g->node_count;
    c->step = (struct Step*)calloc(g->node_count, sizeof(struct Step));
    for (size_t n = 0; n < g->node_count; ++n) {
        const TessNodeView* node = g->nodes[n];
        struct Step* s = &c->step[n];
        s->is_add = strcmp(node->op_type, "Add") == 0;
        for (size_t i = 0; i < node->input_count && i < 2; ++i) {
            int idx = find_input(g, node->inputs[i]->name);
            if (idx < 0) {
                for (size_t k = 0; k < n; ++k)
                    if (strcmp(g->nodes[k]->outputs[0]->name, node->inputs[i]->name) == 0) idx = -(int)k - 1;
            }
            if (i == 0) s->in0 = idx; else s->in1 = idx;
        }
    }
    c->outputs = g->output_count;
    c->output_step = (int*)calloc(g->output_count + 1, sizeof(int));
    for (size_t o = 0; o < g->output_count; ++o)
        for (size_t k = 0; k < g->node_count; ++k)
            if (strcmp(g->nodes[k]->outputs[0]->name, g->outputs[o]->name) == 0) c->output_step[o] = (int)k;
    *out = (TessCompiled*)c;
    return NULL;
}

static void release_compiled(TessCompiled* compiled) {
    struct Compiled* c = (struct Compiled*)compiled;
    free(c->step);
    free(c->output_step);
    free(c);
}

#if defined(PARTIAL_ONE_SIZE_ONLY)
/* The "sized" build: a kernel that computes only the first 60 elements (the size of the onnx Relu case), as a provider
 * that specialized on the shapes it first saw would; the rest stays 0. */
static const size_t kComputed = 60;
#else
static const size_t kComputed = (size_t)-1;
#endif

static TessStatus* compute(TessCompiled* compiled, TessComputeContext* ctx) {
    struct Compiled* c = (struct Compiled*)compiled;
    float** results = (float**)calloc(c->steps, sizeof(float*));
    size_t count = 0;
    const int64_t* dims = NULL;
    size_t rank = 0;
    for (size_t n = 0; n < c->steps; ++n) {
        struct Step* s = &c->step[n];
        const float* a;
        const float* b = NULL;
        if (s->in0 >= 0) {
            const TessValue* v = g_host->compute_input(ctx, (size_t)s->in0);
            a = (const float*)g_host->tensor_const_data(v);
            count = g_host->tensor_element_count(v);
            dims = g_host->tensor_dims(v);
            rank = g_host->tensor_rank(v);
        } else {
            a = results[-s->in0 - 1];
        }
        if (s->is_add) {
            b = s->in1 >= 0 ? (const float*)g_host->tensor_const_data(g_host->compute_input(ctx, (size_t)s->in1))
                            : results[-s->in1 - 1];
        }
        results[n] = (float*)calloc(count + 1, sizeof(float));
        for (size_t i = 0; i < count && i < kComputed; ++i)
            results[n][i] = s->is_add ? a[i] + b[i] : (a[i] > 0.0f ? a[i] : 0.0f);
    }
    TessStatus* status = NULL;
    for (size_t o = 0; o < c->outputs && status == NULL; ++o) {
        TessValue* out = NULL;
        status = g_host->compute_allocate_output(ctx, o, TESS_ELEMENT_FLOAT32, dims, rank, &out);
        if (status == NULL) memcpy(g_host->tensor_data(out), results[c->output_step[o]], count * sizeof(float));
    }
    for (size_t n = 0; n < c->steps; ++n) free(results[n]);
    free(results);
    return status;
}

static const TessMemoryKind* memory_kind(TessProviderInstance* instance) { (void)instance; return &g_memory; }
static TessStatus* allocate(TessProviderInstance* instance, size_t bytes, size_t alignment, void** out) {
    (void)instance;
    if (posix_memalign(out, alignment, bytes) != 0) *out = NULL;
    return *out ? NULL : g_host->status_create(TESS_STATUS_OUT_OF_MEMORY, "partial: out of memory");
}
static void free_memory(TessProviderInstance* instance, void* p) { (void)instance; free(p); }
static TessStatus* copy_to_host(TessProviderInstance* i, void* dst, const void* src, size_t n) {
    (void)i; memcpy(dst, src, n); return NULL;
}
static TessStatus* copy_from_host(TessProviderInstance* i, void* dst, const void* src, size_t n) {
    (void)i; memcpy(dst, src, n); return NULL;
}

/* Leaves a mark when the core shuts the plugin down (the test names the file in TESSERA_TEST_SHUTDOWN_FILE). */
static void shutdown(void) {
    const char* path = getenv("TESSERA_TEST_SHUTDOWN_FILE");
    if (path != NULL) {
        FILE* f = fopen(path, "w");
        if (f != NULL) {
            fputs("shutdown\n", f);
            fclose(f);
        }
    }
}

static TessProviderApi g_provider;
static const TessProviderApi* g_providers[1];

TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    g_host = host;
    if (host->abi_version_min > 1 || host->abi_version_max < 1)
        return host->status_create(TESS_STATUS_ABI_MISMATCH, "partial speaks ABI 1");
    memset(&g_provider, 0, sizeof g_provider);
    g_provider.struct_size = sizeof g_provider;
#if defined(PARTIAL_ONE_SIZE_ONLY)
    g_provider.name = "sized";
#else
    g_provider.name = "partial";
#endif
    g_provider.create_instance = create_instance;
    g_provider.release_instance = release_instance;
    g_provider.get_capability = get_capability;
    g_provider.compile = compile;
    g_provider.release_compiled = release_compiled;
    g_provider.compute = compute;
    g_provider.memory_kind = memory_kind;
    g_provider.allocate = allocate;
    g_provider.free = free_memory;
    g_provider.copy_to_host = copy_to_host;
    g_provider.copy_from_host = copy_from_host;
    g_providers[0] = &g_provider;
    exports->abi_version = 1;
#if defined(PARTIAL_ONE_SIZE_ONLY)
    exports->name = "test-sized";
#else
    exports->name = "test-partial";
#endif
    exports->version = "1.0";
    exports->provider_count = 1;
    exports->providers = g_providers;
    /* An older core's exports table may end before `shutdown`. */
    if (TESS_HAS_FIELD(exports, TessPluginExports, shutdown)) exports->shutdown = shutdown;
    return NULL;
}
