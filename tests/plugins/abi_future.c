/* A plugin that speaks only a future ABI version: it must be skipped with an ABI reason, never loaded. */
#include "tessera/provider.h"
TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
    (void)exports;
    if (host->abi_version_max < 99) return host->status_create(TESS_STATUS_ABI_MISMATCH, "needs plugin ABI 99");
    return NULL;
}
