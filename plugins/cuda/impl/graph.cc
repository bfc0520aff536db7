// CUDA provider: compiled subgraphs and runs (graph.h).
#include "graph.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace tessera::cuda {

// ---- Uploads -----------------------------------------------------------------------------------------------------

Tensor upload_constant(Instance& instance, const TessValue* value) {
    Tensor t;
    t.type = host().value_element_type(value);
    t.dims = value_dims(value);
    const size_t bytes = host().tensor_byte_size(value);
    t.hold = instance.allocate_shared(std::max<size_t>(bytes, 1));
    t.data = t.hold.get();
    instance.copy_from_host(t.data, host().tensor_const_data(value), bytes);
    return t;
}

Tensor upload_floats(Instance& instance, const std::vector<float>& values) {
    Tensor t;
    t.type = TESS_ELEMENT_FLOAT32;
    t.dims = {static_cast<int64_t>(values.size())};
    t.hold = instance.allocate_shared(std::max<size_t>(values.size() * sizeof(float), 1));
    t.data = t.hold.get();
    instance.copy_from_host(t.data, values.data(), values.size() * sizeof(float));
    return t;
}

// ---- Compile -----------------------------------------------------------------------------------------------------

namespace {

class Builder final : public BuildContext {
public:
    Builder(CompiledGraph& graph, const TessGraphView& view) : graph_(graph) {
        for (size_t n = 0; n < view.node_count; ++n) {
            const TessNodeView* node = view.nodes[n];
            for (size_t i = 0; i < node->input_count; ++i)
                if (node->inputs[i] != nullptr) readers_[node->inputs[i]->name].push_back(node);
            for (size_t i = 0; i < node->implicit_input_count; ++i)
                if (node->implicit_inputs[i] != nullptr) readers_[node->implicit_inputs[i]->name].push_back(node);
        }
        for (size_t o = 0; o < view.output_count; ++o) outputs_.insert(view.outputs[o]->name);
    }

    Instance& instance() override { return graph_.instance; }

    int id(const TessValueView* value) override {
        auto it = ids_.find(value->name);
        if (it != ids_.end()) return it->second;
        ValueSlot slot;
        slot.name = value->name;
        if (value->constant != nullptr) {
            slot.source = ValueSlot::Source::Constant;
            slot.constant = value->constant;
        }
        graph_.values.push_back(std::move(slot));
        const int id = static_cast<int>(graph_.values.size() - 1);
        ids_.emplace(value->name, id);
        return id;
    }

    int find(const char* name) const {
        auto it = ids_.find(name);
        return it == ids_.end() ? -1 : it->second;
    }

    const TessNodeView* sole_consumer(const char* name) override {
        if (outputs_.count(name) != 0) return nullptr;
        auto it = readers_.find(name);
        if (it == readers_.end() || it->second.size() != 1) return nullptr;
        return it->second.front();
    }

    void add_input(const TessValueView* value, size_t index) {
        const int v = id(value);
        graph_.values[v].source = ValueSlot::Source::Input;
        graph_.values[v].input_index = index;
    }

private:
    CompiledGraph& graph_;
    std::unordered_map<std::string, int> ids_;
    std::unordered_map<std::string, std::vector<const TessNodeView*>> readers_;
    std::unordered_set<std::string> outputs_;
};

}  // namespace

