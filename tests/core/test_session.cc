// Sessions through the C API: input validation errors, output selection, constant folding, concurrent runs.
#include <algorithm>
#include <fstream>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "test_support.h"

using namespace tessera::test;

namespace {

SessionPtr make_session(TessEnv* env, const ModelBuilder& b) {
    auto bytes = b.bytes();
    TessSession* session = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env, bytes.data(), bytes.size(), nullptr, nullptr, &session));
    EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
    return SessionPtr(session);
}

std::string run_error(TessSession* session, const char* name, const TessValue* value) {
    const TessValue* inputs[] = {value};
    TessValue* out = nullptr;
    StatusPtr status(tess_session_run(session, &name, inputs, 1, nullptr, 1, &out));
    tess_value_release(out);
    return status ? tess_status_message(status.get()) : "";
}

}  // namespace

TEST(Session, ReportsInputsAndOutputs) {
    EnvPtr env = make_env(plugin_dir().string());
    ModelBuilder b;
    b.input("x", {-1, 3}).output("y", {-1, 3});
    b.node("Relu", {"x"}, {"y"});
    SessionPtr s = make_session(env.get(), b);
    ASSERT_EQ(tess_session_input_count(s.get()), 1u);
    TessValueInfo info{};
    info.struct_size = sizeof(info);
    TESS_ASSERT_OK(tess_session_input_info(s.get(), 0, &info));
    EXPECT_STREQ(info.name, "x");
    EXPECT_EQ(info.element_type, TESS_ELEMENT_FLOAT32);
    ASSERT_EQ(info.rank, 2);
    EXPECT_EQ(info.dims[0], -1);
    EXPECT_STREQ(info.dim_params[0], "N");
    EXPECT_EQ(info.dims[1], 3);
}

TEST(Session, BadInputsGiveClearErrors) {
    EnvPtr env = make_env(plugin_dir().string());
    ModelBuilder b;
    b.input("x", {-1, 3}).output("y", {-1, 3});
    b.node("Relu", {"x"}, {"y"});
    SessionPtr s = make_session(env.get(), b);

    auto good = make_float_tensor({2, 3}, std::vector<float>(6, 1.0f));
    EXPECT_EQ(run_error(s.get(), "x", good.get()), "");
    EXPECT_NE(run_error(s.get(), "nope", good.get()).find("no input named 'nope'"), std::string::npos);
    auto wrong_rank = make_float_tensor({6}, std::vector<float>(6, 1.0f));
    EXPECT_NE(run_error(s.get(), "x", wrong_rank.get()).find("expects rank 2"), std::string::npos);
    auto wrong_dim = make_float_tensor({2, 4}, std::vector<float>(8, 1.0f));
    EXPECT_NE(run_error(s.get(), "x", wrong_dim.get()).find("dimension 1"), std::string::npos);
    TessValue* ints = nullptr;
    int64_t dims[] = {2, 3};
    TESS_ASSERT_OK(tess_value_create_tensor(TESS_ELEMENT_INT64, dims, 2, &ints));
    ValuePtr owner(ints);
    EXPECT_NE(run_error(s.get(), "x", ints).find("element type float"), std::string::npos);

    TessValue* out = nullptr;
    StatusPtr missing(tess_session_run(s.get(), nullptr, nullptr, 0, nullptr, 1, &out));
    ASSERT_NE(missing, nullptr);
    EXPECT_NE(std::string(tess_status_message(missing.get())).find("input 'x' is missing"), std::string::npos);
}

TEST(Session, FoldsConstantsAndRunsWithCallerMemory) {
    EnvPtr env = make_env(plugin_dir().string());
    ModelBuilder b;
    b.input("x", {3}).output("y", {3});
    b.initializer("c", {3}, {-1.0f, 2.0f, -3.0f});
    b.node("Relu", {"c"}, {"rc"}, "folded");  // constant: evaluated at session creation
    b.node("Add", {"x", "rc"}, {"y"}, "add");
    SessionPtr s = make_session(env.get(), b);
    TessPartitionInfo p{};
    p.struct_size = sizeof(p);
    ASSERT_EQ(tess_session_partition_count(s.get()), 1u);
    TESS_ASSERT_OK(tess_session_partition_info(s.get(), 0, &p));
    EXPECT_EQ(p.node_count, 1u);  // only the Add is left

    float data[3] = {1.0f, 1.0f, 1.0f};
    int64_t dims[] = {3};
    TessValue* x = nullptr;
    TESS_ASSERT_OK(tess_value_create_tensor_over(TESS_ELEMENT_FLOAT32, dims, 1, data, sizeof(data), nullptr, nullptr, &x));
    ValuePtr owner(x);
    const char* name = "x";
    const TessValue* inputs[] = {x};
    TessValue* out = nullptr;
    TESS_ASSERT_OK(tess_session_run(s.get(), &name, inputs, 1, nullptr, 1, &out));
    ValuePtr y(out);
    EXPECT_EQ(floats_of(y.get()), (std::vector<float>{1.0f, 3.0f, 1.0f}));
}

