// The CUDA plugin on any machine: it always loads; without a usable GPU it reports itself unavailable with the
// reason, sessions that list it fall back to the CPU, and strict sessions fail naming the reason.  These tests run
// (and pass) with or without a GPU.
#include "cuda_test_support.h"

namespace tessera::cuda_test {
namespace {

ModelBuilder relu_model() {
    ModelBuilder m;
    m.input("x", {2, 3}).output("y", {2, 3});
    m.node("Relu", {"x"}, {"y"});
    return m;
}

TEST(CudaPlugin, IsReportedLoadedOrUnavailableWithReason) {
    Env env;
    const auto plugin = cuda_plugin(env);
    ASSERT_TRUE(plugin.has_value()) << "no plugin offers provider 'cuda' in the default plugin directory";
    EXPECT_EQ(plugin->name, "tessera-cuda");
    EXPECT_NE(plugin->state, TESS_PLUGIN_SKIPPED) << "the plugin must always load: " << plugin->reason;
    const std::vector<std::string> usable = env.providers();
    const bool listed = std::find(usable.begin(), usable.end(), "cuda") != usable.end();
    if (plugin->state == TESS_PLUGIN_UNAVAILABLE) {
        EXPECT_FALSE(plugin->reason.empty()) << "an unavailable plugin must say why";
        EXPECT_FALSE(listed) << "an unavailable provider must not be offered";
        std::printf("[ info     ] cuda plugin unavailable here: %s\n", plugin->reason.c_str());
    } else {
        EXPECT_TRUE(listed);
        ASSERT_FALSE(usable.empty());
        EXPECT_EQ(usable.back(), "cpu") << "the CPU fallback comes last";
    }
}

TEST(CudaPlugin, StrictSessionFailsWithTheReasonWhenUnavailable) {
    const std::string& why = cuda_unavailable_reason();
    if (why.empty()) GTEST_SKIP() << "the CUDA provider is usable here";
    Env env;
    // The report says "cuda: <reason>" (provider name first); the session error quotes the provider's reason.
    std::string reason = cuda_plugin(env)->reason;
    if (reason.rfind("cuda: ", 0) == 0) reason.erase(0, 6);
    ASSERT_FALSE(reason.empty());
    const std::string bytes = relu_model().bytes();
    TessSessionOptions* options = nullptr;
    ASSERT_EQ(tess_session_options_create(&options), nullptr);
    const char* names[] = {"cuda"};
    ASSERT_EQ(tess_session_options_set_providers(options, names, 1), nullptr);
    ASSERT_EQ(tess_session_options_set_strict(options, 1), nullptr);
    TessSession* session = nullptr;
    TessStatus* status = tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, options, &session);
    tess_session_options_release(options);
    ASSERT_NE(status, nullptr) << "a strict session on an unavailable provider must fail";
    EXPECT_EQ(tess_status_code(status), TESS_STATUS_UNAVAILABLE);
    const std::string message = tess_status_message(status);
    EXPECT_NE(message.find(reason), std::string::npos) << message << "\ndoes not name the reason: " << reason;
    tess_status_release(status);
    EXPECT_EQ(session, nullptr);
}

TEST(CudaPlugin, NonStrictSessionFallsBackToCpu) {
    std::vector<Input> inputs = {Input{"x", {2, 3}, {-1, 2, -3, 4, -5, 6}}};
    RunResult r = run_model(relu_model().bytes(), inputs, TESS_ELEMENT_FLOAT32, {"cuda", "cpu"}, false);
    ASSERT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(floats(r.outputs[0]), (std::vector<float>{0, 2, 0, 4, 0, 6}));
    ASSERT_EQ(r.partitions.size(), 1u);
    EXPECT_EQ(r.partitions[0].provider, cuda_unavailable_reason().empty() ? "cuda" : "cpu");
}

}  // namespace
}  // namespace tessera::cuda_test
