#include "session/provider_selection.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "common/status.h"

namespace tessera {

namespace {

// The providers asked for, deduplicated, in priority order.
std::vector<std::shared_ptr<const Provider>> chosen_providers(TessEnv& env, const TessSessionOptions& options) {
    std::vector<std::shared_ptr<const Provider>> chosen;
    auto add = [&](std::shared_ptr<const Provider> p) {
        for (const auto& c : chosen)
            if (c->name == p->name) return;
        chosen.push_back(std::move(p));
    };
    if (options.providers.empty()) {
        for (auto& p : env.plugins.providers()) add(p);
        return chosen;
    }
    for (const auto& name : options.providers) {
        auto provider = env.plugins.find(name);
        std::string problem;
        if (!provider) problem = fmt::format("provider '{}' is not loaded", name);
        else if (!provider->available)
            problem = fmt::format("provider '{}' is unavailable: {}", name, provider->unavailable_reason);
        if (problem.empty()) {
            add(provider);
            continue;
        }
        if (options.strict) fail(TESS_STATUS_UNAVAILABLE, "{} (strict mode)", problem);
        log_message(TESS_LOG_WARNING, "session", problem + "; falling back");
    }
    if (!options.strict) {
        // The general-purpose fallbacks run whatever the listed providers leave.
        for (auto& p : env.plugins.providers())
            if (TESS_HAS_FIELD(p->api, TessProviderApi, is_fallback) && p->api->is_fallback) add(p);
    }
    return chosen;
}

}  // namespace

std::vector<InstanceRef> start_providers(TessEnv& env, const TessSessionOptions& options,
                                         const std::vector<const TessCustomOpApi*>& custom_ops) {
    std::vector<std::shared_ptr<const Provider>> chosen = chosen_providers(env, options);
    if (chosen.empty()) fail(TESS_STATUS_UNAVAILABLE, "no execution provider is available (is the plugin directory "
                                                     "next to libtessera, or TESSERA_PLUGIN_PATH set?)");
    TessProviderOptions provider_options{};
    provider_options.struct_size = sizeof(provider_options);
    int threads = options.intra_op_threads;
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    provider_options.intra_op_threads = threads;
    provider_options.custom_op_count = custom_ops.size();
    provider_options.custom_ops = custom_ops.data();  // the caller keeps the list alive as long as the instances
    provider_options.memory_limit_bytes = options.memory_limit_bytes;
    std::vector<InstanceRef> instances;
    for (auto& provider : chosen) {
        try {
            instances.emplace_back(ProviderInstance::create(provider, provider_options));
        } catch (const Error& e) {
            if (options.strict) throw;
            log_message(TESS_LOG_WARNING, "session", e.what());
        }
    }
    if (instances.empty()) fail(TESS_STATUS_UNAVAILABLE, "no execution provider could be started");
    return instances;
}

}  // namespace tessera
