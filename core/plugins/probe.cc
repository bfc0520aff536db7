// Plugin isolation (probe.h): the scanner processes, their verdicts, and the verdict cache.
//
// Why a helper executable started with posix_spawn rather than a bare fork() of the host: libtessera lives in hosts
// that run threads (Python, servers, the CUDA driver's own threads).  A forked child has only the forking thread,
// and any lock another thread held at the fork (the dynamic loader's, a malloc arena's, a logging mutex, CUDA's
// state) stays locked forever in the child, so loading a plugin there could hang and be misjudged, or poison
// state a device library keeps per process.  posix_spawn starts a fresh program instead (glibc uses a vfork-like
// clone: cheap even for a large host, and no fork handlers run), and the scanner loads the plugin through the
// public C API exactly as the host would.  It is what GStreamer does with gst-plugin-scanner.
#include "plugins/probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#if __has_include(<spawn.h>)
#include <spawn.h>
#define TESSERA_HAVE_SPAWN 1
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include <boost/dll/runtime_symbol_info.hpp>
#include <fmt/format.h>

#include "common/log.h"
#include "common/status.h"
#include "tessera/tessera.h"

extern char** environ;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace tessera {

namespace {

constexpr const char* kScannerName = "tessera-plugin-scanner";
constexpr const char* kCacheHeader = "tessera-plugin-probes 1";
// The scanner's progress lines on its stdout (scanner_main.cc writes them); anything else there is the plugin's.
constexpr const char* kReady = "tessera-plugin-scanner: ready";
constexpr const char* kLoaded = "tessera-plugin-scanner: loaded";
constexpr const char* kUnloaded = "tessera-plugin-scanner: unloaded";
constexpr auto kMaxTimeout = std::chrono::hours(24);

// ---- Settings ---------------------------------------------------------------------------------------------------

bool parse_timeout_ms(const char* text, int64_t& out) {
    if (text == nullptr || *text == '\0') return false;
    char* end = nullptr;
    errno = 0;
    long long value = std::strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || value <= 0) return false;
    out = value;
    return true;
}

std::chrono::milliseconds bounded(int64_t ms) {
    return std::min(std::chrono::milliseconds(ms), std::chrono::duration_cast<std::chrono::milliseconds>(kMaxTimeout));
}

std::string seconds_text(std::chrono::milliseconds timeout) {
    return fmt::format("{:g} s", static_cast<double>(timeout.count()) / 1000.0);
}

// ---- Files and the core's identity --------------------------------------------------------------------------------

struct Stamp {
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
};

std::optional<Stamp> stamp_of(const fs::path& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    return Stamp{static_cast<uint64_t>(st.st_size),
                 static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(st.st_mtim.tv_nsec)};
}

// The binary holding this code (libtessera, or a test program linking the core).
fs::path core_location() {
    boost::system::error_code ec;
    boost::dll::fs::path self = boost::dll::this_line_location(ec);
    if (ec) return {};
    std::error_code canonical_ec;
    fs::path canonical = fs::weakly_canonical(fs::path(self.string()), canonical_ec);
    return canonical_ec ? fs::path(self.string()) : canonical;
}

// A verdict holds for one core binary: a plugin that crashed under one build of the core may work under the next.
std::string core_identity() {
    fs::path core = core_location();
    std::optional<Stamp> stamp = core.empty() ? std::nullopt : stamp_of(core);
    if (!stamp) return "unknown";
    return fmt::format("{}|{}|{}", core.string(), stamp->size, stamp->mtime_ns);
}

// The scanner lives next to the plugin directory: <dir of libtessera>/tessera/tessera-plugin-scanner.
// TESSERA_PLUGIN_SCANNER names another one (tests that link the core statically; packagers using libexec).
fs::path find_scanner() {
    if (const char* env = std::getenv("TESSERA_PLUGIN_SCANNER"); env != nullptr && *env != '\0') return env;
    fs::path core = core_location();
    return core.empty() ? fs::path() : core.parent_path() / "tessera" / kScannerName;
}

// ---- The cache ----------------------------------------------------------------------------------------------------
// A text file: a header line, then one line per verdict with six tab-separated fields (core identity, file size,
// file mtime in ns, the verdict: "load", "skip" or "hung:<timeout in ms>", reason, file path), backslash-escaped.
// Read tolerantly: a line that does not parse is ignored, a file with another header is ignored whole.

struct CacheEntry {
    std::string core;
    std::string path;
    Stamp stamp;
    bool skip = false;
    std::string reason;
    int64_t hung_after_ms = 0;  // a hang under this timeout: a larger timeout deserves another probe
};

std::string escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        if (c == '\\') out += "\\\\";
        else if (c == '\t') out += "\\t";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

std::optional<std::string> unescape(std::string_view text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '\\') {
            out += text[i];
            continue;
        }
        if (++i == text.size()) return std::nullopt;
        if (text[i] == '\\') out += '\\';
        else if (text[i] == 't') out += '\t';
        else if (text[i] == 'n') out += '\n';
        else return std::nullopt;
    }
    return out;
}

