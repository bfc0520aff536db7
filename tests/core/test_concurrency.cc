// Concurrency stress: one session run from 8 threads with different inputs gives, bit for bit, what a serial run
// of the same inputs gives; sessions and environments created and destroyed from several threads while another
// session runs.  The model is a small convolutional network with random weights (seeded), so every output depends
// on every weight and on the input: a race that mixes up buffers, weights or shapes between runs changes outputs.
//
// TESSERA_STRESS_RUNS overrides the runs per thread (default 1000); scripts/sanitize.sh lowers it under TSan, which
// makes every run many times slower.  The concurrency tests are named Concurrency.* so that the TSan run can select
// them with --gtest_filter.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

using namespace tessera::test;

namespace {

constexpr int kThreads = 8;
constexpr int64_t kChannels = 3, kHidden = 8, kSide = 8, kClasses = 10;

int runs_per_thread() {
    const char* text = std::getenv("TESSERA_STRESS_RUNS");
    const int runs = text != nullptr ? std::atoi(text) : 1000;
    return runs > 0 ? runs : 1000;
}

std::vector<float> random_values(std::mt19937& rng, size_t count, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> values(count);
    for (float& v : values) v = dist(rng);
    return values;
}

// x [N, 3, 8, 8] -> Conv 3x3 (8) -> Relu -> Conv 3x3 (8) -> Relu -> Flatten -> Gemm (10) -> Softmax -> y [N, 10].
// The batch dimension is symbolic, so that runs of different batch sizes share the session.
std::string conv_net_bytes() {
    std::mt19937 rng(20240611);
    ModelBuilder b;
    b.input("x", {-1, kChannels, kSide, kSide}).output("y", {-1, kClasses});
    b.initializer("w1", {kHidden, kChannels, 3, 3}, random_values(rng, kHidden * kChannels * 9, 0.3f));
    b.initializer("b1", {kHidden}, random_values(rng, kHidden, 0.1f));
    b.initializer("w2", {kHidden, kHidden, 3, 3}, random_values(rng, kHidden * kHidden * 9, 0.2f));
    b.initializer("b2", {kHidden}, random_values(rng, kHidden, 0.1f));
    b.initializer("w3", {kClasses, kHidden * kSide * kSide}, random_values(rng, kClasses * kHidden * kSide * kSide, 0.05f));
    b.initializer("b3", {kClasses}, random_values(rng, kClasses, 0.1f));
    auto conv = [&](const std::string& in, const std::string& w, const std::string& bias, const std::string& out) {
        auto* pads = b.node("Conv", {in, w, bias}, {out}).add_attribute();
        pads->set_name("pads");
        pads->set_type(onnx::AttributeProto::INTS);
        for (int i = 0; i < 4; ++i) pads->add_ints(1);
    };
    conv("x", "w1", "b1", "c1");
    b.node("Relu", {"c1"}, {"r1"});
    conv("r1", "w2", "b2", "c2");
    b.node("Relu", {"c2"}, {"r2"});
    b.node("Flatten", {"r2"}, {"f"});
    auto& gemm = b.node("Gemm", {"f", "w3", "b3"}, {"g"});
    auto* trans_b = gemm.add_attribute();
    trans_b->set_name("transB");
    trans_b->set_type(onnx::AttributeProto::INT);
    trans_b->set_i(1);
    b.node("Softmax", {"g"}, {"y"});
    return b.bytes();
}

SessionPtr make_session(TessEnv* env, const std::string& bytes) {
    TessSession* session = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env, bytes.data(), bytes.size(), nullptr, nullptr, &session));
    EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
    return SessionPtr(session);
}

// The input of run `index`: its batch size (1 to 3) and values both depend on the index.
struct Input {
    std::vector<int64_t> dims;
    std::vector<float> values;
};

Input input_for(int index) {
    std::mt19937 rng(static_cast<uint32_t>(index) * 7919u + 1u);
    const int64_t batch = 1 + index % 3;
    return Input{{batch, kChannels, kSide, kSide}, random_values(rng, batch * kChannels * kSide * kSide, 1.0f)};
}

