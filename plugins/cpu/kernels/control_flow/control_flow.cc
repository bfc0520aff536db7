// Control flow: If, Loop, Scan and SequenceMap run subgraph bodies compiled once at kernel creation.  Values of
// enclosing graphs reach a body through the node's implicit inputs, bound by name.
#include <cstring>
#include <limits>
#include <unordered_map>

#include "runtime/graph_executor.h"
#include "runtime/host.h"
#include "kernels/all_kernels.h"
#include "runtime/subgraph_body.h"

namespace tessera::cpu {

namespace {

// Moves body output j to node output i (values are handed over, tensors copied into the node's output).
void forward_output(KernelContext& ctx, size_t i, OwnedOutputs& outputs, size_t j) {
    const Binding& b = outputs[j];
    if (b.value != nullptr && host().value_kind(b.value) != TESS_VALUE_TENSOR) {
        TessValue* owned = outputs.release_value(j);
        ctx.set_output_value(i, owned != nullptr ? owned : clone_value(b.value));
        return;
    }
    copy_tensor(b.tensor, ctx.output(i, b.tensor.type, b.tensor.shape));
}

void forward_binding(KernelContext& ctx, size_t i, const Binding& b) {
    if (b.value != nullptr && host().value_kind(b.value) != TESS_VALUE_TENSOR) {
        ctx.set_output_value(i, clone_value(b.value));
        return;
    }
    copy_tensor(b.tensor, ctx.output(i, b.tensor.type, b.tensor.shape));
}

bool scalar_bool(const Tensor& t, const char* what) {
    if (t.size() != 1 || t.type != TESS_ELEMENT_BOOL) throw KernelError(std::string(what) + " must be one bool");
    return *t.ptr<uint8_t>() != 0;
}

class IfKernel final : public Kernel {
public:
    explicit IfKernel(const NodeInfo& info) : then_(info, "then_branch"), else_(info, "else_branch") {}

    void compute(KernelContext& ctx) const override {
        const SubgraphBody& body = scalar_bool(ctx.input(0), "If condition") ? then_ : else_;
        std::vector<Binding> bindings;
        OwnedOutputs outputs(body.graph().output_count());
        body.run(ctx, std::move(bindings), outputs);
        if (outputs.size() != ctx.output_count())
            throw KernelError("If branch has " + std::to_string(outputs.size()) + " outputs, the node " +
                              std::to_string(ctx.output_count()));
        for (size_t i = 0; i < outputs.size(); ++i) forward_output(ctx, i, outputs, i);
    }

private:
    SubgraphBody then_, else_;
};

// Accumulates per-iteration tensors, then lays them out stacked along a new axis.
struct Stacked {
    int32_t type = TESS_ELEMENT_UNDEFINED;
    Shape element_shape;
    std::vector<unsigned char> bytes;
    int64_t count = 0;

    void append(const Tensor& t) {
        if (t.type == TESS_ELEMENT_STRING) throw KernelError("scan outputs of strings are not supported");
        if (count == 0) {
            type = t.type;
            element_shape = t.shape;
        } else if (t.shape != element_shape || t.type != type) {
            throw KernelError("scan output changes shape between iterations");
        }
        const auto* p = static_cast<const unsigned char*>(t.data);
        bytes.insert(bytes.end(), p, p + t.byte_size());
        ++count;
    }
};

class LoopKernel final : public Kernel {
public:
    explicit LoopKernel(const NodeInfo& info) : body_(info, "body"), carried_(info.input_count() - 2) {}