std::optional<CacheEntry> parse_cache_line(const std::string& line) {
    std::vector<std::string_view> fields;
    size_t start = 0;
    while (fields.size() < 6) {
        size_t tab = line.find('\t', start);
        size_t length = tab == std::string::npos ? std::string::npos : tab - start;
        fields.emplace_back(std::string_view(line).substr(start, length));
        if (tab == std::string::npos) break;
        start = tab + 1;
    }
    if (fields.size() != 6) return std::nullopt;
    auto number = [](std::string_view text, auto& out) {
        if (text.empty()) return false;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
        return ec == std::errc() && ptr == text.data() + text.size();
    };
    CacheEntry entry;
    auto core = unescape(fields[0]), reason = unescape(fields[4]), path = unescape(fields[5]);
    if (!core || !reason || !path || path->empty()) return std::nullopt;
    if (!number(fields[1], entry.stamp.size) || !number(fields[2], entry.stamp.mtime_ns)) return std::nullopt;
    entry.core = std::move(*core);
    entry.path = std::move(*path);
    constexpr std::string_view kHung = "hung:";
    if (fields[3].substr(0, kHung.size()) == kHung) {
        if (!number(fields[3].substr(kHung.size()), entry.hung_after_ms) || entry.hung_after_ms <= 0)
            return std::nullopt;
    } else if (fields[3] != "skip" && fields[3] != "load") {
        return std::nullopt;
    }
    entry.skip = fields[3] != "load";
    entry.reason = std::move(*reason);
    return entry;
}

std::vector<CacheEntry> read_cache(const fs::path& file) {
    std::vector<CacheEntry> entries;
    std::error_code ec;
    if (file.empty() || !fs::is_regular_file(file, ec) || fs::file_size(file, ec) > (16u << 20)) return entries;
    std::ifstream in(file);
    std::string line;
    if (!std::getline(in, line) || line != kCacheHeader) return entries;
    while (std::getline(in, line))
        if (auto entry = parse_cache_line(line)) entries.push_back(std::move(*entry));
    return entries;
}

// Merges `fresh` into the cache file as it is now (another process may have written it meanwhile), dropping the
// verdicts of files that no longer exist, and replaces the file atomically (a reader sees the old or the new one).
void write_cache(const fs::path& file, const std::vector<CacheEntry>& fresh) {
    static std::atomic<unsigned> counter{0};
    std::vector<CacheEntry> entries = read_cache(file);
    std::erase_if(entries, [&](const CacheEntry& old) {
        std::error_code ec;
        if (!fs::exists(old.path, ec)) return true;
        return std::any_of(fresh.begin(), fresh.end(),
                           [&](const CacheEntry& e) { return e.core == old.core && e.path == old.path; });
    });
    entries.insert(entries.end(), fresh.begin(), fresh.end());

    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    fs::path temporary = file;
    temporary += fmt::format(".{}.{}.tmp", ::getpid(), counter.fetch_add(1));
    {
        std::ofstream out(temporary, std::ios::trunc);
        out << kCacheHeader << '\n';
        for (const CacheEntry& e : entries)
            out << escape(e.core) << '\t' << e.stamp.size << '\t' << e.stamp.mtime_ns << '\t'
                << (e.hung_after_ms > 0 ? fmt::format("hung:{}", e.hung_after_ms) : e.skip ? "skip" : "load") << '\t'
                << escape(e.reason) << '\t' << escape(e.path) << '\n';
        out.close();
        if (!out) {
            fs::remove(temporary, ec);
            log_message(TESS_LOG_DEBUG, "plugins", fmt::format("cannot write the probe cache '{}'", file.string()));
            return;
        }
    }
    fs::rename(temporary, file, ec);
    if (ec) {
        fs::remove(temporary, ec);
        log_message(TESS_LOG_DEBUG, "plugins", fmt::format("cannot replace the probe cache '{}'", file.string()));
    }
}

