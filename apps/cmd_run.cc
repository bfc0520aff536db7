// `tessera run`: load a model, feed it input files (or generated inputs), print the partition plan and a summary of
// every output, and optionally write the outputs as ONNX protobuf files.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli.h"
#include "model_setup.h"
#include "numpy_io.h"
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
    "  --providers A,B     provider priority list, most preferred first (default: every usable one, CPU last)\n"
    "  --strict            fail instead of falling back when a listed provider cannot take a node\n"
    "  --threads N         intra-op threads (default: one per core)\n"
    "  --optimization N    graph optimization level: 0 disabled, 1 basic, 2 extended (fusions), 3 all (default)\n"
    "  --optimized-model-out FILE\n"
    "                      save the graph the optimizer produced (before partitioning) to FILE as an ONNX model\n"
    "  --values N          values shown per output (default 6)\n"
    "  --profile FILE      profile session creation and the run into FILE (a Chrome trace: ui.perfetto.dev opens\n"
    "                      it), then print the time by operator type\n"
    "Outputs and checks:\n"
    "  --outputs DIR       write output_0.pb, output_1.pb, ... there (created when missing)\n"
    "  --output-dir DIR    write each output as DIR/NAME.npy (a .pb file where numpy has no such type)\n"
    "  --check DIR|NPZ     compare the outputs with output_K.pb of a test_data_set folder, or with the arrays of an\n"
    "                      .npz archive by output name; prints the largest error of each output and exits with 1\n"
    "                      when one differs beyond the tolerance\n"
    "  --rtol R, --atol A  tolerance of --check: |got - expected| <= A + R * |expected| (default 1e-3, 1e-7)\n";

struct RunFlags {
    std::optional<std::string> model;
    InputFlags inputs;
    ShapeFlags shapes;
    std::string outputs_dir;
    std::string npy_dir;
    std::string check;
    onnx_io::Tolerance tolerance;
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
        if (flags.inputs.parse(args) || flags.shapes.parse(args) || args.option("--outputs", flags.outputs_dir) ||
            args.option("--output-dir", flags.npy_dir) || args.option("--check", flags.check) ||
            flags.env.parse(args) || flags.session.parse(args))
            continue;
        if (args.option("--values", value)) {
            flags.shown_values = parse_int("--values", value, 0, 1000000);
        } else if (args.option("--rtol", value)) {
            flags.tolerance.rtol = parse_double("--rtol", value, 0, 1e30);
        } else if (args.option("--atol", value)) {
            flags.tolerance.atol = parse_double("--atol", value, 0, 1e30);
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

// The largest absolute and relative error between two numeric tensors of one shape (relative to |expected|, over
// the elements where it is not 0); nullopt when they cannot be compared element by element.
std::optional<std::pair<double, double>> largest_error(ValueView actual, ValueView expected) {
    if (!actual.is_tensor() || !expected.is_tensor() || actual.dims() != expected.dims() ||
        actual.element_type() == TESS_ELEMENT_STRING || expected.element_type() == TESS_ELEMENT_STRING ||
        actual.element_type() == TESS_ELEMENT_COMPLEX64 || actual.element_type() == TESS_ELEMENT_COMPLEX128)
        return std::nullopt;
    double max_abs = 0, max_rel = 0;
    for (size_t i = 0; i < actual.element_count(); ++i) {
        const double a = onnx_io::element_as_double(actual.element_type(), actual.raw_data(), i);
        const double e = onnx_io::element_as_double(expected.element_type(), expected.raw_data(), i);
        if (std::isnan(a) && std::isnan(e)) continue;
        const double error = a == e ? 0.0 : std::fabs(a - e);  // equal infinities are no error
        max_abs = std::max(max_abs, error);
        if (e != 0) max_rel = std::max(max_rel, error / std::fabs(e));
    }
    return std::make_pair(max_abs, max_rel);
}

// The expected outputs of --check, by output index.
std::vector<Value> expected_outputs(const std::string& source, const std::vector<ValueInfo>& outputs) {
    std::vector<Value> expected(outputs.size());
    if (source.size() > 4 && source.compare(source.size() - 4, 4, ".npz") == 0) {
        auto arrays = numpy_io::load_npz(source);
        for (size_t a = 0; a < arrays.size(); ++a) {
            auto& [name, value] = arrays[a];
            size_t k = 0;
            while (k < outputs.size() && outputs[k].name != name) ++k;
            if (k == outputs.size() && name == "arr_" + std::to_string(a) && a < outputs.size()) k = a;
            if (k == outputs.size())
                throw Error(TESS_STATUS_INVALID_ARGUMENT,
                            "--check: '" + source + "' holds '" + name + "', which is no output of the model");
            expected[k] = std::move(value);
        }
    } else {
        for (size_t k = 0; k < outputs.size(); ++k) {
            const std::string path = (fs::path(source) / ("output_" + std::to_string(k) + ".pb")).string();
            if (fs::exists(path)) expected[k] = onnx_io::load_value(path, outputs[k]);
        }
    }
    return expected;
}

// Compares the outputs with the --check reference; prints one line per output; false when one differs.
bool check_outputs(const RunFlags& flags, const std::vector<ValueInfo>& outputs, const std::vector<Value>& results) {
    const std::vector<Value> expected = expected_outputs(flags.check, outputs);
    std::printf("check against %s (rtol %g, atol %g):\n", flags.check.c_str(), flags.tolerance.rtol,
                flags.tolerance.atol);
    bool all_match = true;
    size_t compared = 0;
    for (size_t k = 0; k < results.size(); ++k) {
        const std::string& name = outputs[k].name;
        if (!expected[k]) {
            std::printf("  %s: no reference\n", name.c_str());
            continue;
        }
        ++compared;
        const std::string difference = onnx_io::compare_values(results[k], expected[k], flags.tolerance);
        std::string errors;
        if (auto error = largest_error(results[k], expected[k])) {
            char text[96];
            std::snprintf(text, sizeof(text), " (largest error %.3g, relative %.3g)", error->first, error->second);
            errors = text;
        }
        if (difference.empty()) {
            std::printf("  %s: ok%s\n", name.c_str(), errors.c_str());
        } else {
            all_match = false;
            std::printf("  %s: MISMATCH%s: %s\n", name.c_str(), errors.c_str(), difference.c_str());
        }
    }
    if (compared == 0)
        throw Error(TESS_STATUS_INVALID_ARGUMENT, "--check: '" + flags.check + "' holds no reference output");
    std::printf("check: %s\n", all_match ? "all outputs match" : "outputs differ");
    return all_match;
}

// Writes DIR/NAME.npy for every output (DIR/NAME.pb where numpy has no dtype for it).
void write_npy_outputs(const std::string& dir, const std::vector<ValueInfo>& outputs,
                       const std::vector<Value>& results) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw Error(TESS_STATUS_NOT_FOUND, "cannot create '" + dir + "': " + ec.message());
    for (size_t k = 0; k < results.size(); ++k) {
        // Output names may hold '/' or ':'; the file name keeps only what is safe in a path component.
        std::string file = k < outputs.size() ? outputs[k].name : "output_" + std::to_string(k);
        for (char& c : file)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
        const fs::path base = fs::path(dir) / file;
        if (!numpy_io::save_npy(base.string() + ".npy", results[k]))
            onnx_io::save_value(base.string() + ".pb", results[k], k < outputs.size() ? outputs[k].name : "");
    }
    std::printf("wrote %zu output file%s to %s\n", results.size(), results.size() == 1 ? "" : "s", dir.c_str());
}

}  // namespace

