// Model loading: ONNX ModelProto bytes -> validated Graph.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <onnx/onnx_pb.h>

#include "graph/graph.h"

namespace tessera {

// What a model says about itself (ModelProto's descriptive fields and metadata_props), for callers to read.
struct ModelMetadata {
    std::string producer_name, producer_version, domain, description, graph_name, graph_description;
    int64_t model_version = 0;
    std::vector<std::pair<std::string, std::string>> custom;  // metadata_props, in model order
};

struct LoadedModel {
    Graph graph;
    int64_t ir_version = 0;
    std::string producer;
    ModelMetadata metadata;
};

// Supported ModelProto.ir_version range.
constexpr int64_t kMinIrVersion = 3;
constexpr int64_t kMaxIrVersion = 14;

// Reads a model file; external data is resolved inside the file's directory.
LoadedModel load_model_file(const std::filesystem::path& path);
// Parses serialized bytes; `base_dir` (may be empty) is where external data may live.
LoadedModel load_model_bytes(const void* data, size_t size, std::optional<std::filesystem::path> base_dir);

// Converts an ONNX type into the core's TypeInfo.
TypeInfo type_from_proto(const onnx::TypeProto& type);

}  // namespace tessera
