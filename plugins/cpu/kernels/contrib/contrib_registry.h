// CPU provider, com.microsoft kernels: how each family registers its operators (domain com.microsoft, since
// version 1, open-ended), and the element-type lists they share.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "runtime/kernel.h"

namespace tessera::cpu::contrib {

inline const std::vector<int32_t> k8bit{TESS_ELEMENT_INT8, TESS_ELEMENT_UINT8};
inline const std::vector<int32_t> kFloat32Or16{TESS_ELEMENT_FLOAT32, TESS_ELEMENT_FLOAT16};

using InputTypes = std::vector<std::pair<size_t, std::vector<int32_t>>>;

inline void add(KernelRegistry& registry, const char* op, InputTypes types, KernelFactory factory) {
    registry.add(KernelDef{.domain = "com.microsoft",
                           .op_type = op,
                           .since_version = 1,
                           .end_version = 0,
                           .input_types = std::move(types),
                           .memory = KernelMemory::Normal,
                           .factory = std::move(factory)});
}

// A factory for kernels whose constructor takes the node and one more argument (a variant flag).
template <typename K, typename Arg> KernelFactory factory_with(Arg arg) {
    return [arg](const NodeInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info, arg); };
}

}  // namespace tessera::cpu::contrib