// Runs the session once; the output's bytes, or an empty vector (and a failed expectation) on error.
std::vector<unsigned char> run(TessSession* session, const Input& input) {
    ValuePtr x = make_float_tensor(input.dims, input.values);
    const char* name = "x";
    const TessValue* inputs[] = {x.get()};
    TessValue* out = nullptr;
    StatusPtr status(tess_session_run(session, &name, inputs, 1, nullptr, 1, &out));
    EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
    if (status) return {};
    ValuePtr y(out);
    const auto* bytes = static_cast<const unsigned char*>(tess_tensor_const_data(y.get()));
    return std::vector<unsigned char>(bytes, bytes + tess_tensor_byte_size(y.get()));
}

}  // namespace

TEST(Concurrency, ModelHasRealOutputs) {
    // Guards the stress tests below against a degenerate model: different inputs must give different outputs.
    EnvPtr env = make_env(plugin_dir().string());
    SessionPtr s = make_session(env.get(), conv_net_bytes());
    ASSERT_NE(s, nullptr);
    const auto a = run(s.get(), input_for(0));
    const auto b = run(s.get(), input_for(3));  // same batch size, other values
    ASSERT_EQ(a.size(), static_cast<size_t>(kClasses) * sizeof(float));
    ASSERT_EQ(a.size(), b.size());
    EXPECT_NE(a, b);
    float probabilities[kClasses];
    std::memcpy(probabilities, a.data(), sizeof(probabilities));
    float total = 0;
    for (float p : probabilities) total += p;
    EXPECT_NEAR(total, 1.0f, 1e-5f);
}

TEST(Concurrency, EightThreadsMatchSerialRunsBitForBit) {
    EnvPtr env = make_env(plugin_dir().string());
    SessionPtr s = make_session(env.get(), conv_net_bytes());
    ASSERT_NE(s, nullptr);
    const int runs = runs_per_thread();
    const int total = kThreads * runs;
    std::vector<Input> inputs;
    std::vector<std::vector<unsigned char>> expected;
    inputs.reserve(total);
    expected.reserve(total);
    for (int i = 0; i < total; ++i) {
        inputs.push_back(input_for(i));
        expected.push_back(run(s.get(), inputs.back()));
    }

    std::vector<int> mismatches(kThreads, 0);
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            while (!go.load()) std::this_thread::yield();  // start together, for as much overlap as possible
            // Thread t takes runs t, t + 8, t + 16, ...: neighbouring threads run different batch sizes at once.
            for (int k = 0; k < runs; ++k) {
                const int index = t + k * kThreads;
                if (run(s.get(), inputs[index]) != expected[index]) ++mismatches[t];
            }
        });
    go = true;
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t << " of " << runs << " runs";
}

TEST(Concurrency, SessionsAndEnvironmentsComeAndGoWhileRunning) {
    EnvPtr env = make_env(plugin_dir().string());
    const std::string bytes = conv_net_bytes();
    SessionPtr shared = make_session(env.get(), bytes);
    ASSERT_NE(shared, nullptr);
    constexpr int kInputs = 12;
    std::vector<std::vector<unsigned char>> expected;
    for (int i = 0; i < kInputs; ++i) expected.push_back(run(shared.get(), input_for(i)));

    const int rounds = std::max(2, runs_per_thread() / 50);
    std::atomic<int> mismatches{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    // Two threads keep the long-lived session busy.
    for (int t = 0; t < 2; ++t)
        threads.emplace_back([&, t] {
            for (int k = t; !stop.load(); ++k)
                if (run(shared.get(), input_for(k % kInputs)) != expected[k % kInputs]) ++mismatches;
        });
    // Four threads create a session in the shared environment, run it and release it, over and over; two of them
    // also create (and release) a whole environment of their own each round, which loads and unloads plugins and
    // adds and removes log sinks while the others log.
    std::vector<std::thread> churn;
    for (int t = 0; t < 4; ++t)
        churn.emplace_back([&, t] {
            for (int round = 0; round < rounds; ++round) {
                EnvPtr own = t % 2 == 1 ? make_env(plugin_dir().string()) : nullptr;
                SessionPtr s = make_session(own ? own.get() : env.get(), bytes);
                if (!s) {
                    ++mismatches;
                    continue;
                }
                for (int k = 0; k < 3; ++k) {
                    const int index = (round * 3 + k + t) % kInputs;
                    if (run(s.get(), input_for(index)) != expected[index]) ++mismatches;
                }
            }
        });
    for (auto& th : churn) th.join();
    stop = true;
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches.load(), 0);
}
