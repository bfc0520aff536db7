#include "exec/executor.h"

#include <cstring>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "common/status.h"
#include "exec/profiler.h"
#include "exec/run_control.h"
#include "plugins/contexts.h"

namespace tessera {

CompiledPartition& CompiledPartition::operator=(CompiledPartition&& other) noexcept {
    if (this == &other) return *this;
    if (compiled != nullptr && instance != nullptr) instance->release_compiled(compiled);
    instance = other.instance;
    compiled = std::exchange(other.compiled, nullptr);
    nodes = std::move(other.nodes);
    inputs = std::move(other.inputs);
    outputs = std::move(other.outputs);
    input_ids = std::move(other.input_ids);
    output_ids = std::move(other.output_ids);
    copy_count = other.copy_count;
    input_copied = std::move(other.input_copied);
    memory_kind = std::move(other.memory_kind);
    node_names = std::move(other.node_names);
    node_ops = std::move(other.node_ops);
    node_name_ptrs = std::move(other.node_name_ptrs);
    node_op_ptrs = std::move(other.node_op_ptrs);
    input_ptrs = std::move(other.input_ptrs);
    output_ptrs = std::move(other.output_ptrs);
    return *this;
}

CompiledPartition::~CompiledPartition() {
    if (compiled != nullptr && instance != nullptr) instance->release_compiled(compiled);
}

Executor::Executor(const Graph& graph, std::vector<CompiledPartition> partitions)
    : partitions_(std::move(partitions)) {
    auto intern = [&](const std::string& name) {
        auto [it, inserted] = ids_.emplace(name, names_.size());
        if (inserted) names_.push_back(name);
        return it->second;
    };
    for (const auto& in : graph.inputs) intern(in);
    for (const auto& [name, _] : graph.initializers) intern(name);
    for (auto& p : partitions_) {
        p.input_ids.clear();
        p.output_ids.clear();
        for (const auto& in : p.inputs) p.input_ids.push_back(intern(in));
        for (const auto& out : p.outputs) p.output_ids.push_back(intern(out));
    }
    for (const auto& out : graph.outputs) intern(out);

    constants_.resize(names_.size());
    for (const auto& [name, value] : graph.initializers) constants_[ids_.at(name)] = value.get();
    last_use_.assign(names_.size(), 0);
    for (size_t p = 0; p < partitions_.size(); ++p)
        for (size_t id : partitions_[p].input_ids) last_use_[id] = p;
    is_output_.assign(names_.size(), false);
    for (const auto& out : graph.outputs) is_output_[ids_.at(out)] = true;
}

size_t Executor::value_id(const std::string& name) const {
    auto it = ids_.find(name);
    return it == ids_.end() ? SIZE_MAX : it->second;
}

ProviderInstance* Executor::owner_of(const TessValue& value) const {
    if (value.is_host()) return nullptr;
    for (const auto& p : partitions_)
        if (p.instance->memory_kind() && std::strcmp(p.instance->memory_kind()->name, value.memory->name) == 0)
            return p.instance;
    fail(TESS_STATUS_INTERNAL, "no provider owns memory kind '{}'", value.memory->name);
}

ValuePtr Executor::to_host(const TessValue& value) const {
    ProviderInstance* owner = owner_of(value);
    return owner == nullptr ? clone_host(value) : owner->copy_to_host(value);
}

ValuePtr Executor::to_instance(const TessValue& value, ProviderInstance& instance) const {
    if (value.is_host()) return instance.copy_from_host(value);
    ValuePtr host = to_host(value);
    return instance.copy_from_host(*host);
}

namespace {

// The first partition's instance with the same memory kind stands for that memory kind.
const ProviderInstance* memory_owner_of(const std::vector<CompiledPartition>& partitions,
                                        const ProviderInstance& instance) {
    for (const auto& p : partitions)
        if (p.instance->memory_kind() != nullptr && instance.memory_kind() != nullptr &&
            std::strcmp(p.instance->memory_kind()->name, instance.memory_kind()->name) == 0)
            return p.instance;
    return &instance;
}

bool same_memory(const TessValue& value, const ProviderInstance& instance) {
    if (instance.is_host_memory()) return value.is_host();
    return !value.is_host() && std::strcmp(value.memory->name, instance.memory_kind()->name) == 0;
}

}  // namespace

const ProviderInstance* Executor::memory_owner(const ProviderInstance& instance) const {
    return memory_owner_of(partitions_, instance);
}

void RunControl::check() const {
    if (terminate != nullptr && terminate->load(std::memory_order_relaxed))
        fail(TESS_STATUS_CANCELLED, "the run was terminated (TessRunOptions)");
    if (should_stop()) fail(TESS_STATUS_CANCELLED, "the run took longer than its {} ms timeout", timeout_ms);
}

std::vector<ValuePtr> Executor::run(const std::vector<std::pair<size_t, const TessValue*>>& inputs,
                                    const std::vector<size_t>& output_ids, Profiler* profiler,
                                    const RunControl* control) const {
    const int64_t run_start = profiler != nullptr ? Profiler::now_ns() : 0;
    const int64_t run_index = profiler != nullptr ? profiler->begin_run() : -1;
    // Per-run state lives on this stack frame: concurrent runs share nothing mutable.
    std::vector<const TessValue*> slots(names_.size(), nullptr);
    std::vector<ValuePtr> owned(names_.size());
    for (size_t id = 0; id < names_.size(); ++id)
        if (constants_[id]) slots[id] = constants_[id];
    for (const auto& [id, value] : inputs) slots[id] = value;

    std::vector<const TessValue*> args;
    // A tensor is copied into a memory kind once per run, however many partitions there read it.
    std::map<std::pair<size_t, const ProviderInstance*>, ValuePtr> copies;
    for (size_t p = 0; p < partitions_.size(); ++p) {
        const CompiledPartition& part = partitions_[p];
        if (control != nullptr) control->check();
        args.clear();
        for (size_t i = 0; i < part.input_ids.size(); ++i) {
            const TessValue* value = slots[part.input_ids[i]];
            if (value == nullptr)
                fail(TESS_STATUS_INVALID_ARGUMENT, "value '{}' needed by provider '{}' was not provided",
                     part.inputs[i], part.instance->provider().name);
            if (value->kind == TESS_VALUE_TENSOR && value->element_type != TESS_ELEMENT_STRING &&
                !same_memory(*value, *part.instance)) {
                ValuePtr& copy = copies[{part.input_ids[i], memory_owner(*part.instance)}];
                if (!copy) copy = to_instance(*value, *part.instance);
                value = copy.get();
            }
            args.push_back(value);
        }
        std::vector<ValuePtr> results(part.output_ids.size());
        TessComputeContext ctx;
        ctx.inputs = args.data();
        ctx.input_count = args.size();
        ctx.outputs = &results;
        ctx.instance = part.instance;
        ctx.control = control;
        ComputeProfile profile{profiler, run_index, p, &part.instance->provider().name};
        const int64_t compute_start = profiler != nullptr ? Profiler::now_ns() : 0;
        if (profiler != nullptr) ctx.profile = &profile;
        throw_if_error(part.instance->api().compute(part.compiled, &ctx),
                       fmt::format("provider '{}'", part.instance->provider().name));
        if (profiler != nullptr)
            profiler->partition(run_index, p, part.instance->provider().name, part.nodes.size(), compute_start,
                                Profiler::now_ns());
        for (size_t o = 0; o < results.size(); ++o) {
            if (!results[o])
                fail(TESS_STATUS_INTERNAL, "provider '{}' did not produce '{}'", part.instance->provider().name,
                     part.outputs[o]);
            size_t id = part.output_ids[o];
            slots[id] = results[o].get();
            owned[id] = std::move(results[o]);
        }
        // Free what no later partition reads, so peak memory follows liveness.
        for (size_t id : part.input_ids)
            if (last_use_[id] == p && !is_output_[id] && owned[id]) {
                owned[id].reset();
                slots[id] = nullptr;
            }
    }

    std::vector<ValuePtr> outputs;
    outputs.reserve(output_ids.size());
    for (size_t k = 0; k < output_ids.size(); ++k) {
        size_t id = output_ids[k];
        const TessValue* value = slots[id];
        if (value == nullptr) fail(TESS_STATUS_INTERNAL, "output '{}' was not produced", names_[id]);
        bool requested_again = std::find(output_ids.begin() + static_cast<long>(k) + 1, output_ids.end(), id) !=
                               output_ids.end();
        if (owned[id] && !requested_again && (owned[id]->kind != TESS_VALUE_TENSOR || owned[id]->is_host())) {
            outputs.push_back(std::move(owned[id]));  // hand over without a copy
            slots[id] = nullptr;
        } else {
            outputs.push_back(value->kind == TESS_VALUE_TENSOR ? to_host(*value) : clone_host(*value));
        }
    }
    if (profiler != nullptr) profiler->run(run_index, run_start, Profiler::now_ns());
    return outputs;
}

}  // namespace tessera
