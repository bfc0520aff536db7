// Plugin discovery: broken files are skipped with a reason, never a crash, and sessions still run; plugins that
// crash, abort, exit or hang are caught in their probe process.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

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

// tessera.h: report and provider-name strings are owned by the env and stay valid until it is released, however
// often the report is read again and whatever loads meanwhile.
TEST(Plugins, ReportStringsStayValidWhileTheEnvLives) {
    EnvPtr env = make_env("");
    TESS_ASSERT_OK(tess_env_load_plugin(env.get(), (plugin_dir() / "libtessera_cpu.so").c_str()));
    ASSERT_EQ(tess_env_plugin_count(env.get()), 1u);
    TessPluginInfo first{};
    first.struct_size = sizeof(first);
    TESS_ASSERT_OK(tess_env_plugin_info(env.get(), 0, &first));
    const std::string path = first.path, name = first.name, providers = first.providers;
    ASSERT_EQ(tess_env_provider_count(env.get()), 1u);
    const char* cpu_name = tess_env_provider_name(env.get(), 0);
    ASSERT_STREQ(cpu_name, "cpu");

    // The report grows and is read again and again; a refused file's status code comes from why it was refused.
    StatusPtr future(tess_env_load_plugin(env.get(), (test_plugin_dir() / "libtest_abi_future.so").c_str()));
    ASSERT_NE(future, nullptr);
    EXPECT_EQ(tess_status_code(future.get()), TESS_STATUS_ABI_MISMATCH);
    StatusPtr no_entry(tess_env_load_plugin(env.get(), (test_plugin_dir() / "libtest_no_entry.so").c_str()));
    ASSERT_NE(no_entry, nullptr);
    EXPECT_EQ(tess_status_code(no_entry.get()), TESS_STATUS_INVALID_ARGUMENT);
    TESS_ASSERT_OK(tess_env_load_plugin(env.get(), (test_plugin_dir() / "libtest_unavailable.so").c_str()));
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(tess_env_plugin_count(env.get()), 4u);
        TessPluginInfo again{};
        again.struct_size = sizeof(again);
        TESS_ASSERT_OK(tess_env_plugin_info(env.get(), 3, &again));
        tess_env_provider_count(env.get());
    }

    EXPECT_EQ(std::string(first.path), path);
    EXPECT_EQ(std::string(first.name), name);
    EXPECT_EQ(std::string(first.providers), providers);
    EXPECT_EQ(first.provider_count, 1u);
    EXPECT_STREQ(cpu_name, "cpu");
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

// ---- Plugin isolation: misbehaving plugins are probed in a child process and skipped ----------------------------

namespace {

// A plugin directory holding every misbehaving plugin and the odd entries a report must still list, with a probe
// cache of its own.  The probe timeout is short so that the hanging plugin costs a second.
class Isolation : public ::testing::Test {
protected:
    fs::path root, plugins, cache;

    void SetUp() override {
        root = fs::temp_directory_path() / ("tessera-isolation-" + std::to_string(::getpid()));
        fs::remove_all(root);
        plugins = root / "plugins";
        cache = root / "cache";
        fs::create_directories(plugins);
        for (const auto& entry : fs::directory_iterator(misbehaving_plugin_dir()))
            fs::copy(entry.path(), plugins / entry.path().filename());
        fs::create_directories(plugins / "libx.so");                       // a directory named like a library
        fs::create_symlink("libnowhere.so", plugins / "libdangling.so");   // a link to nothing
        std::ofstream(plugins / "notes.txt") << "not a plugin";
        ASSERT_EQ(::mkfifo((plugins / "plugin.fifo").c_str(), 0600), 0);   // must be reported, never opened
        ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
        ::unsetenv("TESSERA_PLUGIN_PROBE");
        ::unsetenv("TESSERA_PLUGIN_PROBE_TIMEOUT_MS");
        // The real plugins get their verdict with the default timeout first, so that the short one below can only
        // catch the hanging plugin, however busy the machine is.
        make_env(plugin_dir().string());
    }
    void TearDown() override {
        ::setenv("XDG_CACHE_HOME", test_cache_dir().c_str(), 1);
        fs::remove_all(root);
    }

    fs::path cache_file() const { return cache / "tessera" / "plugin-probes.txt"; }

