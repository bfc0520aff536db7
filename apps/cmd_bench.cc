// `tessera bench`: how fast a model runs here.  Times session creation, the first run and a series of runs after a
// warmup, one run at a time, and reports latency percentiles, runs per second, the providers the partition plan
// uses and the process's resident memory, as text or JSON.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <thread>

#include "cli.h"
#include "model_setup.h"
#include "onnx_io.h"

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kBenchHelp =
    "Usage: tessera bench [MODEL] [options]\n"
    "\n"
    "Times MODEL (an .onnx file; the embedded default model when left out): session creation, the first run (it\n"
    "records the memory plans), then timed runs after a warmup, one at a time.  Prints the providers the partition\n"
    "plan uses, the latency mean, min, p50, p90, p99 and max, runs per second, and the resident memory after\n"
    "session creation and at its peak.  Long benchmarks show their progress on stderr.\n"
    "\n"
    "Options:\n"
    "  --inputs DIR        read input_0.pb, input_1.pb, ... as 'tessera run --inputs' does; without it, inputs\n"
    "                      are generated as 'tessera run' generates them (unknown dimensions count as 1)\n";

constexpr const char* kBenchOptions =
    "  --warmup N          runs before the timed ones (default 3); the first run is reported on its own either\n"
    "                      way, and with --warmup 0 it is also the first timed run\n"
    "  --runs N            timed runs (default 20)\n"
    "  --time SECONDS      instead of --runs: time runs until they took SECONDS in all (at least one run)\n"
    "  --json              print the report as one JSON object\n"
    "  --providers A,B     provider priority list, most preferred first (default: every usable one, CPU last)\n"
    "  --strict            fail instead of falling back when a listed provider cannot take a node\n"
    "  --threads N         intra-op threads (default: one per core)\n"
    "  --optimization N    0 disables the graph optimizer, 1 (default) runs it\n"
    "  --optimized-model-out FILE\n"
    "                      save the graph the optimizer produced (before partitioning) to FILE as an ONNX model\n"
    "  --profile FILE      profile session creation and every run into FILE (a Chrome trace: ui.perfetto.dev\n"
    "                      opens it), then print the time by operator type (on stderr with --json)\n";

struct BenchFlags {
    std::optional<std::string> model;
    std::string inputs_dir;
    ShapeFlags shapes;
    SessionFlags session;
    EnvFlags env;
    int warmup = 3;
    int runs = 20;
    std::optional<double> seconds;  // --time
    bool json = false;
    bool help = false;
};

BenchFlags parse_flags(Args& args) {
    BenchFlags flags;
    bool runs_given = false;
    std::string value;
    while (!args.done()) {
        if (args.flag("-h") || args.flag("--help")) {
            flags.help = true;
            return flags;
        }
        if (args.option("--inputs", flags.inputs_dir) || flags.shapes.parse(args) || flags.env.parse(args) ||
            flags.session.parse(args))
            continue;
        if (args.option("--warmup", value)) {
            flags.warmup = parse_int("--warmup", value, 0, 1000000);
        } else if (args.option("--runs", value)) {
            flags.runs = parse_int("--runs", value, 1, 100000000);
            runs_given = true;
        } else if (args.option("--time", value)) {
            flags.seconds = parse_double("--time", value, 0, 1e6);
        } else if (args.flag("--json")) {
            flags.json = true;
        } else if (args.at_option()) {
            throw UsageError("unknown option '" + args.peek() + "' for 'bench' (try 'tessera bench --help')");
        } else if (flags.model) {
            throw UsageError("'bench' takes one MODEL, got '" + *flags.model + "' and '" + args.peek() + "'");
        } else {
            flags.model = args.next();
        }
    }
    if (runs_given && flags.seconds) throw UsageError("give either --runs or --time, not both");
    return flags;
}

// ---- Measurements ------------------------------------------------------------------------------------------------

