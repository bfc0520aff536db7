// Fuzzes plugin discovery and the plugin report through the public C API: a plugin path list, plugin directories
// holding fuzzed files under fuzzed names, an explicit load of a fuzzed path, and reading the report back with
// fuzzed struct sizes (the forward/backward-compatible struct_size contract of TessPluginInfo).
//
// What is deliberately not fuzzed: dlopen() of fuzzed bytes.  Loading a shared library runs its constructors, and
// glibc's loader trusts the ELF it maps; bytes that the fuzzer mutates from a real plugin could run arbitrary code
// in this process, which would be a finding about ld.so, not about Tessera, and could damage the machine.  So a
// fuzzed file that starts with the ELF magic has its first byte changed: the core's "no ELF header" path and
// everything around it (directory scan, hidden files, sorting, de-duplication, path canonicalization, report
// formatting) is fuzzed, while the loads that reach dlopen() use only the project's own test plugins, which the
// harness links into a fixed directory: a library without the entry symbol, one whose ABI is in the future, one
// whose provider is unavailable, and a partial provider.  Every path the core sees lies inside this harness's
// temporary directory: ".." and absolute paths from the input are neutralized before use.
//
// The child-process probing of plugins being added elsewhere keeps this interface, so the harness keeps working.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "tessera/tessera.h"

#ifndef TESSERA_FUZZ_TEST_PLUGIN_DIR
#error "TESSERA_FUZZ_TEST_PLUGIN_DIR (the build tree's test-plugins directory) must be defined"
#endif

namespace fs = std::filesystem;

namespace {

fs::path g_root;  // the temporary tree; removed at exit

void discard_log(void*, int32_t, const char*) {}

void must(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "fuzz_plugin_report: %s\n", what);
    std::abort();
}

// root/real: links to the test plugins; root/odd: a FIFO, a directory and a hidden file, which discovery must
// pass over without opening; root/fuzz: rewritten for every input.
void prepare_tree() {
    std::string pattern = (fs::temp_directory_path() / "tessera-fuzz-plugins-XXXXXX").string();
    must(::mkdtemp(pattern.data()) != nullptr, "mkdtemp");
    g_root = pattern;
    fs::create_directories(g_root / "real");
    fs::create_directories(g_root / "odd" / "dir.so");
    fs::create_directories(g_root / "fuzz");
    std::ofstream(g_root / "odd" / ".hidden.so") << "\x7f" "ELF";
    must(::mkfifo((g_root / "odd" / "fifo.so").c_str(), 0600) == 0, "mkfifo");
    for (const char* name : {"no_entry", "abi_future", "unavailable", "partial_provider"}) {
        const std::string file = std::string("libtest_") + name + ".so";
        const fs::path target = fs::path(TESSERA_FUZZ_TEST_PLUGIN_DIR) / file;
        must(fs::exists(target), "a test plugin is missing (build the test_* plugin targets)");
        fs::create_symlink(target, g_root / "real" / file);
    }
    std::atexit([] {
        std::error_code ec;
        fs::remove_all(g_root, ec);
    });
}

// A file or directory name from the input: no '/', no NUL, not "." or "..".
std::string safe_name(std::string name) {
    for (char& c : name)
        if (c == '/' || c == '\0') c = '_';
    if (name.empty() || name == "." || name == "..") name = "libfuzz.so";
    return name;
}

// A path from the input placed inside the temporary tree: "x/../y" becomes "x/__/y", "/abs" becomes "abs".
std::string inside_root(const std::string& path) {
    std::string relative;
    for (const auto& part : fs::path(path).relative_path()) {
        const std::string p = part.string();
        relative += (relative.empty() ? "" : "/") + (p == ".." ? std::string("__") : p);
    }
    return (g_root / relative).string();
}

// The plugin path list from the input: its separators (and empty entries) are kept, each entry is placed inside
// the tree.
std::string plugin_path_list(const std::string& fuzzed) {
    std::string list;
    size_t start = 0;
    while (start <= fuzzed.size()) {
        size_t end = fuzzed.find(':', start);
        if (end == std::string::npos) end = fuzzed.size();
        const std::string entry = fuzzed.substr(start, end - start);
        std::string mapped = entry.empty() ? "" : inside_root(entry);
        for (char& c : mapped)
            if (c == '\0') c = '_';
        list += mapped;
        if (end < fuzzed.size()) list += ':';
        start = end + 1;
    }
    return list;
}

