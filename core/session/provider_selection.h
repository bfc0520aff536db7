// Which provider instances a session runs on: the ones the caller named (or every loaded provider), in priority
// order, plus the general-purpose fallbacks, each started with the session's options.
#pragma once

#include <vector>

#include "plugins/plugins.h"
#include "session/session.h"

namespace tessera {

// Starts the instances in priority order; `custom_ops` must outlive them (TessProviderOptions::custom_ops).  Not strict: a provider that is missing, unavailable or fails to start is
// logged and left out; strict: that is an error.  Throws when no instance could be started.
std::vector<InstanceRef> start_providers(TessEnv& env, const TessSessionOptions& options,
                                         const std::vector<const TessCustomOpApi*>& custom_ops);

}  // namespace tessera
