// Runs compiled partitions in order, moving values between them and copying tensors that cross memory kinds.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "plugins/plugins.h"

namespace tessera {

class Profiler;
struct RunControl;

struct CompiledPartition {
    ProviderInstance* instance = nullptr;  // owned by the session
    TessCompiled* compiled = nullptr;
    std::vector<size_t> nodes;             // indices into the session graph
    std::vector<std::string> inputs, outputs;
    std::vector<size_t> input_ids, output_ids;
    size_t copy_count = 0;                 // tensors copied into its memory kind for it (once per run and kind)
    std::vector<int32_t> input_copied;     // per input: lives in another memory kind
    std::string memory_kind;

    // Strings behind TessPartitionInfo.
    std::vector<std::string> node_names, node_ops;
    std::vector<const char*> node_name_ptrs, node_op_ptrs, input_ptrs, output_ptrs;

    CompiledPartition() = default;
    // Moves hand over the compiled object (released exactly once).
    CompiledPartition(CompiledPartition&& other) noexcept { *this = std::move(other); }
    CompiledPartition& operator=(CompiledPartition&& other) noexcept;
    CompiledPartition(const CompiledPartition&) = delete;
    CompiledPartition& operator=(const CompiledPartition&) = delete;
    ~CompiledPartition();
};

// Everything a run needs, fixed when the session is created.
class Executor {
public:
    Executor(const Graph& graph, std::vector<CompiledPartition> partitions);

    // Runs with inputs by value id; returns the requested outputs as host values owned by the caller.  With a
    // profiler, the run, each partition's compute call and the nodes its provider reports are recorded there.
    std::vector<ValuePtr> run(const std::vector<std::pair<size_t, const TessValue*>>& inputs,
                              const std::vector<size_t>& output_ids, Profiler* profiler = nullptr,
                              const RunControl* control = nullptr) const;

    size_t value_id(const std::string& name) const;  // SIZE_MAX when unknown
    const std::vector<CompiledPartition>& partitions() const { return partitions_; }

private:
    ValuePtr to_host(const TessValue& value) const;
    ValuePtr to_instance(const TessValue& value, ProviderInstance& instance) const;
    ProviderInstance* owner_of(const TessValue& value) const;
    const ProviderInstance* memory_owner(const ProviderInstance& instance) const;

    std::vector<CompiledPartition> partitions_;
    std::unordered_map<std::string, size_t> ids_;
    std::vector<std::string> names_;
    std::vector<const TessValue*> constants_;     // by id: initializers (owned by the graph, which outlives us)
    std::vector<size_t> last_use_;                // by id: last partition that reads it
    std::vector<bool> is_output_;                 // by id: a graph output
};

}  // namespace tessera
