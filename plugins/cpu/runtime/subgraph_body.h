// CPU provider: a graph attribute compiled once at kernel creation, for kernels that run user subgraphs
// (FlexAttention's score_mod/prob_mod).  Values of enclosing graphs that the body reads reach it through the node's
// implicit inputs, which follow the regular inputs in the kernel context; they are bound by name here.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/graph_executor.h"
#include "runtime/kernel.h"

namespace tessera::cpu {

class SubgraphBody {
public:
    // Compiles the graph attribute `attribute` of the node; throws KernelError when it is missing or not a graph.
    SubgraphBody(const NodeInfo& info, std::string_view attribute) {
        const TessAttributeView* attr = info.find(attribute);
        if (attr == nullptr || attr->type != TESS_ATTR_GRAPH || attr->graph == nullptr)
            throw KernelError(std::string(info.op_type()) + ": attribute '" + std::string(attribute) +
                              "' must be a graph");
        graph_ = compile_subgraph(*attr->graph, info.source());
        const TessNodeView& node = info.view();
        std::unordered_map<std::string, size_t> implicit;
        for (size_t i = 0; i < node.implicit_input_count; ++i)
            implicit[node.implicit_inputs[i]->name] = node.input_count + i;
        for (const auto& name : graph_->outer_names()) {
            auto it = implicit.find(name);
            if (it == implicit.end())
                throw KernelError(std::string(info.op_type()) + ": subgraph '" + std::string(attribute) +
                                  "' reads '" + name + "', which is not in scope");
            outer_inputs_.push_back(it->second);
        }
    }

    const CompiledGraph& graph() const { return *graph_; }

    // Runs the body on `inputs` (its formal parameters) plus the outer-scope values taken from the context.
    void run(const KernelContext& ctx, std::vector<Binding> inputs, OutputSink& outputs) const {
        for (size_t index : outer_inputs_) inputs.push_back(input_binding(ctx, index));
        graph_->run(inputs, outputs, ctx.pool());
    }

    static Binding tensor_binding(const Tensor& t) {
        Binding b;
        b.present = true;
        b.tensor = t;
        b.value = t.value;
        return b;
    }

    static Binding input_binding(const KernelContext& ctx, size_t index) {
        Binding b;
        if (!ctx.has_input(index)) return b;
        b.present = true;
        b.value = ctx.input_value(index);
        // A sequence or an optional passes on as its value; only a tensor has a Tensor view (input() refuses others).
        if (b.value == nullptr || ctx.host().value_kind(b.value) == TESS_VALUE_TENSOR) b.tensor = ctx.input(index);
        return b;
    }

private:
    std::unique_ptr<CompiledGraph> graph_;
    std::vector<size_t> outer_inputs_;  // context input index of each of graph_->outer_names()
};

}  // namespace tessera::cpu
