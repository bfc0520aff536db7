// `tessera provider-test PLUGIN`: the provider conformance kit.  It checks one plugin file the way cores and users
// will meet it -- its entry function against older and newer cores (provider_kit/entry_checks.h), then every
// backend-test case whose operators it claims (provider_kit/op_checks.h) -- and prints a per-operator report.  Exit
// status 1 when any check failed.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "onnx_io.h"
#include "provider_kit/entry_checks.h"
#include "provider_kit/op_checks.h"

namespace fs = std::filesystem;

namespace tessera::cli {
namespace {

constexpr const char* kProviderTestHelp =
    "Usage: tessera provider-test PLUGIN [options]\n"
    "\n"
    "Checks one plugin file (an execution provider or a custom-operator library) before users meet it:\n"
    "  - its entry function against cores of other ABI versions and of earlier struct sizes: refused politely\n"
    "    when the ranges do not meet, accepted with complete tables when they do, nothing written past a table;\n"
    "  - every ONNX backend-test case (model.onnx + test_data_set_N/) whose nodes the provider claims: the\n"
    "    expected outputs, randomized inputs against the reference provider, a second session getting the\n"
    "    same plan, concurrent runs of one session, bad inputs answered by an error status, and no instance,\n"
    "    compiled partition or allocation left alive afterwards.\n"
    "Each check runs in a child process: a crash, an abort or a hang fails that check only.\n"
    "\n"
    "Options:\n"
    "  --cases DIR            backend-test cases: DIR/*/model.onnx (default: $TESSERA_BACKEND_DATA/node, else the\n"
    "                         onnx node cases this build was configured with); repeatable\n"
    "  --ops A,B              only the cases whose model uses one of these operators\n"
    "  --provider NAME        the provider of the plugin to check (default: its first; the reference for a\n"
    "                         custom-operator library, which runs its operators)\n"
    "  --reference NAME       the provider outputs are compared with on randomized inputs (default: cpu)\n"
    "  --concurrency N        concurrent runs of one session (default 4)\n"
    "  --timeout SECONDS      per case (default 60)\n"
    "  --known-failures FILE  cases expected to fail (one name a line, '#' comments; the format of Tessera's\n"
    "                         tests/conformance/known_failures.txt): reported as xfail, not as failures\n"
    "  --verbose              list every case, not only failures\n"
    "  --json                 print the report as one JSON object\n"
    "  --plugin-path DIRS, --no-default-plugins, --plugin-probe MODE, --log-level LEVEL\n"
    "                         how the environment finds the reference provider (see 'tessera --help')\n";

struct Options {
    std::string plugin;
    std::vector<std::string> case_dirs;
    std::set<std::string> ops;
    std::string provider;
    std::set<std::string> known_failures;
    provider_kit::CaseSettings settings;
    bool verbose = false;
    bool json = false;
    EnvFlags env;
};

// Case names, one a line ("test_abs" or "node/test_abs"), '#' starting a comment.
void read_known_failures(const std::string& path, std::set<std::string>& names) {
    std::ifstream in(path);
    if (!in) throw Error(TESS_STATUS_NOT_FOUND, "cannot read known failures '" + path + "'");
    std::string line;
    while (std::getline(in, line)) {
        line = line.substr(0, line.find('#'));
        std::istringstream words(line);
        std::string name;
        if (!(words >> name)) continue;
        if (name.rfind("node/", 0) == 0) name = name.substr(5);
        names.insert(name);
    }
}

Options parse(Args& args) {
    Options o;
    std::string value;
    while (!args.done()) {
        if (args.flag("-h") || args.flag("--help")) {
            std::fputs(kProviderTestHelp, stdout);
            std::exit(0);
        }
        if (args.option("--cases", value)) o.case_dirs.push_back(value);
        else if (args.option("--ops", value)) for (const std::string& op : split_list(value)) o.ops.insert(op);
        else if (args.option("--provider", value)) o.provider = value;
        else if (args.option("--reference", value)) o.settings.reference = value;
        else if (args.option("--concurrency", value)) o.settings.threads = parse_int("--concurrency", value, 1, 64);
        else if (args.option("--timeout", value)) o.settings.timeout_seconds = parse_int("--timeout", value, 1, 3600);
        else if (args.option("--known-failures", value)) read_known_failures(value, o.known_failures);
        else if (args.flag("--verbose")) o.verbose = true;
        else if (args.flag("--json")) o.json = true;
        else if (o.env.parse(args)) continue;
        else if (args.at_option()) throw UsageError("unknown option '" + args.peek() + "' (try --help)");
        else if (o.plugin.empty()) o.plugin = args.next();
        else throw UsageError("unexpected argument '" + args.peek() + "'");
    }
    if (o.plugin.empty()) throw UsageError("provider-test needs a PLUGIN file (try --help)");
    if (o.case_dirs.empty()) {
        const char* env = std::getenv("TESSERA_BACKEND_DATA");
        const std::string root = env != nullptr && env[0] != '\0' ? env : TESSERA_CONFIGURED_BACKEND_DATA;
        if (!root.empty() && fs::is_directory(fs::path(root) / "node")) o.case_dirs.push_back(root + "/node");
    }
    return o;
}

// The case directories under the --cases roots (a root that is itself a case counts as one), filtered by --ops.
std::vector<std::string> find_cases(const Options& o) {
    std::vector<std::string> cases;
    for (const std::string& root : o.case_dirs) {
        if (!fs::is_directory(root)) throw Error(TESS_STATUS_NOT_FOUND, "no case directory '" + root + "'");
        std::vector<std::string> found;
        if (fs::exists(fs::path(root) / "model.onnx")) found.push_back(root);
        else
            for (const auto& entry : fs::directory_iterator(root))
                if (entry.is_directory() && fs::exists(entry.path() / "model.onnx")) found.push_back(entry.path());
        std::sort(found.begin(), found.end());
        for (const std::string& c : found) {
            if (!o.ops.empty()) {
                const std::vector<std::string> model_ops = onnx_io::model_operators(c + "/model.onnx");
                const auto selected = [&](const std::string& op) { return o.ops.count(op) > 0; };
                if (std::none_of(model_ops.begin(), model_ops.end(), selected)) continue;
            }
            cases.push_back(c);
        }
    }
    return cases;
}

// Per operator: how its cases went.
struct OperatorTally {
    int passed = 0, failed = 0, skipped = 0;
    std::string skip_reason;  // the first one
};

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Why the provider declined `op` in a skipped case: the core's error lists every unclaimed node as
// "name (Op) opset N inputs (...) — provider: reason", separated by " | "; the first node of this op type tells it.
std::string reason_for(const std::string& op, const std::string& detail) {
    const std::string bare = op.substr(op.rfind(':') == std::string::npos ? 0 : op.rfind(':') + 1);
    const size_t at = detail.find("(" + bare + ")");
    const std::string dash = "\u2014 ";
    const size_t from = at == std::string::npos ? std::string::npos : detail.find(dash, at);
    const size_t end = at == std::string::npos ? std::string::npos : detail.find(" | ", at);
    if (from == std::string::npos || (end != std::string::npos && from > end)) return first_line(detail).substr(0, 200);
    return detail.substr(from + dash.size(), end == std::string::npos ? std::string::npos : end - from - dash.size());
}

}  // namespace

int provider_test_command(Args& args) {
    Options o = parse(args);
    const std::string plugin_path = fs::weakly_canonical(o.plugin).string();
    if (!fs::exists(plugin_path)) throw Error(TESS_STATUS_NOT_FOUND, "no plugin file '" + o.plugin + "'");

    // 1. The entry function, called directly in child processes.
    const std::vector<provider_kit::CheckResult> entry =
        provider_kit::check_entry(plugin_path, o.settings.timeout_seconds);

    // 2. The plugin through the core, next to the reference provider.
    EnvOptions env_options = o.env.options();
    env_options.log = [](TessLogLevel, const char*) {};  // failures are reported by the kit
    Env env(env_options);
    std::string load_error;
    try {
        env.load_plugin(plugin_path);
    } catch (const Error& e) {
        load_error = e.what();
    }
    PluginInfo info;
    for (const PluginInfo& p : env.plugins())
        if (fs::weakly_canonical(p.path).string() == plugin_path && p.state == TESS_PLUGIN_LOADED) info = p;
    const bool loaded = !info.path.empty();
    if (loaded) load_error.clear();
    o.settings.provider = !o.provider.empty()           ? o.provider
                          : !info.providers.empty()     ? info.providers[0]
                                                        : o.settings.reference;  // custom ops run on the reference
    if (loaded && !info.custom_ops.empty() && info.providers.empty() && o.ops.empty())
        o.ops.insert(info.custom_ops.begin(), info.custom_ops.end());  // their cases only

    std::vector<provider_kit::CaseResult> results, xfail_results;
    std::string cases_note;
    if (!loaded) {
        cases_note = "not run: the core did not load the plugin: " + load_error;
    } else if (o.case_dirs.empty()) {
        cases_note = "not run: no backend-test cases (pass --cases DIR or set TESSERA_BACKEND_DATA)";
    } else {
        const std::vector<std::string> cases = find_cases(o);
        for (size_t i = 0; i < cases.size(); ++i) {
            provider_kit::CaseResult r = provider_kit::run_case(env, cases[i], o.settings);
            if (r.verdict == provider_kit::CaseResult::Verdict::Failed && o.known_failures.count(r.name))
                xfail_results.push_back(std::move(r));  // listed as failing: not held against the provider
            else
                results.push_back(std::move(r));
            if (!o.json && isatty(fileno(stderr)))
                std::fprintf(stderr, "\r%zu/%zu cases", i + 1, cases.size());
        }
        if (!o.json && isatty(fileno(stderr))) std::fprintf(stderr, "\r\033[K");
        if (cases.empty()) cases_note = "not run: no case uses the plugin's operators";
    }

    std::map<std::string, OperatorTally> tally;
    for (const provider_kit::CaseResult& r : results)
        for (const std::string& op : r.ops) {
            if (!o.ops.empty() && o.ops.count(op) == 0) continue;  // the other operators of a selected case
            OperatorTally& t = tally[op];
            switch (r.verdict) {
                case provider_kit::CaseResult::Verdict::Passed: ++t.passed; break;
                case provider_kit::CaseResult::Verdict::Failed: ++t.failed; break;
                case provider_kit::CaseResult::Verdict::Skipped:
                    ++t.skipped;
                    if (t.skip_reason.empty()) t.skip_reason = reason_for(op, r.detail);
                    break;
            }
        }
    // An operator counts as failed when any of its cases failed, passed when one passed, else skipped.
    int entry_failed = 0, ops_passed = 0, ops_failed = 0, ops_skipped = 0, cases_failed = 0;
    std::vector<std::string> xfails;
    for (const auto& c : entry) entry_failed += c.passed ? 0 : 1;
    for (const auto& [op, t] : tally) (t.failed ? ops_failed : t.passed ? ops_passed : ops_skipped) += 1;
    for (const auto& r : results) cases_failed += r.verdict == provider_kit::CaseResult::Verdict::Failed;
    for (const auto& r : xfail_results) xfails.push_back(r.name);
    const bool ok = entry_failed == 0 && cases_failed == 0 && loaded;

    if (o.json) {
        std::printf("{\n  \"plugin\": %s,\n  \"name\": %s,\n  \"provider\": %s,\n  \"loaded\": %s,\n  \"entry\": [",
                    json_string(plugin_path).c_str(), json_string(info.name).c_str(),
                    json_string(o.settings.provider).c_str(), loaded ? "true" : "false");
        for (size_t i = 0; i < entry.size(); ++i)
            std::printf("%s\n    {\"check\": %s, \"passed\": %s, \"detail\": %s}", i ? "," : "",
                        json_string(entry[i].name).c_str(), entry[i].passed ? "true" : "false",
                        json_string(entry[i].detail).c_str());
        std::printf("\n  ],\n  \"operators\": {");
        size_t i = 0;
        for (const auto& [op, t] : tally)
            std::printf("%s\n    %s: {\"passed\": %d, \"failed\": %d, \"skipped\": %d, \"skip_reason\": %s}",
                        i++ ? "," : "", json_string(op).c_str(), t.passed, t.failed, t.skipped,
                        json_string(t.skip_reason).c_str());
        std::printf("\n  },\n  \"cases\": [");
        i = 0;
        for (const auto& r : results) {
            const char* verdict = r.verdict == provider_kit::CaseResult::Verdict::Passed   ? "passed"
                                  : r.verdict == provider_kit::CaseResult::Verdict::Failed ? "failed"
                                                                                           : "skipped";
            std::printf("%s\n    {\"case\": %s, \"verdict\": \"%s\", \"operators\": %s, \"detail\": %s}",
                        i++ ? "," : "", json_string(r.name).c_str(), verdict, json_list(r.ops).c_str(),
                        json_string(r.detail).c_str());
        }
        std::printf("\n  ],\n  \"known_failures\": %s,\n  \"cases_note\": %s,\n  \"passed\": %s\n}\n",
                    json_list(xfails).c_str(), json_string(cases_note).c_str(), ok ? "true" : "false");
        return ok ? 0 : 1;
    }

    std::printf("provider-test: %s\n", plugin_path.c_str());
    if (loaded) {
        std::printf("plugin: %s %s, ABI %u", info.name.c_str(), info.version.c_str(), info.abi_version);
        if (!info.providers.empty()) std::printf(", providers: %s", info.providers[0].c_str());
        if (!info.custom_ops.empty()) std::printf(", %zu custom operators", info.custom_ops.size());
        std::printf("; checking provider '%s' against '%s'\n", o.settings.provider.c_str(),
                    o.settings.reference.c_str());
    }
    std::printf("\nEntry function\n");
    for (const auto& c : entry)
        std::printf("  %-5s %s%s%s\n", c.passed ? "ok" : "FAIL", c.name.c_str(), c.detail.empty() ? "" : ": ",
                    c.detail.c_str());
    std::printf("\nOperators");
    if (!cases_note.empty()) std::printf(": %s\n", cases_note.c_str());
    else std::printf(" (%zu cases)\n  %-34s %6s %6s %7s\n", results.size(), "operator", "passed", "failed", "skipped");
    for (const auto& [op, t] : tally) {
        if (!o.verbose && t.passed == 0 && t.failed == 0) continue;  // listed below with the reason
        std::printf("  %-34s %6d %6d %7d\n", op.c_str(), t.passed, t.failed, t.skipped);
    }
    if (cases_failed > 0) {
        std::printf("\nFailed cases\n");
        for (const auto& r : results)
            if (r.verdict == provider_kit::CaseResult::Verdict::Failed)
                std::printf("  %s: %s\n", r.name.c_str(), r.detail.c_str());
    }
    if (!xfails.empty()) {
        std::printf("\nKnown failures (xfail, --known-failures)\n");
        for (const auto& r : xfail_results) std::printf("  %s: %s\n", r.name.c_str(), first_line(r.detail).c_str());
    }
    if (ops_skipped > 0) {
        std::printf("\nOperators not claimed (the provider's reason, from the first case)\n");
        for (const auto& [op, t] : tally)
            if (t.passed == 0 && t.failed == 0)
                std::printf("  %-34s %s\n", op.c_str(), t.skip_reason.c_str());
    }
    if (o.verbose) {
        std::printf("\nCases\n");
        for (const auto& r : results) {
            const char* verdict = r.verdict == provider_kit::CaseResult::Verdict::Passed   ? "ok"
                                  : r.verdict == provider_kit::CaseResult::Verdict::Failed ? "FAIL"
                                                                                           : "skip";
            std::printf("  %-5s %s\n", verdict, r.name.c_str());
        }
    }
    std::printf("\nSummary: entry %zu/%zu checks passed; operators: %d passed, %d failed, %d not claimed; cases: %zu "
                "run, %d failed, %zu known failures\n",
                entry.size() - entry_failed, entry.size(), ops_passed, ops_failed, ops_skipped,
                results.size() + xfails.size(), cases_failed, xfails.size());
    return ok ? 0 : 1;
}

}  // namespace tessera::cli
