// `tessera run`: load a model, feed it input files (or generated inputs), print the partition plan and a summary of
// every output, and optionally write the outputs as ONNX protobuf files.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <regex>

#include "cli.h"
#include "default_model.h"
#include "onnx_io.h"

namespace fs = std::filesystem;

namespace tessera::cli {
namespace {

constexpr const char* kRunHelp =
    "Usage: tessera run [MODEL] [options]\n"
    "\n"
    "Runs MODEL (an .onnx file; the embedded default model when left out) once and prints which provider runs\n"
    "each partition, then every output's name, type, shape and first values with min/max/mean.\n"
    "\n"
    "Options:\n"
    "  --inputs DIR        read input_0.pb, input_1.pb, ... (TensorProto, SequenceProto or OptionalProto,\n"
    "                      as the graph input's type says) for the graph inputs without initializer, in order;\n"
    "                      without it, inputs are generated: float tensors hold arange(n)/n (unknown\n"
    "                      dimensions count as 1), other tensors zeros, sequences and optionals are empty\n"
    "  --outputs DIR       write output_0.pb, output_1.pb, ... there (created when missing)\n"
    "  --providers A,B     provider priority list, most preferred first (default: every usable one, CPU last)\n"
    "  --strict            fail instead of falling back when a listed provider cannot take a node\n"
    "  --threads N         intra-op threads (default: one per core)\n"
    "  --optimization N    0 disables the graph optimizer, 1 (default) runs it\n"
    "  --values N          values shown per output (default 6)\n";

struct RunFlags {
    std::optional<std::string> model;
    std::string inputs_dir;
    std::string outputs_dir;
    SessionFlags session;
    int shown_values = 6;
    EnvFlags env;
    bool help = false;
};

RunFlags parse_flags(Args& args) {
    RunFlags flags;
    std::string value;
    while (!args.done()) {
        if (args.flag("-h") || args.flag("--help")) {
            flags.help = true;
            return flags;
        }
        if (args.option("--inputs", flags.inputs_dir) || args.option("--outputs", flags.outputs_dir) ||
            flags.env.parse(args) || flags.session.parse(args))
            continue;
        if (args.option("--values", value)) {
            flags.shown_values = parse_int("--values", value, 0, 1000000);
        } else if (args.at_option()) {
            throw UsageError("unknown option '" + args.peek() + "' for 'run' (try 'tessera run --help')");
        } else if (flags.model) {
            throw UsageError("'run' takes one MODEL, got '" + *flags.model + "' and '" + args.peek() + "'");
        } else {
            flags.model = args.next();
        }
    }
    return flags;
}

// Re-throws `e` with `context` in front of its message, keeping the status code.
[[noreturn]] void rethrow_in(const std::string& context, const Error& e) {
    throw Error(e.code(), context + ": " + e.what());
}

// The graph inputs a run feeds: those without an initializer.  Read from the model proto because the session also
// lists the inputs whose initializer is an overridable default; the proto is dropped before the session loads the
// model, so memory does not peak at two copies.
std::vector<ValueInfo> inputs_to_feed(const RunFlags& flags) {
    if (!flags.model) {
        if (tessera_default_model_size == 0)
            throw UsageError("this build embeds no default model; give a MODEL (try 'tessera run --help')");
        return onnx_io::graph_inputs(onnx_io::parse_model(tessera_default_model, tessera_default_model_size));
    }
    const std::string bytes = onnx_io::read_file(*flags.model);
    try {
        return onnx_io::graph_inputs(onnx_io::parse_model(bytes.data(), bytes.size()));
    } catch (const Error& e) {
        rethrow_in("cannot load model '" + *flags.model + "'", e);
    }
}

Session open_session(Env& env, const RunFlags& flags) {
    SessionOptions options;
    flags.session.apply(options);
    try {
        if (flags.model) return Session(env, *flags.model, &options);
        return Session::from_bytes(env, tessera_default_model, tessera_default_model_size, "", &options);
    } catch (const Error& e) {
        rethrow_in(flags.model ? "cannot load model '" + *flags.model + "'" : "cannot load the default model", e);
    }
}

// The input_K.pb files of `dir`, checked against the graph inputs: one file per input, no gaps, no extras.
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

void print_partitions(const Session& session) {
    const std::vector<PartitionInfo> partitions = session.partitions();
    std::printf("partitions: %zu\n", partitions.size());
    for (size_t i = 0; i < partitions.size(); ++i) {
        const PartitionInfo& p = partitions[i];
        // Distinct operators in first-seen order, a handful of them.
        std::vector<std::string> ops;
        for (const std::string& op : p.node_ops)
            if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
        std::string op_list;
        for (size_t k = 0; k < ops.size() && k < 8; ++k) op_list += (k ? ", " : "") + ops[k];
        if (ops.size() > 8) op_list += ", ...";
        std::printf("  [%zu] %-8s %zu node%s: %s", i, p.provider.c_str(), p.node_names.size(),
                    p.node_names.size() == 1 ? "" : "s", op_list.c_str());
        if (p.copy_count) std::printf("  (%zu input copies per run)", p.copy_count);
        std::printf("\n");
    }
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int run_command(Args& args) {
    const RunFlags flags = parse_flags(args);
    if (flags.help) {
        std::fputs(kRunHelp, stdout);
        std::fputs(EnvFlags::help(), stdout);
        return 0;
    }

    // Inputs first, so that a bad input file fails fast, before the model is compiled.
    const std::vector<ValueInfo> inputs = inputs_to_feed(flags);
    std::vector<Value> values =
        flags.inputs_dir.empty() ? generate_inputs(inputs) : read_inputs(flags.inputs_dir, inputs);
    std::vector<std::string> input_names;
    for (const ValueInfo& info : inputs) input_names.push_back(info.name);

    std::optional<Env> env;
    try {
        env.emplace(flags.env.options());
    } catch (const Error& e) {
        rethrow_in("cannot create the environment", e);
    }
    const auto load_start = std::chrono::steady_clock::now();
    Session session = open_session(*env, flags);
    const double load_ms = milliseconds_since(load_start);
    const std::vector<ValueInfo> outputs = session.outputs();

    std::printf("model: %s\n", flags.model ? flags.model->c_str() : "(embedded default model)");
    std::printf("inputs%s:\n", flags.inputs_dir.empty() ? " (generated)" : "");
    for (size_t k = 0; k < inputs.size(); ++k)
        std::printf("  %s: %s\n", inputs[k].name.c_str(), onnx_io::describe_value(values[k]).c_str());
    print_partitions(session);

    const auto run_start = std::chrono::steady_clock::now();
    std::vector<Value> results;
    try {
        results = session.run(input_names, values);
    } catch (const Error& e) {
        rethrow_in("run failed", e);
    }
    const double run_ms = milliseconds_since(run_start);

    std::printf("outputs:\n");
    for (size_t k = 0; k < results.size(); ++k) {
        const std::string& name = k < outputs.size() ? outputs[k].name : std::to_string(k);
        std::printf("  %s: %s\n", name.c_str(), onnx_io::describe_value(results[k]).c_str());
        if (flags.shown_values > 0)
            std::printf("    %s\n",
                        onnx_io::summarize(results[k], static_cast<size_t>(flags.shown_values)).c_str());
    }
    std::printf("session created in %.1f ms, run took %.1f ms\n", load_ms, run_ms);

    if (!flags.outputs_dir.empty()) {
        std::error_code ec;
        fs::create_directories(flags.outputs_dir, ec);
        if (ec)
            throw Error(TESS_STATUS_NOT_FOUND, "cannot create '" + flags.outputs_dir + "': " + ec.message());
        for (size_t k = 0; k < results.size(); ++k) {
            const std::string path = (fs::path(flags.outputs_dir) / ("output_" + std::to_string(k) + ".pb")).string();
            onnx_io::save_value(path, results[k], k < outputs.size() ? outputs[k].name : "");
        }
        std::printf("wrote %zu output file%s to %s\n", results.size(), results.size() == 1 ? "" : "s",
                    flags.outputs_dir.c_str());
    }
    std::fflush(stdout);
    return 0;
}

}  // namespace tessera::cli
