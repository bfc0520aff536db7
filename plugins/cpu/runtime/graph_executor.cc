#include "runtime/graph_executor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unordered_map>

#include "runtime/host.h"

namespace tessera::cpu {

namespace {

constexpr size_t kAlignment = 64;

size_t round_up(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

thread_local const TessComputeContext* t_current_run = nullptr;
thread_local MemoryBudget* t_current_budget = nullptr;

void check(TessStatus* status, const std::string& what) { check_status(status, what); }

}  // namespace

Binding bind_value(const TessValue* value) {
    Binding b;
    if (value == nullptr) return b;
    b.present = true;
    b.value = value;
    if (host().value_kind(value) == TESS_VALUE_TENSOR) b.tensor = tensor_of(value);
    // A sequence or optional has no tensor; the stand-in has no elements, so that a kernel fed one by a malformed
    // model (kernels are chosen by element type) reads nothing instead of a NULL pointer.  Kernels that take such
    // values read `value`.
    else b.tensor = Tensor{host().value_element_type(value), {0}, nullptr, const_cast<TessValue*>(value)};
    return b;
}

OwnedOutputs::OwnedOutputs(size_t count) : bindings_(count), budget_(t_current_budget) {}

OwnedOutputs::~OwnedOutputs() {
    for (void* p : buffers_) free_buffer(budget_, p);
    for (TessValue* v : values_)
        if (v != nullptr) host().value_release(v);
}

Tensor OwnedOutputs::allocate(size_t index, int32_t type, const Shape& shape) {
    Binding& b = bindings_.at(index);
    b = Binding{};
    b.present = true;
    if (type == TESS_ELEMENT_STRING) {
        TessValue* v = nullptr;
        check(host().value_create_tensor(type, shape.data(), shape.size(), &v), "subgraph output");
        values_.push_back(v);
        b.value = v;
        b.tensor = tensor_of(v);
        return b.tensor;
    }
    void* data = allocate_buffer(budget_, element_bytes(type, static_cast<size_t>(shape_size(shape))));
    buffers_.push_back(data);
    b.tensor = Tensor{type, shape, data, nullptr};
    return b.tensor;
}

void OwnedOutputs::set(size_t index, TessValue* value) {
    values_.push_back(value);
    bindings_.at(index) = bind_value(value);
}

TessValue* OwnedOutputs::release_value(size_t index) {
    const TessValue* v = bindings_.at(index).value;
    for (auto& owned : values_)
        if (owned == v) {
            owned = nullptr;
            return const_cast<TessValue*>(v);
        }
    return nullptr;
}

// Offsets of the intermediate buffers in one arena, for one set of input shapes.
struct MemoryPlan {
    std::vector<int64_t> offset;  // per value id; -1: not in the arena
    std::vector<size_t> size;     // per value id: bytes reserved
    size_t arena_bytes = 0;
};

// Per-run state; pooled so that concurrent runs each have one and steady-state runs reuse them.
struct Workspace {
    std::vector<Tensor> tensors;
    std::vector<TessValue*> values;
    std::vector<bool> present;
    std::vector<int> root;             // value whose buffer this value uses (-1: memory we do not own)
    std::vector<int> buffer_last_use;  // per root: last step reading any value in that buffer
    std::vector<size_t> bytes;         // per value with its own buffer: bytes used this run
    std::vector<void*> buffer;         // per value with its own buffer: where it is
    std::vector<TessValue*> owned;     // values created during the run, released after it
    std::vector<void*> heap;           // per value: its buffer outside the arena (first run of a shape), or NULL
    std::vector<int> live_heap;        // values whose heap buffer is still allocated
    std::vector<int64_t> key;          // this run's plan key (capacity reused across runs)
    void* arena = nullptr;
    size_t arena_bytes = 0;
    MemoryBudget* budget = nullptr;    // the session's: every buffer here is charged to it

    ~Workspace() {
        free_buffer(budget, arena);
        for (void* p : heap) free_buffer(budget, p);
    }

