// Plugin isolation: before discovery loads a plugin file into the host process, a child process (the plugin
// scanner, scanner_main.cc) loads and unloads it first.  A plugin that crashes, aborts, exits or hangs there is
// skipped with the reason instead of taking the host down.  Verdicts are cached per file (path, size, mtime) so
// that only new or changed files pay for a child process.  GStreamer's registry and gst-plugin-scanner work the
// same way.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera {

// How discovery treats plugin files before loading them (TessEnvOptions.plugin_probe and plugin_probe_timeout_ms,
// with the environment variables TESSERA_PLUGIN_PROBE and TESSERA_PLUGIN_PROBE_TIMEOUT_MS).
struct ProbeSettings {
    enum class Mode { kAuto, kOff, kRescan };
    Mode mode = Mode::kAuto;
    std::chrono::milliseconds timeout{10000};

    // `mode` is a TESS_PLUGIN_PROBE_* value, `timeout_ms` 0 for the default; the environment variables apply where
    // the options keep their defaults.  Throws Error(INVALID_ARGUMENT) for a mode or timeout out of range.
    static ProbeSettings resolve(int32_t mode, int64_t timeout_ms);
};

struct ProbeVerdict {
    bool skip = false;    // true: the plugin misbehaved in its probe and must not be loaded here
    std::string reason;   // why, when skipped ("crashed during its probe (SIGSEGV: segmentation fault)")
    bool cached = false;  // the verdict came from the cache, not from a probe just now
};

// One verdict per file, in order.  Files without a cached verdict are probed, several at a time, each in its own
// child process; new verdicts are written back to the cache.  A file that could not be probed (no scanner, probing
// off, the scanner itself failing) gets `skip = false`: it is loaded in process as it would be without isolation.
// `files` are absolute paths of regular files that start with an ELF header.
std::vector<ProbeVerdict> probe_plugins(const std::vector<std::filesystem::path>& files, const ProbeSettings& settings);

// Where the verdicts are cached: $XDG_CACHE_HOME/tessera/plugin-probes.txt, or ~/.cache/tessera/...; empty when
// neither variable gives an absolute directory (then nothing is cached).
std::filesystem::path probe_cache_file();

}  // namespace tessera
