// Plugin discovery: broken files are skipped with a reason, never a crash, and sessions still run.
#include <filesystem>
#include <fstream>

#include "test_support.h"

namespace fs = std::filesystem;
using namespace tessera::test;

namespace {

struct PluginDir {
    fs::path path;
    PluginDir() {
        path = fs::temp_directory_path() / ("tessera-plugins-" + std::to_string(::getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
        for (const auto& entry : fs::directory_iterator(plugin_dir())) fs::copy(entry.path(), path / entry.path().filename());
        std::ofstream(path / "garbage.so") << "definitely not an ELF file";
        fs::copy(test_plugin_dir() / "libtest_no_entry.so", path / "libtest_no_entry.so");
        fs::copy(test_plugin_dir() / "libtest_abi_future.so", path / "libtest_abi_future.so");
        fs::copy(test_plugin_dir() / "libtest_unavailable.so", path / "libtest_unavailable.so");
    }
    ~PluginDir() { fs::remove_all(path); }
};

TessPluginInfo info_for(TessEnv* env, const std::string& file) {
    for (size_t i = 0; i < tess_env_plugin_count(env); ++i) {
        TessPluginInfo info{};
        info.struct_size = sizeof(info);
        StatusPtr s(tess_env_plugin_info(env, i, &info));
        if (fs::path(info.path).filename() == file) return info;
    }
    ADD_FAILURE() << "no report entry for " << file;
    return TessPluginInfo{};
}

}  // namespace

TEST(Plugins, BrokenPluginsAreSkippedWithAReason) {
    PluginDir dir;
    EnvPtr env = make_env(dir.path.string());

    TessPluginInfo garbage = info_for(env.get(), "garbage.so");
    EXPECT_EQ(garbage.state, TESS_PLUGIN_SKIPPED);
    EXPECT_NE(std::string(garbage.reason).find("not a shared library"), std::string::npos) << garbage.reason;

    TessPluginInfo no_entry = info_for(env.get(), "libtest_no_entry.so");
    EXPECT_EQ(no_entry.state, TESS_PLUGIN_SKIPPED);
    EXPECT_NE(std::string(no_entry.reason).find("no entry symbol"), std::string::npos) << no_entry.reason;

    TessPluginInfo future = info_for(env.get(), "libtest_abi_future.so");
    EXPECT_EQ(future.state, TESS_PLUGIN_SKIPPED);
    EXPECT_NE(std::string(future.reason).find("ABI version out of range"), std::string::npos) << future.reason;

    TessPluginInfo ghost = info_for(env.get(), "libtest_unavailable.so");
    EXPECT_EQ(ghost.state, TESS_PLUGIN_UNAVAILABLE);
    EXPECT_NE(std::string(ghost.reason).find("no test device present"), std::string::npos) << ghost.reason;

    TessPluginInfo cpu = info_for(env.get(), "libtessera_cpu.so");
    EXPECT_EQ(cpu.state, TESS_PLUGIN_LOADED);
    EXPECT_STREQ(cpu.providers, "cpu");
    EXPECT_EQ(cpu.abi_version, 1u);

    // Sessions still work, on the CPU provider.
    ModelBuilder b;
    b.input("x", {2}).output("y", {2});
    b.node("Relu", {"x"}, {"y"});
    auto bytes = b.bytes();
    TessSession* session = nullptr;
    TESS_ASSERT_OK(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, nullptr, &session));
    SessionPtr owner(session);
    auto x = make_float_tensor({2}, {-1.0f, 3.0f});
    const char* in_name = "x";
    const TessValue* inputs[] = {x.get()};
    TessValue* out = nullptr;
    TESS_ASSERT_OK(tess_session_run(session, &in_name, inputs, 1, nullptr, 1, &out));
    ValuePtr y(out);
    EXPECT_EQ(floats_of(y.get()), (std::vector<float>{0.0f, 3.0f}));
}

TEST(Plugins, ExplicitLoadReportsWhyAFileWasRefused) {
    EnvPtr env = make_env("");
    StatusPtr missing(tess_env_load_plugin(env.get(), "/nonexistent/libnothing.so"));
    ASSERT_NE(missing, nullptr);
    EXPECT_NE(std::string(tess_status_message(missing.get())).find("file not found"), std::string::npos);

    StatusPtr future(tess_env_load_plugin(env.get(), (test_plugin_dir() / "libtest_abi_future.so").c_str()));
    ASSERT_NE(future, nullptr);
    EXPECT_EQ(tess_status_code(future.get()), TESS_STATUS_ABI_MISMATCH);

    TESS_ASSERT_OK(tess_env_load_plugin(env.get(), (plugin_dir() / "libtessera_cpu.so").c_str()));
    ASSERT_EQ(tess_env_provider_count(env.get()), 1u);
    EXPECT_STREQ(tess_env_provider_name(env.get(), 0), "cpu");
}

TEST(Plugins, StrictModeRefusesAnUnavailableProvider) {
    EnvPtr env = make_env(plugin_dir().string() + ":" + test_plugin_dir().string());
    ModelBuilder b;
    b.input("x", {2}).output("y", {2});
    b.node("Relu", {"x"}, {"y"});
    auto bytes = b.bytes();
    TessSessionOptions* raw = nullptr;
    TESS_ASSERT_OK(tess_session_options_create(&raw));
    OptionsPtr options(raw);
    const char* names[] = {"ghost"};
    TESS_ASSERT_OK(tess_session_options_set_providers(raw, names, 1));
    TESS_ASSERT_OK(tess_session_options_set_strict(raw, 1));
    TessSession* session = nullptr;
    StatusPtr strict(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, raw, &session));
    ASSERT_NE(strict, nullptr);
    EXPECT_EQ(tess_status_code(strict.get()), TESS_STATUS_UNAVAILABLE);
    EXPECT_NE(std::string(tess_status_message(strict.get())).find("no test device present"), std::string::npos);

    // Without strict mode the CPU fallback runs it.
    TESS_ASSERT_OK(tess_session_options_set_strict(raw, 0));
    TESS_ASSERT_OK(tess_session_create_from_bytes(env.get(), bytes.data(), bytes.size(), nullptr, raw, &session));
    SessionPtr owner(session);
    TessPartitionInfo part{};
    part.struct_size = sizeof(part);
    TESS_ASSERT_OK(tess_session_partition_info(session, 0, &part));
    EXPECT_STREQ(part.provider, "cpu");
}

TEST(Plugins, ShutdownRunsWhenThePluginIsLetGo) {
    fs::path mark = fs::temp_directory_path() / ("tessera-shutdown-" + std::to_string(::getpid()));
    fs::remove(mark);
    ::setenv("TESSERA_TEST_SHUTDOWN_FILE", mark.c_str(), 1);
    {
        EnvPtr env = make_env(test_plugin_dir().string());
        ASSERT_FALSE(fs::exists(mark));
    }
    ::unsetenv("TESSERA_TEST_SHUTDOWN_FILE");
    EXPECT_TRUE(fs::exists(mark));
    fs::remove(mark);
}