int run_command(Args& args) {
    const RunFlags flags = parse_flags(args);
    if (flags.help) {
        std::fputs(kRunHelp, stdout);
        std::fputs("Inputs:\n", stdout);
        std::fputs(InputFlags::help(), stdout);
        std::fputs(ShapeFlags::help(), stdout);
        std::fputs(EnvFlags::help(), stdout);
        return 0;
    }

    // Inputs first, so that a bad input file fails fast, before the model is compiled.
    std::vector<ValueInfo> inputs = inputs_to_feed(flags.model);
    flags.shapes.apply(inputs);
    std::vector<bool> generated;
    std::vector<Value> values = flags.inputs.collect(inputs, generated);
    std::vector<std::string> input_names;
    for (const ValueInfo& info : inputs) input_names.push_back(info.name);

    Env env = create_env(flags.env);
    const auto load_start = std::chrono::steady_clock::now();
    Session session = open_session(env, flags.model, flags.session);
    const double load_ms = milliseconds_since(load_start);
    const std::vector<ValueInfo> outputs = session.outputs();

    std::printf("model: %s\n", flags.model ? flags.model->c_str() : "(embedded default model)");
    std::printf("inputs:\n");
    for (size_t k = 0; k < inputs.size(); ++k)
        std::printf("  %s: %s%s\n", inputs[k].name.c_str(), onnx_io::describe_value(values[k]).c_str(),
                    generated[k] ? " (generated)" : "");
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
    if (!flags.npy_dir.empty()) write_npy_outputs(flags.npy_dir, outputs, results);
    print_profile(session, stdout);
    const bool matched = flags.check.empty() || check_outputs(flags, outputs, results);
    std::fflush(stdout);
    return matched ? 0 : 1;
}

}  // namespace tessera::cli
