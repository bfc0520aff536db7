// `tessera run`: load a model, feed it input files (or generated inputs), print the partition plan and a summary of
// every output, and optionally write the outputs as ONNX protobuf files.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli.h"
#include "model_setup.h"
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
    "  --optimization N    graph optimization level: 0 disabled, 1 basic, 2 extended (fusions), 3 all (default)\n"
    "  --optimized-model-out FILE\n"
    "                      save the graph the optimizer produced (before partitioning) to FILE as an ONNX model\n"
    "  --values N          values shown per output (default 6)\n"
    "  --profile FILE      profile session creation and the run into FILE (a Chrome trace: ui.perfetto.dev opens\n"
    "                      it), then print the time by operator type\n";

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

}  // namespace

int run_command(Args& args) {
    const RunFlags flags = parse_flags(args);
    if (flags.help) {
        std::fputs(kRunHelp, stdout);
        std::fputs(EnvFlags::help(), stdout);
        return 0;
    }

    // Inputs first, so that a bad input file fails fast, before the model is compiled.
    const std::vector<ValueInfo> inputs = inputs_to_feed(flags.model);
    std::vector<Value> values =
        flags.inputs_dir.empty() ? generate_inputs(inputs) : read_inputs(flags.inputs_dir, inputs);
    std::vector<std::string> input_names;
    for (const ValueInfo& info : inputs) input_names.push_back(info.name);

    Env env = create_env(flags.env);
    const auto load_start = std::chrono::steady_clock::now();
    Session session = open_session(env, flags.model, flags.session);
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
    print_profile(session, stdout);
    std::fflush(stdout);
    return 0;
}

}  // namespace tessera::cli
