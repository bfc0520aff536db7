// Profiling: the profiler's trace and summary (white-box), and profiled sessions through the C API with the CPU
// provider reporting every node (tess_session_options_set_profiling, tess_session_end_profiling).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "exec/profiler.h"
#include "plugins/plugins.h"
#include "test_support.h"

using namespace tessera::test;
namespace fs = std::filesystem;

namespace {

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
    return n;
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// A fresh directory for one test's files.
fs::path scratch_dir(const std::string& name) {
    fs::path dir = fs::temp_directory_path() / ("tessera_profiling_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

// x -> Relu -> Add(c) -> Mul(x) -> y: three named nodes, nothing the optimizer removes.
ModelBuilder three_nodes() {
    ModelBuilder b;
    b.input("x", {2, 3}).output("y", {2, 3});
    b.initializer("c", {3}, {1.0f, 2.0f, 3.0f});
    b.node("Relu", {"x"}, {"r"}, "relu \"quoted\"");
    b.node("Add", {"r", "c"}, {"a"}, "add");
    b.node("Mul", {"a", "x"}, {"y"}, "mul");
    return b;
}

SessionPtr profiled_session(TessEnv* env, const ModelBuilder& b, const std::string& path) {
    TessSessionOptions* raw = nullptr;
    EXPECT_EQ(StatusPtr(tess_session_options_create(&raw)), nullptr);
    OptionsPtr options(raw);
    EXPECT_EQ(StatusPtr(tess_session_options_set_profiling(options.get(), path.empty() ? nullptr : path.c_str())),
              nullptr);
    const std::string bytes = b.bytes();
    TessSession* session = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env, bytes.data(), bytes.size(), nullptr, options.get(), &session));
    EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
    return SessionPtr(session);
}

void run_once(TessSession* session) {
    ValuePtr x = make_float_tensor({2, 3}, {-1, 2, -3, 4, -5, 6});
    const char* name = "x";
    const TessValue* inputs[] = {x.get()};
    TessValue* out = nullptr;
    StatusPtr status(tess_session_run(session, &name, inputs, 1, nullptr, 1, &out));
    ASSERT_EQ(status, nullptr) << tess_status_message(status.get());
    ValuePtr owned(out);
    EXPECT_EQ(floats_of(out), (std::vector<float>{-1, 8, -9, 20, -10, 54}));
}

}  // namespace

TEST(Profiler, TraceAndSummary) {
    const fs::path dir = scratch_dir("unit");
    const int64_t origin = tessera::Profiler::now_ns();
    tessera::Profiler profiler((dir / "trace.json").string(), origin);
    const std::string cpu = "cpu";
    profiler.session_phase("load", origin, origin + 2000, "{\"nodes\":3}");
    const int64_t run = profiler.begin_run();
    EXPECT_EQ(run, 0);
    profiler.node(run, 0, cpu, "conv \"1\"", "Conv", "[1,3,8,8] [4,3,3,3]", origin + 3000, origin + 9000);
    profiler.node(run, 0, cpu, "", "Relu", nullptr, origin + 9000, origin + 10000);
    profiler.node(run, 0, cpu, "conv2", "Conv", "[1,4,6,6]", origin + 10000, origin + 12000);
    profiler.partition(run, 0, cpu, 3, origin + 2500, origin + 12500);
    profiler.run(run, origin + 2200, origin + 13000);

    const std::string trace = profiler.trace_json();
    EXPECT_EQ(trace.rfind("{\"traceEvents\":[", 0), 0u);
    EXPECT_NE(trace.find("\"displayTimeUnit\":\"ms\"}"), std::string::npos);
    EXPECT_EQ(count(trace, "\"ph\":\"X\""), 6u);
    EXPECT_EQ(count(trace, "\"cat\":\"node\""), 3u);
    EXPECT_NE(trace.find("\"name\":\"conv \\\"1\\\"\""), std::string::npos);  // escaped
    EXPECT_NE(trace.find("\"name\":\"Relu\""), std::string::npos);           // unnamed: the op type
    EXPECT_NE(trace.find("\"ts\":3.000,\"dur\":6.000"), std::string::npos);  // microseconds since the origin
    EXPECT_NE(trace.find("\"input_shapes\":\"[1,3,8,8] [4,3,3,3]\""), std::string::npos);
    EXPECT_NE(trace.find("\"args\":{\"nodes\":3}"), std::string::npos);
    // Sorted by start: load, run, partition, then the nodes.
    EXPECT_LT(trace.find("\"name\":\"load\""), trace.find("\"cat\":\"run\""));
    EXPECT_LT(trace.find("\"cat\":\"run\""), trace.find("\"cat\":\"partition\""));
    EXPECT_LT(trace.find("\"cat\":\"partition\""), trace.find("\"cat\":\"node\""));

    const std::string summary = profiler.summary();
    EXPECT_EQ(summary.rfind("profile: 1 run, 0.011 ms per run, 3 node calls, 0.009 ms in nodes\n", 0), 0u) << summary;
    EXPECT_LT(summary.find("Conv"), summary.find("Relu"));  // most time first
    EXPECT_NE(summary.find("88.9%"), std::string::npos) << summary;
    EXPECT_NE(profiler.summary(1).find("(1 more)"), std::string::npos);

    EXPECT_TRUE(profiler.active());
    EXPECT_EQ(profiler.end(), (dir / "trace.json").string());
    EXPECT_FALSE(profiler.active());
    profiler.node(1, 0, cpu, "late", "Relu", nullptr, origin, origin + 1);  // ignored after the end
    EXPECT_EQ(read_file(dir / "trace.json"), trace);
    fs::remove_all(dir);
}

