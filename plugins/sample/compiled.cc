// Compile: a fused subgraph becomes a list of steps over numbered slots (partition inputs, constants uploaded into
// the provider's memory, and one slot per node output).  Compute: walk the steps with per-call buffers.
//
// Nothing in a compiled object changes after compile, so compute may run on several threads at once: everything a
// run writes lives in its own Run object.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <unordered_map>

#include "sample.h"
#include "tessera/support/tensor.hpp"

namespace sample {
namespace {

struct Slot {
    int input_index = -1;   // partition input number, or -1
    int output_index = -1;  // partition output number, or -1
    int last_use = -1;      // last step that reads it
    // Constants: copied at compile time into the provider's memory (the view's bytes live only for the call).
    float* constant = nullptr;
    Shape constant_shape;
};

struct Program {
    std::vector<Slot> slots;
    std::vector<Step> steps;
    size_t input_count = 0;
    size_t output_count = 0;

    ~Program() {
        for (Slot& s : slots)
            if (s.constant != nullptr) free_bytes(s.constant);
    }
};

// Per-call state: the tensor each slot holds, and the buffers this call allocated (freed on every exit path).
struct Run {
    struct Tensor {
        const float* data = nullptr;
        Shape shape;
        float* owned = nullptr;  // an intermediate this run allocated
    };
    std::vector<Tensor> slots;
    explicit Run(size_t n) : slots(n) {}
    ~Run() {
        for (Tensor& t : slots) release(t);
    }
    static void release(Tensor& t) {
        if (t.owned != nullptr) free_bytes(t.owned);
        t.owned = nullptr;
        t.data = nullptr;
    }
};

}  // namespace
}  // namespace sample

// The opaque handle of the provider ABI, defined by this provider.
struct TessCompiled {
    sample::Program program;
};