void write_fuzzed_files(FuzzedDataProvider& input) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(g_root / "fuzz", ec)) fs::remove_all(entry.path(), ec);
    const int files = input.ConsumeIntegralInRange(0, 3);
    for (int i = 0; i < files; ++i) {
        const std::string name = safe_name(input.ConsumeRandomLengthString(64));
        std::string content = input.ConsumeRandomLengthString(512);
        if (content.size() >= 4 && content.compare(0, 4, "\x7f" "ELF") == 0) content[0] = 'X';  // never dlopen'ed
        std::ofstream(g_root / "fuzz" / name, std::ios::binary) << content;
    }
}

// Reads entry `index` into a buffer larger than TessPluginInfo with the given struct_size, and checks the contract:
// nothing past struct_size is written, and every string inside it is a valid C string.
void read_entry(const TessEnv* env, size_t index, size_t struct_size) {
    constexpr size_t kSlack = 32;
    constexpr unsigned char kCanary = 0xA5;
    unsigned char buffer[sizeof(TessPluginInfo) + kSlack];
    std::memset(buffer, kCanary, sizeof(buffer));
    TessPluginInfo* info = reinterpret_cast<TessPluginInfo*>(buffer);
    std::memcpy(buffer, &struct_size, sizeof(struct_size));
    TessStatus* status = tess_env_plugin_info(env, index, info);
    if (status != nullptr) {
        tess_status_release(status);
        return;
    }
    const size_t written = std::min(struct_size, sizeof(TessPluginInfo));
    for (size_t i = std::max(written, sizeof(size_t)); i < sizeof(buffer); ++i)
        must(buffer[i] == kCanary, "tess_env_plugin_info wrote past struct_size");
    auto has = [&](size_t offset, size_t field_size) { return offset + field_size <= written; };
    volatile size_t sink = 0;
    for (size_t offset : {offsetof(TessPluginInfo, path), offsetof(TessPluginInfo, name),
                          offsetof(TessPluginInfo, version), offsetof(TessPluginInfo, reason),
                          offsetof(TessPluginInfo, providers), offsetof(TessPluginInfo, custom_ops)}) {
        if (!has(offset, sizeof(const char*))) continue;
        const char* text = nullptr;
        std::memcpy(&text, buffer + offset, sizeof(text));
        must(text != nullptr, "a report string is NULL");
        sink = sink + std::strlen(text);
    }
    if (has(offsetof(TessPluginInfo, state), sizeof(int32_t)))
        must(info->state >= TESS_PLUGIN_LOADED && info->state <= TESS_PLUGIN_SKIPPED, "bad plugin state");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    ::unsetenv("TESSERA_PLUGIN_PATH");  // only the directories this harness names
    prepare_tree();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider input(data, size);
    write_fuzzed_files(input);
    const std::string path_list = plugin_path_list(input.ConsumeRandomLengthString(256));
    const std::string explicit_load = inside_root(input.ConsumeRandomLengthString(128));

    TessEnvOptions options{};
    options.struct_size = sizeof(options);
    options.log_level = input.ConsumeIntegralInRange<int32_t>(TESS_LOG_ERROR, TESS_LOG_DEBUG);
    options.log_callback = discard_log;
    options.plugin_path = path_list.c_str();
    options.no_default_plugin_dirs = 1;
    TessEnv* env = nullptr;
    TessStatus* status = tess_env_create(&options, &env);
    // A broken plugin never fails environment creation (tessera.h), so a failure here is a finding.
    must(status == nullptr, "tess_env_create failed");

    if (input.ConsumeBool()) tess_status_release(tess_env_load_plugin(env, explicit_load.c_str()));

    const size_t count = tess_env_plugin_count(env);
    for (size_t i = 0; i <= count; ++i)  // one past the end: an error, never a read out of bounds
        read_entry(env, i, input.ConsumeIntegralInRange<size_t>(0, sizeof(TessPluginInfo) + 16));
    volatile size_t sink = 0;
    for (size_t i = 0; i <= tess_env_provider_count(env); ++i) {
        const char* name = tess_env_provider_name(env, i);
        if (name != nullptr) sink = sink + std::strlen(name);
    }
    tess_env_release(env);
    return 0;
}