// float6 (IR 14) end to end: initializers in raw_data and int32_data cast to float, and a float6 output.
TEST(Session, RunsFloat6Models) {
    EnvPtr env = make_env(plugin_dir().string());
    const std::vector<int32_t> codes{0x3F, 0x2A, 0x15, 0x33, 0x0C};
    const std::string packed("\xBF\x5A\xCD\x0C", 4);
    struct Case {
        int32_t type;
        std::vector<float> values;  // of the codes
    };
    for (const Case& c : {Case{TESS_ELEMENT_FLOAT6E2M3, {-7.5f, -1.25f, 3.25f, -2.75f, 1.5f}},
                          Case{TESS_ELEMENT_FLOAT6E3M2, {-28.0f, -0.75f, 5.0f, -3.5f, 1.0f}}}) {
        SCOPED_TRACE(c.type);
        ModelBuilder b(28, 14);
        b.input("x", {5}).output("from_raw", {5}).output("from_typed", {5}).output("q", {5}, c.type);
        for (const char* name : {"raw", "typed"}) {
            auto* t = b.graph->add_initializer();
            t->set_name(name);
            t->set_data_type(c.type);
            t->add_dims(5);
            if (std::string(name) == "raw") t->set_raw_data(packed);
            else for (int32_t code : codes) t->add_int32_data(code);
            auto& cast = b.node("Cast", {name}, {std::string(name) + "_f"});
            auto* to = cast.add_attribute();
            to->set_name("to");
            to->set_type(onnx::AttributeProto::INT);
            to->set_i(onnx::TensorProto::FLOAT);
            b.node("Add", {"x", std::string(name) + "_f"}, {std::string("from_") + name});
        }
        auto& cast = b.node("Cast", {"x"}, {"q"});
        auto* to = cast.add_attribute();
        to->set_name("to");
        to->set_type(onnx::AttributeProto::INT);
        to->set_i(c.type);
        SessionPtr s = make_session(env.get(), b);
        ASSERT_NE(s, nullptr);

        auto x = make_float_tensor({5}, c.values);  // representable: adding it doubles the values, casting is exact
        const char* name = "x";
        const TessValue* inputs[] = {x.get()};
        TessValue* outs[3] = {};
        TESS_ASSERT_OK(tess_session_run(s.get(), &name, inputs, 1, nullptr, 3, outs));
        ValuePtr from_raw(outs[0]), from_typed(outs[1]), q(outs[2]);
        std::vector<float> doubled;
        for (float v : c.values) doubled.push_back(2 * v);
        EXPECT_EQ(floats_of(from_raw.get()), doubled);
        EXPECT_EQ(floats_of(from_typed.get()), doubled);
        EXPECT_EQ(tess_value_element_type(q.get()), c.type);
        ASSERT_EQ(tess_tensor_byte_size(q.get()), 4u);
        EXPECT_EQ(std::string(static_cast<const char*>(tess_tensor_const_data(q.get())), 4), packed);
    }
}

TEST(Session, ConcurrentRunsOnOneSessionAgree) {
    EnvPtr env = make_env(plugin_dir().string());
    ModelBuilder b;
    b.input("x", {64, 64}).output("y", {64, 64});
    b.node("MatMul", {"x", "x"}, {"m"});
    b.node("Relu", {"m"}, {"r"});
    b.node("Add", {"r", "x"}, {"y"});
    SessionPtr s = make_session(env.get(), b);

    std::vector<float> values(64 * 64);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 37) % 17) / 17.0f - 0.5f;
    auto x = make_float_tensor({64, 64}, values);
    auto run_once = [&] {
        const char* name = "x";
        const TessValue* inputs[] = {x.get()};
        TessValue* out = nullptr;
        StatusPtr status(tess_session_run(s.get(), &name, inputs, 1, nullptr, 1, &out));
        EXPECT_EQ(status, nullptr);
        ValuePtr y(out);
        return floats_of(y.get());
    };
    std::vector<float> reference = run_once();
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int k = 0; k < 25; ++k)
                if (run_once() != reference) ++mismatches[t];
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