    void compute(KernelContext& ctx) const override {
        int64_t max_trips = std::numeric_limits<int64_t>::max();
        if (ctx.has_input(0)) {
            const Tensor& m = ctx.input(0);
            if (m.size() != 1) throw KernelError("Loop M must be a scalar");
            max_trips = *m.ptr<int64_t>();
        }
        bool condition = ctx.has_input(1) ? scalar_bool(ctx.input(1), "Loop cond") : true;
        size_t scans = ctx.output_count() - carried_;

        std::vector<Binding> state;
        for (size_t k = 0; k < carried_; ++k) state.push_back(SubgraphBody::input_binding(ctx, 2 + k));
        std::unique_ptr<OwnedOutputs> previous;  // keeps the current loop-carried values alive
        std::vector<Stacked> stacked(scans);
        int64_t iteration = 0;
        uint8_t cond_in = condition ? 1 : 0;
        for (; iteration < max_trips && condition; ++iteration) {
            std::vector<Binding> bindings;
            Binding iter_binding;
            iter_binding.present = true;
            iter_binding.tensor = Tensor{TESS_ELEMENT_INT64, {}, &iteration, nullptr};
            Binding cond_binding;
            cond_binding.present = true;
            cond_binding.tensor = Tensor{TESS_ELEMENT_BOOL, {}, &cond_in, nullptr};
            bindings.push_back(iter_binding);
            bindings.push_back(cond_binding);
            bindings.insert(bindings.end(), state.begin(), state.end());
            auto outputs = std::make_unique<OwnedOutputs>(body_.graph().output_count());
            body_.run(ctx, std::move(bindings), *outputs);
            if (outputs->size() != 1 + carried_ + scans) throw KernelError("Loop body output count does not match");
            condition = scalar_bool((*outputs)[0].tensor, "Loop body condition");
            cond_in = condition ? 1 : 0;
            for (size_t k = 0; k < carried_; ++k) state[k] = (*outputs)[1 + k];
            for (size_t s = 0; s < scans; ++s) stacked[s].append((*outputs)[1 + carried_ + s].tensor);
            previous = std::move(outputs);
        }
        for (size_t k = 0; k < carried_; ++k) {
            if (!state[k].present) throw KernelError("Loop-carried value " + std::to_string(k) + " is missing");
            forward_binding(ctx, k, state[k]);
        }
        for (size_t s = 0; s < scans; ++s) {
            Shape shape{stacked[s].count};
            shape.insert(shape.end(), stacked[s].element_shape.begin(), stacked[s].element_shape.end());
            int32_t type = stacked[s].count > 0 ? stacked[s].type : TESS_ELEMENT_FLOAT32;
            Tensor& out = ctx.output(carried_ + s, type, shape);
            if (!stacked[s].bytes.empty()) std::memcpy(out.data, stacked[s].bytes.data(), stacked[s].bytes.size());
        }
    }

private:
    SubgraphBody body_;
    size_t carried_;
};

// Copies slice `index` of `t` along `axis` into `out` (which has t's shape without that axis).
void take_slice(const Tensor& t, int64_t axis, int64_t index, void* out) {
    int64_t outer = 1, inner = static_cast<int64_t>(element_bytes(t.type, 1));
    for (int64_t d = 0; d < axis; ++d) outer *= t.shape[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < t.rank(); ++d) inner *= t.shape[d];
    int64_t length = t.shape[static_cast<size_t>(axis)];
    if (inner == 0 || outer == 0) return;  // an empty slice: nothing to copy (and `out` may be NULL)
    const auto* src = static_cast<const unsigned char*>(t.data);
    auto* dst = static_cast<unsigned char*>(out);
    for (int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + o * inner, src + (o * length + index) * inner, static_cast<size_t>(inner));
}

// Writes `slice` as position `index` along `axis` of `out` (of shape with length `length` there).
void put_slice(const Tensor& slice, Tensor& out, int64_t axis, int64_t index) {
    int64_t outer = 1, inner = static_cast<int64_t>(element_bytes(out.type, 1));
    for (int64_t d = 0; d < axis; ++d) outer *= out.shape[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < out.rank(); ++d) inner *= out.shape[d];
    int64_t length = out.shape[static_cast<size_t>(axis)];
    if (inner == 0 || outer == 0) return;  // an empty slice: nothing to copy (and the buffers may be NULL)
    const auto* src = static_cast<const unsigned char*>(slice.data);
    auto* dst = static_cast<unsigned char*>(out.data);
    for (int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + (o * length + index) * inner, src + o * inner, static_cast<size_t>(inner));
}

int64_t normalize_axis(int64_t axis, size_t rank) {
    int64_t r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r) throw KernelError("Scan axis " + std::to_string(axis) + " is out of range");
    return axis < 0 ? axis + r : axis;
}

// Scan (opset 9+).  Opset 8 adds a leading batch dimension and sequence_lens; it is run as one Scan per batch entry.
class ScanKernel final : public Kernel {
public:
    explicit ScanKernel(const NodeInfo& info)
        : body_(info, "body"),
          batched_(info.opset() < 9),
          scan_inputs_(static_cast<size_t>(info.attr_int("num_scan_inputs"))),
          input_axes_(info.attr_ints("scan_input_axes")),
          input_directions_(info.attr_ints(batched_ ? "directions" : "scan_input_directions")),
          output_axes_(info.attr_ints("scan_output_axes")),
          output_directions_(info.attr_ints("scan_output_directions")) {
        size_t regular = info.input_count() - (batched_ ? 1 : 0);
        if (scan_inputs_ > regular) throw KernelError("Scan num_scan_inputs exceeds the inputs");
        states_ = regular - scan_inputs_;
    }

