// Model saving: the core's Graph -> an ONNX model file.  What a session writes when it is created with an optimized
// model path (tess_session_options_set_optimized_model_path): the graph the optimizer produced, before partitioning.
#pragma once

#include <cstddef>
#include <filesystem>
#include <limits>

#include <onnx/onnx_pb.h>

#include "graph/graph.h"

namespace tessera {

struct SaveModelOptions {
    // A model whose serialized size would exceed this (protobuf cannot read a message over 2 GiB) stores every
    // initializer of `external_min_bytes` or more in "<file name>.data" next to the model file, as ONNX external
    // data (location, offset, length).  Tests lower it to exercise that path.
    size_t max_inline_bytes = static_cast<size_t>(std::numeric_limits<int>::max());
    size_t external_min_bytes = 1024;
};

// Writes `graph` as an ONNX ModelProto to `path` (replaced when it exists):
//  - ir_version: the graph's, at least 7 (initializers need not be graph inputs); opset imports: graph.opsets (the
//    optimizer's "ai.tessera" domain included); producer "tessera" and the library's version;
//  - nodes in graph order with their attributes as stored (subgraph bodies as their attributes hold them);
//  - graph inputs and outputs with their types from graph.types, value_info for the other typed node outputs;
//  - initializers as TensorProto with raw_data (strings as string_data), or as external data (above).
// Values whose type the IR cannot restore exactly (optionals, maps, unknown kinds) are written without a type.
// The model is streamed to the file one initializer at a time, so saving holds no second copy of the weights.
// Throws tessera::Error naming the path: TESS_STATUS_RUNTIME_ERROR when a file cannot be written (a partly written
// file is removed), TESS_STATUS_NOT_IMPLEMENTED when the model is too large even with external data.
void save_model_file(const Graph& graph, const std::filesystem::path& path, const SaveModelOptions& options = {});

// The ONNX type of a value, when it can be written exactly; false otherwise (see above).
bool type_to_proto(const TypeInfo& type, onnx::TypeProto& out);

}  // namespace tessera
