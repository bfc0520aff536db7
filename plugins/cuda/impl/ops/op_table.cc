// CUDA provider: the keyed operator table (op_table.h).  Nothing here touches the device, so the lookup is tested
// without a GPU (tests/cuda/test_cuda_op_table.cc).
#include "ops/op_table.h"

#include <algorithm>

namespace tessera::cuda::ops {

namespace {

// "" for the default ONNX domain, however the model spells it.
std::string_view canonical_domain(const char* domain) {
    if (domain == nullptr) return {};
    const std::string_view d(domain);
    return d == "ai.onnx" ? std::string_view() : d;
}

std::string type_list(const TypeList& types) {
    std::string s;
    for (int32_t t : types) s += (s.empty() ? "" : ", ") + std::string(type_name(t));
    return s;
}

// "inputs float32, int64" ("none" for an absent optional input).
std::string input_types(const TessNodeView& node) {
    std::string s = "inputs";
    for (size_t k = 0; k < node.input_count; ++k) {
        const TessValueView* v = node.inputs[k];
        s += (k == 0 ? " " : ", ") + std::string(v == nullptr ? "none" : type_name(v->element_type));
    }
    return node.input_count == 0 ? "no inputs" : s;
}

std::string opset_range(const OpEntry& e) {
    if (e.end_version == 0) return std::to_string(e.since_version) + "+";
    if (e.end_version == e.since_version) return std::to_string(e.since_version);
    return std::to_string(e.since_version) + "-" + std::to_string(e.end_version);
}

}  // namespace

std::string OpTable::key(std::string_view domain, std::string_view op_type) {
    std::string k(domain);
    k += '\0';
    k += op_type;
    return k;
}

void OpTable::add(OpEntry entry) {
    if (entry.domain == "ai.onnx") entry.domain.clear();
    by_op_[key(entry.domain, entry.op_type)].push_back(entries_.size());
    entries_.push_back(std::move(entry));
}

void OpTable::add(const char* op_type, int since_version, int end_version, InputTypes input_types, OpFns fns) {
    add(OpEntry{"", op_type, since_version, end_version, std::move(input_types), std::move(fns.check),
                std::move(fns.build)});
}

const OpEntry* OpTable::find(const TessNodeView& node, std::string* why) const {
    const std::string_view domain = canonical_domain(node.domain);
    const std::string_view op = node.op_type != nullptr ? node.op_type : "";
    const std::string name = (domain.empty() ? "" : std::string(domain) + ":") + std::string(op);
    const std::string opset = "opset " + std::to_string(node.opset);
    const auto found = by_op_.find(key(domain, op));
    if (found == by_op_.end()) {
        if (why != nullptr) *why = "no CUDA kernel for " + name + " (" + opset + "; " + input_types(node) + ")";
        return nullptr;
    }
    const OpEntry* best = nullptr;
    std::string type_problem, ranges;
    for (size_t i : found->second) {
        const OpEntry& e = entries_[i];
        ranges += (ranges.empty() ? "" : ", ") + opset_range(e);
        if (node.opset < e.since_version || (e.end_version != 0 && node.opset > e.end_version)) continue;
        bool types_ok = true;
        for (const auto& [index, allowed] : e.input_types) {
            if (allowed.empty() || index >= node.input_count || node.inputs[index] == nullptr) continue;
            const int32_t t = node.inputs[index]->element_type;
            if (t == TESS_ELEMENT_UNDEFINED) continue;
            if (std::find(allowed.begin(), allowed.end(), t) == allowed.end()) {
                types_ok = false;
                type_problem = "input " + std::to_string(index) + " is " + type_name(t) + "; the CUDA kernel takes " +
                               type_list(allowed);
                break;
            }
        }
        if (!types_ok) continue;
        if (best == nullptr || e.since_version > best->since_version) best = &e;
    }
    if (best == nullptr && why != nullptr) {
        if (!type_problem.empty())
            *why = name + " (" + opset + "): " + type_problem + " (" + input_types(node) + ")";
        else
            *why = "no CUDA kernel for " + name + " at " + opset + " (CUDA kernels for opsets " + ranges + "; " +
                   input_types(node) + ")";
    }
    return best;
}

}  // namespace tessera::cuda::ops