    void compute(KernelContext& ctx) const override {
        size_t first = batched_ ? 1 : 0;
        std::vector<Tensor> states, scans;
        for (size_t k = 0; k < states_; ++k) states.push_back(ctx.input(first + k));
        for (size_t k = 0; k < scan_inputs_; ++k) scans.push_back(ctx.input(first + states_ + k));
        // Node outputs, allocated on first use and kept across the batch entries of Scan-8.
        std::vector<Tensor*> outs(ctx.output_count(), nullptr);
        if (!batched_) {
            run_one(ctx, states, scans, outs, nullptr, 0);
            return;
        }
        int64_t batch = states.empty() ? scans[0].shape[0] : states[0].shape[0];
        if (ctx.has_input(0)) {
            const Tensor& lens = ctx.input(0);
            for (int64_t b = 0; b < lens.size(); ++b)
                if (lens.ptr<int64_t>()[b] != scans[0].shape[1])
                    throw KernelError("Scan-8 with sequence_lens shorter than the sequence is not supported");
        }
        for (int64_t b = 0; b < batch; ++b) {
            std::vector<Tensor> s = states, x = scans;
            for (auto& t : s) t = sliced(t, b);
            for (auto& t : x) t = sliced(t, b);
            run_one(ctx, s, x, outs, &batch, b);
        }
    }

private:
    // A view of batch entry b (leading dimension removed); contiguous, so no copy is needed.
    static Tensor sliced(const Tensor& t, int64_t b) {
        Tensor v = t;
        v.shape.erase(v.shape.begin());
        v.data = static_cast<unsigned char*>(t.data) + b * static_cast<int64_t>(element_bytes(t.type, 1)) * v.size();
        v.value = nullptr;
        return v;
    }

    // The node output k, allocated with `shape` (plus the batch dimension for Scan-8) on first use.
    static Tensor output_for(KernelContext& ctx, std::vector<Tensor*>& outs, size_t k, int32_t type, Shape shape,
                             const int64_t* batch, int64_t batch_index) {
        if (outs[k] == nullptr) {
            if (batch != nullptr) shape.insert(shape.begin(), *batch);
            outs[k] = &ctx.output(k, type, shape);
        }
        return batch != nullptr ? sliced(*outs[k], batch_index) : *outs[k];
    }

    void run_one(KernelContext& ctx, const std::vector<Tensor>& initial, const std::vector<Tensor>& scans,
                 std::vector<Tensor*>& outs, const int64_t* batch, int64_t batch_index) const {
        int64_t length = 0;
        std::vector<int64_t> axes(scan_inputs_);
        for (size_t k = 0; k < scan_inputs_; ++k) {
            axes[k] = normalize_axis(k < input_axes_.size() ? input_axes_[k] : 0, scans[k].rank());
            int64_t n = scans[k].shape[static_cast<size_t>(axes[k])];
            if (k > 0 && n != length) throw KernelError("Scan inputs differ in sequence length");
            length = n;
        }
        size_t scan_outputs = ctx.output_count() - states_;

        std::vector<Binding> state(states_);
        for (size_t k = 0; k < states_; ++k) {
            state[k].present = true;
            state[k].tensor = initial[k];
        }
        std::vector<std::vector<unsigned char>> slices(scan_inputs_);
        std::unique_ptr<OwnedOutputs> previous;  // keeps the current state values alive
        for (int64_t step = 0; step < length; ++step) {
            std::vector<Binding> bindings(state.begin(), state.end());
            for (size_t k = 0; k < scan_inputs_; ++k) {
                bool reverse = k < input_directions_.size() && input_directions_[k] == 1;
                Binding b;
                b.present = true;
                b.tensor.type = scans[k].type;
                b.tensor.shape = scans[k].shape;
                b.tensor.shape.erase(b.tensor.shape.begin() + axes[k]);
                slices[k].resize(element_bytes(b.tensor.type, static_cast<size_t>(b.tensor.size())));
                take_slice(scans[k], axes[k], reverse ? length - 1 - step : step, slices[k].data());
                b.tensor.data = slices[k].data();
                bindings.push_back(b);
            }
            auto outputs = std::make_unique<OwnedOutputs>(body_.graph().output_count());
            body_.run(ctx, std::move(bindings), *outputs);
            for (size_t k = 0; k < states_; ++k) state[k] = (*outputs)[k];
            for (size_t s = 0; s < scan_outputs; ++s) {
                const Tensor& slice = (*outputs)[states_ + s].tensor;
                int64_t axis = normalize_axis(s < output_axes_.size() ? output_axes_[s] : 0, slice.rank() + 1);
                bool reverse = s < output_directions_.size() && output_directions_[s] == 1;
                Shape shape = slice.shape;
                shape.insert(shape.begin() + axis, length);
                Tensor target = output_for(ctx, outs, states_ + s, slice.type, shape, batch, batch_index);
                put_slice(slice, target, axis, reverse ? length - 1 - step : step);
            }
            previous = std::move(outputs);
        }
        for (size_t k = 0; k < states_; ++k) {
            const Tensor& value = state[k].tensor;
            copy_tensor(value, output_for(ctx, outs, k, value.type, value.shape, batch, batch_index));
        }
    }