    // Frees the heap buffers no later step reads (a run without a plan yet would otherwise hold every
    // intermediate at once: for BERT-base, 150 MB more than the plan's arena).
    void release_dead_buffers(int step) {
        size_t kept = 0;
        for (int id : live_heap) {
            if (buffer_last_use[id] > step) {
                live_heap[kept++] = id;
                continue;
            }
            free_buffer(budget, heap[id]);
            heap[id] = nullptr;
        }
        live_heap.resize(kept);
    }

    void reset(size_t value_count) {
        tensors.assign(value_count, Tensor{});
        values.assign(value_count, nullptr);
        present.assign(value_count, false);
        root.assign(value_count, -1);
        buffer_last_use.assign(value_count, -1);
        bytes.assign(value_count, 0);
        buffer.assign(value_count, nullptr);
        owned.clear();
        for (void* p : heap) free_buffer(budget, p);
        heap.assign(value_count, nullptr);
        live_heap.clear();
    }

    void finish() {
        for (TessValue* v : owned) host().value_release(v);
        owned.clear();
        for (void*& p : heap) {
            free_buffer(budget, p);
            p = nullptr;
        }
        live_heap.clear();
    }
};

// The KernelContext of one step of one run.
class StepContext final : public KernelContext {
public:
    StepContext(const CompiledGraph& graph, const CompiledGraph::Step& step, int step_index, Workspace& ws,
                OutputSink& sink, ThreadPool& pool, const MemoryPlan* plan)
        : graph_(graph), step_(step), step_index_(step_index), ws_(ws), sink_(sink), pool_(pool), plan_(plan) {}

    size_t input_count() const override { return step_.inputs.size(); }
    bool has_input(size_t i) const override {
        return i < step_.inputs.size() && step_.inputs[i] >= 0 && ws_.present[step_.inputs[i]];
    }
    const Tensor& input(size_t i) const override {
        if (!has_input(i)) throw KernelError(step_.label + ": input " + std::to_string(i) + " is missing");
        return ws_.tensors[step_.inputs[i]];
    }
    const TessValue* input_value(size_t i) const override {
        return has_input(i) ? ws_.values[step_.inputs[i]] : nullptr;
    }
    size_t output_count() const override { return step_.outputs.size(); }
    bool output_wanted(size_t i) const override {
        if (i >= step_.outputs.size()) return false;
        const auto& info = graph_.values_[step_.outputs[i]];
        return info.last_use >= 0 || info.output >= 0;
    }

    Tensor& output(size_t i, int32_t type, const Shape& shape) override {
        // Output shapes come from the model's data: a shape whose size wraps would get a small buffer.
        const size_t bytes = checked_byte_size(type, shape, "output " + std::to_string(i));
        int id = output_id(i);
        Tensor& t = ws_.tensors[id];
        t = Tensor{type, shape, nullptr, nullptr};
        ws_.present[id] = true;
        const auto& info = graph_.values_[id];
        if (info.output >= 0) {
            // Graph outputs go straight to their destination (for partitions: the core's allocation made with our
            // allocator), so nothing is copied afterwards.
            t = sink_.allocate(static_cast<size_t>(info.output), type, shape);
            ws_.values[id] = t.value;
            return t;
        }
        if (type == TESS_ELEMENT_STRING) {
            TessValue* v = nullptr;
            check(host().value_create_tensor(type, shape.data(), shape.size(), &v), step_.label);
            ws_.owned.push_back(v);
            t.value = v;
            ws_.values[id] = v;
            return t;
        }
        if (info.concat_into >= 0 && shape == info.dims) {
            t.data = concat_slot(id);
            return t;
        }
        const int reusable = step_.memory == KernelMemory::InPlaceInput0 ? 0 : step_.kernel->in_place_input();
        if (i == 0 && reusable >= 0 && can_reuse_input(static_cast<size_t>(reusable), bytes)) {
            int source = step_.inputs[static_cast<size_t>(reusable)];
            int root = ws_.root[source];
            t.data = ws_.tensors[source].data;
            share_buffer(id, root);
            return t;
        }
        if (ws_.root[id] == id) {
            // A Concat output whose inputs were written into it: the buffer exists since the first of them.
            if (bytes == ws_.bytes[id]) {
                t.data = ws_.buffer[id];
                return t;
            }
            // Shapes that disagree with the declared ones: Concat copies everything into memory of its own.
            TessValue* v = nullptr;
            check(host().value_create_tensor(type, shape.data(), shape.size(), &v), step_.label);
            ws_.owned.push_back(v);
            t = tensor_of(v);
            ws_.values[id] = v;
            return t;
        }
        t.data = own_buffer(id, bytes);
        return t;
    }

