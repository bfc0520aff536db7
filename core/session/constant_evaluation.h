// Constant folding asks the session's providers to evaluate a node whose inputs are all constants: the first host
// provider that claims the node compiles it as a one-node partition and runs it once, so folding computes exactly
// what a run would, with no kernels of the core's own.
#pragma once

#include <vector>

#include "common/value.h"
#include "graph/graph.h"
#include "plugins/plugins.h"

namespace tessera {

// The outputs of `graph.nodes[node_index]`, computed by the first host-memory instance (priority order) that claims
// it; empty when none claims it or evaluating fails (logged at debug: the node then stays in the graph).
std::vector<ValuePtr> evaluate_constant_node(const std::vector<InstanceRef>& instances, const Graph& graph,
                                             size_t node_index);

}  // namespace tessera
