#include "session/constant_evaluation.h"

#include <fmt/format.h>

#include "common/log.h"
#include "common/status.h"
#include "exec/executor.h"
#include "graph/graph_view.h"
#include "plugins/contexts.h"

namespace tessera {

namespace {

// Whether `instance` claims the one node `view` offers; a provider that cannot answer claims nothing.
bool claims(ProviderInstance& instance, const Graph& graph, const TessGraphView* view, size_t node_index) {
    TessCapabilityContext capability;
    capability.offered.assign(graph.nodes.size(), false);
    capability.offered[node_index] = true;
    TessStatus* status = instance.api().get_capability(instance.handle(), view, &capability);
    if (status != nullptr) {
        release_status(adopt_plugin_status(status, "a capability query"));
        return false;
    }
    return !capability.claimed.empty();
}

}  // namespace

std::vector<ValuePtr> evaluate_constant_node(const std::vector<InstanceRef>& instances, const Graph& graph,
                                             size_t node_index) {
    for (const auto& instance : instances) {
        if (!instance->is_host_memory()) continue;
        try {
            GraphViewBuilder builder(graph);
            std::vector<std::string> outputs(graph.nodes[node_index].outputs);
            const TessGraphView* view = builder.build({node_index}, &outputs);
            if (!claims(*instance.get(), graph, view, node_index)) continue;
            CompiledPartition part;  // released (release_compiled) when it goes out of scope
            part.instance = instance.get();
            throw_if_error(instance->compile(view, &part.compiled));
            std::vector<ValuePtr> results(outputs.size());
            TessComputeContext ctx;
            ctx.outputs = &results;
            ctx.instance = instance.get();
            throw_if_error(instance->api().compute(part.compiled, &ctx));
            for (size_t i = 0; i < outputs.size(); ++i)
                if (!outputs[i].empty() && !results[i]) return {};
            return results;
        } catch (const Error& e) {
            log_message(TESS_LOG_DEBUG, "optimizer",
                        fmt::format("not folding {}: {}", graph.nodes[node_index].label(), e.what()));
            return {};
        }
    }
    return {};
}

}  // namespace tessera
