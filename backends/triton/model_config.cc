#include "model_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include "triton_support.h"

namespace tessera_triton {

namespace {

struct TypePair {
    tessera::ElementType tessera;
    TRITONSERVER_DataType triton;
};

// Every type both sides know.  Bool is one byte per element on both, so it passes through unchanged.
constexpr TypePair kTypePairs[] = {
    {TESS_ELEMENT_BOOL, TRITONSERVER_TYPE_BOOL},     {TESS_ELEMENT_UINT8, TRITONSERVER_TYPE_UINT8},
    {TESS_ELEMENT_UINT16, TRITONSERVER_TYPE_UINT16}, {TESS_ELEMENT_UINT32, TRITONSERVER_TYPE_UINT32},
    {TESS_ELEMENT_UINT64, TRITONSERVER_TYPE_UINT64}, {TESS_ELEMENT_INT8, TRITONSERVER_TYPE_INT8},
    {TESS_ELEMENT_INT16, TRITONSERVER_TYPE_INT16},   {TESS_ELEMENT_INT32, TRITONSERVER_TYPE_INT32},
    {TESS_ELEMENT_INT64, TRITONSERVER_TYPE_INT64},   {TESS_ELEMENT_FLOAT16, TRITONSERVER_TYPE_FP16},
    {TESS_ELEMENT_FLOAT32, TRITONSERVER_TYPE_FP32},  {TESS_ELEMENT_FLOAT64, TRITONSERVER_TYPE_FP64},
    {TESS_ELEMENT_STRING, TRITONSERVER_TYPE_BYTES},  {TESS_ELEMENT_BFLOAT16, TRITONSERVER_TYPE_BF16},
};

// Protobuf's JSON writes int64 fields as strings; Triton converts most back to numbers, but accept both.
int64_t json_int(const nlohmann::json& value, const std::string& what) {
    if (value.is_number_integer()) return value.get<int64_t>();
    if (value.is_string()) {
        const std::string& text = value.get_ref<const std::string&>();
        int64_t result = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), result);
        if (ec == std::errc() && end == text.data() + text.size()) return result;
    }
    throw invalid_arg(what + " must be an integer, not " + value.dump());
}

std::vector<int64_t> json_dims(const nlohmann::json& value, const std::string& what) {
    std::vector<int64_t> dims;
    if (value.is_null()) return dims;
    if (!value.is_array()) throw invalid_arg(what + " must be a list of integers");
    for (const auto& d : value) {
        const int64_t dim = json_int(d, what);
        if (dim < -1)
            throw invalid_arg(what + " has the dimension " + std::to_string(dim) + " (use -1 for a variable one)");
        dims.push_back(dim);
    }
    return dims;
}

TensorConfig parse_tensor(const nlohmann::json& entry, const char* kind, size_t index) {
    const std::string where = std::string(kind) + " " + std::to_string(index);
    if (!entry.is_object()) throw invalid_arg(where + " of the configuration is not an object");
    TensorConfig tensor;
    tensor.name = entry.value("name", "");
    if (tensor.name.empty()) throw invalid_arg(where + " of the configuration has no name");
    const std::string what = std::string(kind) + " '" + tensor.name + "'";
    const std::string type_name = entry.value("data_type", "");
    tensor.data_type = parse_config_type(type_name);
    if (tensor.data_type == TRITONSERVER_TYPE_INVALID)
        throw invalid_arg(what + " has data_type '" + type_name + "', which the tessera backend does not support");
    tensor.dims = json_dims(entry.value("dims", nlohmann::json()), what + " dims");
    if (auto reshape = entry.find("reshape"); reshape != entry.end() && reshape->is_object())
        tensor.reshape = json_dims(reshape->value("shape", nlohmann::json::array()), what + " reshape");
    tensor.allow_ragged_batch = entry.value("allow_ragged_batch", false);
    return tensor;
}

std::string lower(std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
}

std::string trim(const std::string& text) {
    const auto first = text.find_first_not_of(" \t\n");
    if (first == std::string::npos) return "";
    return text.substr(first, text.find_last_not_of(" \t\n") - first + 1);
}

bool parse_bool(const std::string& key, const std::string& text) {
    const std::string value = lower(trim(text));
    if (value == "true" || value == "1" || value == "yes" || value == "on") return true;
    if (value == "false" || value == "0" || value == "no" || value == "off") return false;
    throw invalid_arg("parameter '" + key + "' must be true or false, not '" + text + "'");
}

