// Type and shape inference for the com.microsoft operators of onnxruntime's transformer optimizer and converters,
// which libonnx does not know: schemas of Tessera's own, handed to libonnx's inference beside its standard ones
// (guarded_inference.cc), so that the nodes after such an operator see typed, shaped values whichever provider runs
// it.  Each schema states its inputs and outputs (for the guard's count checks) and infers what the operator's
// definition fixes; a shape it cannot tell is left unknown.
#pragma once

#include <string>

#include <onnx/defs/schema.h>

namespace tessera {

// The schema of com.microsoft operator `op` at opset `version`, or NULL when Tessera has none.  Static: valid for the
// life of the process.
const onnx::OpSchema* contrib_schema(const std::string& op, int version);

}  // namespace tessera
