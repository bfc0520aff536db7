/* A provider whose device is absent: it loads, but reports itself unavailable with the reason. */
#include <string.h>
#include "tessera/provider.h"
static const TessHostApi* g_host;
static TessProviderApi g_api;
static const TessProviderApi* g_list[1];
static TessStatus* check(void* d) { (void)d; return g_host->status_create(TESS_STATUS_UNAVAILABLE, "no test device present"); }
static TessStatus* never(void) { return g_host->status_create(TESS_STATUS_INTERNAL, "must not be called"); }
static TessStatus* create(void* d, const TessProviderOptions* o, TessProviderInstance** out) { (void)d; (void)o; (void)out; return never(); }
static TessStatus* cap(TessProviderInstance* i, const TessGraphView* g, TessCapabilityContext* c) { (void)i; (void)g; (void)c; return never(); }
static TessStatus* comp(TessProviderInstance* i, const TessGraphView* g, TessCompiled** o) { (void)i; (void)g; (void)o; return never(); }
static void drop(TessCompiled* c) { (void)c; }
static TessStatus* run(TessCompiled* c, TessComputeContext* x) { (void)c; (void)x; return never(); }
static TessStatus* alloc(TessProviderInstance* i, size_t b, size_t a, void** o) { (void)i; (void)b; (void)a; (void)o; return never(); }
static void release(TessProviderInstance* i, void* p) { (void)i; (void)p; }
TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    g_host = host;
    memset(&g_api, 0, sizeof g_api);
    g_api.struct_size = sizeof g_api;
    g_api.name = "ghost";
    g_api.check_available = check;
    g_api.create_instance = create;
    g_api.get_capability = cap;
    g_api.compile = comp;
    g_api.release_compiled = drop;
    g_api.compute = run;
    g_api.allocate = alloc;
    g_api.free = release;
    g_list[0] = &g_api;
    exports->abi_version = 1;
    exports->name = "test-ghost";
    exports->version = "0.0";
    exports->provider_count = 1;
    exports->providers = g_list;
    return NULL;
}