// ---- Probe processes ----------------------------------------------------------------------------------------------

std::string signal_text(int sig) {
    switch (sig) {
        case SIGSEGV: return "SIGSEGV: segmentation fault";
        case SIGABRT: return "SIGABRT";
        case SIGBUS: return "SIGBUS: bus error";
        case SIGFPE: return "SIGFPE: arithmetic exception";
        case SIGILL: return "SIGILL: illegal instruction";
        case SIGKILL: return "SIGKILL";
        case SIGTERM: return "SIGTERM";
        case SIGTRAP: return "SIGTRAP";
        case SIGSYS: return "SIGSYS: bad system call";
        case SIGPIPE: return "SIGPIPE";
        case SIGXCPU: return "SIGXCPU: CPU time limit";
        default: return fmt::format("signal {}", sig);
    }
}

enum class Phase { kStarting, kLoading, kUnloading, kExiting };  // what the scanner last said it was about to do

const char* phase_text(Phase phase) {
    switch (phase) {
        case Phase::kStarting: return "before it was loaded";
        case Phase::kLoading: return "while being loaded";
        case Phase::kUnloading: return "while being unloaded";
        case Phase::kExiting: return "at process exit";
    }
    return "";
}

struct Probe {
    size_t index = 0;  // into the caller's files
    pid_t pid = -1;
    int fd = -1;       // read end of the scanner's stdout
    std::string line;  // the incomplete last line read
    Phase phase = Phase::kStarting;
    Clock::time_point deadline;
    bool ended = false;
    bool timed_out = false;
    bool status_known = false;  // false when the child was reaped by someone else (SIGCHLD ignored by the host)
    int status = 0;
};

// Reads what the scanner wrote; progress lines move the phase on, other lines (the plugin's) are dropped.
void read_output(Probe& probe, std::chrono::milliseconds timeout) {
    char buffer[4096];
    for (;;) {
        ssize_t n = ::read(probe.fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                ::close(probe.fd);
                probe.fd = -1;
            }
            return;
        }
        for (ssize_t i = 0; i < n; ++i) {
            if (buffer[i] != '\n') {
                if (probe.line.size() < 256) probe.line += buffer[i];
                continue;
            }
            if (probe.line == kReady) {
                probe.phase = Phase::kLoading;
                probe.deadline = Clock::now() + timeout;  // the plugin gets the whole timeout, however slow the start
            } else if (probe.line == kLoaded) {
                probe.phase = Phase::kUnloading;
            } else if (probe.line == kUnloaded) {
                probe.phase = Phase::kExiting;
            }
            probe.line.clear();
        }
    }
}

#ifdef TESSERA_HAVE_SPAWN