TEST(Profiling, HostTableOffersTheProfilingFunctions) {
    const TessHostApi& host = tessera::host_api();
    ASSERT_TRUE(TESS_HAS_FIELD(&host, TessHostApi, compute_profile_node));
    ASSERT_NE(host.compute_profiling, nullptr);
    ASSERT_NE(host.compute_profile_node, nullptr);
    EXPECT_EQ(host.compute_profiling(nullptr), 0);
    host.compute_profile_node(nullptr, "n", "Relu", nullptr, 0, 1);  // ignored, no crash
}

TEST(Profiling, SessionRecordsPhasesRunsPartitionsAndNodes) {
    EnvPtr env = make_env(plugin_dir().string());
    const fs::path dir = scratch_dir("session");
    const std::string path = (dir / "trace.json").string();
    SessionPtr session = profiled_session(env.get(), three_nodes(), path);
    ASSERT_NE(session, nullptr);
    run_once(session.get());
    run_once(session.get());
    EXPECT_FALSE(fs::exists(path));  // written when profiling ends

    const char* written = nullptr;
    TESS_ASSERT_OK(tess_session_end_profiling(session.get(), &written));
    EXPECT_EQ(std::string(written), path);
    const std::string trace = read_file(path);
    for (const char* phase : {"load", "providers", "optimize", "partition", "compile"})
        EXPECT_NE(trace.find(std::string("\"cat\":\"session\",\"name\":\"") + phase + "\""), std::string::npos)
            << phase;
    EXPECT_EQ(count(trace, "\"cat\":\"run\""), 2u);
    EXPECT_EQ(count(trace, "\"cat\":\"partition\""), 2u);
    EXPECT_EQ(count(trace, "\"cat\":\"node\""), 6u);
    EXPECT_EQ(count(trace, "\"name\":\"relu \\\"quoted\\\"\""), 2u);
    EXPECT_EQ(count(trace, "\"name\":\"add\",\"pid\""), 2u);
    EXPECT_EQ(count(trace, "\"op_type\":\"Mul\",\"provider\":\"cpu\",\"input_shapes\":\"[2,3] [2,3]\""), 2u);
    EXPECT_EQ(count(trace, "\"op_type\":\"Add\",\"provider\":\"cpu\",\"input_shapes\":\"[2,3] [3]\""), 2u);

    // Ended: runs record nothing more, and the path stays.
    run_once(session.get());
    const char* again = nullptr;
    TESS_ASSERT_OK(tess_session_end_profiling(session.get(), &again));
    EXPECT_EQ(again, written);
    EXPECT_EQ(read_file(path), trace);

    const char* summary = nullptr;
    TESS_ASSERT_OK(tess_session_profiling_summary(session.get(), 15, &summary));
    const std::string text = summary;
    EXPECT_EQ(text.rfind("profile: 2 runs", 0), 0u) << text;
    for (const char* op : {"Relu", "Add", "Mul"}) EXPECT_NE(text.find(op), std::string::npos) << text;
    session.reset();
    fs::remove_all(dir);
}

TEST(Profiling, ConcurrentRunsAreEachRecorded) {
    EnvPtr env = make_env(plugin_dir().string());
    const fs::path dir = scratch_dir("threads");
    const std::string path = (dir / "trace.json").string();
    SessionPtr session = profiled_session(env.get(), three_nodes(), path);
    ASSERT_NE(session, nullptr);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
            for (int k = 0; k < 5; ++k) run_once(session.get());
        });
    for (auto& t : threads) t.join();
    session.reset();  // released without end_profiling: the trace is written now
    const std::string trace = read_file(path);
    EXPECT_EQ(count(trace, "\"cat\":\"run\""), 20u);
    EXPECT_EQ(count(trace, "\"cat\":\"node\""), 60u);
    for (int run = 0; run < 20; ++run)
        EXPECT_EQ(count(trace, "\"run\":" + std::to_string(run) + "}"), 1u + 1u + 3u) << run;  // run, partition, nodes
    fs::remove_all(dir);
}

TEST(Profiling, OffByDefaultAndWithAnEmptyPath) {
    EnvPtr env = make_env(plugin_dir().string());
    const fs::path dir = scratch_dir("off");
    const fs::path before = fs::current_path();
    fs::current_path(dir);
    {
        SessionPtr session = profiled_session(env.get(), three_nodes(), "");
        run_once(session.get());
        const char* path = nullptr;
        TESS_ASSERT_OK(tess_session_end_profiling(session.get(), &path));
        EXPECT_STREQ(path, "");
        const char* summary = nullptr;
        TESS_ASSERT_OK(tess_session_profiling_summary(session.get(), 15, &summary));
        EXPECT_STREQ(summary, "");
    }
    fs::current_path(before);
    EXPECT_TRUE(fs::is_empty(dir));
    fs::remove_all(dir);
}

TEST(Profiling, MissingDirectoryFailsSessionCreation) {
    EnvPtr env = make_env(plugin_dir().string());
    TessSessionOptions* raw = nullptr;
    TESS_ASSERT_OK(tess_session_options_create(&raw));
    OptionsPtr options(raw);
    TESS_ASSERT_OK(tess_session_options_set_profiling(options.get(), "/nonexistent/dir/trace.json"));
    const std::string bytes = three_nodes().bytes();
    TessSession* session = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, options.get(),
                                                    &session));
    ASSERT_NE(status, nullptr);
    EXPECT_EQ(tess_status_code(status.get()), TESS_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tess_status_message(status.get())).find("does not exist"), std::string::npos);
    StatusPtr null_options(tess_session_options_set_profiling(nullptr, "x.json"));
    EXPECT_NE(null_options, nullptr);
    StatusPtr null_out(tess_session_end_profiling(nullptr, nullptr));
    EXPECT_NE(null_out, nullptr);
}
