// CUDA provider: a compiled fused subgraph -- a list of steps over numbered values -- and the state of one run.
//
// Compile turns each node (or a fused chain such as Conv -> BatchNormalization -> Relu) into a Step that knows its
// attributes and prepacked constants.  A run binds the partition's inputs, walks the steps on the instance's stream
// (every step enqueues work and returns), frees intermediates after their last reader, and synchronizes once
// before compute returns, so the outputs are complete.  Shapes are computed on the host from the input shapes, so
// nothing waits on the device except a step that must read tensor contents (a Reshape whose shape is computed).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "instance.h"

namespace tessera::cuda {

class Run;

class Step {
public:
    virtual ~Step() = default;
    virtual void run(Run& run) = 0;

    std::string label;       // "Conv 'conv1'" for messages
    std::vector<int> in;     // value ids, -1 for an absent optional input
    std::vector<int> out;    // value ids, -1 for an absent optional output
    // Inputs the step reads on the host only (shapes, axes) or has prepacked itself: constants among them are not
    // uploaded to the device.
    std::vector<bool> host_only;
};

// What a value of the compiled graph is.
struct ValueSlot {
    std::string name;
    enum class Source { Input, Constant, Produced } source = Source::Produced;
    size_t input_index = 0;              // Source::Input
    const TessValue* constant = nullptr; // Source::Constant (host; valid while the compiled object lives)
    Tensor device;                       // Source::Constant, when a step reads it on the device
    int output_index = -1;               // >= 0: a partition output
    int last_use = -1;                   // index of the last step that reads it
};

class CompiledGraph {
public:
    CompiledGraph(Instance& instance, const TessGraphView& graph);
    void run(TessComputeContext* context);

    Instance& instance;
    std::vector<ValueSlot> values;
    std::vector<std::unique_ptr<Step>> steps;
};

// One compute call.
class Run {
public:
    Run(CompiledGraph& graph, TessComputeContext* context);

    Instance& dev;
    cudaStream_t stream() const { return dev.stream; }

    // Input k of the step; NULL when absent.
    const Tensor* input(const Step& step, size_t k);
    const Tensor& required(const Step& step, size_t k);
    // Allocates output k (in the core's buffer when it is a partition output, else in the arena).
    Tensor& output(const Step& step, size_t k, int32_t type, const Shape& dims);
    // Output k shares `source`'s memory with another shape (copied when it is a partition output).
    void alias(const Step& step, size_t k, const Tensor& source, const Shape& dims);
    // The integers of input k, read on the host (from the constant, or copied from the device).
    std::vector<int64_t> read_ints(const Step& step, size_t k);
    bool has_output(const Step& step, size_t k) const { return k < step.out.size() && step.out[k] >= 0; }

private:
    friend class CompiledGraph;
    CompiledGraph& graph_;
    TessComputeContext* context_;
    std::vector<Tensor> values_;
    std::vector<bool> set_;
};

// ---- Ops (ops/registry.cc; the operator table in ops/op_table.h) ----------------------------------------------------

// Empty when the CUDA provider can run `node`, else why not.
std::string check_node(const TessNodeView& node);

// What compile offers the step builders.
class BuildContext {
public:
    virtual ~BuildContext() = default;
    virtual Instance& instance() = 0;
    // Value id of a value (created on first use).
    virtual int id(const TessValueView* value) = 0;
    // The single node of the partition reading `name` when there is exactly one and the value does not leave the
    // partition (a candidate for fusion); NULL otherwise.
    virtual const TessNodeView* sole_consumer(const char* name) = 0;
};

// Builds the step for `node` (and the nodes it fuses, which it adds to `fused`).
std::unique_ptr<Step> build_step(BuildContext& ctx, const TessNodeView& node, std::vector<const TessNodeView*>& fused);

// Device copy of a host constant (float32/float16 data as is).
Tensor upload_constant(Instance& instance, const TessValue* value);
// Device copy of float values.
Tensor upload_floats(Instance& instance, const std::vector<float>& values);

}  // namespace tessera::cuda