// Starts the scanner on one file: stdin from /dev/null, stdout into a pipe (so that a plugin printing there cannot
// garble the host's own output), stderr shared with the host, default signal dispositions and an empty signal mask
// (a host may ignore SIGPIPE or block signals; the scanner must die the way a plain program would).
bool spawn_scanner(const fs::path& scanner, const fs::path& file, Probe& probe, std::string& error) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        error = fmt::format("pipe: {}", std::strerror(errno));
        return false;
    }
    // Keep the write end off fds 0-2: dup2 onto the same number would not clear close-on-exec.
    int write_end = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 3);
    ::close(fds[1]);
    if (write_end < 0) {
        ::close(fds[0]);
        error = fmt::format("fcntl: {}", std::strerror(errno));
        return false;
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, write_end, 1);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);  // the host's other descriptors stay with the host
#endif
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attributes, &all);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

    std::string program = scanner.string(), target = file.string();
    char* argv[] = {program.data(), const_cast<char*>("--probe"), target.data(), nullptr};
    int rc = posix_spawn(&probe.pid, program.c_str(), &actions, &attributes, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    ::close(write_end);
    if (rc != 0) {
        ::close(fds[0]);
        error = fmt::format("cannot start '{}': {}", program, std::strerror(rc));
        return false;
    }
    probe.fd = fds[0];
    ::fcntl(probe.fd, F_SETFL, ::fcntl(probe.fd, F_GETFL) | O_NONBLOCK);
    return true;
}

// Notes the scanner's end when it has ended, without blocking.  Only this pid is waited for: the host's other
// children are none of our business.
void poll_exit(Probe& probe) {
    int status = 0;
    pid_t rc;
    do {
        rc = ::waitpid(probe.pid, &status, WNOHANG);
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) return;
    probe.ended = true;
    probe.status_known = rc == probe.pid;
    probe.status = status;
}

void kill_and_reap(Probe& probe) {
    ::kill(probe.pid, SIGKILL);
    int status = 0;
    pid_t rc;
    do {
        rc = ::waitpid(probe.pid, &status, 0);
    } while (rc < 0 && errno == EINTR);
    probe.ended = true;
    probe.timed_out = true;
    probe.status_known = rc == probe.pid;
    probe.status = status;
}

// The verdict on an ended probe; nullopt when the scanner itself failed before loading anything (a broken
// installation is not the plugin's fault: the file is then loaded in process, as without isolation).
std::optional<ProbeVerdict> judge(const Probe& probe, std::chrono::milliseconds timeout, const fs::path& file) {
    const char* when = phase_text(probe.phase);
    ProbeVerdict verdict;
    verdict.skip = true;
    if (probe.timed_out) {
        verdict.reason = fmt::format(
            "hung {} in its probe process: no answer within {} (the probe was killed; a slow plugin needs a larger "
            "TessEnvOptions.plugin_probe_timeout_ms or TESSERA_PLUGIN_PROBE_TIMEOUT_MS)",
            when, seconds_text(timeout));
        return verdict;
    }
    const bool clean = probe.status_known && WIFEXITED(probe.status) && WEXITSTATUS(probe.status) == 0;
    if (probe.phase == Phase::kExiting && (clean || !probe.status_known)) return ProbeVerdict{};  // loaded fine
    if (probe.phase == Phase::kStarting) {
        std::string how = !probe.status_known         ? "its status is unknown"
                          : WIFSIGNALED(probe.status) ? signal_text(WTERMSIG(probe.status))
                                                      : fmt::format("exit status {}", WEXITSTATUS(probe.status));
        log_message(TESS_LOG_WARNING, "plugins",
                    fmt::format("the plugin scanner failed before loading '{}' ({}); loading it without isolation",
                                file.string(), how));
        return std::nullopt;
    }
    if (!probe.status_known) {
        verdict.reason = fmt::format("ended {} in its probe process, how is unknown (the host reaps children itself)",
                                     when);
    } else if (WIFSIGNALED(probe.status)) {
        int sig = WTERMSIG(probe.status);
        verdict.reason = fmt::format("{} {} in its probe process ({})", sig == SIGABRT ? "aborted" : "crashed", when,
                                     signal_text(sig));
    } else {
        verdict.reason = fmt::format("ended the process (exit status {}) {} in its probe process",
                                     WEXITSTATUS(probe.status), when);
    }
    return verdict;
}

struct ProbeResult {
    std::optional<ProbeVerdict> verdict;  // nullopt: not probed (load in process)
    bool cacheable = true;                // false for a verdict that says nothing about the file
    bool hung = false;                    // the plugin ran past the timeout
};