// Resident memory now: the second field of /proc/self/statm, in pages.  0 where there is no /proc.
double resident_mib() {
    std::ifstream statm("/proc/self/statm");
    unsigned long long size = 0, resident = 0;
    if (!(statm >> size >> resident)) return 0;
    return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// The most memory the process has had resident so far; Linux counts ru_maxrss in KiB.
double peak_resident_mib() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

struct Latency {
    double mean = 0, min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0, total = 0;
};

// Linear interpolation between the closest ranks, as numpy.percentile does by default.
double percentile(const std::vector<double>& sorted, double fraction) {
    const double rank = fraction * static_cast<double>(sorted.size() - 1);
    const size_t low = static_cast<size_t>(rank);
    const size_t high = std::min(low + 1, sorted.size() - 1);
    return sorted[low] + (sorted[high] - sorted[low]) * (rank - static_cast<double>(low));
}

Latency latency_of(std::vector<double> milliseconds) {
    std::sort(milliseconds.begin(), milliseconds.end());
    Latency l;
    for (double ms : milliseconds) l.total += ms;
    l.mean = l.total / static_cast<double>(milliseconds.size());
    l.min = milliseconds.front();
    l.max = milliseconds.back();
    l.p50 = percentile(milliseconds, 0.50);
    l.p90 = percentile(milliseconds, 0.90);
    l.p99 = percentile(milliseconds, 0.99);
    return l;
}

// Providers that own partitions, in order of first appearance, with how many they own.
std::vector<std::pair<std::string, size_t>> providers_used(const std::vector<PartitionInfo>& partitions) {
    std::vector<std::pair<std::string, size_t>> used;
    for (const PartitionInfo& p : partitions) {
        auto it = std::find_if(used.begin(), used.end(), [&](const auto& u) { return u.first == p.provider; });
        if (it == used.end()) used.emplace_back(p.provider, 1);
        else ++it->second;
    }
    return used;
}

// A progress line on stderr, so a long benchmark does not look hung: rewritten in place at most 4 times a second on
// a terminal, a new line every 5 seconds otherwise, and none for --json into a pipe or file (whoever parses stdout
// is a program).  The first comes after a while, so short benchmarks print nothing.
class Progress {
public:
    explicit Progress(bool json)
        : terminal_(::isatty(STDERR_FILENO) != 0),
          enabled_(terminal_ || !json),
          next_(Clock::now() + (terminal_ ? std::chrono::seconds(1) : std::chrono::seconds(5))) {}
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;
    ~Progress() { clear(); }

    bool due(Clock::time_point now) const { return enabled_ && now >= next_; }
    void show(Clock::time_point now, const std::string& text) {
        if (terminal_) {
            std::fprintf(stderr, "\r%-*s", width_, text.c_str());
            width_ = std::max(width_, static_cast<int>(text.size()));
            next_ = now + std::chrono::milliseconds(250);
        } else {
            std::fprintf(stderr, "%s\n", text.c_str());
            next_ = now + std::chrono::seconds(5);
        }
        std::fflush(stderr);
    }
    // Blanks the terminal line, so results and error lines start on a clean one.
    void clear() {
        if (width_ > 0) std::fprintf(stderr, "\r%*s\r", width_, "");
        width_ = 0;
    }

private:
    bool terminal_;
    bool enabled_;
    Clock::time_point next_;
    int width_ = 0;
};

struct Report {
    std::string model;  // empty: the embedded default model
    bool generated_inputs = false;
    std::vector<std::pair<std::string, std::string>> inputs;  // name, description of the value fed
    std::vector<std::pair<std::string, size_t>> providers;
    size_t partitions = 0;
    int threads = 0;
    bool default_threads = false;
    int warmup = 0;
    double session_ms = 0, first_run_ms = 0;
    size_t runs = 0;
    Latency latency;
    double rss_after_session_mib = 0, peak_rss_mib = 0;
    double runs_per_second() const { return latency.total > 0 ? 1000.0 * runs / latency.total : 0; }
};

// Four significant digits without an exponent: "0.02723", "12.34", "1234".
std::string milliseconds(double ms) {
    const int decimals = ms > 0 ? std::clamp(3 - static_cast<int>(std::floor(std::log10(ms))), 0, 6) : 3;
    char text[32];
    std::snprintf(text, sizeof text, "%.*f", decimals, ms);
    return text;
}

void print_text(const Report& r) {
    std::printf("model: %s\n", r.model.empty() ? "(embedded default model)" : r.model.c_str());
    std::printf("inputs%s:\n", r.generated_inputs ? " (generated)" : "");
    for (const auto& [name, value] : r.inputs) std::printf("  %s: %s\n", name.c_str(), value.c_str());
    std::string providers;
    for (const auto& [name, count] : r.providers)
        providers += (providers.empty() ? "" : ", ") + name + " (" + std::to_string(count) + " partition" +
                     (count == 1 ? ")" : "s)");
    std::printf("providers: %s\n", providers.empty() ? "(none)" : providers.c_str());
    std::printf("threads: %d%s\n", r.threads, r.default_threads ? " (one per core)" : "");
    std::printf("session creation: %s ms, %.1f MiB resident after it\n", milliseconds(r.session_ms).c_str(),
                r.rss_after_session_mib);
    std::printf("first run: %s ms\n", milliseconds(r.first_run_ms).c_str());
    std::printf("timed runs: %zu after %d warmup, %s ms in all, %.1f runs/s\n", r.runs, r.warmup,
                milliseconds(r.latency.total).c_str(), r.runs_per_second());
    const Latency& l = r.latency;
    std::printf("latency (ms): mean %s  min %s  p50 %s  p90 %s  p99 %s  max %s\n", milliseconds(l.mean).c_str(),
                milliseconds(l.min).c_str(), milliseconds(l.p50).c_str(), milliseconds(l.p90).c_str(),
                milliseconds(l.p99).c_str(), milliseconds(l.max).c_str());
    std::printf("peak resident memory: %.1f MiB\n", r.peak_rss_mib);
}

void print_json(const Report& r) {
    std::printf("{\n  \"model\": %s,\n", r.model.empty() ? "null" : json_string(r.model).c_str());
    std::printf("  \"generated_inputs\": %s,\n  \"inputs\": [", r.generated_inputs ? "true" : "false");
    for (size_t k = 0; k < r.inputs.size(); ++k)
        std::printf("%s{\"name\": %s, \"value\": %s}", k ? ", " : "", json_string(r.inputs[k].first).c_str(),
                    json_string(r.inputs[k].second).c_str());
    std::vector<std::string> providers;
    for (const auto& used : r.providers) providers.push_back(used.first);
    std::printf("],\n  \"providers\": %s,\n  \"partitions\": %zu,\n  \"threads\": %d,\n", json_list(providers).c_str(),
                r.partitions, r.threads);
    // Milliseconds with six decimals: the clock's nanoseconds.
    std::printf("  \"session_create_ms\": %.6f,\n  \"first_run_ms\": %.6f,\n  \"warmup_runs\": %d,\n", r.session_ms,
                r.first_run_ms, r.warmup);
    const Latency& l = r.latency;
    std::printf("  \"runs\": %zu,\n  \"total_ms\": %.6f,\n  \"runs_per_s\": %.3f,\n", r.runs, l.total,
                r.runs_per_second());
    std::printf("  \"latency_ms\": {\"mean\": %.6f, \"min\": %.6f, \"p50\": %.6f, \"p90\": %.6f, \"p99\": %.6f, "
                "\"max\": %.6f},\n",
                l.mean, l.min, l.p50, l.p90, l.p99, l.max);
    std::printf("  \"rss_after_session_mib\": %.2f,\n  \"peak_rss_mib\": %.2f\n}\n", r.rss_after_session_mib,
                r.peak_rss_mib);
}

}  // namespace

