// CPU provider: which values of a compiled graph are held in the blocked channel layout (util/blocked_conv.h).
//
// Convolutions read NCHW or blocked input and write either (BlockedLayoutKernel), so a chain of them needs no
// reorders; elementwise operators, and Concat on the channel axis, do not care how channels are ordered as long as
// all their tensors agree, so they pass a layout on.  Values joined by such operators form a group that is blocked
// as a whole, when every member can be: a float 4-D tensor with a known shape whose channel count is a multiple
// of 16, made and read only by kernels that handle the layout, and neither an input nor an output of the graph.
// Everything else stays NCHW, so no kernel outside this file and the convolution ever sees a blocked tensor.
#include <numeric>
#include <string_view>

#include "runtime/graph_executor.h"
#include "util/blocked_conv.h"

namespace tessera::cpu {

namespace {

enum class LayoutUse { Fixed, Elementwise, ChannelConcat, Converting };

bool one_of(std::string_view op, std::initializer_list<std::string_view> ops) {
    for (std::string_view o : ops)
        if (op == o) return true;
    return false;
}

LayoutUse layout_use(const TessNodeView& node, const Kernel* kernel) {
    const std::string_view op = node.op_type, domain = node.domain;
    if (dynamic_cast<const BlockedLayoutKernel*>(kernel) != nullptr) return LayoutUse::Converting;
    if (!domain.empty() && domain != "ai.onnx") return LayoutUse::Fixed;
    if (one_of(op, {"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh", "Identity", "Add",
                    "Sub", "Mul", "Div", "Max", "Min", "Sum"}))
        return LayoutUse::Elementwise;
    if (op == "Concat") {
        for (size_t a = 0; a < node.attribute_count; ++a) {
            const TessAttributeView& attr = *node.attributes[a];
            if (std::string_view(attr.name) == "axis" && attr.type == TESS_ATTR_INT && (attr.i == 1 || attr.i == -3))
                return LayoutUse::ChannelConcat;
        }
    }
    return LayoutUse::Fixed;
}

// Union-find over value ids.
struct Groups {
    std::vector<int> parent;
    explicit Groups(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
    int find(int v) {
        while (parent[v] != v) v = parent[v] = parent[parent[v]];
        return v;
    }
    void join(int a, int b) { parent[find(a)] = find(b); }
};

}  // namespace

void CompiledGraph::choose_layouts(const TessGraphView& view) {
    std::vector<BlockedLayoutKernel*> converting(steps_.size(), nullptr);
    bool any = false;
    for (size_t s = 0; s < steps_.size(); ++s) {
        converting[s] = dynamic_cast<BlockedLayoutKernel*>(steps_[s].kernel.get());
        any = any || converting[s] != nullptr;
    }
    if (!any) return;

    auto eligible = [&](int id) {
        const ValueInfo& v = values_[id];
        if (v.type != TESS_ELEMENT_FLOAT32 || v.dims.size() != 4 || v.dims[1] % kChannelBlock != 0) return false;
        for (int64_t d : v.dims)
            if (d <= 0) return false;
        return v.producer >= 0 && v.input < 0 && v.output < 0 && v.constant == nullptr;
    };
    Groups groups(values_.size());
    std::vector<bool> pinned(values_.size(), false);  // must stay NCHW
    for (size_t id = 0; id < values_.size(); ++id) pinned[id] = !eligible(static_cast<int>(id));
    auto pin_all = [&](const Step& step) {
        for (int id : step.inputs)
            if (id >= 0) pinned[id] = true;
        for (int id : step.outputs) pinned[id] = true;
    };

    for (size_t s = 0; s < steps_.size(); ++s) {
        const Step& step = steps_[s];
        const TessNodeView& node = *view.nodes[s];
        const LayoutUse use = layout_use(node, step.kernel.get());
        switch (use) {
            case LayoutUse::Fixed: pin_all(step); break;
            case LayoutUse::Elementwise:
            case LayoutUse::ChannelConcat: {
                // Data inputs: every input, or for Clip its first (min and max are scalars).
                const bool concat = use == LayoutUse::ChannelConcat;
                const size_t data_inputs = std::string_view(node.op_type) == "Clip" ? 1 : step.inputs.size();
                bool ok = step.outputs.size() == 1 && data_inputs <= node.input_count;
                const int out = ok ? step.outputs[0] : -1;
                for (size_t i = 0; ok && i < step.inputs.size(); ++i) {
                    const int id = step.inputs[i];
                    if (i >= data_inputs) {
                        ok = id < 0 || values_[id].constant != nullptr;
                        continue;
                    }
                    // Elementwise: no broadcasting, every data input shaped as the output.  Concat: inputs differ
                    // in channels only, which eligibility requires to be whole blocks.
                    ok = id >= 0 && (concat || values_[id].dims == values_[out].dims);
                }
                if (!ok) {
                    pin_all(step);
                    break;
                }
                for (size_t i = 0; i < data_inputs; ++i) groups.join(step.inputs[i], out);
                break;
            }
            case LayoutUse::Converting: {
                const BlockedLayoutKernel& k = *converting[s];
                for (size_t i = 0; i < step.inputs.size(); ++i) {
                    const int id = step.inputs[i];
                    if (id < 0) continue;
                    if (!k.reads_blocked(i)) pinned[id] = true;
                    if (k.same_layout_as_output(i) && !step.outputs.empty()) groups.join(id, step.outputs[0]);
                }
                for (size_t o = 0; o < step.outputs.size(); ++o)
                    if (o > 0 || !k.writes_blocked()) pinned[step.outputs[o]] = true;
                break;
            }
        }
    }
    // A group is blocked when none of its members must stay NCHW.
    std::vector<bool> group_pinned(values_.size(), false);
    for (size_t id = 0; id < values_.size(); ++id)
        if (pinned[id]) group_pinned[groups.find(static_cast<int>(id))] = true;
    auto blocked = [&](int id) { return id >= 0 && !group_pinned[groups.find(id)]; };

    for (size_t s = 0; s < steps_.size(); ++s) {
        if (converting[s] == nullptr) continue;
        const Step& step = steps_[s];
        std::vector<bool> blocked_inputs(step.inputs.size(), false);
        for (size_t i = 0; i < step.inputs.size(); ++i)
            blocked_inputs[i] = blocked(step.inputs[i]);
        converting[s]->set_layout(blocked_inputs, !step.outputs.empty() && blocked(step.outputs[0]));
    }
}

}  // namespace tessera::cpu