// Probes the files, several at a time, each in its own scanner process.  One result per file.
std::vector<ProbeResult> run_probes(const fs::path& scanner, const std::vector<fs::path>& files,
                                    std::chrono::milliseconds timeout) {
    std::vector<ProbeResult> results(files.size());
    const size_t parallel = std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 8);
    std::vector<Probe> running;
    size_t next = 0;
    while (next < files.size() || !running.empty()) {
        while (running.size() < parallel && next < files.size()) {
            Probe probe;
            probe.index = next;
            // Until the scanner says it is ready, the same allowance covers its own start.
            probe.deadline = Clock::now() + timeout;
            std::string error;
            if (spawn_scanner(scanner, files[next], probe, error)) {
                running.push_back(std::move(probe));
            } else {
                log_message(TESS_LOG_WARNING, "plugins",
                            fmt::format("cannot probe '{}' ({}); loading it without isolation", files[next].string(),
                                        error));
            }
            ++next;
        }
        // Wait for output, an end or a deadline; short slices, since an end shows on the pipe only when no
        // grandchild of the plugin keeps it open.
        std::vector<pollfd> fds;
        for (const Probe& p : running)
            if (p.fd >= 0) fds.push_back(pollfd{p.fd, POLLIN, 0});
        if (::poll(fds.data(), fds.size(), 10) < 0 && errno != EINTR)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        for (Probe& p : running) {
            if (p.fd >= 0) read_output(p, timeout);
            poll_exit(p);
            if (p.ended && p.fd >= 0) read_output(p, timeout);  // what it wrote just before ending
            if (!p.ended && Clock::now() > p.deadline) kill_and_reap(p);
            if (!p.ended) continue;
            if (p.fd >= 0) ::close(p.fd);
            p.fd = -1;
            if (p.phase == Phase::kStarting && p.timed_out) {
                // Not even the scanner answered in time (a machine under heavy load): not the plugin's fault, but
                // nothing proves the plugin safe either, so it is skipped this time and probed again next time.
                ProbeVerdict verdict;
                verdict.skip = true;
                verdict.reason = fmt::format("its probe process did not start within {}", seconds_text(timeout));
                results[p.index] = ProbeResult{verdict, false};
                continue;
            }
            results[p.index].verdict = judge(p, timeout, files[p.index]);
            results[p.index].hung = p.timed_out;
        }
        std::erase_if(running, [](const Probe& p) { return p.ended; });
    }
    return results;
}

#endif  // TESSERA_HAVE_SPAWN

}  // namespace

ProbeSettings ProbeSettings::resolve(int32_t mode, int64_t timeout_ms) {
    if (mode < TESS_PLUGIN_PROBE_AUTO || mode > TESS_PLUGIN_PROBE_RESCAN)
        fail(TESS_STATUS_INVALID_ARGUMENT, "plugin_probe {} is not a TESS_PLUGIN_PROBE_* value", mode);
    if (timeout_ms < 0) fail(TESS_STATUS_INVALID_ARGUMENT, "plugin_probe_timeout_ms {} is negative", timeout_ms);
    ProbeSettings settings;
    settings.mode = mode == TESS_PLUGIN_PROBE_OFF      ? Mode::kOff
                    : mode == TESS_PLUGIN_PROBE_RESCAN ? Mode::kRescan
                                                       : Mode::kAuto;
    if (settings.mode == Mode::kAuto) {
        if (const char* env = std::getenv("TESSERA_PLUGIN_PROBE"); env != nullptr && *env != '\0') {
            std::string value = env;
            if (value == "0" || value == "off") settings.mode = Mode::kOff;
            else if (value == "rescan") settings.mode = Mode::kRescan;
            else if (value != "1" && value != "auto")
                log_message(TESS_LOG_WARNING, "plugins",
                            fmt::format("TESSERA_PLUGIN_PROBE='{}' is not auto, off (0) or rescan; ignored", value));
        }
    }
    if (timeout_ms > 0) {
        settings.timeout = bounded(timeout_ms);
    } else if (const char* env = std::getenv("TESSERA_PLUGIN_PROBE_TIMEOUT_MS"); env != nullptr && *env != '\0') {
        int64_t parsed = 0;
        if (parse_timeout_ms(env, parsed))
            settings.timeout = bounded(parsed);
        else
            log_message(TESS_LOG_WARNING, "plugins",
                        fmt::format("TESSERA_PLUGIN_PROBE_TIMEOUT_MS='{}' is not a positive number; ignored", env));
    }
    return settings;
}

