/* Plugins that misbehave while they are loaded or unloaded, one per MISBEHAVE_* definition (tests/CMakeLists.txt
 * builds this file once for each).  Each would take the host down if it were loaded in process unprobed, except
 * foreign_status, which the host must recognise by itself.  They exist for the plugin isolation tests only and live
 * in their own directory, never in a plugin directory that other tests search. */
#define _POSIX_C_SOURCE 200112L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/provider.h"

static const TessHostApi* g_host;

#if defined(MISBEHAVE_CRASH_ENTRY) || defined(MISBEHAVE_CRASH_CONSTRUCTOR) || defined(MISBEHAVE_CRASH_UNLOAD)
static void crash(void) {
    volatile int* volatile nowhere = NULL; /* volatile: the compiler may not prove it NULL and drop the crash */
    *nowhere = 42; /* SIGSEGV */
}
#endif

#if defined(MISBEHAVE_CRASH_CONSTRUCTOR)
/* Crashes before the entry function is even looked up: in the library's constructor, while it is dlopen()ed. */
__attribute__((constructor)) static void crash_on_load(void) { crash(); }
#endif

/* A minimal host-memory provider, complete enough to be accepted, for the plugins that get that far. */
static TessStatus* create(void* d, const TessProviderOptions* o, TessProviderInstance** out) {
    (void)d; (void)o;
    *out = (TessProviderInstance*)malloc(1);
    return NULL;
}
static void release_instance(TessProviderInstance* i) { free(i); }
static TessStatus* capability(TessProviderInstance* i, const TessGraphView* g, TessCapabilityContext* c) {
    (void)i; (void)g; (void)c;
#if defined(MISBEHAVE_CAPABILITY_ERROR)
    return g_host->status_create(TESS_STATUS_RUNTIME_ERROR, "flaky: the device stopped answering");
#elif defined(MISBEHAVE_COMPILE_ERROR)
    size_t n;
    for (n = 0; n < g->node_count; ++n) g_host->capability_claim(c, g->nodes[n]->index);
    return NULL;
#else
    return NULL;
#endif
}
static TessStatus* compile(TessProviderInstance* i, const TessGraphView* g, TessCompiled** o) {
    (void)i; (void)g; (void)o;
#if defined(MISBEHAVE_COMPILE_ERROR)
    /* Claims every node, then compiles none: the session must give the nodes to the next provider. */
    return g_host->status_create(TESS_STATUS_RUNTIME_ERROR, "refusing: the compiler is out of licences");
#else
    return g_host->status_create(TESS_STATUS_INTERNAL, "never called: nothing is claimed");
#endif
}
static void release_compiled(TessCompiled* c) { (void)c; }
static TessStatus* compute(TessCompiled* c, TessComputeContext* x) {
    (void)c; (void)x;
    return g_host->status_create(TESS_STATUS_INTERNAL, "never called: nothing is claimed");
}
static const TessMemoryKind g_memory = {sizeof(TessMemoryKind), TESS_HOST_MEMORY_NAME, 1, 0};
static const TessMemoryKind* memory_kind(TessProviderInstance* i) { (void)i; return &g_memory; }
static TessStatus* allocate(TessProviderInstance* i, size_t bytes, size_t alignment, void** out) {
    (void)i;
    if (posix_memalign(out, alignment, bytes) != 0) return g_host->status_create(TESS_STATUS_OUT_OF_MEMORY, "oom");
    return NULL;
}
static void release_memory(TessProviderInstance* i, void* p) { (void)i; free(p); }
static void shutdown_hook(void) {
#if defined(MISBEHAVE_CRASH_UNLOAD)
    crash();
#endif
}

static TessProviderApi g_api;
static const TessProviderApi* g_list[1];
#if defined(MISBEHAVE_FOREIGN_STATUS)
/* Not a status the host made: freeing it would end in "free(): invalid pointer". */
static char g_not_a_status[64] = "this is not a TessStatus";
#endif

TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    g_host = host;
#if defined(MISBEHAVE_CRASH_ENTRY)
    crash();
#elif defined(MISBEHAVE_ABORT_ENTRY)
    abort();
#elif defined(MISBEHAVE_EXIT_ENTRY)
    exit(0);
#elif defined(MISBEHAVE_HANG_ENTRY)
    for (;;) sleep(1);
#elif defined(MISBEHAVE_FOREIGN_STATUS)
    return (TessStatus*)(void*)g_not_a_status;
#endif
    memset(&g_api, 0, sizeof g_api);
    g_api.struct_size = sizeof g_api;
#if defined(MISBEHAVE_CAPABILITY_ERROR)
    g_api.name = "flaky";
    exports->name = "test-flaky";
#elif defined(MISBEHAVE_COMPILE_ERROR)
    g_api.name = "refusing";
    exports->name = "test-refusing";
#else
    g_api.name = "misbehaving";
    exports->name = "test-misbehaving";
#endif
    g_api.create_instance = create;
    g_api.release_instance = release_instance;
    g_api.get_capability = capability;
    g_api.compile = compile;
    g_api.release_compiled = release_compiled;
    g_api.compute = compute;
    g_api.memory_kind = memory_kind;
    g_api.allocate = allocate;
    g_api.free = release_memory;
    g_list[0] = &g_api;
    exports->abi_version = 1;
    exports->version = "0.0";
    exports->provider_count = 1;
    exports->providers = g_list;
    exports->shutdown = shutdown_hook;
    return NULL;
}