// An integer from `low` to `high`; the error says what the parameter takes (`allowed`, when the caller also
// accepts names).
int parse_int(const std::string& key, const std::string& text, int low, int high, const std::string& allowed = "") {
    const std::string value = trim(text);
    int result = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), result);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || result < low || result > high)
        throw invalid_arg("parameter '" + key + "' must be " +
                          (allowed.empty() ? "an integer from " + std::to_string(low) + " to " + std::to_string(high)
                                           : allowed) +
                          ", not '" + text + "'");
    return result;
}

// A `parameters` entry's text: {"string_value": "..."} in the JSON Triton gives backends.
std::string parameter_text(const std::string& key, const nlohmann::json& value) {
    if (value.is_object()) {
        auto found = value.find("string_value");
        if (found != value.end() && found->is_string()) return found->get<std::string>();
    }
    if (value.is_string()) return value.get<std::string>();  // backend command-line settings are plain strings
    throw invalid_arg("parameter '" + key + "' has no string_value");
}

}  // namespace

TRITONSERVER_DataType triton_type_for(tessera::ElementType type) noexcept {
    for (const TypePair& pair : kTypePairs)
        if (pair.tessera == type) return pair.triton;
    return TRITONSERVER_TYPE_INVALID;
}

tessera::ElementType tessera_type_for(TRITONSERVER_DataType type) noexcept {
    for (const TypePair& pair : kTypePairs)
        if (pair.triton == type) return pair.tessera;
    return TESS_ELEMENT_UNDEFINED;
}

std::string config_type_name(TRITONSERVER_DataType type) {
    if (type == TRITONSERVER_TYPE_BYTES) return "TYPE_STRING";
    return std::string("TYPE_") + TRITONSERVER_DataTypeString(type);
}

TRITONSERVER_DataType parse_config_type(const std::string& name) noexcept {
    if (name == "TYPE_STRING") return TRITONSERVER_TYPE_BYTES;
    if (name.rfind("TYPE_", 0) != 0) return TRITONSERVER_TYPE_INVALID;
    const std::string bare = name.substr(5);
    for (const TypePair& pair : kTypePairs)
        if (bare == TRITONSERVER_DataTypeString(pair.triton)) return pair.triton;
    return TRITONSERVER_TYPE_INVALID;
}

size_t triton_type_size(TRITONSERVER_DataType type) noexcept {
    return type == TRITONSERVER_TYPE_BYTES ? 0 : TRITONSERVER_DataTypeByteSize(type);
}

std::string shape_text(const int64_t* dims, size_t rank) {
    std::string text = "[";
    for (size_t i = 0; i < rank; ++i) {
        if (i > 0) text += ',';
        text += std::to_string(dims[i]);
    }
    text += ']';
    return text;
}

const TensorConfig* ModelConfig::find_input(const std::string& input_name) const {
    for (const TensorConfig& t : inputs)
        if (t.name == input_name) return &t;
    return nullptr;
}

const TensorConfig* ModelConfig::find_output(const std::string& output_name) const {
    for (const TensorConfig& t : outputs)
        if (t.name == output_name) return &t;
    return nullptr;
}

void parse_tessera_parameters(const nlohmann::json& parameters, TesseraOptions& options) {
    if (!parameters.is_object()) return;
    for (const auto& [key, value] : parameters.items()) {
        const std::string text = parameter_text(key, value);
        if (key == "providers") {
            std::vector<std::string> names;
            size_t start = 0;
            while (start <= text.size()) {
                const size_t comma = std::min(text.find(',', start), text.size());
                if (std::string name = trim(text.substr(start, comma - start)); !name.empty())
                    names.push_back(name);
                start = comma + 1;
            }
            options.providers = names;  // empty: every usable provider, CPU last
        } else if (key == "intra_op_threads") {
            options.intra_op_threads = parse_int(key, text, 0, 1024);
        } else if (key == "optimization_level") {
            static const std::map<std::string, int> kNames = {
                {"disabled", 0}, {"basic", 1}, {"extended", 2}, {"all", 3}};
            const auto named = kNames.find(lower(trim(text)));
            options.optimization_level =
                named != kNames.end() ? named->second
                                      : parse_int(key, text, 0, 3, "disabled, basic, extended or all (or 0 to 3)");
        } else if (key == "strict") {
            options.strict = parse_bool(key, text);
        } else if (key == "plugin_dir") {
            options.plugin_dir = trim(text);
        } else if (key == "share_session") {
            options.share_session = parse_bool(key, text);
        }
        // Other keys belong to Triton or to other tools (model-analyzer, repository agents): ignored.
    }
}

