// Internal declarations shared by the sample provider's files (not installed, not part of any ABI).
//
//   plugin.cc    the ABI glue: entry point, provider table, instances, allocator, data transfer, counters
//   ops.cc       which nodes the provider runs: one parser used by both the capability query and compile
//   compiled.cc  compile a fused subgraph into a list of steps over numbered slots; run it
//   kernels.cc   the arithmetic (knows nothing about Tessera)
#pragma once

#include <string>
#include <vector>

#include "kernels.h"
#include "tessera/provider.h"

namespace sample {

// The host table the core handed to the entry function; valid while the plugin is loaded.
extern const TessHostApi* g_host;

TessStatus* make_error(int32_t code, const std::string& message);

// The provider's memory: every tensor buffer it owns comes from here (the core's allocations through the provider
// table, the intermediates of a run, the weights a compile uploads).  Throws std::bad_alloc.
void* allocate_bytes(size_t bytes, size_t alignment);
void free_bytes(void* pointer);

// ---- ops.cc -----------------------------------------------------------------------------------------------------

enum class OpKind { Binary, Sum, Unary, MatMul, Gemm };

// One node of a compiled partition.  Inputs and output are slot numbers (compiled.cc); -1 is an absent input.
struct Step {
    OpKind kind = OpKind::Unary;
    Binary binary = Binary::Add;
    Unary unary = Unary::Relu;
    UnaryParams unary_params;
    GemmParams gemm_params;
    std::vector<int> inputs;
    int output = -1;
    std::string label;  // "Relu 'conv1_relu'", for error messages
};

// Fills `step` (kind and parameters, not the slots) from the node and returns "", or returns why the sample provider
// does not run this node.  Used by get_capability (the reason goes to capability_decline) and by compile.
std::string parse_node(const TessNodeView* node, Step& step);

// Which inputs of the node are tensors the step reads at run time (Clip's min/max are folded into the parameters).
size_t runtime_input_count(const TessNodeView* node, const Step& step);

// ---- compiled.cc ------------------------------------------------------------------------------------------------

TessStatus* compile_graph(const TessGraphView* graph, TessCompiled** out);
TessStatus* compute_graph(TessCompiled* compiled, TessComputeContext* context);
void release_graph(TessCompiled* compiled);

}  // namespace sample