// Run options through the C API: a terminated run fails at once with CANCELLED and leaves the session usable; the
// stopping of long runs (a Loop of 2^40 iterations) is tested from Python (test_robustness.py).
TEST(Session, TerminatedRunOptionsCancelARun) {
    EnvPtr env = make_env(plugin_dir().string());
    ModelBuilder b;
    b.input("x", {2}).output("y", {2});
    b.node("Relu", {"x"}, {"y"});
    SessionPtr s = make_session(env.get(), b);
    auto x = make_float_tensor({2}, {-1.0f, 2.0f});
    const char* name = "x";
    const TessValue* inputs[] = {x.get()};

    TessRunOptions* options = nullptr;
    TESS_ASSERT_OK(tess_run_options_create(&options));
    std::unique_ptr<TessRunOptions, decltype(&tess_run_options_release)> owner(options, tess_run_options_release);
    StatusPtr negative(tess_run_options_set_timeout_ms(options, -5));
    EXPECT_EQ(tess_status_code(negative.get()), TESS_STATUS_INVALID_ARGUMENT);

    TESS_ASSERT_OK(tess_run_options_set_terminate(options, 1));
    EXPECT_EQ(tess_run_options_get_terminate(options), 1);
    TessValue* out = nullptr;
    StatusPtr cancelled(tess_session_run_with_options(s.get(), options, &name, inputs, 1, nullptr, 1, &out));
    EXPECT_EQ(tess_status_code(cancelled.get()), TESS_STATUS_CANCELLED);
    EXPECT_EQ(out, nullptr);

    TESS_ASSERT_OK(tess_run_options_set_terminate(options, 0));
    TESS_ASSERT_OK(tess_session_run_with_options(s.get(), options, &name, inputs, 1, nullptr, 1, &out));
    ValuePtr y(out);
    EXPECT_EQ(static_cast<const float*>(tess_tensor_const_data(y.get()))[1], 2.0f);
    TESS_ASSERT_OK(tess_session_run_with_options(s.get(), nullptr, &name, inputs, 1, nullptr, 1, &out));
    tess_value_release(out);
}

namespace {

// Messages the environment's log callback received (every level down to debug).
struct LogCapture {
    std::mutex mutex;
    std::vector<std::string> lines;
    EnvPtr env;

    explicit LogCapture(const std::string& plugin_path) {
        TessEnvOptions options{};
        options.struct_size = sizeof(options);
        options.log_level = TESS_LOG_DEBUG;
        options.log_callback = [](void* user, int32_t, const char* message) {
            auto* self = static_cast<LogCapture*>(user);
            std::lock_guard lock(self->mutex);
            self->lines.emplace_back(message);
        };
        options.log_user_data = this;
        options.plugin_path = plugin_path.c_str();
        options.no_default_plugin_dirs = 1;
        TessEnv* raw = nullptr;
        StatusPtr status(tess_env_create(&options, &raw));
        EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
        env.reset(raw);
    }
    size_t count(const std::string& text) {
        std::lock_guard lock(mutex);
        return std::count_if(lines.begin(), lines.end(),
                             [&](const std::string& line) { return line.find(text) != std::string::npos; });
    }
};

using RunOptionsPtr = std::unique_ptr<TessRunOptions, decltype(&tess_run_options_release)>;

ModelBuilder relu_of_two() {
    ModelBuilder b;
    b.input("x", {2}).output("y", {2});
    b.node("Relu", {"x"}, {"y"});
    return b;
}

RunOptionsPtr make_run_options() {
    TessRunOptions* options = nullptr;
    StatusPtr status(tess_run_options_create(&options));
    EXPECT_EQ(status, nullptr);
    return RunOptionsPtr(options, tess_run_options_release);
}

}  // namespace

// A consumer written against API 0.1 uses run options for terminate and timeout only: its runs log no tag and write
// no trace, exactly as before 0.2 appended the log tag and per-run profiling.
TEST(Session, RunOptionsOfAnApi01ConsumerBehaveAsBefore) {
    LogCapture log(plugin_dir().string());
    SessionPtr s = make_session(log.env.get(), relu_of_two());
    auto x = make_float_tensor({2}, {-1.0f, 2.0f});
    const char* name = "x";
    const TessValue* inputs[] = {x.get()};
    RunOptionsPtr options = make_run_options();
    TESS_ASSERT_OK(tess_run_options_set_timeout_ms(options.get(), 60000));
    TessValue* out = nullptr;
    TESS_ASSERT_OK(tess_session_run_with_options(s.get(), options.get(), &name, inputs, 1, nullptr, 1, &out));
    ValuePtr y(out);
    EXPECT_EQ(static_cast<const float*>(tess_tensor_const_data(y.get()))[0], 0.0f);
    EXPECT_STREQ(tess_run_options_get_log_tag(options.get()), "");
    EXPECT_EQ(log.count("[run "), 0u);
}

