// Partitioning: providers claim nodes in priority order, claimed nodes fuse into connected groups without cycles,
// boundary tensors are copied between memory kinds, and unclaimed nodes are explained.
#include <cmath>

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