    void alias_output(size_t i, size_t input_index, const Shape& shape) override {
        const Tensor& source = input(input_index);
        int id = output_id(i);
        const auto& info = graph_.values_[id];
        if (info.output >= 0 || source.type == TESS_ELEMENT_STRING) {
            copy_tensor(source, output(i, source.type, shape));
            return;
        }
        Tensor& t = ws_.tensors[id];
        t = Tensor{source.type, shape, source.data, nullptr};
        ws_.present[id] = true;
        share_buffer(id, ws_.root[step_.inputs[input_index]]);
    }

    void set_output_value(size_t i, TessValue* value) override {
        int id = output_id(i);
        const auto& info = graph_.values_[id];
        ws_.present[id] = true;
        if (info.output >= 0) {
            sink_.set(static_cast<size_t>(info.output), value);
            ws_.values[id] = value;  // owned by the sink now, alive until the run ends
        } else {
            ws_.owned.push_back(value);
            ws_.values[id] = value;
        }
        if (host().value_kind(value) == TESS_VALUE_TENSOR) ws_.tensors[id] = tensor_of(value);
        else ws_.tensors[id] = Tensor{host().value_element_type(value), {}, nullptr, value};
    }

    ThreadPool& pool() const override { return pool_; }
    const TessHostApi& host() const override { return cpu::host(); }

private:
    int output_id(size_t i) const {
        if (i >= step_.outputs.size())
            throw KernelError(step_.label + ": output " + std::to_string(i) + " does not exist");
        return step_.outputs[i];
    }

    // Input `index`'s buffer may be overwritten when nothing reads it after this step.
    bool can_reuse_input(size_t index, size_t bytes) const {
        if (index >= step_.inputs.size() || step_.inputs[index] < 0) return false;
        int source = step_.inputs[index];
        int root = ws_.root[source];
        if (root < 0) return false;  // a partition input or constant: not ours to overwrite
        if (graph_.values_[source].output >= 0) return false;
        if (ws_.buffer_last_use[root] != step_index_) return false;
        for (size_t k = 0; k < step_.inputs.size(); ++k)
            if (k != index && step_.inputs[k] >= 0 && ws_.root[step_.inputs[k]] == root)
                return false;  // read again by this step
        return ws_.bytes[root] == bytes && ws_.tensors[source].data == ws_.buffer[root];
    }

    // Gives value `id` a buffer of its own: its place in the plan's arena, or the heap before there is a plan.
    void* own_buffer(int id, size_t bytes) {
        ws_.root[id] = id;
        ws_.buffer_last_use[id] = graph_.values_[id].last_use;
        ws_.bytes[id] = bytes;
        void* data = nullptr;
        if (plan_ != nullptr && plan_->offset[id] >= 0 && bytes <= plan_->size[id]) {
            data = static_cast<char*>(ws_.arena) + plan_->offset[id];
        } else {
            data = allocate_buffer(ws_.budget, bytes);
            ws_.heap[id] = data;
            ws_.live_heap.push_back(id);
        }
        ws_.buffer[id] = data;
        return data;
    }

    // Where a Concat input goes inside the output of the outermost Concat it ends up in (concat_in_place.cc); that
    // output's buffer is made here, by its first input, with the declared size.
    void* concat_slot(int id) {
        int64_t offset = 0;
        int root = id;
        while (graph_.values_[root].concat_into >= 0) {
            offset += graph_.values_[root].concat_offset;
            root = graph_.values_[root].concat_into;
        }
        if (ws_.root[root] != root) {
            const auto& info = graph_.values_[root];
            own_buffer(root, checked_byte_size(info.type, info.dims, info.name));
        }
        share_buffer(id, root);
        return static_cast<char*>(ws_.buffer[root]) + offset;
    }

    void share_buffer(int id, int root) {
        ws_.root[id] = root;
        if (root >= 0)
            ws_.buffer_last_use[root] = std::max(ws_.buffer_last_use[root], graph_.values_[id].last_use);
    }