CompiledGraph::CompiledGraph(Instance& inst, const TessGraphView& view) : instance(inst) {
    Builder builder(*this, view);
    for (size_t i = 0; i < view.input_count; ++i) builder.add_input(view.inputs[i], i);

    std::unordered_set<const TessNodeView*> done;
    for (size_t n = 0; n < view.node_count; ++n) {
        const TessNodeView* node = view.nodes[n];
        if (done.count(node) != 0) continue;
        const std::string why = check_node(*node);
        if (!why.empty()) fail(TESS_STATUS_NOT_IMPLEMENTED, why);
        std::vector<const TessNodeView*> fused;
        std::unique_ptr<Step> step = build_step(builder, *node, fused);
        for (const TessNodeView* f : fused) done.insert(f);
        step->host_only.resize(step->in.size(), false);
        steps.push_back(std::move(step));
    }

    for (size_t o = 0; o < view.output_count; ++o) {
        const int v = builder.find(view.outputs[o]->name);
        if (v < 0 || values[v].source != ValueSlot::Source::Produced)
            fail(TESS_STATUS_INTERNAL, std::string("cuda: partition output '") + view.outputs[o]->name +
                                           "' is not produced by a node of the partition");
        values[v].output_index = static_cast<int>(o);
    }

    for (size_t s = 0; s < steps.size(); ++s) {
        const Step& step = *steps[s];
        for (size_t k = 0; k < step.in.size(); ++k) {
            const int v = step.in[k];
            if (v < 0) continue;
            values[v].last_use = static_cast<int>(s);
            ValueSlot& slot = values[v];
            if (slot.source == ValueSlot::Source::Constant && !step.host_only[k] && slot.device.data == nullptr)
                slot.device = upload_constant(instance, slot.constant);
        }
    }
}

void CompiledGraph::run(TessComputeContext* context) {
    std::lock_guard lock(instance.exec_mutex);
    Run run(*this, context);
    size_t current = 0;
    try {
        for (; current < steps.size(); ++current) {
            Step& step = *steps[current];
            step.run(run);
            // Intermediates die after their last reader (the stream orders any reuse of their memory after it).
            for (int v : step.in) {
                if (v >= 0 && values[v].last_use == static_cast<int>(current) && values[v].output_index < 0 &&
                    values[v].source != ValueSlot::Source::Constant)
                    run.values_[v] = Tensor{};
            }
        }
        check_cuda(cudaStreamSynchronize(instance.stream), "cudaStreamSynchronize");
    } catch (const Error& e) {
        cudaStreamSynchronize(instance.stream);
        cudaGetLastError();
        const std::string where = current < steps.size() ? steps[current]->label + ": " : "";
        throw Error(e.code(), where + e.what());
    } catch (...) {
        cudaStreamSynchronize(instance.stream);
        cudaGetLastError();
        throw;
    }
    for (const ValueSlot& slot : values) {
        if (slot.output_index >= 0 && !run.set_[&slot - values.data()])
            fail(TESS_STATUS_INTERNAL, "cuda: partition output '" + slot.name + "' was not computed");
    }
}

// ---- Runs --------------------------------------------------------------------------------------------------------

Run::Run(CompiledGraph& graph, TessComputeContext* context)
    : dev(graph.instance), graph_(graph), context_(context), values_(graph.values.size()),
      set_(graph.values.size(), false) {
    const size_t inputs = host().compute_input_count(context);
    for (size_t v = 0; v < graph.values.size(); ++v) {
        const ValueSlot& slot = graph.values[v];
        if (slot.source == ValueSlot::Source::Input) {
            if (slot.input_index >= inputs)
                fail(TESS_STATUS_INTERNAL, "cuda: input '" + slot.name + "' was not passed to compute");
            const TessValue* value = host().compute_input(context, slot.input_index);
            if (value == nullptr) continue;  // an omitted optional input
            if (host().value_kind(value) != TESS_VALUE_TENSOR)
                fail(TESS_STATUS_INVALID_ARGUMENT, "cuda: input '" + slot.name + "' is not a tensor");
            Tensor& t = values_[v];
            t.type = host().value_element_type(value);
            t.dims = value_dims(value);
            t.data = const_cast<void*>(host().tensor_const_data(value));
            set_[v] = true;
        } else if (slot.source == ValueSlot::Source::Constant && slot.device.data != nullptr) {
            values_[v] = slot.device;
            set_[v] = true;
        }
    }
}

const Tensor* Run::input(const Step& step, size_t k) {
    if (k >= step.in.size() || step.in[k] < 0) return nullptr;
    const int v = step.in[k];
    return set_[v] ? &values_[v] : nullptr;
}

