// Model-local functions (ModelProto.functions): every call is inlined when the model is loaded, so the rest of the
// runtime sees only ordinary nodes.
#pragma once

#include <onnx/onnx_pb.h>

namespace tessera {

// Replaces, in the main graph and every subgraph, each node that calls a function of the model by the function's
// body (with inputs, outputs and attribute references bound, internal names made unique).  Throws for recursion or
// a call that does not fit the function's signature.
void inline_model_functions(onnx::ModelProto& model);

}  // namespace tessera