fs::path probe_cache_file() {
    fs::path dir;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') dir = xdg;
    else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') dir = fs::path(home) / ".cache";
    return dir.empty() ? dir : dir / "tessera" / "plugin-probes.txt";
}

std::vector<ProbeVerdict> probe_plugins(const std::vector<fs::path>& files, const ProbeSettings& settings) {
    std::vector<ProbeVerdict> verdicts(files.size());
#ifdef TESSERA_HAVE_SPAWN
    if (settings.mode == ProbeSettings::Mode::kOff || files.empty()) return verdicts;
    const fs::path scanner = find_scanner();
    if (scanner.empty() || ::access(scanner.c_str(), X_OK) != 0) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true))
            log_message(TESS_LOG_WARNING, "plugins",
                        fmt::format("the plugin scanner '{}' is missing: plugins are loaded without isolation",
                                    scanner.string()));
        return verdicts;
    }

    const std::string core = core_identity();
    const fs::path cache_file = probe_cache_file();
    std::vector<CacheEntry> cached;
    if (settings.mode == ProbeSettings::Mode::kAuto) cached = read_cache(cache_file);
    std::vector<size_t> pending;
    std::vector<std::optional<Stamp>> stamps(files.size());
    for (size_t i = 0; i < files.size(); ++i) {
        stamps[i] = stamp_of(files[i]);
        // A hang under a shorter timeout than today's is no verdict: the plugin may just be slow.
        auto hit = std::find_if(cached.begin(), cached.end(), [&](const CacheEntry& e) {
            return stamps[i] && e.core == core && e.path == files[i].string() && e.stamp == *stamps[i] &&
                   (e.hung_after_ms == 0 || e.hung_after_ms >= settings.timeout.count());
        });
        if (hit == cached.end()) {
            pending.push_back(i);
            continue;
        }
        verdicts[i].skip = hit->skip;
        verdicts[i].reason = hit->skip ? hit->reason + " (cached verdict)" : "";
        verdicts[i].cached = true;
    }
    if (pending.empty()) return verdicts;

    std::vector<fs::path> to_probe;
    for (size_t i : pending) to_probe.push_back(files[i]);
    const auto start = Clock::now();
    std::vector<ProbeResult> probed = run_probes(scanner, to_probe, settings.timeout);
    log_message(TESS_LOG_DEBUG, "plugins",
                fmt::format("probed {} plugin file(s) in {} ms", to_probe.size(),
                            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));

    std::vector<CacheEntry> fresh;
    for (size_t k = 0; k < pending.size(); ++k) {
        const size_t i = pending[k];
        if (!probed[k].verdict) continue;  // not probed: loaded in process, nothing to remember
        verdicts[i] = *probed[k].verdict;
        if (stamps[i] && probed[k].cacheable)
            fresh.push_back(CacheEntry{core, files[i].string(), *stamps[i], verdicts[i].skip, verdicts[i].reason,
                                       probed[k].hung ? static_cast<int64_t>(settings.timeout.count()) : 0});
    }
    if (!fresh.empty() && !cache_file.empty()) {
        try {
            write_cache(cache_file, fresh);
        } catch (const std::exception& e) {  // a cache that cannot be written only costs a probe next time
            log_message(TESS_LOG_DEBUG, "plugins", fmt::format("probe cache not written: {}", e.what()));
        }
    }
#else
    (void)files;
    (void)settings;
#endif
    return verdicts;
}

}  // namespace tessera
