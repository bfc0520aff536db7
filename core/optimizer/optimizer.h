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

struct PassContext {
    NodeEvaluator evaluate;  // may be empty: folding is skipped
};

class GraphPass {
public:
    virtual ~GraphPass() = default;
    virtual const char* name() const = 0;
    // Rewrites the graph; returns true when it changed something.
    virtual bool run(Graph& graph, const PassContext& context) const = 0;
    // Lowerings that make a graph runnable (rather than faster) run even when optimization is off.
    virtual bool required() const { return false; }
};

// The ordered list of passes; later passes (fusions, layout rewrites) register here.
std::vector<std::unique_ptr<GraphPass>> default_passes();

// Runs the passes until none changes the graph (bounded), keeping it topologically sorted.  Level 0 runs only the
// required lowerings.
void optimize(Graph& graph, const PassContext& context, int level);

// Pass factories (one file each).
std::unique_ptr<GraphPass> make_expand_gradient_pass();
std::unique_ptr<GraphPass> make_eliminate_identity_pass();
std::unique_ptr<GraphPass> make_constant_folding_pass();
std::unique_ptr<GraphPass> make_dead_node_pass();

// Replaces every read of `from` by `to` (node inputs only).
void rename_uses(Graph& graph, const std::string& from, const std::string& to);

}  // namespace tessera