// The log tag marks the messages of the run in progress on each calling thread, concurrent runs each with their own.
TEST(Session, RunOptionsLogTagMarksEachRunsMessages) {
    LogCapture log(plugin_dir().string());
    SessionPtr s = make_session(log.env.get(), relu_of_two());
    auto x = make_float_tensor({2}, {-1.0f, 2.0f});
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
        threads.emplace_back([&, t] {
            RunOptionsPtr options = make_run_options();
            const std::string tag = "request-" + std::to_string(t);
            StatusPtr set(tess_run_options_set_log_tag(options.get(), tag.c_str()));
            ASSERT_EQ(set, nullptr);
            EXPECT_EQ(tess_run_options_get_log_tag(options.get()), tag);
            const char* name = "x";
            const TessValue* inputs[] = {x.get()};
            for (int i = 0; i < 5; ++i) {
                TessValue* out = nullptr;
                StatusPtr status(tess_session_run_with_options(s.get(), options.get(), &name, inputs, 1, nullptr, 1, &out));
                EXPECT_EQ(status, nullptr);
                tess_value_release(out);
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 2; ++t) {
        const std::string tag = "[run request-" + std::to_string(t) + "] ";
        EXPECT_EQ(log.count(tag + "run started"), 5u);
        EXPECT_EQ(log.count(tag + "run finished in "), 5u);
    }
    // A failing run says so under its tag; messages outside tagged runs carry none.
    RunOptionsPtr options = make_run_options();
    TESS_ASSERT_OK(tess_run_options_set_log_tag(options.get(), "bad"));
    auto wrong = make_float_tensor({3}, {1, 2, 3});
    const char* name = "x";
    const TessValue* inputs[] = {wrong.get()};
    TessValue* out = nullptr;
    StatusPtr failed(tess_session_run_with_options(s.get(), options.get(), &name, inputs, 1, nullptr, 1, &out));
    EXPECT_NE(failed, nullptr);
    EXPECT_EQ(log.count("[run bad] run failed: "), 1u);
    TESS_ASSERT_OK(tess_run_options_set_log_tag(options.get(), nullptr));
    EXPECT_STREQ(tess_run_options_get_log_tag(options.get()), "");
    const size_t tagged_before = log.count("[run ");
    StatusPtr failed_again(tess_session_run_with_options(s.get(), options.get(), &name, inputs, 1, nullptr, 1, &out));
    EXPECT_NE(failed_again, nullptr);
    EXPECT_EQ(log.count("[run "), tagged_before);
}

// A run profiled on its own writes its own Chrome trace, with its nodes, whether or not the session profiles.
TEST(Session, RunOptionsProfileOneRun) {
    EnvPtr env = make_env(plugin_dir().string());
    ModelBuilder b;
    b.input("x", {2}).output("y", {2});
    b.node("Relu", {"x"}, {"r"}, "first_relu");
    b.node("Neg", {"r"}, {"y"}, "then_neg");
    SessionPtr s = make_session(env.get(), b);
    auto x = make_float_tensor({2}, {-1.0f, 2.0f});
    const char* name = "x";
    const TessValue* inputs[] = {x.get()};
    const std::filesystem::path trace = std::filesystem::temp_directory_path() / ("tessera_run_trace_" + std::to_string(::getpid()) + ".json");
    std::filesystem::remove(trace);
    RunOptionsPtr options = make_run_options();
    TESS_ASSERT_OK(tess_run_options_set_profile_path(options.get(), trace.c_str()));
    TessValue* out = nullptr;
    TESS_ASSERT_OK(tess_session_run_with_options(s.get(), options.get(), &name, inputs, 1, nullptr, 1, &out));
    tess_value_release(out);
    ASSERT_TRUE(std::filesystem::exists(trace));
    std::ifstream in(trace);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\"traceEvents\""), std::string::npos);
    EXPECT_NE(text.find("first_relu"), std::string::npos) << text;
    EXPECT_NE(text.find("then_neg"), std::string::npos) << text;
    std::filesystem::remove(trace);
    // Turned off again: the next run writes nothing.
    TESS_ASSERT_OK(tess_run_options_set_profile_path(options.get(), ""));
    TESS_ASSERT_OK(tess_session_run_with_options(s.get(), options.get(), &name, inputs, 1, nullptr, 1, &out));
    tess_value_release(out);
    EXPECT_FALSE(std::filesystem::exists(trace));
}
