// Partitioning: providers claim nodes in priority order, claimed nodes fuse into connected groups without cycles,
// boundary tensors are copied between memory kinds, and unclaimed nodes are explained.
#include <cmath>
#include <filesystem>

#include <unistd.h>

#include "model/loader.h"
#include "partition/partitioner.h"
#include "test_support.h"

using namespace tessera::test;

namespace {

tessera::Graph graph_of(const ModelBuilder& b) {
    auto bytes = b.bytes();
    return tessera::load_model_bytes(bytes.data(), bytes.size(), std::nullopt).graph;
}

// a -> {b, c}; b -> d; c -> d  with providers given per node.
ModelBuilder diamond() {
    ModelBuilder b;
    b.input("x", {4}).output("out", {4});
    b.node("Relu", {"x"}, {"a"}, "a");
    b.node("Sigmoid", {"a"}, {"b"}, "b");
    b.node("Relu", {"a"}, {"c"}, "c");
    b.node("Add", {"b", "c"}, {"out"}, "d");
    return b;
}

}  // namespace

TEST(GroupNodes, NeverFusesAcrossAnotherProvidersNode) {
    // a, c, d on provider 0; b on provider 1.  Fusing a with d would need b in between: a cycle.
    auto graph = graph_of(diamond());
    auto groups = tessera::group_nodes(graph, {0, 1, 0, 0});
    ASSERT_GE(groups.size(), 3u);
    // Every group's inputs must be produced by earlier groups.
    std::set<size_t> done;
    auto producers = graph.producers();
    for (const auto& g : groups) {
        for (size_t n : g.nodes)
            for (const auto& in : graph.nodes[n].inputs) {
                auto it = producers.find(in);
                if (it == producers.end()) continue;
                bool inside = std::find(g.nodes.begin(), g.nodes.end(), it->second) != g.nodes.end();
                EXPECT_TRUE(inside || done.count(it->second)) << "node " << n << " reads a later group";
            }
        done.insert(g.nodes.begin(), g.nodes.end());
    }
}

TEST(GroupNodes, FusesAChainOfOneProvider) {
    auto graph = graph_of(diamond());
    auto groups = tessera::group_nodes(graph, {0, 0, 0, 0});
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].nodes.size(), 4u);
}

TEST(Partition, SplitsBetweenProvidersAndCopiesAtBoundaries) {
    EnvPtr env = make_env(test_plugin_dir().string() + ":" + plugin_dir().string());
    auto bytes = diamond().bytes();
    TessSessionOptions* raw = nullptr;
    TESS_ASSERT_OK(tess_session_options_create(&raw));
    OptionsPtr options(raw);
    const char* names[] = {"partial", "cpu"};
    TESS_ASSERT_OK(tess_session_options_set_providers(raw, names, 2));
    TESS_ASSERT_OK(tess_session_options_set_strict(raw, 1));
    TessSession* session = nullptr;
    TESS_ASSERT_OK(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, raw, &session));
    SessionPtr owner(session);

    size_t count = tess_session_partition_count(session);
    ASSERT_GE(count, 3u);
    size_t partial_nodes = 0, cpu_nodes = 0, copies = 0;
    for (size_t i = 0; i < count; ++i) {
        TessPartitionInfo p{};
        p.struct_size = sizeof(p);
        TESS_ASSERT_OK(tess_session_partition_info(session, i, &p));
        (std::string(p.provider) == "partial" ? partial_nodes : cpu_nodes) += p.node_count;
        copies += p.copy_count;
        for (size_t n = 0; n < p.node_count; ++n) {
            if (std::string(p.node_ops[n]) == "Sigmoid") {
                EXPECT_STREQ(p.provider, "cpu");
            }
        }
    }
    EXPECT_EQ(partial_nodes, 3u);
    EXPECT_EQ(cpu_nodes, 1u);
    EXPECT_GT(copies, 0u);

    auto x = make_float_tensor({4}, {-2.0f, -0.5f, 0.5f, 2.0f});
    const char* in = "x";
    const TessValue* inputs[] = {x.get()};
    TessValue* out = nullptr;
    TESS_ASSERT_OK(tess_session_run(session, &in, inputs, 1, nullptr, 1, &out));
    ValuePtr y(out);
    auto values = floats_of(y.get());
    for (size_t i = 0; i < 4; ++i) {
        float a = std::max(0.0f, std::vector<float>{-2.0f, -0.5f, 0.5f, 2.0f}[i]);
        EXPECT_NEAR(values[i], 1.0f / (1.0f + std::exp(-a)) + a, 1e-6f);
    }
}

TEST(Partition, UnclaimedNodesAreExplained) {
    EnvPtr env = make_env(test_plugin_dir().string());
    ModelBuilder b;
    b.input("x", {4}).output("y", {4});
    b.node("Sigmoid", {"x"}, {"y"}, "lonely");
    auto bytes = b.bytes();
    TessSession* session = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &session));
    ASSERT_NE(status, nullptr);
    std::string message = tess_status_message(status.get());
    EXPECT_EQ(tess_status_code(status.get()), TESS_STATUS_NOT_IMPLEMENTED);
    EXPECT_NE(message.find("lonely"), std::string::npos) << message;
    EXPECT_NE(message.find("Sigmoid"), std::string::npos) << message;
    EXPECT_NE(message.find("opset 13"), std::string::npos) << message;
    EXPECT_NE(message.find("float"), std::string::npos) << message;
    EXPECT_NE(message.find("partial runs only float32 Relu and Add"), std::string::npos) << message;
}

