// The session's plan: the graph partitioned over the provider instances and each group compiled once, with every
// weight the providers copied (prepacked) freed, so that it is held once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/executor.h"
#include "exec/profiler.h"
#include "graph/graph.h"
#include "plugins/plugins.h"

namespace tessera {

struct CompiledGraph {
    std::unique_ptr<Executor> executor;
    int64_t partition_end_ns = 0;  // when the last partitioning ended (Profiler::now_ns): compiling starts there
};

// Partitions `graph` over `instances` (priority order) and compiles each group.  A provider that fails to compile a
// group gives those nodes up to the next provider and the graph is partitioned again, unless `strict`, where the
// failure is the error.  Every retry takes nodes away from a provider for good, so the retries end: at the latest
// when a node is left to no provider, which fails naming each provider's compile error.  Frees the constants every
// reader copied from `graph.initializers`.  Records the partition phases in `profiler` (may be NULL).
CompiledGraph compile_graph(Graph& graph, const std::vector<InstanceRef>& instances, bool strict, Profiler* profiler);

}  // namespace tessera
