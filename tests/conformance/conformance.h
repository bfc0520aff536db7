// Shared by the conformance runner's two ways of running a case: in-process through the C API
// (conformance_runner.cc) and through the `tessera run` command line (cli_case.cc).  Both load the expected outputs
// and compare them with the same functions declared here, so a case passes or fails the same way on either path.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "onnx_io.h"

#ifndef TESSERA_DEFAULT_KNOWN_FAILURES
#define TESSERA_DEFAULT_KNOWN_FAILURES "tests/conformance/known_failures.txt"
#endif

namespace tessera::conformance {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
    std::string data_dir;
    std::set<std::string> suites;
    std::optional<std::regex> filter;
    std::string known_failures_path = TESSERA_DEFAULT_KNOWN_FAILURES;
    bool known_failures_explicit = false;
    std::vector<std::string> providers;
    bool strict = false;
    int threads = -1;
    std::string plugin_path;
    int jobs = 1;
    int timeout_s = 60;
    bool coverage = false;
    bool verbose = false;
    bool fork = true;
    std::string via_cli;  // the `tessera` executable that runs every case; empty: run them in-process
};

struct Case {
    std::string suite;
    std::string name;
    fs::path model;
    std::vector<fs::path> data_sets;  // test_data_set_* folders; empty for light cases
    fs::path light_output;            // light cases: the expected output_0
    onnx_io::Tolerance tolerance;
    std::set<std::string> ops;        // node suite: the operators of the case (see print_summary)
    std::string skip_reason;
    std::optional<std::string> known_failure;  // the reason given in the known-failures file

    std::string id() const { return suite + "/" + name; }
};

enum class Outcome { Pass, LoadError, SessionError, RunError, Mismatch, Crash, Timeout, Skip };

struct Result {
    Outcome outcome = Outcome::Pass;
    bool session_created = false;
    std::string message;
    double seconds = 0;
};

// ---- Data sets and comparison (conformance_runner.cc) --------------------------------------------------------

// "[CODE] message".
std::string status_text(const Error& e);

// The files input_0.pb, input_1.pb, ... (or output_) of a folder, in order, stopping at the first gap.
std::vector<fs::path> numbered_files(const fs::path& dir, const char* prefix);

// The input and output files of one test_data_set_* folder; throws Error when there are more of either than the
// graph has inputs (without initializer) or outputs.
struct DataSetFiles {
    std::vector<fs::path> inputs;
    std::vector<fs::path> outputs;
};
DataSetFiles data_set_files(const fs::path& data_set, size_t graph_inputs, size_t graph_outputs);

// The expected outputs of a data set (`files` null: the light case's output_0), read with the declared types of
// the graph outputs they belong to.  Throws Error.
std::vector<Value> load_expected(const Case& c, const std::vector<ValueInfo>& outputs, const DataSetFiles* files);

// Compares the outputs a run produced with the expected ones, with the case's tolerance.  Throws Error when the
// run gave a different number of outputs, else sets `stage` to Mismatch and returns "" when every output matches,
// the first mismatch otherwise.
std::string compare_outputs(const Case& c, const std::vector<Value>& actual, const std::vector<Value>& expected,
                            const std::vector<ValueInfo>& outputs, Outcome& stage);

// ---- Running a case through the command line (cli_case.cc) ----------------------------------------------------

// A fresh private folder under the system temporary directory for one case's `tessera run` outputs; the caller
// removes it with remove_temp_dir once the case is over.  Exits the runner when none can be made.
fs::path make_temp_dir();
void remove_temp_dir(const fs::path& dir);

// Runs every data set of `c` (the generated inputs of a light case) with `o.via_cli run MODEL --inputs DATA_SET
// --outputs DIR ...`, one process per data set writing into a folder under `temp_dir`, and compares the output
// files with the expected ones as the in-process path does.  A `tessera run` still running at `deadline` is killed
// and the case times out.
Result run_case_via_cli(const Case& c, const Options& o, const fs::path& temp_dir, Clock::time_point deadline);

}  // namespace tessera::conformance
