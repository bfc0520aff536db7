// `tessera plugins`: the plugin discovery report, as text or JSON.  Skipped plugins are part of the report, not a
// failure: the exit status is 0 whenever the report could be produced.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"

namespace tessera::cli {
namespace {

constexpr const char* kPluginsHelp =
    "Usage: tessera plugins [options]\n"
    "\n"
    "Lists every plugin file discovery found (path, name, version, state: loaded, unavailable or skipped, the\n"
    "reason when it is not loaded, the providers and custom operators it contributes) and the usable providers\n"
    "in priority order.\n"
    "\n"
    "Every plugin is first loaded and unloaded in a child process (tessera-plugin-scanner); one that crashes,\n"
    "aborts, exits or hangs there is skipped, with what happened as the reason.  Verdicts are cached per file in\n"
    "$XDG_CACHE_HOME/tessera (or ~/.cache/tessera) until the file changes.\n"
    "\n"
    "Options:\n"
    "  --json                 print the report as one JSON object\n"
    "  --rescan               probe every plugin again, ignoring cached verdicts (--plugin-probe rescan)\n";

std::string joined(const std::vector<std::string>& items) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
    return out;
}

void print_json(const std::vector<PluginInfo>& plugins, const std::vector<std::string>& providers) {
    std::printf("{\n  \"plugins\": [");
    for (size_t i = 0; i < plugins.size(); ++i) {
        const PluginInfo& p = plugins[i];
        std::printf("%s\n    {\"path\": %s, \"name\": %s, \"version\": %s, \"state\": \"%s\", \"reason\": %s, "
                    "\"abi_version\": %u, \"providers\": %s, \"custom_ops\": %s}",
                    i ? "," : "", json_string(p.path).c_str(), json_string(p.name).c_str(),
                    json_string(p.version).c_str(), p.state_name(), json_string(p.reason).c_str(), p.abi_version,
                    json_list(p.providers).c_str(), json_list(p.custom_ops).c_str());
    }
    std::printf("%s],\n  \"providers\": %s\n}\n", plugins.empty() ? "" : "\n  ", json_list(providers).c_str());
}

void print_text(const std::vector<PluginInfo>& plugins, const std::vector<std::string>& providers) {
    std::printf("plugins: %zu found\n", plugins.size());
    for (const PluginInfo& p : plugins) {
        // A plugin that could not say its name is titled by its file.
        std::string title = p.name.empty() ? std::filesystem::path(p.path).filename().string() : p.name;
        if (!p.version.empty()) title += " " + p.version;
        std::printf("  %-11s %s\n", p.state_name(), title.c_str());
        std::printf("              path: %s\n", p.path.c_str());
        if (!p.providers.empty())
            std::printf("              providers: %s (ABI %u)\n", joined(p.providers).c_str(), p.abi_version);
        if (!p.custom_ops.empty()) {
            // Grouped by domain: "com.microsoft (12): QuickGelu, ...".
            std::vector<std::pair<std::string, std::vector<std::string>>> domains;
            for (const std::string& op : p.custom_ops) {
                const size_t colon = op.rfind(':');
                const std::string domain = colon == std::string::npos ? "" : op.substr(0, colon);
                const std::string name = colon == std::string::npos ? op : op.substr(colon + 1);
                auto it = std::find_if(domains.begin(), domains.end(), [&](const auto& d) { return d.first == domain; });
                if (it == domains.end()) it = domains.insert(domains.end(), {domain, {}});
                it->second.push_back(name);
            }
            for (const auto& [domain, names] : domains)
                std::printf("              operators: %s (%zu): %s\n", domain.empty() ? "(default domain)" : domain.c_str(),
                            names.size(), joined(names).c_str());
        }
        if (!p.reason.empty()) std::printf("              reason: %s\n", p.reason.c_str());
    }
    std::printf("providers (priority order): %s\n", providers.empty() ? "(none)" : joined(providers).c_str());
}

}  // namespace

int plugins_command(Args& args) {
    bool json = false;
    EnvFlags env_flags;
    env_flags.log_level = TESS_LOG_ERROR;  // the report states why a plugin was skipped; no need to warn as well
    while (!args.done()) {
        if (args.flag("-h") || args.flag("--help")) {
            std::fputs(kPluginsHelp, stdout);
            std::fputs(EnvFlags::help(), stdout);
            return 0;
        }
        if (args.flag("--json")) {
            json = true;
        } else if (args.flag("--rescan")) {
            env_flags.plugin_probe = TESS_PLUGIN_PROBE_RESCAN;
        } else if (!env_flags.parse(args)) {
            throw UsageError("unexpected argument '" + args.peek() + "' for 'plugins' (try 'tessera plugins --help')");
        }
    }
    Env env(env_flags.options());
    const std::vector<PluginInfo> plugins = env.plugins();
    const std::vector<std::string> providers = env.providers();
    if (json)
        print_json(plugins, providers);
    else
        print_text(plugins, providers);
    return 0;
}

}  // namespace tessera::cli