    const CompiledGraph& graph_;
    const CompiledGraph::Step& step_;
    int step_index_;
    Workspace& ws_;
    OutputSink& sink_;
    ThreadPool& pool_;
    const MemoryPlan* plan_;
};

CompiledGraph::CompiledGraph(const TessGraphView& view, const KernelSource& source) {
    std::unordered_map<std::string, int> ids;
    auto intern = [&](const TessValueView* v) -> int {
        auto [it, inserted] = ids.emplace(v->name, static_cast<int>(values_.size()));
        if (inserted) {
            values_.push_back(ValueInfo{});
            values_.back().name = v->name;
            // Constants stay valid until this compiled graph is released (provider.h): read in place, never copied.
            if (v->constant != nullptr) values_.back().constant = v->constant;
            values_.back().type = v->element_type;
            if (v->rank >= 0 && v->dims != nullptr) values_.back().dims.assign(v->dims, v->dims + v->rank);
        }
        return it->second;
    };
    input_count_ = view.input_count;
    for (size_t i = 0; i < view.input_count; ++i) values_[intern(view.inputs[i])].input = static_cast<int>(i);

    for (size_t n = 0; n < view.node_count; ++n) {
        const TessNodeView& node = *view.nodes[n];
        std::string why;
        KernelSource::Match match = source.find(node, &why);
        if (!match) throw KernelError(why);
        Step step;
        step.label = std::string(node.op_type) + (node.name[0] ? std::string(" '") + node.name + "'" : std::string());
        step.memory = match.def != nullptr ? match.def->memory : KernelMemory::Normal;
        auto read = [&](const TessValueView* v) {
            if (v == nullptr) return -1;
            int id = intern(v);
            ValueInfo& info = values_[id];
            if (info.producer < 0 && info.input < 0 && info.constant == nullptr) {
                // Defined by an enclosing graph: bound by the node that runs this body.
                info.input = static_cast<int>(input_count_ + outer_names_.size());
                outer_names_.push_back(info.name);
            }
            info.last_use = static_cast<int>(n);
            return id;
        };
        for (size_t i = 0; i < node.input_count; ++i) step.inputs.push_back(read(node.inputs[i]));
        if (TESS_HAS_FIELD(&node, TessNodeView, implicit_inputs))
            for (size_t i = 0; i < node.implicit_input_count; ++i) step.inputs.push_back(read(node.implicit_inputs[i]));
        for (size_t o = 0; o < node.output_count; ++o) {
            int id = -1;
            if (node.outputs[o] != nullptr) {
                id = intern(node.outputs[o]);
            } else {
                // An omitted output still gets a slot so that kernels may write it unconditionally.
                id = static_cast<int>(values_.size());
                values_.push_back(ValueInfo{});
                values_.back().name = step.label + "#unused" + std::to_string(o);
            }
            // Every value has one definition (the loader checks the model; this guards what the core's rewrites
            // produce): two writers of one value would share, and leak, its buffer.
            const ValueInfo& existing = values_[id];
            if (existing.producer >= 0 || existing.input >= 0 || existing.constant != nullptr)
                throw KernelError(step.label + ": output '" + existing.name + "' is already defined");
            values_[id].producer = static_cast<int>(n);
            step.outputs.push_back(id);
        }
        std::vector<size_t> released;
        try {
            step.kernel = source.create(match, NodeInfo(node, &source, &released));
        } catch (const KernelError& e) {
            throw KernelError(step.label + ": " + e.what());
        }
        for (size_t i : released) {
            if (i >= node.input_count || step.inputs[i] < 0) continue;
            step.released_inputs.push_back(i);
            if (TESS_HAS_FIELD(&host(), TessHostApi, compile_release_constant) && host().compile_release_constant)
                host().compile_release_constant(&view, node.index, i);
        }
        steps_.push_back(std::move(step));
    }
    for (size_t o = 0; o < view.output_count; ++o) {
        int id = intern(view.outputs[o]);
        ValueInfo& info = values_[id];
        if (info.producer < 0 && info.input < 0 && info.constant == nullptr) {
            info.input = static_cast<int>(input_count_ + outer_names_.size());
            outer_names_.push_back(info.name);
        }
        if (info.output < 0) info.output = static_cast<int>(o);
        output_ids_.push_back(id);
    }
    choose_layouts(view);
    place_concat_inputs(view);
    fuse_producers();
    drop_released_constants();
}

CompiledGraph::~CompiledGraph() {
    for (auto& ws : free_workspaces_) ws->finish();
}

std::unique_ptr<Workspace> CompiledGraph::acquire() const {
    {
        std::lock_guard lock(mutex_);
        if (!free_workspaces_.empty()) {
            auto ws = std::move(free_workspaces_.back());
            free_workspaces_.pop_back();
            return ws;
        }
    }
    auto ws = std::make_unique<Workspace>();
    ws->budget = budget_ != nullptr ? budget_ : t_current_budget;
    return ws;
}

void CompiledGraph::release(std::unique_ptr<Workspace> ws) const {
    ws->finish();
    std::lock_guard lock(mutex_);
    free_workspaces_.push_back(std::move(ws));
}

void CompiledGraph::signature(const std::vector<Binding>& inputs, std::vector<int64_t>& key) {
    key.clear();
    for (const Binding& b : inputs) {
        if (!b.present || (b.value != nullptr && host().value_kind(b.value) != TESS_VALUE_TENSOR)) {
            key.push_back(-1);
            continue;
        }
        key.push_back(b.tensor.type);
        key.push_back(static_cast<int64_t>(b.tensor.shape.size()));
        key.insert(key.end(), b.tensor.shape.begin(), b.tensor.shape.end());
    }
}

namespace {

// Greedy placement, largest buffers first, at the lowest offset that overlaps no live buffer.
std::shared_ptr<MemoryPlan> build_plan(const Workspace& ws, const std::vector<int>& producer) {
    struct Block {
        int id;
        int first, last;
        size_t size;
        int64_t offset;
    };
    // A buffer is live from the first step writing any value in it (a Concat's inputs precede the Concat).
    std::vector<int> first(producer);
    for (size_t id = 0; id < ws.root.size(); ++id)
        if (const int root = ws.root[id]; root >= 0) first[root] = std::min(first[root], producer[id]);
    std::vector<Block> blocks;
    for (size_t id = 0; id < ws.root.size(); ++id) {
        if (ws.root[id] != static_cast<int>(id) || ws.bytes[id] == 0) continue;
        int last = std::max(ws.buffer_last_use[id], producer[id]);
        blocks.push_back(Block{static_cast<int>(id), first[id], last, round_up(ws.bytes[id]), -1});
    }
    std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) { return a.size > b.size; });
    auto plan = std::make_shared<MemoryPlan>();
    plan->offset.assign(ws.root.size(), -1);
    plan->size.assign(ws.root.size(), 0);
    std::vector<const Block*> placed;
    for (Block& b : blocks) {
        std::vector<std::pair<int64_t, int64_t>> busy;
        for (const Block* p : placed)
            if (p->first <= b.last && b.first <= p->last)
                busy.emplace_back(p->offset, p->offset + static_cast<int64_t>(p->size));
        std::sort(busy.begin(), busy.end());
        int64_t offset = 0;
        for (const auto& [start, end] : busy) {
            if (offset + static_cast<int64_t>(b.size) <= start) break;
            offset = std::max(offset, end);
        }
        b.offset = offset;
        placed.push_back(&b);
        plan->offset[b.id] = offset;
        plan->size[b.id] = b.size;
        plan->arena_bytes = std::max(plan->arena_bytes, static_cast<size_t>(offset) + b.size);
    }
    return plan;
}

}  // namespace

