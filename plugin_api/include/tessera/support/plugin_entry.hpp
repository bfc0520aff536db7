/*
 * Tessera plugin support (header-only C++17, installed with the SDK): the entry function's work.
 *
 * Every plugin's tess_plugin_entry does the same things: check the host table, pick the ABI version both sides speak
 * (or refuse with ABI_MISMATCH), initialize its global state once, and fill the exports table without writing past
 * the size the core allocated.  `enter_plugin` does them all:
 *
 *   extern "C" TESS_EXPORT TessStatus* tess_plugin_entry(const TessHostApi* host, TessPluginExports* exports) {
 *       static std::once_flag once;
 *       return tessera::support::enter_plugin(host, exports, kDescription, once, [&] { g_host = host; });
 *   }
 *
 * The core makes one entry call per environment that loads the file, and a later one may come while sessions of
 * another environment run the plugin (provider.h); `init` therefore runs under `once`, on the first call only.
 * `plugin` is read after `init`, so `init` may complete it (a table of operators built at load time).
 */
#ifndef TESSERA_SUPPORT_PLUGIN_ENTRY_HPP_
#define TESSERA_SUPPORT_PLUGIN_ENTRY_HPP_

#include <cstdint>
#include <mutex>
#include <string>

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#endif

#include "tessera/custom_op.h"
#include "tessera/support/status.hpp"

namespace tessera::support {

/* What a plugin exports; every pointer static, or owned by the plugin until it is unloaded. */
struct PluginDescription {
    const char* name = nullptr;     // e.g. "tessera-sample"
    const char* version = nullptr;  // the plugin's own version, e.g. "1.0"
    const TessProviderApi* const* providers = nullptr;
    size_t provider_count = 0;
    const TessCustomOpApi* const* custom_ops = nullptr;
    size_t custom_op_count = 0;
    void (*shutdown)(void) = nullptr;
    uint32_t abi_version_min = TESS_PLUGIN_ABI_VERSION_MIN;  // the range this plugin speaks
    uint32_t abi_version_max = TESS_PLUGIN_ABI_VERSION_MAX;

    /* A plugin of execution providers, or of custom operators, speaking this header's ABI range. */
    template <size_t N>
    static PluginDescription of_providers(const char* name, const char* version,
                                          const TessProviderApi* const (&providers)[N]) {
        PluginDescription d;
        d.name = name;
        d.version = version;
        d.providers = providers;
        d.provider_count = N;
        return d;
    }
    template <size_t N>
    static PluginDescription of_custom_ops(const char* name, const char* version,
                                           const TessCustomOpApi* const (&ops)[N]) {
        PluginDescription d;
        d.name = name;
        d.version = version;
        d.custom_ops = ops;
        d.custom_op_count = N;
        return d;
    }
};

/* The highest ABI version inside both ranges, or 0 when they do not meet. */
constexpr uint32_t negotiate_abi_version(uint32_t core_min, uint32_t core_max, uint32_t plugin_min,
                                         uint32_t plugin_max) noexcept {
    const uint32_t low = core_min > plugin_min ? core_min : plugin_min;
    const uint32_t high = core_max < plugin_max ? core_max : plugin_max;
    return low <= high ? high : 0;
}

/* The body of tess_plugin_entry (see above).  Returns NULL after filling `exports`, or an ABI_MISMATCH status when the
 * versions do not meet or the core's exports table lacks room for custom operators the plugin adds, or the status of
 * an exception `init` threw (as guarded makes it).  A NULL host or exports table gets NULL: there is nothing to
 * report through. */
template <typename Init>
TessStatus* enter_plugin(const TessHostApi* host, TessPluginExports* exports, const PluginDescription& plugin,
                         std::once_flag& once, Init&& init) noexcept {
    if (host == nullptr || exports == nullptr || !TESS_HAS_FIELD(host, TessHostApi, status_release)) return nullptr;
    const uint32_t version = negotiate_abi_version(host->abi_version_min, host->abi_version_max,
                                                   plugin.abi_version_min, plugin.abi_version_max);
    if (version == 0) {
        return guarded(host, plugin.name, [&]() -> TessStatus* {
            const std::string message = std::string(plugin.name) + " speaks plugin ABI " +
                                        std::to_string(plugin.abi_version_min) + ".." +
                                        std::to_string(plugin.abi_version_max) + "; the core speaks " +
                                        std::to_string(host->abi_version_min) + ".." +
                                        std::to_string(host->abi_version_max);
            return host->status_create(TESS_STATUS_ABI_MISMATCH, message.c_str());
        });
    }
    if (TessStatus* failed = guarded(host, plugin.name, [&] { std::call_once(once, init); })) return failed;
    if (plugin.custom_op_count > 0 && !TESS_HAS_FIELD(exports, TessPluginExports, custom_ops)) {
        return make_status(host, TESS_STATUS_ABI_MISMATCH, plugin.name,
                           "the core's exports table has no room for custom operators");
    }
    // Only the fields that fit in what the core allocated (struct_size-first rule).
    if (TESS_HAS_FIELD(exports, TessPluginExports, abi_version)) exports->abi_version = version;
    if (TESS_HAS_FIELD(exports, TessPluginExports, name)) exports->name = plugin.name;
    if (TESS_HAS_FIELD(exports, TessPluginExports, version)) exports->version = plugin.version;
    if (TESS_HAS_FIELD(exports, TessPluginExports, providers)) {
        exports->provider_count = plugin.provider_count;
        exports->providers = plugin.providers;
    }
    if (TESS_HAS_FIELD(exports, TessPluginExports, shutdown)) exports->shutdown = plugin.shutdown;
    if (TESS_HAS_FIELD(exports, TessPluginExports, custom_ops)) {
        exports->custom_op_count = plugin.custom_op_count;
        exports->custom_ops = plugin.custom_ops;
    }
    return nullptr;
}

#if defined(__unix__) || defined(__APPLE__)
/* The directory of the shared library holding `address` (a function of the plugin itself): where a plugin finds
 * libraries it opens later from a folder of its own (the CUDA provider's implementation, the image provider's
 * codecs).  "." when the loader cannot tell. */
inline std::string library_directory(const void* address) {
    Dl_info info{};
    if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return ".";
    const std::string path = info.dli_fname;
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}
#endif

}  // namespace tessera::support

#endif  // TESSERA_SUPPORT_PLUGIN_ENTRY_HPP_