ModelConfig parse_model_config(const nlohmann::json& config, const TesseraOptions& defaults) {
    if (!config.is_object()) throw invalid_arg("the model configuration is not a JSON object");
    ModelConfig parsed;
    parsed.options = defaults;
    parsed.name = config.value("name", "");
    if (auto mbs = config.find("max_batch_size"); mbs != config.end())
        parsed.max_batch_size = json_int(*mbs, "max_batch_size");
    if (parsed.max_batch_size < 0) throw invalid_arg("max_batch_size must not be negative");
    if (auto inputs = config.find("input"); inputs != config.end() && inputs->is_array())
        for (size_t i = 0; i < inputs->size(); ++i) parsed.inputs.push_back(parse_tensor((*inputs)[i], "input", i));
    if (auto outputs = config.find("output"); outputs != config.end() && outputs->is_array())
        for (size_t i = 0; i < outputs->size(); ++i)
            parsed.outputs.push_back(parse_tensor((*outputs)[i], "output", i));
    if (std::string file = config.value("default_model_filename", ""); !file.empty()) {
        if (file.find('/') != std::string::npos || file == "..")
            throw invalid_arg("default_model_filename '" + file + "' must be a file name inside the version folder");
        parsed.model_filename = file;
    }
    parsed.dynamic_batching = config.contains("dynamic_batching");
    if (auto parameters = config.find("parameters"); parameters != config.end())
        parse_tessera_parameters(*parameters, parsed.options);
    return parsed;
}

bool auto_complete_config(nlohmann::json& config, const tessera::Session& session, int64_t default_max_batch_size,
                          const std::string& model_name) {
    const bool has_inputs = config.contains("input") && config["input"].is_array() && !config["input"].empty();
    const bool has_outputs = config.contains("output") && config["output"].is_array() && !config["output"].empty();
    if (has_inputs && has_outputs) {
        log_info("model '" + model_name + "': inputs and outputs are configured, nothing to auto-complete");
        return false;
    }
    const std::vector<tessera::ValueInfo> inputs = session.inputs();
    const std::vector<tessera::ValueInfo> outputs = session.outputs();

    // Inputs with a default value (initializers listed as inputs) are not served: Triton never sends them.
    std::vector<tessera::ValueInfo> required_inputs;
    for (size_t i = 0; i < inputs.size(); ++i)
        if (!tess_session_input_has_default(session.get(), i)) required_inputs.push_back(inputs[i]);

    // Batching needs a variable first dimension on every served input and output, as in the onnxruntime backend.
    bool can_batch = true;
    const std::vector<tessera::ValueInfo>* served[] = {&required_inputs, &outputs};
    for (const std::vector<tessera::ValueInfo>* list : served)
        for (const tessera::ValueInfo& info : *list)
            if (info.kind != TESS_VALUE_TENSOR || !info.has_shape || info.dims.empty() || info.dims[0] != -1)
                can_batch = false;

    int64_t max_batch_size =
        config.contains("max_batch_size") ? json_int(config["max_batch_size"], "max_batch_size") : 0;
    if (can_batch) {
        if (max_batch_size == 0) {
            max_batch_size = std::max<int64_t>(default_max_batch_size, 0);
            config["max_batch_size"] = max_batch_size;
            log_warning("model '" + model_name + "': auto-completed max_batch_size to " +
                        std::to_string(max_batch_size) +
                        " since every input and output has a variable first dimension; set max_batch_size (and "
                        "the inputs and outputs) in config.pbtxt to choose another");
        }
        if (max_batch_size > 1 && !config.contains("dynamic_batching") && !config.contains("sequence_batching"))
            config["dynamic_batching"] = nlohmann::json::object();
    } else if (max_batch_size != 0) {
        throw invalid_arg("auto-complete failed for model '" + model_name + "': max_batch_size is " +
                          std::to_string(max_batch_size) +
                          " but the model cannot batch (an input or output has no variable first dimension)");
    }

    auto describe = [&](const std::vector<tessera::ValueInfo>& infos, const char* kind) {
        nlohmann::json list = nlohmann::json::array();
        for (const tessera::ValueInfo& info : infos) {
            const TRITONSERVER_DataType type = triton_type_for(info.element_type);
            if (info.kind != TESS_VALUE_TENSOR || type == TRITONSERVER_TYPE_INVALID)
                throw invalid_arg("auto-complete failed for model '" + model_name + "': " + kind + " '" + info.name +
                                  "' is a " + tessera::value_kind_name(info.kind) + " of " +
                                  tessera::element_type_name(info.element_type) + ", which Triton cannot carry");
            nlohmann::json entry = {{"name", info.name}, {"data_type", config_type_name(type)}};
            nlohmann::json dims = nlohmann::json::array();
            if (!info.has_shape)
                dims.push_back(-1);  // unknown rank: let any rank-1 request through; Tessera checks at run time
            else
                for (size_t d = max_batch_size > 0 ? 1 : 0; d < info.dims.size(); ++d) dims.push_back(info.dims[d]);
            if (dims.empty()) {
                // Triton has no rank-0 tensor: a scalar per batch item is [1] to clients, reshaped to [] for us.
                dims.push_back(1);
                if (max_batch_size > 0) entry["reshape"] = {{"shape", nlohmann::json::array()}};
            }
            entry["dims"] = dims;
            list.push_back(entry);
        }
        return list;
    };
    if (!has_inputs) config["input"] = describe(required_inputs, "input");
    if (!has_outputs) config["output"] = describe(outputs, "output");
    return true;
}

