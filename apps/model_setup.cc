// What `tessera run` and `tessera bench` share; see model_setup.h.
#include "model_setup.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>

#include "default_model.h"
#include "numpy_io.h"
#include "onnx_io.h"

namespace fs = std::filesystem;

namespace tessera::cli {
namespace {

// A dimension size after NAME= or between the x's of a shape; the command line is wrong when it is not one.
int64_t parse_dim(const std::string& option, const std::string& text) {
    return parse_int(option, text, 0, 1 << 30);
}

// "NAME=VALUE" split at the last '=' (names may hold one, values never do).
std::pair<std::string, std::string> split_assignment(const std::string& option, const std::string& text,
                                                     const char* expected) {
    const size_t eq = text.rfind('=');
    if (eq == std::string::npos || eq == 0)
        throw UsageError("option '" + option + "' wants " + expected + ", got '" + text + "'");
    return {text.substr(0, eq), text.substr(eq + 1)};
}

bool is_tensor(const ValueInfo& info) { return info.kind == TESS_VALUE_TENSOR || info.kind == TESS_VALUE_UNKNOWN; }

std::string input_names(const std::vector<ValueInfo>& inputs) {
    std::string out;
    for (const ValueInfo& info : inputs) out += (out.empty() ? "'" : ", '") + info.name + "'";
    return out.empty() ? "none" : out;
}

}  // namespace

void rethrow_in(const std::string& context, const Error& e) { throw Error(e.code(), context + ": " + e.what()); }

double milliseconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// ---- --dim / --shape ---------------------------------------------------------------------------------------------

bool ShapeFlags::parse(Args& args) {
    std::string value;
    if (args.option("--dim", value)) {
        auto [name, size] = split_assignment("--dim", value, "NAME=SIZE");
        dims.emplace_back(name, parse_dim("--dim", size));
        return true;
    }
    if (args.option("--shape", value)) {
        auto [name, text] = split_assignment("--shape", value, "INPUT=DxDx...");
        std::vector<int64_t> shape;  // "INPUT=" alone is a scalar
        for (size_t start = 0; !text.empty() && start <= text.size();) {
            size_t end = text.find('x', start);
            if (end == std::string::npos) end = text.size();
            shape.push_back(parse_dim("--shape", text.substr(start, end - start)));
            start = end + 1;
        }
        shapes.emplace_back(name, std::move(shape));
        return true;
    }
    return false;
}

void ShapeFlags::apply(std::vector<ValueInfo>& inputs) const {
    const std::vector<ValueInfo> declared = inputs;  // --shape is checked against the model, not against --dim
    for (const auto& [name, size] : dims) {
        bool found = false;
        for (ValueInfo& info : inputs)
            for (size_t d = 0; is_tensor(info) && d < info.dims.size() && d < info.dim_params.size(); ++d)
                if (info.dim_params[d] == name && info.dims[d] < 0) {
                    info.dims[d] = size;
                    found = true;
                }
        if (!found)
            throw Error(TESS_STATUS_INVALID_ARGUMENT,
                        "--dim " + name + ": no input has a dimension named '" + name + "' that the model leaves open");
    }
    for (const auto& [name, shape] : shapes) {
        size_t k = 0;
        while (k < inputs.size() && inputs[k].name != name) ++k;
        if (k == inputs.size())
            throw Error(TESS_STATUS_INVALID_ARGUMENT,
                        "--shape " + name + ": the model has no such input (inputs: " + input_names(inputs) + ")");
        const ValueInfo& model = declared[k];
        const std::string wrong = "--shape " + name + ": input '" + name + "' is " + onnx_io::describe_type(model);
        if (!is_tensor(model)) throw Error(TESS_STATUS_INVALID_ARGUMENT, wrong + ", not a tensor");
        if (model.has_shape && model.dims.size() != shape.size())
            throw Error(TESS_STATUS_INVALID_ARGUMENT, wrong + ", of rank " + std::to_string(model.dims.size()));
        for (size_t d = 0; model.has_shape && d < shape.size(); ++d)
            if (model.dims[d] >= 0 && model.dims[d] != shape[d])
                throw Error(TESS_STATUS_INVALID_ARGUMENT, wrong + ", whose dimension " + std::to_string(d) +
                                                              " is fixed at " + std::to_string(model.dims[d]));
        inputs[k].has_shape = true;
        inputs[k].dims = shape;
        inputs[k].dim_params.assign(shape.size(), "");
    }
}

const char* ShapeFlags::help() {
    return "  --dim NAME=SIZE     size of the symbolic dimension NAME wherever an input has it (repeatable)\n"
           "  --shape IN=DxDx..   whole shape of input IN, e.g. image=1x3x224x224; wins over --dim (repeatable)\n";
}

// ---- Inputs ------------------------------------------------------------------------------------------------------

// Read from the model proto because the session also lists the inputs whose initializer is an overridable default;
// the proto is dropped before the session loads the model, so memory does not peak at two copies.
std::vector<ValueInfo> inputs_to_feed(const std::optional<std::string>& model) {
    if (!model) {
        if (tessera_default_model_size == 0)
            throw UsageError("this build embeds no default model; give a MODEL");
        return onnx_io::graph_inputs(
            onnx_io::parse_model_interface(tessera_default_model, tessera_default_model_size));
    }
    try {
        return onnx_io::graph_inputs(onnx_io::load_model_interface(*model));
    } catch (const Error& e) {
        rethrow_in("cannot load model '" + *model + "'", e);
    }
}

std::vector<Value> read_inputs(const std::string& dir, const std::vector<ValueInfo>& inputs) {
    if (!fs::is_directory(dir)) throw Error(TESS_STATUS_NOT_FOUND, "input directory '" + dir + "' does not exist");
    static const std::regex input_file(R"(input_(\d+)\.pb)");
    size_t file_count = 0;
    for (const auto& entry : fs::directory_iterator(dir))
        if (std::regex_match(entry.path().filename().string(), input_file)) ++file_count;
    std::vector<Value> values;
    for (size_t k = 0; k < inputs.size(); ++k) {
        const std::string path = (fs::path(dir) / ("input_" + std::to_string(k) + ".pb")).string();
        const ValueInfo& declared = inputs[k];
        if (!fs::exists(path))
            throw Error(TESS_STATUS_NOT_FOUND, "missing input file '" + path + "' for input '" + declared.name +
                                                   "' (the model has " + std::to_string(inputs.size()) + " inputs)");
        Value value;
        try {
            value = onnx_io::load_value(path, declared);
        } catch (const Error& e) {
            rethrow_in("input '" + declared.name + "'", e);
        }
        const std::string mismatch = onnx_io::check_matches(value, declared);
        if (!mismatch.empty())
            throw Error(TESS_STATUS_INVALID_ARGUMENT, "'" + path + "' does not fit input '" + declared.name +
                                                          "': " + mismatch);
        values.push_back(std::move(value));
    }
    if (file_count != inputs.size())
        throw Error(TESS_STATUS_INVALID_ARGUMENT, "'" + dir + "' holds " + std::to_string(file_count) +
                                                      " input_*.pb files but the model has " +
                                                      std::to_string(inputs.size()) + " inputs");
    return values;
}

// ---- Input files -------------------------------------------------------------------------------------------------

namespace {

bool ends_with(const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

Value checked(Value value, const std::string& path, const ValueInfo& declared) {
    const std::string mismatch = onnx_io::check_matches(value, declared);
    if (!mismatch.empty())
        throw Error(TESS_STATUS_INVALID_ARGUMENT, "'" + path + "' does not fit input '" + declared.name + "' (" +
                                                      onnx_io::describe_type(declared) + "): " + mismatch);
    return value;
}

}  // namespace

Value load_input_file(const std::string& path, const ValueInfo& declared) {
    try {
        Value value = ends_with(path, ".npy") ? numpy_io::load_npy(path) : onnx_io::load_value(path, declared);
        return checked(std::move(value), path, declared);
    } catch (const Error& e) {
        rethrow_in("input '" + declared.name + "'", e);
    }
}

bool InputFlags::parse(Args& args) {
    std::string value;
    if (args.option("--inputs", inputs)) return true;
    if (!args.option("--input", value)) return false;
    const size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == value.size())
        throw UsageError("option '--input' wants NAME=FILE, got '" + value + "'");
    files.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    return true;
}

const char* InputFlags::help() {
    return "  --input NAME=FILE   the value of input NAME from a .npy file or a .pb file (TensorProto, SequenceProto\n"
           "                      or OptionalProto, as the input's type says); repeatable\n"
           "  --inputs DIR|NPZ    input_0.pb, input_1.pb, ... of a test_data_set folder, for the inputs in order; or\n"
           "                      an .npz archive (numpy.savez) holding the inputs by name (or arr_0, arr_1, ...\n"
           "                      by position); inputs given no file are generated: float tensors hold\n"
           "                      arange(n)/n, others zeros, unknown dimensions count as 1 unless --shape/--dim\n";
}

std::vector<Value> InputFlags::collect(const std::vector<ValueInfo>& inputs, std::vector<bool>& generated) const {
    std::vector<Value> values(inputs.size());
    std::vector<bool> given(inputs.size(), false);
    auto index_of = [&](const std::string& name, const std::string& source) {
        for (size_t k = 0; k < inputs.size(); ++k)
            if (inputs[k].name == name) return k;
        throw Error(TESS_STATUS_INVALID_ARGUMENT, source + ": the model has no input named '" + name +
                                                      "' (inputs: " + input_names(inputs) + ")");
    };
    if (!inputs.empty() && !this->inputs.empty()) {
        if (ends_with(this->inputs, ".npz")) {
            auto arrays = numpy_io::load_npz(this->inputs);
            for (size_t a = 0; a < arrays.size(); ++a) {
                const std::string& name = arrays[a].first;  // not a structured binding: lambdas capture it
                Value& value = arrays[a].second;
                const bool positional = name == "arr_" + std::to_string(a) && a < inputs.size() &&
                                        std::none_of(inputs.begin(), inputs.end(),
                                                     [&](const ValueInfo& i) { return i.name == name; });
                const size_t k = positional ? a : index_of(name, "'" + this->inputs + "' array '" + name + "'");
                values[k] = checked(std::move(value), this->inputs + ":" + name, inputs[k]);
                given[k] = true;
            }
        } else {
            values = read_inputs(this->inputs, inputs);
            given.assign(inputs.size(), true);
        }
    }
    for (const auto& [name, path] : files) {
        const size_t k = index_of(name, "--input " + name);
        values[k] = load_input_file(path, inputs[k]);
        given[k] = true;
    }
    generated.assign(inputs.size(), false);
    for (size_t k = 0; k < inputs.size(); ++k) {
        if (given[k]) continue;
        try {
            values[k] = onnx_io::generated_input(inputs[k]);
        } catch (const Error& e) {
            rethrow_in("cannot generate input '" + inputs[k].name + "'", e);
        }
        generated[k] = true;
    }
    return values;
}

std::vector<Value> generate_inputs(const std::vector<ValueInfo>& inputs) {
    std::vector<Value> values;
    for (const ValueInfo& declared : inputs) {
        try {
            values.push_back(onnx_io::generated_input(declared));
        } catch (const Error& e) {
            rethrow_in("cannot generate input '" + declared.name + "'", e);
        }
    }
    return values;
}

// ---- Environment and session -------------------------------------------------------------------------------------

Env create_env(const EnvFlags& flags) {
    try {
        return Env(flags.options());
    } catch (const Error& e) {
        rethrow_in("cannot create the environment", e);
    }
}

Session open_session(Env& env, const std::optional<std::string>& model, const SessionFlags& flags) {
    SessionOptions options;
    flags.apply(options);
    try {
        if (model) return Session(env, *model, &options);
        return Session::from_bytes(env, tessera_default_model, tessera_default_model_size, "", &options);
    } catch (const Error& e) {
        rethrow_in(model ? "cannot load model '" + *model + "'" : "cannot load the default model", e);
    }
}

}  // namespace tessera::cli
