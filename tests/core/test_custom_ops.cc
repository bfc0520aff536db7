// Custom-operator libraries: the example library is discovered, its operator runs inside the CPU partition with its
// shape inference and per-node state, and an operator no library provides fails at session creation by name.
#include "test_support.h"

using namespace tessera::test;

namespace {

ModelBuilder scaled_add_model(const std::string& op_type) {
    ModelBuilder b;
    auto* example = b.model.add_opset_import();
    example->set_domain("tessera.example");
    example->set_version(1);
    b.input("a", {3}).input("b", {3}).output("out", {3});
    auto& node = b.node(op_type, {"a", "b"}, {"c"}, "scaled");
    node.set_domain("tessera.example");
    auto* alpha = node.add_attribute();
    alpha->set_name("alpha");
    alpha->set_type(onnx::AttributeProto::FLOAT);
    alpha->set_f(2.0f);
    b.node("Relu", {"c"}, {"out"}, "relu");
    return b;
}

}  // namespace

TEST(CustomOps, ExampleLibraryIsReportedAndRuns) {
    EnvPtr env = make_env(plugin_dir().string());
    bool reported = false;
    for (size_t i = 0; i < tess_env_plugin_count(env.get()); ++i) {
        TessPluginInfo info{};
        info.struct_size = sizeof(info);
        TESS_ASSERT_OK(tess_env_plugin_info(env.get(), i, &info));
        if (std::string(info.custom_ops) == "tessera.example:ScaledAdd") {
            reported = true;
            EXPECT_EQ(info.state, TESS_PLUGIN_LOADED);
            EXPECT_EQ(info.custom_op_count, 1u);
        }
    }
    EXPECT_TRUE(reported);

    auto bytes = scaled_add_model("ScaledAdd").bytes();
    TessSession* session = nullptr;
    TESS_ASSERT_OK(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &session));
    SessionPtr owner(session);
    // The custom node and the Relu share one CPU partition.
    ASSERT_EQ(tess_session_partition_count(session), 1u);
    TessPartitionInfo part{};
    part.struct_size = sizeof(part);
    TESS_ASSERT_OK(tess_session_partition_info(session, 0, &part));
    EXPECT_STREQ(part.provider, "cpu");
    EXPECT_EQ(part.node_count, 2u);

    auto a = make_float_tensor({3}, {1.0f, -5.0f, 0.5f});
    auto b = make_float_tensor({3}, {1.0f, 1.0f, -1.0f});
    const char* names[] = {"a", "b"};
    const TessValue* inputs[] = {a.get(), b.get()};
    TessValue* out = nullptr;
    TESS_ASSERT_OK(tess_session_run(session, names, inputs, 2, nullptr, 1, &out));
    ValuePtr result(out);
    EXPECT_EQ(floats_of(result.get()), (std::vector<float>{3.0f, 0.0f, 0.0f}));
}

TEST(CustomOps, UnknownCustomOperatorFailsAtSessionCreation) {
    EnvPtr env = make_env(plugin_dir().string());
    auto bytes = scaled_add_model("ScaledSubtract").bytes();
    TessSession* session = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &session));
    ASSERT_NE(status, nullptr);
    std::string message = tess_status_message(status.get());
    EXPECT_NE(message.find("tessera.example:ScaledSubtract"), std::string::npos) << message;
}

TEST(CustomOps, TypeConstraintsAreChecked) {
    EnvPtr env = make_env(plugin_dir().string());
    auto model = scaled_add_model("ScaledAdd");
    model.graph->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::DOUBLE);
    auto bytes = model.bytes();
    TessSession* session = nullptr;
    StatusPtr status(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &session));
    ASSERT_NE(status, nullptr);
    std::string message = tess_status_message(status.get());
    EXPECT_NE(message.find("input 'A' of type double is not supported"), std::string::npos) << message;
}