// A constant every reading step has copied is no longer bound: the core may free it once this graph is compiled.
void CompiledGraph::drop_released_constants() {
    std::vector<int> unreleased_reads(values_.size(), 0);
    for (const Step& step : steps_) {
        for (size_t i = 0; i < step.inputs.size(); ++i) {
            const int id = step.inputs[i];
            if (id < 0 || values_[id].constant == nullptr) continue;
            if (std::find(step.released_inputs.begin(), step.released_inputs.end(), i) == step.released_inputs.end())
                ++unreleased_reads[id];
        }
    }
    for (int id : output_ids_) ++unreleased_reads[id];
    for (size_t id = 0; id < values_.size(); ++id) {
        ValueInfo& info = values_[id];
        if (info.constant == nullptr || unreleased_reads[id] > 0) continue;
        bool read = false;
        for (const Step& step : steps_)
            for (size_t i = 0; i < step.inputs.size(); ++i) read = read || step.inputs[i] == static_cast<int>(id);
        if (read) info.constant = nullptr;
    }
}

RunScope::RunScope(const TessComputeContext* context, MemoryBudget* budget)
    : previous_(t_current_run), previous_budget_(t_current_budget) {
    t_current_run = context;
    t_current_budget = budget;
}

RunScope::~RunScope() {
    t_current_run = previous_;
    t_current_budget = previous_budget_;
}

