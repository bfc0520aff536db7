// Conversion between ONNX protobuf files and Tessera values, shared by the `tessera` CLI, the conformance runner, the
// provider kit and the tests.
//
// Files follow the ONNX backend-test layout: input_K.pb / output_K.pb hold a TensorProto, a SequenceProto or an
// OptionalProto, and which one is said by the declared type of the graph value they belong to (tensor_type,
// sequence_type, optional_type), exactly as onnx's own test runner decides.
//
// Every function reports failure by throwing tessera::Error with a message meant for a person.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <onnx/onnx-data_pb.h>  // SequenceProto, OptionalProto (and, through it, onnx_pb.h)

#include "tessera/tessera.hpp"

namespace tessera::onnx_io {

// ---- Files and models ----------------------------------------------------------------------------------------

// The whole file; NOT_FOUND when it cannot be read.
std::string read_file(const std::string& path);
// Writes `bytes` to `path`, replacing it.
void write_file(const std::string& path, const std::string& bytes);

// Parses a ModelProto; INVALID_MODEL when the bytes are not one.  External data is not loaded.
onnx::ModelProto load_model(const std::string& path);
onnx::ModelProto parse_model(const void* data, size_t size);
// A model with only what its callers see: the graph's inputs and its initializers' names (no weights), read without
// holding the whole model in memory.  graph_inputs() works on it.
onnx::ModelProto parse_model_interface(const void* data, size_t size);
onnx::ModelProto load_model_interface(const std::string& path);

// ---- Declared types ------------------------------------------------------------------------------------------
// A graph value's declared type is described with tessera::ValueInfo, whether it comes from the model proto or from
// a session: kind, element type of the (innermost) tensors, and for tensors the shape (-1 and dim_params for
// dimensions that are not fixed).

ValueInfo value_info_from_proto(const onnx::ValueInfoProto& proto);
// Graph inputs that have no initializer (the ones a caller feeds), in graph order.
std::vector<ValueInfo> graph_inputs(const onnx::ModelProto& model);
std::vector<ValueInfo> graph_outputs(const onnx::ModelProto& model);

// "tensor(float) [1, 3, N, 224]" ("?" for an unknown dimension, the symbolic name where there is one).
std::string describe_type(const ValueInfo& type);
// "tensor(float) [1, 1000]", "sequence(tensor(int64)) of 3", "optional(tensor(float)) empty".
std::string describe_value(ValueView value);
// "[1, 3, 224, 224]".
std::string format_dims(const std::vector<int64_t>& dims);

// Empty when `value` may be fed for `declared`; otherwise why not: wrong kind, element type, rank or a fixed
// dimension that differs.
std::string check_matches(ValueView value, const ValueInfo& declared);

// ---- Protobuf <-> values -------------------------------------------------------------------------------------

// A tensor from a TensorProto: raw_data or the typed fields (float_data, int32_data for every type of 16 bits or
// less -- float16/bfloat16 as bit patterns, 4- and 2-bit types as packed bytes, float6 one code per entry --,
// int64_data, double_data, uint64_data, string_data).  External data is refused.
Value tensor_from_proto(const onnx::TensorProto& proto);
// `element_type` types an empty sequence / optional whose proto does not say.
Value sequence_from_proto(const onnx::SequenceProto& proto, ElementType element_type);
Value optional_from_proto(const onnx::OptionalProto& proto, ElementType element_type);

// Reads one value file, choosing the proto kind from `declared.kind` (an unknown kind reads a TensorProto).
Value load_value(const std::string& path, const ValueInfo& declared);

// Values to protos; every numeric tensor is written as raw_data, strings as string_data.
onnx::TensorProto tensor_to_proto(ValueView tensor, const std::string& name);
onnx::SequenceProto sequence_to_proto(ValueView sequence, const std::string& name);
onnx::OptionalProto optional_to_proto(ValueView optional, const std::string& name);
// Writes `value` as the proto of its own kind, named `name`.
void save_value(const std::string& path, ValueView value, const std::string& name);

// ---- Comparison ----------------------------------------------------------------------------------------------

struct Tolerance {
    double rtol = 1e-3;
    double atol = 1e-7;
};

// The ONNX backend runner's rule (numpy.testing.assert_allclose): kinds, element types and shapes must be equal;
// numbers pass when |actual - expected| <= atol + rtol * |expected|, NaN matches NaN, an infinity only itself;
// strings must be equal; sequences and optionals compare item by item.  float16, bfloat16, float8, float6 and float4
// are compared as their float values, integers as numbers, complex numbers by the modulus of the difference.
// Returns "" when they match, else a one-line description of the first difference and the error statistics.
std::string compare_values(ValueView actual, ValueView expected, const Tolerance& tolerance);

// ---- Backend-test cases -------------------------------------------------------------------------------------
// A case is a directory with model.onnx and test_data_set_N/ folders of input_K.pb and output_K.pb.

// onnx's default tolerance, or the rtol/atol the case's data.json gives (as onnx's loader reads them).
Tolerance case_tolerance(const std::string& case_dir);
// `dir`/`prefix`K.pb for K = 0, 1, ... while they exist.
std::vector<std::string> numbered_files(const std::string& dir, const char* prefix);
// The distinct operator types of a model's main graph, sorted ("domain:op" outside the default domain; subgraph
// bodies do not count); empty when the model cannot be read.
std::vector<std::string> model_operators(const std::string& model_path);

// ---- Generated inputs ----------------------------------------------------------------------------------------

// The ONNX "light model" input: a float32 tensor of the declared shape, unknown dimensions counted as 1, holding
// arange(n).reshape(shape) / n.  INVALID_ARGUMENT for any other declared type.
Value light_input(const ValueInfo& declared);
// A deterministic input for any declared type: the light rule for floating-point tensors (converted to the
// declared type), zeros for integer and bool tensors, empty strings, empty sequences and empty optionals.
Value generated_input(const ValueInfo& declared);

// ---- Inspection ----------------------------------------------------------------------------------------------

// Element `index` of a numeric tensor as a double (sub-byte and 8/16-bit float types decoded).
double element_as_double(ElementType type, const void* data, size_t index);
bool is_floating_point(ElementType type);

// A short human summary: the first `max_values` values, then min/max/mean for numeric tensors.
std::string summarize(ValueView value, size_t max_values = 6);

}  // namespace tessera::onnx_io
