// CPU provider: where kernels come from — the built-in registry, then the custom operators of loaded custom-op
// libraries (custom_op.h), which run inside the provider's fused partitions like any other node.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/kernel.h"
#include "tessera/custom_op.h"

namespace tessera::cpu {

struct KernelSource {
    const KernelRegistry* registry = nullptr;
    std::vector<const TessCustomOpApi*> custom_ops;

    struct Match {
        const KernelDef* def = nullptr;
        const TessCustomOpApi* custom = nullptr;
        explicit operator bool() const { return def != nullptr || custom != nullptr; }
    };
    // How to run `node`, or an empty match with `why` naming op, opset and the problem.
    Match find(const TessNodeView& node, std::string* why) const;
    // Creates the kernel for a match (attributes parsed, state created).
    std::unique_ptr<Kernel> create(const Match& match, const NodeInfo& info) const;
};

}  // namespace tessera::cpu
