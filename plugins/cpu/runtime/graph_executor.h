// CPU provider: a compiled graph (a fused partition, or a subgraph body of If/Loop/Scan).  Kernels are created once
// (attributes parsed, weights prepacked); each run executes them in topological order.  Intermediate tensors live in
// one arena laid out by a liveness-based plan, recorded on the first run for each set of input shapes, so
// steady-state runs allocate nothing.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/memory_budget.h"
#include "runtime/kernel.h"
#include "runtime/kernel_source.h"

namespace tessera::cpu {

struct MemoryPlan;
struct Workspace;

// One input of a run: a tensor view, a non-tensor value, or absent.
struct Binding {
    bool present = false;
    Tensor tensor;                    // tensors (value may be NULL for internal tensors)
    const TessValue* value = nullptr; // the backing value, when there is one
};

Binding bind_value(const TessValue* value);  // absent for NULL

// Where a run's outputs go.
class OutputSink {
public:
    virtual ~OutputSink() = default;
    // Memory for output i; the returned tensor stays valid until the sink is destroyed or handed on.
    virtual Tensor allocate(size_t index, int32_t type, const Shape& shape) = 0;
    // Takes ownership of a complete value (sequence, optional, or tensor).
    virtual void set(size_t index, TessValue* value) = 0;
};

// A sink that owns its outputs: what subgraph bodies write into.
class OwnedOutputs final : public OutputSink {
public:
    explicit OwnedOutputs(size_t count);
    ~OwnedOutputs() override;
    OwnedOutputs(const OwnedOutputs&) = delete;
    OwnedOutputs& operator=(const OwnedOutputs&) = delete;

    Tensor allocate(size_t index, int32_t type, const Shape& shape) override;
    void set(size_t index, TessValue* value) override;
    const Binding& operator[](size_t index) const { return bindings_.at(index); }
    size_t size() const { return bindings_.size(); }
    // Gives up ownership of a value output (the caller releases it or hands it on).
    TessValue* release_value(size_t index);

private:
    std::vector<Binding> bindings_;
    std::vector<void*> buffers_;
    std::vector<TessValue*> values_;
    MemoryBudget* budget_;  // the session's, when made during one of its runs
};

// Marks the core compute call this thread is serving, so that graph runs on it (subgraph bodies included) can see
// whether the run must stop.  Set by the plugin's compute entry for the duration of the call.
class RunScope {
public:
    // `budget`: the session's memory budget, charged for subgraph outputs made on this thread (may be NULL).
    RunScope(const TessComputeContext* context, MemoryBudget* budget);
    ~RunScope();
    RunScope(const RunScope&) = delete;
    RunScope& operator=(const RunScope&) = delete;

private:
    const TessComputeContext* previous_;
    MemoryBudget* previous_budget_;
};

// Throws RunStopped when the run this thread serves was terminated or passed its deadline.
void check_run_stop();

class CompiledGraph {
public:
    CompiledGraph(const TessGraphView& view, const KernelSource& source);
    // Charges the run buffers to the session's budget (subgraph bodies use the budget of the run calling them).
    void set_memory_budget(MemoryBudget* budget) { budget_ = budget; }
    ~CompiledGraph();

    // Inputs: the view's inputs in order, then the values named by outer_names().  `profile`: the compute context of
    // a profiled run (TessHostApi::compute_profiling), to which each step is reported; NULL when not profiled.
    void run(const std::vector<Binding>& inputs, OutputSink& outputs, ThreadPool& pool,
             TessComputeContext* profile = nullptr) const;
    // Profiling: keeps the shapes of the constants the kernels copied and no longer read (they are reported as node
    // input shapes).  Call right after construction, while the view's constants are valid.
    void remember_constant_shapes(const TessGraphView& view);

    size_t input_count() const { return input_count_; }
    size_t output_count() const { return output_ids_.size(); }
    // Values the graph reads from enclosing graphs (subgraph bodies only).
    const std::vector<std::string>& outer_names() const { return outer_names_; }

private:
    friend class StepContext;

    struct ValueInfo {
        std::string name;
        int producer = -1;          // step index; -1 for inputs and constants
        int last_use = -1;          // last step reading it
        int input = -1;             // index among the run's inputs
        int output = -1;            // first index among the outputs
        const TessValue* constant = nullptr;  // the core's, valid while we exist
        int32_t type = TESS_ELEMENT_UNDEFINED;  // declared element type
        std::vector<int64_t> dims;              // declared shape (empty: unknown rank; -1: unknown dimension)
        int concat_into = -1;                   // a Concat output whose buffer this value is written into
        int64_t concat_offset = 0;              // the byte offset there (concat_in_place.cc)
    };
    struct Step {
        std::unique_ptr<Kernel> kernel;
        KernelMemory memory = KernelMemory::Normal;
        std::vector<int> inputs;   // value ids; -1 for omitted; implicit inputs follow the node's inputs
        std::vector<int> outputs;  // value ids
        std::string label;
        std::vector<size_t> released_inputs;  // constant inputs the kernel copied (NodeInfo::release_constant)
        // NULL kernel: a step another one took over (fuse_producers); it has no inputs or outputs left.
    };

    // Profiling: runs one step timed and reports it to the core.
    void compute_profiled(const Step& step, KernelContext& ctx, const Workspace& ws, TessComputeContext* profile) const;

    // Chooses which values are held in the blocked channel layout and tells the kernels that read or write them
    // (blocked_layout.cc).  Runs once, after every step is created.
    void choose_layouts(const TessGraphView& view);
    // Chooses which Concat inputs are written straight into the Concat's output (concat_in_place.cc).
    void place_concat_inputs(const TessGraphView& view);
    // Lets kernels take over the steps producing their inputs (ProducerFusingKernel, producer_fusion.cc).
    void fuse_producers();

    std::unique_ptr<Workspace> acquire() const;
    void drop_released_constants();
    void release(std::unique_ptr<Workspace> ws) const;
    // The plan key of a run: element type and shape of every input (-1 marks an absent or non-tensor input).
    static void signature(const std::vector<Binding>& inputs, std::vector<int64_t>& key);

    MemoryBudget* budget_ = nullptr;
    std::vector<ValueInfo> values_;
    std::vector<Step> steps_;
    std::vector<int> output_ids_;
    size_t input_count_ = 0;
    std::vector<std::string> outer_names_;

    std::vector<std::string> constant_shapes_;  // profiling: by value id, "[d,d]" for a constant no longer bound

    mutable std::mutex mutex_;
    mutable std::vector<std::unique_ptr<Workspace>> free_workspaces_;
    mutable std::map<std::vector<int64_t>, std::shared_ptr<const MemoryPlan>> plans_;
};

// Compiles a subgraph body (for control-flow kernels) with the kernels its node was compiled with; NULL `source`
// means the built-in registry alone.
std::unique_ptr<CompiledGraph> compile_subgraph(const TessGraphView& body, const KernelSource* source);
void set_subgraph_registry(const KernelRegistry* registry);

}  // namespace tessera::cpu
