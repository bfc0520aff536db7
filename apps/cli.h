// Pieces shared by the `tessera` subcommands: argument parsing, error kinds and the options every command that
// creates an environment accepts.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/tessera.hpp"

namespace tessera::cli {

// A command line the program cannot make sense of: exit status 2.  Everything else that goes wrong is an exit
// status 1 with one "tessera: error: ..." line.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The arguments after the subcommand, consumed front to back.  Options take their value as the next argument or
// after '=' ("--threads 4", "--threads=4").
class Args {
public:
    Args(int argc, char** argv, int first) : args_(argv + first, argv + argc) {}

    bool done() const { return pos_ >= args_.size(); }
    const std::string& peek() const { return args_[pos_]; }
    std::string next() { return args_[pos_++]; }
    // True when the next argument looks like an option ("-x", "--xyz"), not "-" alone.
    bool at_option() const { return !done() && args_[pos_].size() > 1 && args_[pos_][0] == '-'; }

    // Consumes the flag `name` when it is next.
    bool flag(const char* name) {
        if (done() || args_[pos_] != name) return false;
        ++pos_;
        return true;
    }
    // Consumes the option `name` and its value when it is next.
    bool option(const char* name, std::string& value) {
        if (done()) return false;
        const std::string& arg = args_[pos_];
        const std::string prefix = std::string(name) + "=";
        if (arg.compare(0, prefix.size(), prefix) == 0) {
            value = arg.substr(prefix.size());
            ++pos_;
            return true;
        }
        if (arg != name) return false;
        if (pos_ + 1 >= args_.size()) throw UsageError(std::string("option '") + name + "' needs a value");
        value = args_[pos_ + 1];
        pos_ += 2;
        return true;
    }

private:
    std::vector<std::string> args_;
    size_t pos_ = 0;
};

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_list(const std::string& text, char separator = ',');
// An integer option value in [min, max], or a UsageError naming the option.
int parse_int(const std::string& option, const std::string& text, int min, int max);
// A finite number option value in [min, max], or a UsageError naming the option.
double parse_double(const std::string& option, const std::string& text, double min, double max);

// `text` as a JSON string literal, quotes included; `items` as a JSON array of strings.
std::string json_string(const std::string& text);
std::string json_list(const std::vector<std::string>& items);

// --plugin-path DIRS, --no-default-plugins, --plugin-probe MODE, --log-level LEVEL: how the environment finds and
// loads plugins and what it logs.
struct EnvFlags {
    std::string plugin_path;
    bool no_default_plugins = false;
    TessPluginProbe plugin_probe = TESS_PLUGIN_PROBE_AUTO;
    TessLogLevel log_level = TESS_LOG_WARNING;

    // Consumes one of the flags above when it is next.
    bool parse(Args& args);
    EnvOptions options() const;
    static const char* help();
};

// The options of the commands that create a session (--providers, --strict, --threads, --optimization, --profile,
// --optimized-model-out).
struct SessionFlags {
    std::vector<std::string> providers;
    bool strict = false;
    int threads = -1;       // -1: the session's default
    int optimization = -1;  // -1: the session's default
    std::string profile;    // --profile FILE: the trace file; "" when not profiling
    std::string optimized_model_out;  // --optimized-model-out FILE: where the optimized graph is saved; "" when not

    // Consumes one of the flags above when it is next.
    bool parse(Args& args);
    void apply(SessionOptions& options) const;
};

// --profile: ends the session's profiling (writing the trace) and prints where it went and the time by operator type
// (the 15 op types that took longest) to `out`.  Does nothing when the session is not profiled.
void print_profile(Session& session, std::FILE* out);

// Subcommands: each returns the exit status and throws UsageError / tessera::Error / std::exception.
int run_command(Args& args);
int plugins_command(Args& args);
int inspect_command(Args& args);
int bench_command(Args& args);
int provider_test_command(Args& args);

}  // namespace tessera::cli
