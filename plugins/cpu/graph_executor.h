// CPU provider: a compiled fused subgraph.  Kernels are created once (attributes parsed, weights prepacked); each
// run executes them in topological order.  Intermediate tensors live in one arena laid out by a liveness-based
// plan, recorded on the first run for each set of input shapes, so steady-state runs allocate nothing.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernel.h"

namespace tessera::cpu {

struct MemoryPlan;
struct Workspace;

class CompiledGraph {
public:
    CompiledGraph(const TessGraphView& view, const KernelRegistry& registry, ThreadPool& pool);
    ~CompiledGraph();

    void run(TessComputeContext* context) const;

private:
    friend class StepContext;

    struct ValueInfo {
        std::string name;
        int producer = -1;          // step index; -1 for graph inputs and constants
        int last_use = -1;          // last step reading it
        int graph_input = -1;       // index among the partition's inputs
        int graph_output = -1;      // index among the partition's outputs
        TessValue* constant = nullptr;  // our own copy (host value)
    };
    struct Step {
        std::unique_ptr<Kernel> kernel;
        KernelMemory memory = KernelMemory::Normal;
        std::vector<int> inputs;   // value ids; -1 for omitted
        std::vector<int> outputs;  // value ids; -1 for omitted
        std::string label;
    };

    std::unique_ptr<Workspace> acquire() const;
    void release(std::unique_ptr<Workspace> ws) const;
    std::string signature(TessComputeContext* context) const;

    std::vector<ValueInfo> values_;
    std::vector<Step> steps_;
    std::vector<int> output_ids_;
    ThreadPool& pool_;

    mutable std::mutex mutex_;
    mutable std::vector<std::unique_ptr<Workspace>> free_workspaces_;
    mutable std::map<std::string, std::shared_ptr<const MemoryPlan>> plans_;
};

}  // namespace tessera::cpu
