// What `tessera run` and `tessera bench` share: the graph inputs a run feeds, their values (read from input_K.pb
// files or generated), dynamic dimensions fixed from the command line, and the environment and session, with
// errors that name what failed.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"

namespace tessera::cli {

// Re-throws `e` with `context` in front of its message, keeping the status code.
[[noreturn]] void rethrow_in(const std::string& context, const Error& e);

double milliseconds_since(std::chrono::steady_clock::time_point start);

// --dim NAME=VALUE and --shape INPUT=DxDxD: sizes for the dimensions the model leaves open, so generated inputs
// (and checks of input files) use them instead of counting an unknown dimension as 1.
struct ShapeFlags {
    std::vector<std::pair<std::string, int64_t>> dims;                  // symbolic name -> size
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;  // input name -> whole shape

    // Consumes one of the flags above when it is next (repeatable).
    bool parse(Args& args);
    // Fixes the declared shapes of `inputs`; --shape wins over --dim.  An input or dimension name the model does not
    // have, or a shape that contradicts a dimension the model fixes, is an Error (the command line is well formed,
    // it just does not fit this model).
    void apply(std::vector<ValueInfo>& inputs) const;
    static const char* help();
};

// --input NAME=FILE (a .npy or .pb file for one input; repeatable) and --inputs DIR|FILE.npz (input_K.pb files of
// a test_data_set folder, or the arrays of an .npz archive by input name, or arr_K by position as np.savez names
// unnamed arrays).  Inputs given neither way are generated (generate_inputs).
struct InputFlags {
    std::vector<std::pair<std::string, std::string>> files;  // input name -> file
    std::string inputs;                                       // DIR or FILE.npz; "" when not given

    bool parse(Args& args);
    // One value per declared input, each checked against its declaration; `generated` is set for those made up.
    std::vector<Value> collect(const std::vector<ValueInfo>& inputs, std::vector<bool>& generated) const;
    static const char* help();
};

// Loads the value in `path` (.npy, or a .pb file read as `declared` says) for `declared`, checked against it.
Value load_input_file(const std::string& path, const ValueInfo& declared);

// The graph inputs a run feeds: those without an initializer.  `model` empty: the embedded default model.
std::vector<ValueInfo> inputs_to_feed(const std::optional<std::string>& model);
// The input_K.pb files of `dir`, checked against the graph inputs: one file per input, no gaps, no extras.
std::vector<Value> read_inputs(const std::string& dir, const std::vector<ValueInfo>& inputs);
// Deterministic inputs (onnx_io::generated_input), unknown dimensions counted as 1.
std::vector<Value> generate_inputs(const std::vector<ValueInfo>& inputs);

Env create_env(const EnvFlags& flags);
Session open_session(Env& env, const std::optional<std::string>& model, const SessionFlags& flags);

}  // namespace tessera::cli