    SubgraphBody body_;
    bool batched_;
    size_t scan_inputs_;
    size_t states_ = 0;
    std::vector<int64_t> input_axes_, input_directions_, output_axes_, output_directions_;
};

class SequenceMapKernel final : public Kernel {
public:
    explicit SequenceMapKernel(const NodeInfo& info) : body_(info, "body"), inputs_(info.input_count()) {}

    void compute(KernelContext& ctx) const override {
        const TessHostApi& h = host();
        const TessValue* sequence = ctx.input_value(0);
        if (sequence == nullptr || h.value_kind(sequence) != TESS_VALUE_SEQUENCE)
            throw KernelError("SequenceMap input 0 must be a sequence");
        size_t length = h.sequence_length(sequence);
        size_t outputs_count = ctx.output_count();
        std::vector<std::vector<TessValue*>> results(outputs_count);
        std::vector<int32_t> types(outputs_count, TESS_ELEMENT_FLOAT32);
        try {
            for (size_t i = 0; i < length; ++i) {
                std::vector<Binding> bindings;
                for (size_t k = 0; k < inputs_; ++k) {
                    const TessValue* v = ctx.input_value(k);
                    if (v != nullptr && h.value_kind(v) == TESS_VALUE_SEQUENCE) {
                        if (h.sequence_length(v) != length) throw KernelError("SequenceMap sequences differ in length");
                        bindings.push_back(bind_value(h.sequence_at(v, i)));
                    } else {
                        bindings.push_back(SubgraphBody::input_binding(ctx, k));
                    }
                }
                OwnedOutputs outputs(body_.graph().output_count());
                body_.run(ctx, std::move(bindings), outputs);
                for (size_t o = 0; o < outputs_count; ++o) {
                    const Binding& b = outputs[o];
                    TessValue* item = nullptr;
                    check_status(h.value_create_tensor(b.tensor.type, b.tensor.shape.data(), b.tensor.shape.size(),
                                                       &item),
                                 "SequenceMap");
                    results[o].push_back(item);
                    copy_tensor(b.tensor, tensor_of(item));
                    types[o] = b.tensor.type;
                }
            }
        } catch (...) {
            for (auto& list : results)
                for (TessValue* v : list) h.value_release(v);
            throw;
        }
        for (size_t o = 0; o < outputs_count; ++o) {
            TessValue* seq = nullptr;
            int32_t type = results[o].empty() ? sequence_element_type(sequence) : types[o];
            check_status(h.value_create_sequence(type, results[o].data(), results[o].size(), &seq), "SequenceMap");
            ctx.set_output_value(o, seq);
        }
    }

private:
    static int32_t sequence_element_type(const TessValue* v) { return host().value_element_type(v); }

    SubgraphBody body_;
    size_t inputs_;
};

}  // namespace

void register_control_flow_kernels(KernelRegistry& registry) {
    // The condition is one bool and Loop's trip count one int64 (read as such).
    const std::vector<int32_t> bools{TESS_ELEMENT_BOOL};
    const std::vector<int32_t> int64s{TESS_ELEMENT_INT64};
    registry.add({"", "If", 1, 0, {{0, bools}}, KernelMemory::Normal, make_factory<IfKernel>()});
    registry.add({"", "Loop", 1, 0, {{0, int64s}, {1, bools}}, KernelMemory::Normal, make_factory<LoopKernel>()});
    registry.add({"", "Scan", 8, 0, {}, KernelMemory::Normal, make_factory<ScanKernel>()});
    registry.add({"", "SequenceMap", 17, 0, {}, KernelMemory::Normal, make_factory<SequenceMapKernel>()});
}

}  // namespace tessera::cpu