int bench_command(Args& args) {
    const BenchFlags flags = parse_flags(args);
    if (flags.help) {
        std::fputs(kBenchHelp, stdout);
        std::fputs(ShapeFlags::help(), stdout);
        std::fputs(kBenchOptions, stdout);
        std::fputs(EnvFlags::help(), stdout);
        return 0;
    }

    // Inputs first, so that a bad input file or --shape fails fast, before the model is compiled.
    std::vector<ValueInfo> inputs = inputs_to_feed(flags.model);
    flags.shapes.apply(inputs);
    const std::vector<Value> values =
        flags.inputs_dir.empty() ? generate_inputs(inputs) : read_inputs(flags.inputs_dir, inputs);
    const std::vector<ValueView> views(values.begin(), values.end());
    std::vector<std::string> input_names;
    for (const ValueInfo& info : inputs) input_names.push_back(info.name);

    Report report;
    report.model = flags.model.value_or("");
    report.generated_inputs = flags.inputs_dir.empty();
    for (size_t k = 0; k < inputs.size(); ++k)
        report.inputs.emplace_back(inputs[k].name, onnx_io::describe_value(values[k]));

    Env env = create_env(flags.env);
    const auto create_start = Clock::now();
    Session session = open_session(env, flags.model, flags.session);
    report.session_ms = milliseconds_since(create_start);
    report.rss_after_session_mib = resident_mib();
    const std::vector<PartitionInfo> partitions = session.partitions();
    report.partitions = partitions.size();
    report.providers = providers_used(partitions);
    // The session's own rule for its pool size (0 or unset: one thread per core).
    report.default_threads = flags.session.threads <= 0;
    report.threads = report.default_threads ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                                            : flags.session.threads;
    report.warmup = flags.warmup;

    auto timed_run = [&]() {
        const auto start = Clock::now();
        try {
            const std::vector<Value> outputs = session.run(input_names, views);
            return milliseconds_since(start);  // before the outputs are released: that is the caller's work
        } catch (const Error& e) {
            rethrow_in("run failed", e);
        }
    };

    Progress progress(flags.json);
    std::vector<double> latencies;
    latencies.reserve(flags.seconds ? 1024 : static_cast<size_t>(flags.runs));
    report.first_run_ms = timed_run();
    if (flags.warmup == 0) latencies.push_back(report.first_run_ms);
    for (int done = 1; done < flags.warmup; ++done) {
        timed_run();
        if (const auto now = Clock::now(); progress.due(now))
            progress.show(now, "tessera bench: warmup " + std::to_string(done + 1) + "/" +
                                   std::to_string(flags.warmup));
    }
    const double budget_ms = flags.seconds.value_or(0) * 1000.0;
    double spent_ms = latencies.empty() ? 0 : latencies.front();
    while (flags.seconds ? latencies.empty() || spent_ms < budget_ms
                         : latencies.size() < static_cast<size_t>(flags.runs)) {
        latencies.push_back(timed_run());
        spent_ms += latencies.back();
        if (const auto now = Clock::now(); progress.due(now)) {
            char line[160];
            if (flags.seconds)
                std::snprintf(line, sizeof line, "tessera bench: %zu runs, %.1f of %.1f s, mean %s ms",
                              latencies.size(), spent_ms / 1000.0, *flags.seconds,
                              milliseconds(spent_ms / latencies.size()).c_str());
            else
                std::snprintf(line, sizeof line, "tessera bench: run %zu/%d, mean %s ms", latencies.size(),
                              flags.runs, milliseconds(spent_ms / latencies.size()).c_str());
            progress.show(now, line);
        }
    }
    progress.clear();

    report.runs = latencies.size();
    report.latency = latency_of(std::move(latencies));
    report.peak_rss_mib = peak_resident_mib();
    if (flags.json) print_json(report);
    else print_text(report);
    std::fflush(stdout);
    print_profile(session, flags.json ? stderr : stdout);  // stdout stays one JSON object with --json
    return 0;
}

}  // namespace tessera::cli
