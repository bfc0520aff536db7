// CPU provider: Concat without copies.  When every dimension before the concatenation axis is 1, each input is one
// contiguous stretch of the output, so the step producing it can write it there directly and Concat has nothing
// left to move.  That is channel concatenation of one image, in NCHW and in the blocked layout alike (a blocked
// tensor's channel blocks are outermost too): SqueezeNet's fire modules, and DenseNet's dense blocks, where each
// Concat's output is the first input of the next, so that a whole block fills one buffer.
//
// The choice is made here, once, from the declared shapes; the run (graph_executor.cc) follows it for a value only
// while its shape is the declared one, and Concat copies whatever is not already in place.
#include <cstdlib>
#include <optional>
#include <string_view>

#include "runtime/graph_executor.h"
#include "util/data_movement.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kSlotAlignment = 64;  // kernels may store whole vectors: every slot starts as a buffer would

bool known(const std::vector<int64_t>& dims) {
    for (int64_t d : dims)
        if (d < 0) return false;
    return true;
}

// The node's axis attribute (Concat before opset 4 defaults to 1); nullopt when absent or not an integer.
std::optional<int64_t> concat_axis(const TessNodeView& node) {
    for (size_t a = 0; a < node.attribute_count; ++a) {
        const TessAttributeView& attr = *node.attributes[a];
        if (std::string_view(attr.name) == "axis")
            return attr.type == TESS_ATTR_INT ? std::optional<int64_t>(attr.i) : std::nullopt;
    }
    return node.opset < 4 ? std::optional<int64_t>(1) : std::nullopt;
}

}  // namespace

void CompiledGraph::place_concat_inputs(const TessGraphView& view) {
    // TESSERA_CPU_CONCAT_IN_PLACE=0 keeps every Concat copying (for measurements and tests).
    if (const char* env = std::getenv("TESSERA_CPU_CONCAT_IN_PLACE"); env != nullptr && std::string_view(env) == "0")
        return;
    for (size_t s = 0; s < steps_.size(); ++s) {
        const Step& step = steps_[s];
        if (step.memory != KernelMemory::ConcatInPlace || step.outputs.size() != 1) continue;
        const int out = step.outputs[0];
        const ValueInfo& target = values_[out];
        const size_t element_size = movement::element_size(target.type);
        const auto axis = concat_axis(*view.nodes[s]);
        const int64_t rank = static_cast<int64_t>(target.dims.size());
        // A graph output lives where the caller's sink puts it, not in a buffer of ours.
        if (element_size == 0 || !axis || target.output >= 0 || rank == 0 || !known(target.dims)) continue;
        const int64_t a = *axis < 0 ? *axis + rank : *axis;
        if (a < 0 || a >= rank) continue;
        int64_t outer = 1, inner = 1;
        for (int64_t d = 0; d < a; ++d) outer *= target.dims[d];
        for (int64_t d = a + 1; d < rank; ++d) inner *= target.dims[d];
        if (outer != 1) continue;

        int64_t offset = 0;  // bytes
        for (size_t i = 0; i < step.inputs.size(); ++i) {
            const int id = step.inputs[i];
            if (id < 0) continue;
            ValueInfo& v = values_[id];
            const int64_t bytes = (v.dims.size() == target.dims.size() && known(v.dims))
                                      ? v.dims[a] * inner * static_cast<int64_t>(element_size)
                                      : -1;
            if (bytes < 0) break;  // later offsets are unknown
            int uses_here = 0;
            for (int other : step.inputs) uses_here += other == id;
            // Only a value this graph makes, once, for this Concat alone to place; a graph input, constant or
            // output lives elsewhere.
            const bool placeable = v.producer >= 0 && v.input < 0 && v.output < 0 && v.constant == nullptr &&
                                   v.concat_into < 0 && uses_here == 1 && v.type == target.type &&
                                   offset % kSlotAlignment == 0;
            if (placeable) {
                v.concat_into = out;
                v.concat_offset = offset;
            }
            offset += bytes;
        }
    }
}

}  // namespace tessera::cpu
