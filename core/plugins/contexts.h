// The core-side objects behind the opaque context handles that providers receive.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "common/value.h"
#include "tessera/provider.h"

namespace tessera { class ProviderInstance; }

struct TessCapabilityContext {
    std::vector<size_t> claimed;                          // node indices, in call order
    std::unordered_map<size_t, std::string> declined;     // node index -> reason
    std::vector<bool> offered;                            // indexed by node index: may be claimed
};

struct TessShapeContext {
    struct Output {
        bool set = false;
        int32_t element_type = TESS_ELEMENT_UNDEFINED;
        int64_t rank = -1;
        std::vector<int64_t> dims;
    };
    std::vector<Output> outputs;
};

struct TessComputeContext {
    const TessValue* const* inputs = nullptr;
    size_t input_count = 0;
    std::vector<tessera::ValuePtr>* outputs = nullptr;   // sized by the caller
    tessera::ProviderInstance* instance = nullptr;        // allocates outputs
};
