// Per-session profiling (TessSessionOptions' profiling file, like onnxruntime's enable_profiling): timed events of
// session creation, of every run, of every partition compute call and of every node a provider reports, written as a
// Chrome trace (a JSON object with "traceEvents", opened by ui.perfetto.dev or chrome://tracing), and a text summary
// of node time by operator type.
//
// Times are CLOCK_MONOTONIC nanoseconds, the clock providers report nodes in (TessHostApi::compute_profile_node); the
// trace shows them in microseconds since the profiler's origin (the start of session creation).  Every member
// function is thread-safe: concurrent runs record into one profiler.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tessera {

class Profiler {
public:
    // `path`: the trace file end() writes.  `origin_ns`: the instant trace timestamps count from.
    Profiler(std::string path, int64_t origin_ns);
    // Writes the trace when end() has not (errors are logged, not thrown).
    ~Profiler();
    Profiler(const Profiler&) = delete;
    Profiler& operator=(const Profiler&) = delete;

    static int64_t now_ns();  // CLOCK_MONOTONIC

    // False once end() was called: nothing more is recorded.
    bool active() const { return active_.load(std::memory_order_acquire); }

    // A phase of session creation ("load", "optimize", "partition", "compile"); `args_json` is a JSON object's text.
    void session_phase(const std::string& name, int64_t start_ns, int64_t end_ns, const std::string& args_json = "{}");
    // Numbers the runs: 0, 1, ...
    int64_t begin_run();
    void run(int64_t run, int64_t start_ns, int64_t end_ns);
    void partition(int64_t run, size_t partition, const std::string& provider, size_t node_count, int64_t start_ns,
                   int64_t end_ns);
    // A node a provider ran; `name` may be empty (the op type names the event then), `input_shapes` NULL.
    void node(int64_t run, size_t partition, const std::string& provider, const char* name, const char* op_type,
              const char* input_shapes, int64_t start_ns, int64_t end_ns);

    // Stops recording, writes the trace file and returns its path.  Later calls write nothing and return the same
    // path.  Throws tessera::Error when the file cannot be written (recording has stopped all the same).
    const std::string& end();
    const std::string& path() const { return path_; }

    // The trace as end() writes it.
    std::string trace_json() const;
    // Node time by operator type, most first: a header line, then one line per op type (at most `max_rows`; a last
    // line counts the rest) with calls, total ms, mean ms per call and share of all node time.
    std::string summary(size_t max_rows = 15) const;

    // Events beyond this many are dropped from the trace (the summary still counts them).
    static constexpr size_t kMaxEvents = 2'000'000;

private:
    enum class Category : uint8_t { Session, Run, Partition, Node };
    struct Event {
        Category category;
        uint32_t tid;
        uint32_t name;            // interned strings
        uint32_t op_type = 0;     // node
        uint32_t provider = 0;    // partition, node
        uint32_t detail = 0;      // node: input shapes; session: args JSON
        int64_t run = -1;
        int64_t partition = -1;
        int64_t count = 0;        // partition: nodes
        int64_t start_ns, end_ns;
    };
    struct OpTotal {
        int64_t ns = 0;
        int64_t calls = 0;
    };
    struct TransparentHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };

    // With mutex_ held.
    uint32_t intern(std::string_view text);
    uint32_t thread_id();
    void add(const Event& event);

    const std::string path_;
    const int64_t origin_ns_;
    const int pid_;
    std::atomic<bool> active_{true};
    std::atomic<int64_t> next_run_{0};

    mutable std::mutex mutex_;
    bool written_ = false;
    std::vector<Event> events_;
    size_t dropped_ = 0;
    std::vector<std::string> strings_;
    std::unordered_map<std::string, uint32_t, TransparentHash, std::equal_to<>> string_ids_;
    std::unordered_map<std::thread::id, uint32_t> thread_ids_;
    std::unordered_map<uint32_t, OpTotal> op_totals_;  // by interned op type
    int64_t runs_ = 0, run_ns_ = 0;
};

// What a compute context carries while its run is profiled (TessComputeContext::profile).
struct ComputeProfile {
    Profiler* profiler = nullptr;
    int64_t run = -1;
    size_t partition = 0;
    const std::string* provider = nullptr;
};

}  // namespace tessera
