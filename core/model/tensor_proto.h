// Conversion of ONNX TensorProto (initializers, Constant attributes) into host values.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <onnx/onnx_pb.h>

#include "common/value.h"

namespace tessera {

// Where external tensor data may be read from: only files inside `model_dir` (no absolute paths, no "..", no links
// that leave it).  An empty optional forbids external data.
struct ExternalDataPolicy {
    std::optional<std::filesystem::path> model_dir;
};

// Converts a tensor; `what` names it in error messages ("initializer 'w'", "attribute 'value' of node ...").
ValuePtr tensor_from_proto(const onnx::TensorProto& proto, const ExternalDataPolicy& policy, const std::string& what);

// The same for a proto the caller is about to discard: raw data is moved into the value instead of copied, so that
// a large model's weights exist once in memory while it loads (the value's data is then 16-byte aligned, not 64).
ValuePtr take_tensor_from_proto(onnx::TensorProto& proto, const ExternalDataPolicy& policy, const std::string& what);

}  // namespace tessera