void validate_config_against_model(const ModelConfig& config, const tessera::Session& session) {
    const std::vector<tessera::ValueInfo> inputs = session.inputs();
    const std::vector<tessera::ValueInfo> outputs = session.outputs();
    const bool batching = config.max_batch_size > 0;

    auto names_of = [](const std::vector<tessera::ValueInfo>& infos) {
        std::vector<std::string> names;
        for (const tessera::ValueInfo& info : infos) names.push_back(info.name);
        return join(names, "none");
    };
    auto check_tensor = [&](const TensorConfig& tensor, const std::vector<tessera::ValueInfo>& infos,
                            const char* kind) {
        auto info = std::find_if(infos.begin(), infos.end(),
                                 [&](const tessera::ValueInfo& i) { return i.name == tensor.name; });
        const std::string what = std::string("configuration ") + kind + " '" + tensor.name + "'";
        if (info == infos.end())
            throw invalid_arg(what + " is not an " + kind + " of the model (its " + kind + "s: " + names_of(infos) +
                              ")");
        if (info->kind != TESS_VALUE_TENSOR)
            throw invalid_arg(what + " is a " + tessera::value_kind_name(info->kind) +
                              " in the model; the tessera backend serves tensors only");
        const tessera::ElementType want = tessera_type_for(tensor.data_type);
        if (want != info->element_type)
            throw invalid_arg(what + " has data_type " + config_type_name(tensor.data_type) + " but the model's is " +
                              tessera::element_type_name(info->element_type));
        if (!info->has_shape) return;  // rank unknown to the model: checked per request at run time
        std::vector<int64_t> model_dims = info->dims;
        if (batching) {
            if (model_dims.empty() || model_dims[0] != -1)
                throw invalid_arg(what + ": max_batch_size is " + std::to_string(config.max_batch_size) +
                                  " but the model's shape " + shape_text(info->dims) +
                                  " has no variable first dimension to batch along; set max_batch_size: 0");
            model_dims.erase(model_dims.begin());
        }
        const std::vector<int64_t>& seen = tensor.reshape ? *tensor.reshape : tensor.dims;
        bool compatible = seen.size() == model_dims.size();
        for (size_t d = 0; compatible && d < seen.size(); ++d)
            compatible = seen[d] == -1 || model_dims[d] == -1 || seen[d] == model_dims[d];
        if (!compatible)
            throw invalid_arg(what + " has " + (tensor.reshape ? "reshape " : "dims ") + shape_text(seen) +
                              (batching ? " (after the batch dimension)" : "") + " but the model's shape is " +
                              shape_text(info->dims));
    };
    for (const TensorConfig& tensor : config.inputs) check_tensor(tensor, inputs, "input");
    for (const TensorConfig& tensor : config.outputs) check_tensor(tensor, outputs, "output");
    for (size_t i = 0; i < inputs.size(); ++i)
        if (config.find_input(inputs[i].name) == nullptr && !tess_session_input_has_default(session.get(), i))
            throw invalid_arg("model input '" + inputs[i].name +
                              "' is missing from the configuration (a model input without a default value must be "
                              "configured)");
    if (config.outputs.empty()) throw invalid_arg("the configuration has no outputs");
}

}  // namespace tessera_triton