void check_run_stop() {
    if (t_current_run == nullptr) return;
    const TessHostApi& h = host();
    if (TESS_HAS_FIELD(&h, TessHostApi, compute_should_stop) && h.compute_should_stop != nullptr &&
        h.compute_should_stop(t_current_run) != 0)
        throw RunStopped();
}

void CompiledGraph::run(const std::vector<Binding>& inputs, OutputSink& outputs, ThreadPool& pool,
                        TessComputeContext* profile) const {
    check_run_stop();  // also once per iteration of a Loop or Scan body, even one without nodes
    if (inputs.size() != input_count_ + outer_names_.size())
        throw KernelError("graph run with " + std::to_string(inputs.size()) + " inputs, expected " +
                          std::to_string(input_count_ + outer_names_.size()));
    std::unique_ptr<Workspace> ws = acquire();
    struct Releaser {
        const CompiledGraph* graph;
        std::unique_ptr<Workspace>& ws;
        ~Releaser() { graph->release(std::move(ws)); }
    } releaser{this, ws};

    ws->reset(values_.size());
    for (size_t id = 0; id < values_.size(); ++id) {
        const ValueInfo& info = values_[id];
        Binding b;
        if (info.constant != nullptr) b = bind_value(info.constant);
        else if (info.input >= 0) b = inputs[static_cast<size_t>(info.input)];
        if (!b.present) continue;
        ws->values[id] = const_cast<TessValue*>(b.value);
        ws->present[id] = true;
        ws->tensors[id] = b.tensor;
    }

    signature(inputs, ws->key);
    std::shared_ptr<const MemoryPlan> plan;
    {
        std::lock_guard lock(mutex_);
        auto it = plans_.find(ws->key);
        if (it != plans_.end()) plan = it->second;
    }
    if (plan && ws->arena_bytes < plan->arena_bytes) {
        free_buffer(ws->budget, ws->arena);
        ws->arena = nullptr;
        ws->arena_bytes = 0;
        ws->arena = allocate_buffer(ws->budget, plan->arena_bytes);
        ws->arena_bytes = plan->arena_bytes;
    }

    for (size_t s = 0; s < steps_.size(); ++s) {
        const Step& step = steps_[s];
        if (step.kernel == nullptr) continue;  // taken over by a later step
        if (s > 0) check_run_stop();
        StepContext ctx(*this, step, static_cast<int>(s), *ws, outputs, pool, plan.get());
        try {
            if (profile == nullptr) step.kernel->compute(ctx);
            else compute_profiled(step, ctx, *ws, profile);
        } catch (const KernelError& e) {
            throw KernelError(step.label + ": " + e.what());
        }
        if (!ws->live_heap.empty()) ws->release_dead_buffers(static_cast<int>(s));
    }

    // Outputs no step wrote through the sink (inputs, constants, repeated names) are copied there now.
    for (size_t o = 0; o < output_ids_.size(); ++o) {
        int id = output_ids_[o];
        const ValueInfo& info = values_[id];
        if (!ws->present[id]) throw KernelError("output '" + info.name + "' was not produced");
        if (info.producer >= 0 && info.output == static_cast<int>(o)) continue;
        const Tensor& source = ws->tensors[id];
        const TessValue* value = ws->values[id];
        if (value != nullptr && host().value_kind(value) != TESS_VALUE_TENSOR) {
            outputs.set(o, clone_value(value));
            continue;
        }
        Tensor t = outputs.allocate(o, source.type, source.shape);
        copy_tensor(source, t);
    }

    if (!plan) {
        std::vector<int> producer(values_.size());
        for (size_t id = 0; id < values_.size(); ++id) producer[id] = values_[id].producer;
        auto recorded = build_plan(*ws, producer);
        std::lock_guard lock(mutex_);
        plans_.emplace(ws->key, std::move(recorded));
    }
}