namespace sample {

TessStatus* compile_graph(const TessGraphView* graph, TessCompiled** out) {
    auto compiled = std::make_unique<TessCompiled>();
    Program& p = compiled->program;
    std::unordered_map<std::string, int> slot_of;
    auto add_slot = [&](const std::string& name) {
        const int id = static_cast<int>(p.slots.size());
        p.slots.emplace_back();
        slot_of[name] = id;
        return id;
    };
    for (size_t i = 0; i < graph->input_count; ++i) p.slots[add_slot(graph->inputs[i]->name)].input_index = static_cast<int>(i);
    p.input_count = graph->input_count;

    for (size_t n = 0; n < graph->node_count; ++n) {
        const TessNodeView* node = graph->nodes[n];
        Step step;
        std::string problem = parse_node(node, step);
        if (!problem.empty()) return make_error(TESS_STATUS_NOT_IMPLEMENTED, "sample: " + step.label + ": " + problem);
        const size_t inputs = runtime_input_count(node, step);
        for (size_t i = 0; i < inputs; ++i) {
            const TessValueView* v = i < node->input_count ? node->inputs[i] : nullptr;
            if (v == nullptr || v->name == nullptr || v->name[0] == 0) {
                step.inputs.push_back(-1);
                continue;
            }
            auto it = slot_of.find(v->name);
            if (it != slot_of.end()) {
                step.inputs.push_back(it->second);
            } else if (v->constant != nullptr) {
                // Upload the constant: a device provider would copy it into device memory here.
                const int id = add_slot(v->name);
                Slot& s = p.slots[id];
                const tessera::support::TensorView constant(g_host, v->constant);
                s.constant_shape = constant.shape();
                const size_t bytes = constant.byte_size();
                s.constant = static_cast<float*>(allocate_bytes(std::max<size_t>(bytes, 1), 64));
                if (bytes != 0) std::memcpy(s.constant, constant.data<float>(), bytes);
                step.inputs.push_back(id);
            } else {
                return make_error(TESS_STATUS_INVALID_ARGUMENT,
                                  "sample: " + step.label + " reads '" + v->name + "', which the view does not define");
            }
        }
        step.output = add_slot(node->outputs[0]->name);
        p.steps.push_back(std::move(step));
    }

    for (size_t o = 0; o < graph->output_count; ++o) {
        auto it = slot_of.find(graph->outputs[o]->name);
        if (it == slot_of.end() || p.slots[it->second].input_index >= 0 || p.slots[it->second].constant != nullptr)
            return make_error(TESS_STATUS_NOT_IMPLEMENTED, std::string("sample: partition output '") +
                                                               graph->outputs[o]->name + "' is not computed by a node");
        p.slots[it->second].output_index = static_cast<int>(o);
    }
    p.output_count = graph->output_count;
    for (size_t s = 0; s < p.steps.size(); ++s)
        for (int in : p.steps[s].inputs)
            if (in >= 0) p.slots[in].last_use = static_cast<int>(s);
    *out = compiled.release();
    return nullptr;
}

void release_graph(TessCompiled* compiled) { delete compiled; }

TessStatus* compute_graph(TessCompiled* compiled, TessComputeContext* context) {
    const Program& p = compiled->program;
    Run run(p.slots.size());
    for (size_t id = 0; id < p.slots.size(); ++id) {
        const Slot& slot = p.slots[id];
        Run::Tensor& t = run.slots[id];
        if (slot.constant != nullptr) {
            t.data = slot.constant;
            t.shape = slot.constant_shape;
        } else if (slot.input_index >= 0) {
            // TensorView (the SDK's support layer) checks that the value is a float32 tensor.
            const tessera::support::TensorView input(g_host, g_host->compute_input(context, size_t(slot.input_index)));
            if (input.element_type() != TESS_ELEMENT_FLOAT32)
                return make_error(TESS_STATUS_INVALID_ARGUMENT, "sample: input " + std::to_string(slot.input_index) +
                                                                    " is " + input.describe() + ", not float32");
            t.data = input.data<float>();
            t.shape = input.shape();
        }
    }

    for (size_t s = 0; s < p.steps.size(); ++s) {
        const Step& step = p.steps[s];
        auto in = [&](size_t i) -> const Run::Tensor* {
            return i < step.inputs.size() && step.inputs[i] >= 0 ? &run.slots[step.inputs[i]] : nullptr;
        };
        try {
            // Output shape first: it decides the buffer.
            Shape shape;
            switch (step.kind) {
                case OpKind::Binary: shape = broadcast_shapes(in(0)->shape, in(1)->shape); break;
                case OpKind::Sum:
                    shape = in(0)->shape;
                    for (size_t i = 1; i < step.inputs.size(); ++i) shape = broadcast_shapes(shape, in(i)->shape);
                    break;
                case OpKind::Unary: shape = in(0)->shape; break;
                case OpKind::MatMul: shape = matmul_shape(in(0)->shape, in(1)->shape); break;
                case OpKind::Gemm: shape = gemm_shape(step.gemm_params, in(0)->shape, in(1)->shape); break;
            }
            Run::Tensor& result = run.slots[step.output];
            float* y = nullptr;
            const Slot& out_slot = p.slots[step.output];
            if (out_slot.output_index >= 0) {
                // A partition output: the core owns it; it is allocated with this provider's allocator.
                TessValue* value = nullptr;
                TessStatus* status = g_host->compute_allocate_output(context, static_cast<size_t>(out_slot.output_index),
                                                                     TESS_ELEMENT_FLOAT32, shape.data(), shape.size(),
                                                                     &value);
                if (status != nullptr) return status;
                y = static_cast<float*>(g_host->tensor_data(value));
            } else {
                y = static_cast<float*>(allocate_bytes(std::max<size_t>(element_count(shape) * sizeof(float), 1), 64));
                result.owned = y;
            }
            result.data = y;
            result.shape = shape;

            switch (step.kind) {
                case OpKind::Binary:
                    binary(step.binary, in(0)->data, in(0)->shape, in(1)->data, in(1)->shape, y, shape);
                    break;
                case OpKind::Sum:
                    if (step.inputs.size() == 1) {
                        std::copy_n(in(0)->data, element_count(shape), y);
                        break;
                    }
                    binary(Binary::Add, in(0)->data, in(0)->shape, in(1)->data, in(1)->shape, y, shape);
                    for (size_t i = 2; i < step.inputs.size(); ++i)
                        binary(Binary::Add, y, shape, in(i)->data, in(i)->shape, y, shape);
                    break;
                case OpKind::Unary: unary(step.unary, step.unary_params, in(0)->data, y, element_count(shape)); break;
                case OpKind::MatMul: matmul(in(0)->data, in(0)->shape, in(1)->data, in(1)->shape, y, shape); break;
                case OpKind::Gemm: {
                    const Run::Tensor* c = in(2);
                    gemm(step.gemm_params, in(0)->data, in(0)->shape, in(1)->data, in(1)->shape,
                         c != nullptr ? c->data : nullptr, c != nullptr ? c->shape : Shape{}, y, shape);
                    break;
                }
            }
        } catch (const KernelError& e) {
            return make_error(TESS_STATUS_RUNTIME_ERROR, "sample: " + step.label + ": " + e.what());
        }
        // Intermediates die after their last reader, so a long chain never holds more than it needs.
        for (int i : step.inputs)
            if (i >= 0 && p.slots[i].last_use == static_cast<int>(s) && run.slots[i].owned != nullptr)
                Run::release(run.slots[i]);
    }
    return nullptr;
}

}  // namespace sample
