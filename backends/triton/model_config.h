// The parts of a Triton model configuration (config.pbtxt, as the JSON Triton hands to backends) that the Tessera
// backend uses, Tessera's options from its `parameters`, the data type mapping, and the auto-completion of inputs,
// outputs and max_batch_size from the ONNX model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/tessera.hpp"
#include "triton/core/tritonserver.h"

namespace tessera_triton {

// ---- Data types -----------------------------------------------------------------------------------------------

// Triton's type for a Tessera element type; TRITONSERVER_TYPE_INVALID when Triton has none (complex, float8, ...).
TRITONSERVER_DataType triton_type_for(tessera::ElementType type) noexcept;
// Tessera's element type for a Triton type; TESS_ELEMENT_UNDEFINED for TRITONSERVER_TYPE_INVALID.
tessera::ElementType tessera_type_for(TRITONSERVER_DataType type) noexcept;
// The configuration's spelling ("TYPE_FP32", "TYPE_STRING" for BYTES) and back (INVALID for an unknown name).
std::string config_type_name(TRITONSERVER_DataType type);
TRITONSERVER_DataType parse_config_type(const std::string& name) noexcept;
// Bytes of one element; 0 for BYTES (variable size).
size_t triton_type_size(TRITONSERVER_DataType type) noexcept;

// "[2,3,-1]".
std::string shape_text(const int64_t* dims, size_t rank);
inline std::string shape_text(const std::vector<int64_t>& dims) { return shape_text(dims.data(), dims.size()); }

// ---- Configuration --------------------------------------------------------------------------------------------

// One `input` or `output` entry.
struct TensorConfig {
    std::string name;
    TRITONSERVER_DataType data_type = TRITONSERVER_TYPE_INVALID;
    std::vector<int64_t> dims;                    // without the batch dimension; -1 for a variable one
    std::optional<std::vector<int64_t>> reshape;  // the shape the model sees (without batch) when it differs
    bool allow_ragged_batch = false;
};

// Tessera's session options from the configuration's `parameters` (string values, see docs/serving.md).
struct TesseraOptions {
    std::optional<std::vector<std::string>> providers;  // priority order; unset: chosen by the instance kind
    int intra_op_threads = 0;                           // 0: one per core
    int optimization_level = TESS_OPTIMIZATION_ALL;
    bool strict = false;
    std::string plugin_dir;    // colon-separated directories searched after Tessera's own
    bool share_session = false;  // one session for all instances of the model instead of one each
};

struct ModelConfig {
    std::string name;
    int64_t max_batch_size = 0;
    std::vector<TensorConfig> inputs;
    std::vector<TensorConfig> outputs;
    std::string model_filename = "model.onnx";  // default_model_filename, when set
    bool dynamic_batching = false;
    TesseraOptions options;

    const TensorConfig* find_input(const std::string& input_name) const;
    const TensorConfig* find_output(const std::string& output_name) const;
};

// Parses Triton's JSON form of the configuration; Tessera's options start from `defaults` (the backend's settings)
// and the model's `parameters` override them.  Throws BackendError (INVALID_ARG) naming the field at fault.
ModelConfig parse_model_config(const nlohmann::json& config, const TesseraOptions& defaults);

// Tessera's options from the `parameters` object alone (also used for the backend-wide defaults).
void parse_tessera_parameters(const nlohmann::json& parameters, TesseraOptions& options);

// Fills what the configuration leaves out from the model, as the onnxruntime backend does: when inputs or outputs
// are missing, they are added from the session's graph inputs and outputs; a model whose every input and output
// has a variable first dimension gets max_batch_size `default_max_batch_size` when none is set, and dynamic
// batching when max_batch_size > 1 and no scheduler is chosen.  Returns true when `config` changed.
bool auto_complete_config(nlohmann::json& config, const tessera::Session& session, int64_t default_max_batch_size,
                          const std::string& model_name);

// Checks the configuration against the model: every configured input and output exists with the same type and
// compatible dimensions, every model input without a default value is configured, and batching is possible when
// max_batch_size > 0.  Throws BackendError naming the tensor and what differs.
void validate_config_against_model(const ModelConfig& config, const tessera::Session& session);

}  // namespace tessera_triton