// ---- Profiling ----------------------------------------------------------------------------------------------------

namespace {

int64_t monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void append_shape(std::string& out, const int64_t* dims, size_t rank) {
    out += '[';
    for (size_t d = 0; d < rank; ++d) {
        if (d > 0) out += ',';
        out += std::to_string(dims[d]);
    }
    out += ']';
}

}  // namespace

void CompiledGraph::remember_constant_shapes(const TessGraphView& view) {
    std::unordered_map<std::string, int> ids;
    for (size_t id = 0; id < values_.size(); ++id) {
        const ValueInfo& info = values_[id];
        if (info.constant == nullptr && info.producer < 0 && info.input < 0)
            ids.emplace(info.name, static_cast<int>(id));
    }
    if (ids.empty()) return;
    for (size_t n = 0; n < view.node_count; ++n) {
        const TessNodeView& node = *view.nodes[n];
        for (size_t i = 0; i < node.input_count; ++i) {
            const TessValueView* v = node.inputs[i];
            // The view's declared dims, not the constant: the core may already have freed a released constant.
            if (v == nullptr || v->constant == nullptr || v->rank < 0) continue;
            auto it = ids.find(v->name);
            if (it == ids.end()) continue;
            if (constant_shapes_.size() < values_.size()) constant_shapes_.resize(values_.size());
            std::string& shape = constant_shapes_[static_cast<size_t>(it->second)];
            if (shape.empty()) append_shape(shape, v->dims, static_cast<size_t>(v->rank));
        }
    }
}

void CompiledGraph::compute_profiled(const Step& step, KernelContext& ctx, const Workspace& ws,
                                     TessComputeContext* profile) const {
    // "[1,3,224,224] [64,3,7,7]": "-" for an omitted input, the kind for a sequence or an optional.
    std::string shapes;
    for (int id : step.inputs) {
        if (!shapes.empty()) shapes += ' ';
        if (id >= 0 && ws.present[id]) {
            const TessValue* value = ws.values[id];
            const int32_t kind = value != nullptr ? host().value_kind(value) : TESS_VALUE_TENSOR;
            const Shape& shape = ws.tensors[id].shape;
            if (kind == TESS_VALUE_TENSOR) append_shape(shapes, shape.data(), shape.size());
            else shapes += kind == TESS_VALUE_SEQUENCE ? "sequence" : kind == TESS_VALUE_OPTIONAL ? "optional" : "?";
        } else if (id >= 0 && static_cast<size_t>(id) < constant_shapes_.size() && !constant_shapes_[id].empty()) {
            shapes += constant_shapes_[id];
        } else {
            shapes += '-';
        }
    }
    // The label is the op type, then " 'name'" for a named node (see the constructor).
    const size_t quote = step.label.find(" '");
    const std::string op_type = step.label.substr(0, quote);
    const std::string name =
        quote == std::string::npos ? "" : step.label.substr(quote + 2, step.label.size() - quote - 3);
    const int64_t start = monotonic_ns();
    step.kernel->compute(ctx);
    const int64_t end = monotonic_ns();
    host().compute_profile_node(profile, name.c_str(), op_type.c_str(), shapes.c_str(), start, end);
}

namespace {
const KernelRegistry* g_subgraph_registry = nullptr;
}

void set_subgraph_registry(const KernelRegistry* registry) { g_subgraph_registry = registry; }

std::unique_ptr<CompiledGraph> compile_subgraph(const TessGraphView& body, const KernelSource* source) {
    if (source != nullptr) return std::make_unique<CompiledGraph>(body, *source);
    if (g_subgraph_registry == nullptr) throw KernelError("no kernel registry for subgraphs");
    KernelSource builtin;
    builtin.registry = g_subgraph_registry;
    return std::make_unique<CompiledGraph>(body, builtin);
}

}  // namespace tessera::cpu
