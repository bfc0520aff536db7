// CPU provider, com.microsoft kernels: how each family registers its operators (domain com.microsoft, since
// version 1, open-ended), and the element-type lists they share.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/host.h"
#include "runtime/kernel.h"

namespace tessera::cpu::contrib {

inline const std::vector<int32_t> k8bit{TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8};
inline const std::vector<int32_t> kFloat32Or16{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT16};

using InputTypes = std::vector<std::pair<size_t, std::vector<int32_t>>>;

// `check` (optional): KernelDef::check, the reason a node is declined at session creation.
inline void add(KernelRegistry& registry, const char* op, InputTypes types, KernelFactory factory,
                std::function<std::string(const NodeInfo&)> check = {}) {
    registry.add(KernelDef{.domain = "com.microsoft",
                           .op_type = op,
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = std::move(types),
                           .memory = KernelMemory::Normal,
                           .factory = std::move(factory),
                           .check = std::move(check)});
}

// What the model declares of input i before running: its dims with -1 for each unknown one, or nothing when its rank
// is unknown or the input is absent.
inline std::optional<Shape> declared_dims(const NodeInfo& info, size_t i) {
    if (!info.has_input(i)) return std::nullopt;
    const TessValueView& v = *info.view().inputs[i];
    if (v.rank < 0) return std::nullopt;
    return Shape(v.dims, v.dims + v.rank);
}

// The inputs of `indices` present with a known element type all have one type ("" when so).
inline std::string same_types(const NodeInfo& info, std::initializer_list<size_t> indices) {
    int32_t first = TESS_ELEMENT_UNDEFINED;
    size_t first_index = 0;
    for (size_t i : indices) {
        const int32_t t = info.has_input(i) ? info.input_type(i) : TESS_ELEMENT_UNDEFINED;
        if (t == TESS_ELEMENT_UNDEFINED) continue;
        if (first == TESS_ELEMENT_UNDEFINED) {
            first = t;
            first_index = i;
        } else if (t != first) {
            return "inputs " + std::to_string(first_index) + " and " + std::to_string(i) +
                   " must have the same element type (T), they are " + element_type_name(first) + " and " +
                   element_type_name(t);
        }
    }
    return "";
}

// A factory for kernels whose constructor takes the node and one more argument (a variant flag).
template <typename K, typename Arg> KernelFactory factory_with(Arg arg) {
    return [arg](const NodeInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info, arg); };
}

}  // namespace tessera::cpu::contrib