const Tensor& Run::required(const Step& step, size_t k) {
    const Tensor* t = input(step, k);
    if (t == nullptr)
        fail(TESS_STATUS_INVALID_ARGUMENT, "cuda: input " + std::to_string(k) + " is missing");
    return *t;
}

Tensor& Run::output(const Step& step, size_t k, int32_t type, const Shape& dims) {
    if (k >= step.out.size() || step.out[k] < 0) fail(TESS_STATUS_INTERNAL, "cuda: output " + std::to_string(k) + " is absent");
    for (int64_t d : dims)
        if (d < 0) fail(TESS_STATUS_INVALID_ARGUMENT, "cuda: negative dimension in output shape " + shape_string(dims));
    const int v = step.out[k];
    const ValueSlot& slot = graph_.values[v];
    Tensor t;
    t.type = type;
    t.dims = dims;
    if (slot.output_index >= 0) {
        TessValue* value = nullptr;
        if (TessStatus* status = host().compute_allocate_output(context_, static_cast<size_t>(slot.output_index), type,
                                                                 dims.data(), dims.size(), &value)) {
            const int32_t code = host().status_code(status);
            const std::string message = host().status_message(status);
            host().status_release(status);
            fail(code, message);
        }
        t.data = host().tensor_data(value);
    } else {
        t.hold = dev.allocate_shared(std::max<size_t>(t.bytes(), 1));
        t.data = t.hold.get();
    }
    values_[v] = std::move(t);
    set_[v] = true;
    return values_[v];
}

void Run::alias(const Step& step, size_t k, const Tensor& source, const Shape& dims) {
    if (element_count(dims) != source.count())
        fail(TESS_STATUS_INTERNAL, "cuda: alias of " + shape_string(source.dims) + " as " + shape_string(dims));
    if (k >= step.out.size() || step.out[k] < 0) fail(TESS_STATUS_INTERNAL, "cuda: output " + std::to_string(k) + " is absent");
    const int v = step.out[k];
    if (graph_.values[v].output_index >= 0) {
        const Tensor src = source;  // `source` may live in values_, which output() writes
        Tensor& out = output(step, k, src.type, dims);
        if (out.bytes() > 0)
            check_cuda(cudaMemcpyAsync(out.data, src.data, out.bytes(), cudaMemcpyDeviceToDevice, dev.stream),
                       "cudaMemcpyAsync (device to device)");
        return;
    }
    Tensor t = source;
    t.dims = dims;
    values_[v] = std::move(t);
    set_[v] = true;
}

std::vector<int64_t> Run::read_ints(const Step& step, size_t k) {
    if (k >= step.in.size() || step.in[k] < 0) fail(TESS_STATUS_INTERNAL, "cuda: input " + std::to_string(k) + " is absent");
    const int v = step.in[k];
    const ValueSlot& slot = graph_.values[v];
    if (slot.source == ValueSlot::Source::Constant) return constant_ints(slot.constant);
    if (!set_[v]) fail(TESS_STATUS_INVALID_ARGUMENT, "cuda: input " + std::to_string(k) + " is missing");
    const Tensor& t = values_[v];
    const size_t n = static_cast<size_t>(t.count());
    std::vector<int64_t> out(n);
    if (t.type == TESS_ELEMENT_INT64) {
        dev.copy_to_host_locked(out.data(), t.data, n * sizeof(int64_t));
    } else if (t.type == TESS_ELEMENT_INT32) {
        std::vector<int32_t> tmp(n);
        dev.copy_to_host_locked(tmp.data(), t.data, n * sizeof(int32_t));
        std::copy(tmp.begin(), tmp.end(), out.begin());
    } else {
        fail(TESS_STATUS_INVALID_ARGUMENT,
             std::string("cuda: input ") + std::to_string(k) + " is " + type_name(t.type) + ", not int64");
    }
    return out;
}

}  // namespace tessera::cuda
