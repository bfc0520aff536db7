// ONNX shape inference (libonnx) made safe to run on untrusted models.
#pragma once

#include <onnx/onnx_pb.h>

namespace tessera {

// onnx::shape_inference::InferShapes over `model`, with every operator's inference function guarded by the checks
// that libonnx leaves to its model checker: the number of inputs and outputs, required attributes and attribute
// types, and for the convolution and pooling families consistent ranks.  The libonnx that Debian ships (1.12)
// reads out of bounds or through NULL when a malformed node reaches its inference function (found by
// tests/fuzz/fuzz_model.cc); a guarded node is left uninferred instead, as any other node whose inference fails.
// Errors are swallowed: inference is a hint, the model is validated by Tessera's own checks.  A model importing a
// default-domain opset newer than libonnx knows is inferred node by node where the older definitions are known to
// give the same types and shapes (guarded_inference.cc), and not at all beyond the opsets surveyed.
void infer_shapes_guarded(onnx::ModelProto& model);

}  // namespace tessera
