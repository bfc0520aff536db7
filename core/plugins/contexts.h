// The core-side objects behind the opaque context handles that providers receive.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/value.h"
#include "tessera/provider.h"

namespace tessera { class ProviderInstance; }
namespace tessera { struct ComputeProfile; }  // exec/profiler.h
namespace tessera { struct RunControl; }      // exec/run_control.h

struct TessCapabilityContext {
    std::vector<size_t> claimed;                          // node indices, in call order
    std::unordered_map<size_t, std::string> declined;     // node index -> reason
    std::vector<bool> offered;                            // indexed by node index: may be claimed
};

namespace tessera {

// The compile call in progress on this thread, and the (node, input) reads of constants its provider released
// (TessHostApi::compile_release_constant).  Set by the session around each compile call.
struct CompileReleases {
    const TessGraphView* view = nullptr;
    std::vector<std::pair<size_t, size_t>> released;  // (graph node index, input index)
    // When set, called for each release as it happens (the session frees a constant at its last reader's release).
    std::function<void(size_t node_index, size_t input_index)> on_release;
};
CompileReleases*& active_compile_releases();  // thread-local; NULL outside compile calls

}  // namespace tessera

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
    const tessera::ComputeProfile* profile = nullptr;     // the run's profiler; NULL when the run is not profiled
    const tessera::RunControl* control = nullptr;         // the run's terminate flag and deadline; NULL: none
};
