// Provider-independent graph transforms, as registered passes run in order before partitioning.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera {

// Evaluates one node whose inputs are all constants (used by constant folding).  Returns the outputs in node order
// (host values), or an empty vector when no provider can evaluate it; never throws for that reason.
using NodeEvaluator = std::function<std::vector<ValuePtr>(const Graph& graph, size_t node_index)>;

// For each given node, the priority index of the first provider of the session that claims it (-1: none).  Fusions
// that produce operators outside the default domain (TESS_FUSED_OPS_DOMAIN's FusedConv, ...) ask before they commit and keep a
// fused node only where the provider that would have run the original nodes runs it too, so that a session whose
// providers lack the fused operator keeps its graph, and fusing never moves work to another provider.
using PlacementQuery = std::function<std::vector<int>(const Graph& graph, const std::vector<size_t>& node_indices)>;

// Optimization levels, as in onnxruntime (the C ABI's TESS_OPTIMIZATION_* values).
enum class OptimizationLevel : int {
    Disabled = 0,  // only the lowerings that make a graph runnable
    Basic = 1,     // semantics-preserving rewrites in the default domain: folding, identity removal, BatchNorm folding
    Extended = 2,  // fusions into compound operators (TESS_FUSED_OPS_DOMAIN) where the provider runs them
    All = 3,       // everything
};

struct PassContext {
    NodeEvaluator evaluate;  // may be empty: folding is skipped
    PlacementQuery placement;  // may be empty: fusions into non-default domains are skipped
};

class GraphPass {
public:
    virtual ~GraphPass() = default;
    virtual const char* name() const = 0;
    // Rewrites the graph; returns true when it changed something.
    virtual bool run(Graph& graph, const PassContext& context) const = 0;
    // Lowerings that make a graph runnable (rather than faster) run even when optimization is off.
    virtual bool required() const { return false; }
    // The lowest optimization level that runs this pass (required passes run at every level).
    virtual OptimizationLevel level() const { return OptimizationLevel::Basic; }
};

// The ordered list of passes; later passes (fusions, layout rewrites) register here.
std::vector<std::unique_ptr<GraphPass>> default_passes();

// Runs the passes of `level` and below until none changes the graph (bounded), keeping it topologically sorted.
void optimize(Graph& graph, const PassContext& context, OptimizationLevel level);

// The level a TESS_OPTIMIZATION_* value names (99, onnxruntime's ORT_ENABLE_ALL, is All); throws for others.
OptimizationLevel optimization_level_from_int(int level);

// Pass factories (one file each).
std::unique_ptr<GraphPass> make_expand_gradient_pass();
std::unique_ptr<GraphPass> make_eliminate_identity_pass();
std::unique_ptr<GraphPass> make_constant_folding_pass();
std::unique_ptr<GraphPass> make_fuse_quantized_lookup_pass();
std::unique_ptr<GraphPass> make_dead_node_pass();
std::unique_ptr<GraphPass> make_fuse_conv_batchnorm_pass();
std::unique_ptr<GraphPass> make_fold_channel_affine_pass();
std::unique_ptr<GraphPass> make_fuse_conv_activation_pass();
std::unique_ptr<GraphPass> make_batchnorm_to_conv_pass();
std::unique_ptr<GraphPass> make_pool_before_pointwise_conv_pass();
std::unique_ptr<GraphPass> make_fuse_gelu_pass();
std::unique_ptr<GraphPass> make_fuse_attention_pass();
std::unique_ptr<GraphPass> make_fuse_matmul_bias_pass();
std::unique_ptr<GraphPass> make_fuse_qdq_pass();
std::unique_ptr<GraphPass> make_fuse_dynamic_quantization_pass();

// Replaces every read of `from` by `to` (node inputs only).
void rename_uses(Graph& graph, const std::string& from, const std::string& to);

}  // namespace tessera