namespace {

// An environment over the cpu provider and "refusing" (tests/plugins/misbehaving.c), which claims every node and
// compiles none; `with_cpu` false leaves cpu out.
EnvPtr refusing_env(const std::filesystem::path& dir, bool with_cpu) {
    std::filesystem::create_directories(dir);
    std::filesystem::copy(misbehaving_plugin_dir() / "libtest_compile_error.so", dir / "libtest_compile_error.so",
                          std::filesystem::copy_options::overwrite_existing);
    std::string path = dir.string() + (with_cpu ? ":" + plugin_dir().string() : "");
    TessEnvOptions options{};
    options.struct_size = sizeof(options);
    options.log_level = TESS_LOG_ERROR;
    options.plugin_path = path.c_str();
    options.no_default_plugin_dirs = 1;
    options.plugin_probe = TESS_PLUGIN_PROBE_OFF;
    TessEnv* env = nullptr;
    StatusPtr status(tess_env_create(&options, &env));
    EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
    return EnvPtr(env);
}

StatusPtr create_with(TessEnv* env, const ModelBuilder& b, std::vector<const char*> providers, bool strict,
                      SessionPtr* out) {
    auto bytes = b.bytes();
    TessSessionOptions* raw = nullptr;
    StatusPtr made(tess_session_options_create(&raw));
    EXPECT_EQ(made, nullptr);
    OptionsPtr options(raw);
    StatusPtr set(tess_session_options_set_providers(raw, providers.data(), providers.size()));
    EXPECT_EQ(set, nullptr);
    StatusPtr strict_set(tess_session_options_set_strict(raw, strict ? 1 : 0));
    EXPECT_EQ(strict_set, nullptr);
    TessSession* session = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env, bytes.data(), bytes.size(), nullptr, raw, &session));
    out->reset(session);
    return status;
}

}  // namespace

// A provider that claims nodes and then fails to compile them gives them up: the next provider takes them (the
// retry ends because each failure takes nodes away from that provider for good).
TEST(Partition, NodesAProviderFailsToCompileGoToTheNext) {
    const auto dir = std::filesystem::temp_directory_path() / ("tessera_refusing_" + std::to_string(::getpid()));
    EnvPtr env = refusing_env(dir / "with_cpu", true);
    SessionPtr session;
    TESS_ASSERT_OK(create_with(env.get(), diamond(), {"refusing", "cpu"}, false, &session).release());
    const size_t count = tess_session_partition_count(session.get());
    ASSERT_GE(count, 1u);
    for (size_t i = 0; i < count; ++i) {
        TessPartitionInfo p{};
        p.struct_size = sizeof(p);
        TESS_ASSERT_OK(tess_session_partition_info(session.get(), i, &p));
        EXPECT_STREQ(p.provider, "cpu");
    }
    auto x = make_float_tensor({4}, {-2.0f, -0.5f, 0.5f, 2.0f});
    const char* in = "x";
    const TessValue* inputs[] = {x.get()};
    TessValue* out = nullptr;
    TESS_ASSERT_OK(tess_session_run(session.get(), &in, inputs, 1, nullptr, 1, &out));
    ValuePtr y(out);
    EXPECT_NEAR(floats_of(y.get())[3], 1.0f / (1.0f + std::exp(-2.0f)) + 2.0f, 1e-6f);

    // Strict: the compile failure is the error, with the provider's own code and message.
    SessionPtr strict_session;
    StatusPtr strict = create_with(env.get(), diamond(), {"refusing", "cpu"}, true, &strict_session);
    ASSERT_NE(strict, nullptr);
    EXPECT_EQ(tess_status_code(strict.get()), TESS_STATUS_RUNTIME_ERROR);
    EXPECT_NE(std::string(tess_status_message(strict.get())).find("out of licences"), std::string::npos);
    std::filesystem::remove_all(dir);
}

// With nobody left to take them, the nodes are reported with the compile error that lost them.
TEST(Partition, NodesNoProviderCanCompileAreExplained) {
    const auto dir = std::filesystem::temp_directory_path() / ("tessera_refusing_alone_" + std::to_string(::getpid()));
    EnvPtr env = refusing_env(dir, false);
    SessionPtr session;
    StatusPtr status = create_with(env.get(), diamond(), {"refusing"}, false, &session);
    ASSERT_NE(status, nullptr);
    EXPECT_EQ(tess_status_code(status.get()), TESS_STATUS_NOT_IMPLEMENTED);
    const std::string message = tess_status_message(status.get());
    EXPECT_NE(message.find("refusing: failed to compile it: "), std::string::npos) << message;
    EXPECT_NE(message.find("out of licences"), std::string::npos) << message;
    std::filesystem::remove_all(dir);
}
