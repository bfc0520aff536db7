// The `tessera` command: dispatches to one subcommand per file (cmd_run.cc, cmd_plugins.cc, cmd_inspect.cc,
// cmd_bench.cc, cmd_provider_test.cc) and turns every failure into one "tessera: error: ..." line and an exit status
// (1: the work failed, 2: the command line is wrong).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cli.h"

namespace tessera::cli {
namespace {

constexpr const char* kHelp =
    "Usage: tessera <command> [options]\n"
    "\n"
    "Tessera runs ONNX models on the execution providers its plugins contribute.\n"
    "\n"
    "Commands:\n"
    "  run [MODEL]    run a model (the embedded default model when MODEL is left out)\n"
    "                 on given or generated inputs, print its outputs and partition plan\n"
    "  plugins        list the plugins discovery found and the providers they contribute\n"
    "  inspect MODEL  show how MODEL is partitioned across providers (text, JSON, Graphviz)\n"
    "  bench [MODEL]  time session creation and repeated runs: latency percentiles, runs/s, memory\n"
    "  provider-test PLUGIN\n"
    "                 check a provider plugin: ABI negotiation, its operators on ONNX test cases against\n"
    "                 the expected outputs and the CPU provider, concurrency, bad inputs, leaks\n"
    "\n"
    "Options:\n"
    "  -h, --help     show this help (`tessera <command> --help` for a command)\n"
    "  -V, --version  show the version\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 wrong command line.\n";

}  // namespace

std::vector<std::string> split_list(const std::string& text, char separator) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find(separator, start);
        if (end == std::string::npos) end = text.size();
        if (end > start) out.push_back(text.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

int parse_int(const std::string& option, const std::string& text, int min, int max) {
    errno = 0;
    char* end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || value < min || value > max)
        throw UsageError("option '" + option + "' wants an integer from " + std::to_string(min) + " to " +
                         std::to_string(max) + ", got '" + text + "'");
    return static_cast<int>(value);
}

double parse_double(const std::string& option, const std::string& text, double min, double max) {
    errno = 0;
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(value) || value < min || value > max) {
        char range[64];
        std::snprintf(range, sizeof range, "%g to %g", min, max);
        throw UsageError("option '" + option + "' wants a number from " + range + ", got '" + text + "'");
    }
    return value;
}

std::string json_string(const std::string& text) {
    std::string out = "\"";
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    return out + "\"";
}

std::string json_list(const std::vector<std::string>& items) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + json_string(items[i]);
    return out + "]";
}

bool EnvFlags::parse(Args& args) {
    std::string value;
    if (args.option("--plugin-path", value)) {
        plugin_path = value;
        return true;
    }
    if (args.flag("--no-default-plugins")) {
        no_default_plugins = true;
        return true;
    }
    if (args.option("--plugin-probe", value)) {
        if (value == "auto") plugin_probe = TESS_PLUGIN_PROBE_AUTO;
        else if (value == "off") plugin_probe = TESS_PLUGIN_PROBE_OFF;
        else if (value == "rescan") plugin_probe = TESS_PLUGIN_PROBE_RESCAN;
        else throw UsageError("option '--plugin-probe' wants auto, off or rescan, got '" + value + "'");
        return true;
    }
    if (args.option("--log-level", value)) {
        static const char* const names[] = {"error", "warning", "info", "debug"};
        for (int level = 0; level < 4; ++level)
            if (value == names[level]) {
                log_level = static_cast<TessLogLevel>(level);
                return true;
            }
        throw UsageError("option '--log-level' wants error, warning, info or debug, got '" + value + "'");
    }
    return false;
}

EnvOptions EnvFlags::options() const {
    EnvOptions options;
    options.log_level = log_level;
    options.plugin_path = plugin_path;
    options.no_default_plugin_dirs = no_default_plugins;
    options.plugin_probe = plugin_probe;
    return options;
}

bool SessionFlags::parse(Args& args) {
    std::string value;
    if (args.option("--providers", value)) {
        providers = split_list(value);
        if (providers.empty()) throw UsageError("option '--providers' needs at least one name");
        return true;
    }
    if (args.flag("--strict")) {
        strict = true;
        return true;
    }
    if (args.option("--threads", value)) {
        threads = parse_int("--threads", value, 0, 4096);
        return true;
    }
    if (args.option("--optimization", value)) {
        optimization = parse_int("--optimization", value, 0, 99);  // the core names the valid levels
        return true;
    }
    if (args.option("--profile", value)) {
        if (value.empty()) throw UsageError("option '--profile' needs a file name");
        profile = value;
        return true;
    }
    if (args.option("--optimized-model-out", value)) {
        if (value.empty()) throw UsageError("option '--optimized-model-out' needs a file name");
        optimized_model_out = value;
        return true;
    }
    return false;
}

void SessionFlags::apply(SessionOptions& options) const {
    if (!providers.empty()) options.providers(providers);
    if (strict) options.strict(true);
    if (threads >= 0) options.intra_op_threads(threads);
    if (optimization >= 0) options.optimization_level(optimization);
    if (!profile.empty()) options.profiling(profile);
    if (!optimized_model_out.empty()) options.optimized_model_path(optimized_model_out);
}

void print_profile(Session& session, std::FILE* out) {
    const std::string path = session.end_profiling();
    if (path.empty()) return;
    std::fprintf(out, "profile written to %s (open it in ui.perfetto.dev or chrome://tracing)\n", path.c_str());
    std::fputs(session.profiling_summary(15).c_str(), out);
    std::fflush(out);
}

const char* EnvFlags::help() {
    return "  --plugin-path DIRS     also search these colon-separated directories for plugins\n"
           "  --no-default-plugins   search only --plugin-path (not <libdir>/tessera/plugins, TESSERA_PLUGIN_PATH)\n"
           "  --plugin-probe MODE    auto (default): load each plugin in a child process first and skip it if it\n"
           "                         crashes, exits or hangs there (verdicts cached); off: load in this process;\n"
           "                         rescan: probe every plugin again\n"
           "  --log-level LEVEL      error, warning (default), info or debug\n";
}

}  // namespace tessera::cli

int main(int argc, char** argv) {
    using namespace tessera::cli;
    try {
        Args args(argc, argv, 1);
        if (args.done()) {
            std::fputs(kHelp, stderr);
            return 2;
        }
        const std::string command = args.next();
        if (command == "-h" || command == "--help" || command == "help") {
            std::fputs(kHelp, stdout);
            return 0;
        }
        if (command == "-V" || command == "--version") {
            std::printf("tessera %s (C API %d.%d.%d)\n", tessera::version().c_str(), TESS_API_VERSION_MAJOR,
                        TESS_API_VERSION_MINOR, TESS_API_VERSION_PATCH);
            return 0;
        }
        if (command == "run") return run_command(args);
        if (command == "plugins") return plugins_command(args);
        if (command == "inspect") return inspect_command(args);
        if (command == "bench") return bench_command(args);
        if (command == "provider-test") return provider_test_command(args);
        throw UsageError("unknown command '" + command + "' (try 'tessera --help')");
    } catch (const UsageError& e) {
        std::fprintf(stderr, "tessera: error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera: error: %s\n", e.what());
        return 1;
    }
}