    // An environment over the misbehaving plugins and the real ones; warnings and errors land in `log`.
    EnvPtr open_env(int32_t probe = TESS_PLUGIN_PROBE_AUTO, std::vector<std::string>* log = nullptr,
                    int64_t timeout_ms = 1000) {
        std::string path = plugins.string() + ":" + plugin_dir().string();
        TessEnvOptions options{};
        options.struct_size = sizeof(options);
        options.log_level = TESS_LOG_WARNING;
        options.log_callback = [](void* user, int32_t, const char* message) {
            if (user != nullptr) static_cast<std::vector<std::string>*>(user)->push_back(message);
        };
        options.log_user_data = log;
        options.plugin_path = path.c_str();
        options.no_default_plugin_dirs = 1;
        options.plugin_probe = probe;
        options.plugin_probe_timeout_ms = timeout_ms;
        TessEnv* raw = nullptr;
        StatusPtr status(tess_env_create(&options, &raw));
        EXPECT_EQ(status, nullptr) << tess_status_message(status.get());
        return EnvPtr(raw);
    }

    // The reason a file was skipped for (failing when it was not skipped).
    static std::string skipped(TessEnv* env, const std::string& file) {
        TessPluginInfo info = info_for(env, file);
        EXPECT_EQ(info.state, TESS_PLUGIN_SKIPPED) << file;
        return info.reason != nullptr ? info.reason : "";
    }
};

std::vector<uint8_t> relu_model() {
    ModelBuilder b;
    b.input("x", {2}).output("y", {2});
    b.node("Relu", {"x"}, {"y"});
    std::string bytes = b.bytes();
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_F(Isolation, MisbehavingPluginsAreSkippedWithWhatHappened) {
    std::vector<std::string> log;
    EnvPtr e = open_env(TESS_PLUGIN_PROBE_AUTO, &log);
    TessEnv* env = e.get();

    std::string crash = skipped(env, "libtest_crash_entry.so");
    EXPECT_TRUE(contains(crash, "crashed while being loaded in its probe process (SIGSEGV")) << crash;
    std::string ctor = skipped(env, "libtest_crash_constructor.so");
    EXPECT_TRUE(contains(ctor, "crashed while being loaded") && contains(ctor, "SIGSEGV")) << ctor;
    std::string aborted = skipped(env, "libtest_abort_entry.so");
    EXPECT_TRUE(contains(aborted, "aborted while being loaded") && contains(aborted, "SIGABRT")) << aborted;
    std::string exited = skipped(env, "libtest_exit_entry.so");
    EXPECT_TRUE(contains(exited, "ended the process (exit status 0) while being loaded")) << exited;
    std::string hang = skipped(env, "libtest_hang_entry.so");
    EXPECT_TRUE(contains(hang, "hung while being loaded") && contains(hang, "within 1 s")) << hang;
    std::string unload = skipped(env, "libtest_crash_unload.so");
    EXPECT_TRUE(contains(unload, "crashed while being unloaded")) << unload;
    std::string foreign = skipped(env, "libtest_foreign_status.so");
    EXPECT_TRUE(contains(foreign, "plugin fault: its entry function returned a status the host did not create"))
        << foreign;
    EXPECT_TRUE(contains(skipped(env, "libx.so"), "a directory"));
    EXPECT_TRUE(contains(skipped(env, "libdangling.so"), "dangling symbolic link (to 'libnowhere.so')"));
    EXPECT_TRUE(contains(skipped(env, "notes.txt"), "not a shared library"));
    EXPECT_TRUE(contains(skipped(env, "plugin.fifo"), "not a regular file"));
    EXPECT_EQ(info_for(env, "libtest_capability_error.so").state, TESS_PLUGIN_LOADED);
    EXPECT_EQ(info_for(env, "libtessera_cpu.so").state, TESS_PLUGIN_LOADED);
    // Fresh faults are worth a warning each.
    EXPECT_TRUE(std::any_of(log.begin(), log.end(), [](const std::string& m) { return contains(m, "crash_entry"); }));

    // Sessions work: the provider whose capability query fails is skipped with a warning, cpu runs the model.
    auto bytes = relu_model();
    TessSession* session = nullptr;
    log.clear();
    TESS_ASSERT_OK(tess_session_create_from_bytes(env, bytes.data(), bytes.size(), nullptr, nullptr, &session));
    SessionPtr owner(session);
    EXPECT_TRUE(std::any_of(log.begin(), log.end(), [](const std::string& m) {
        return contains(m, "provider 'flaky' is skipped for this session") && contains(m, "stopped answering");
    }));
    TessPartitionInfo part{};
    part.struct_size = sizeof(part);
    TESS_ASSERT_OK(tess_session_partition_info(session, 0, &part));
    EXPECT_STREQ(part.provider, "cpu");
    auto x = make_float_tensor({2}, {-1.0f, 3.0f});
    const char* in_name = "x";
    const TessValue* inputs[] = {x.get()};
    TessValue* out = nullptr;
    TESS_ASSERT_OK(tess_session_run(session, &in_name, inputs, 1, nullptr, 1, &out));
    ValuePtr y(out);
    EXPECT_EQ(floats_of(y.get()), (std::vector<float>{0.0f, 3.0f}));

    // In strict mode the failing query stays an error.
    TessSessionOptions* raw = nullptr;
    TESS_ASSERT_OK(tess_session_options_create(&raw));
    OptionsPtr options(raw);
    const char* names[] = {"flaky"};
    TESS_ASSERT_OK(tess_session_options_set_providers(raw, names, 1));
    TESS_ASSERT_OK(tess_session_options_set_strict(raw, 1));
    TessSession* strict = nullptr;
    StatusPtr refused(tess_session_create_from_bytes(env, bytes.data(), bytes.size(), nullptr, raw, &strict));
    ASSERT_NE(refused, nullptr);
    EXPECT_TRUE(contains(tess_status_message(refused.get()), "provider 'flaky' capability query"))
        << tess_status_message(refused.get());
}

TEST_F(Isolation, VerdictsAreCachedUntilTheFileChanges) {
    const auto start = std::chrono::steady_clock::now();
    open_env();  // probes everything; the hanging plugin costs the timeout
    const auto first = std::chrono::steady_clock::now() - start;
    EXPECT_GE(first, std::chrono::milliseconds(1000));
    ASSERT_TRUE(fs::exists(cache_file()));
    {
        std::ifstream in(cache_file());
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        EXPECT_EQ(text.rfind("tessera-plugin-probes 1\n", 0), 0u);
        EXPECT_TRUE(contains(text, "libtest_hang_entry.so"));
    }

    // No child process for a cached bad file: the verdicts say so, and the hanging plugin costs nothing.
    const auto again = std::chrono::steady_clock::now();
    EnvPtr cached = open_env();
    EXPECT_LT(std::chrono::steady_clock::now() - again, std::chrono::milliseconds(1000));
    for (const char* file : {"libtest_crash_entry.so", "libtest_abort_entry.so", "libtest_exit_entry.so",
                             "libtest_hang_entry.so", "libtest_crash_unload.so"})
        EXPECT_TRUE(contains(skipped(cached.get(), file), "(cached verdict)")) << file;
    EXPECT_TRUE(contains(skipped(cached.get(), "libtest_hang_entry.so"), "hung while being loaded"));

    // A changed file is probed again.
    fs::last_write_time(plugins / "libtest_crash_entry.so", fs::file_time_type::clock::now());
    EnvPtr changed = open_env();
    std::string reason = skipped(changed.get(), "libtest_crash_entry.so");
    EXPECT_TRUE(contains(reason, "crashed") && !contains(reason, "cached")) << reason;
    EXPECT_TRUE(contains(skipped(changed.get(), "libtest_abort_entry.so"), "(cached verdict)"));

    // Rescan ignores the cache.
    EnvPtr rescanned = open_env(TESS_PLUGIN_PROBE_RESCAN);
    EXPECT_FALSE(contains(skipped(rescanned.get(), "libtest_abort_entry.so"), "cached"));

    // A hang is remembered for the timeout it ran into: a longer timeout probes again, a shorter one need not.
    EnvPtr patient = open_env(TESS_PLUGIN_PROBE_AUTO, nullptr, 1500);
    std::string hang = skipped(patient.get(), "libtest_hang_entry.so");
    EXPECT_TRUE(contains(hang, "within 1.5 s") && !contains(hang, "cached")) << hang;
    EXPECT_TRUE(contains(skipped(patient.get(), "libtest_abort_entry.so"), "(cached verdict)"));
    EnvPtr hasty = open_env(TESS_PLUGIN_PROBE_AUTO, nullptr, 500);
    EXPECT_TRUE(contains(skipped(hasty.get(), "libtest_hang_entry.so"), "within 1.5 s (the probe was killed"));
}

TEST_F(Isolation, ACorruptCacheIsIgnored) {
    fs::create_directories(cache_file().parent_path());
    std::ofstream(cache_file()) << "tessera-plugin-probes 1\n\\x\tgarbage\n\t\t\t\t\t\nnot even tabs\n";
    EnvPtr e = open_env();
    std::string reason = skipped(e.get(), "libtest_abort_entry.so");
    EXPECT_TRUE(contains(reason, "aborted") && !contains(reason, "cached")) << reason;
    std::ifstream in(cache_file());
    std::string header;
    std::getline(in, header);
    EXPECT_EQ(header, "tessera-plugin-probes 1");
}

TEST_F(Isolation, ExplicitLoadsAreProbedToo) {
    EnvPtr e = make_env("");
    StatusPtr crashed(tess_env_load_plugin(e.get(), (plugins / "libtest_crash_entry.so").c_str()));
    ASSERT_NE(crashed, nullptr);
    EXPECT_TRUE(contains(tess_status_message(crashed.get()), "crashed while being loaded"))
        << tess_status_message(crashed.get());
}

// Without probing, the host still recognises a status it did not create, and a failing capability query only costs
// that provider.
TEST_F(Isolation, InProcessLoadingRecognisesForeignStatuses) {
    fs::path safe = root / "safe";
    fs::create_directories(safe);
    fs::copy(plugins / "libtest_foreign_status.so", safe / "libtest_foreign_status.so");
    fs::copy(plugins / "libtest_capability_error.so", safe / "libtest_capability_error.so");
    TessEnvOptions options{};
    options.struct_size = sizeof(options);
    options.log_level = TESS_LOG_ERROR;
    options.log_callback = [](void*, int32_t, const char*) {};
    std::string path = safe.string() + ":" + plugin_dir().string();
    options.plugin_path = path.c_str();
    options.no_default_plugin_dirs = 1;
    options.plugin_probe = TESS_PLUGIN_PROBE_OFF;
    fs::remove(cache_file());
    TessEnv* raw = nullptr;
    TESS_ASSERT_OK(tess_env_create(&options, &raw));
    EnvPtr e(raw);
    EXPECT_TRUE(contains(skipped(e.get(), "libtest_foreign_status.so"), "plugin fault"));
    EXPECT_FALSE(fs::exists(cache_file()));  // nothing probed, nothing cached

    auto bytes = relu_model();
    TessSession* session = nullptr;
    TESS_ASSERT_OK(tess_session_create_from_bytes(e.get(), bytes.data(), bytes.size(), nullptr, nullptr, &session));
    SessionPtr owner(session);
}

TEST(Plugins, ProbeOptionsAreChecked) {
    TessEnvOptions options{};
    options.struct_size = sizeof(options);
    options.no_default_plugin_dirs = 1;
    options.plugin_probe = 7;
    TessEnv* env = nullptr;
    StatusPtr bad_mode(tess_env_create(&options, &env));
    ASSERT_NE(bad_mode, nullptr);
    EXPECT_EQ(tess_status_code(bad_mode.get()), TESS_STATUS_INVALID_ARGUMENT);
    options.plugin_probe = TESS_PLUGIN_PROBE_AUTO;
    options.plugin_probe_timeout_ms = -1;
    StatusPtr bad_timeout(tess_env_create(&options, &env));
    ASSERT_NE(bad_timeout, nullptr);
    EXPECT_EQ(tess_status_code(bad_timeout.get()), TESS_STATUS_INVALID_ARGUMENT);
}

// A pointer that is not a live status of the host reads as a fault and is never freed.
TEST(Plugins, StatusesTheHostDidNotMakeAreNeverFreed) {
    static char not_a_status[32] = "plain bytes";
    auto* foreign = reinterpret_cast<TessStatus*>(not_a_status);
    EXPECT_EQ(tess_status_code(foreign), TESS_STATUS_INTERNAL);
    EXPECT_NE(std::string(tess_status_message(foreign)).find("did not create"), std::string::npos);
    tess_status_release(foreign);  // left alone: no "free(): invalid pointer"
    EXPECT_STREQ(not_a_status, "plain bytes");

    TessStatus* twice = tess_env_load_plugin(nullptr, nullptr);
    ASSERT_NE(twice, nullptr);
    tess_status_release(twice);
    tess_status_release(twice);  // a double release is recognised as well
}
