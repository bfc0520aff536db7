// tessera_conformance --via-cli: runs a case through the `tessera run` command instead of the C API.
//
// Each data set is one `TESSERA run MODEL --inputs DATA_SET --outputs DIR` process (a light case runs without
// --inputs: the command generates the light-rule inputs itself), started with fork/exec and no shell.  Its stdout
// and stderr are captured: stdout tells whether the session was created (the partition plan is printed once it
// is), the "tessera: error: ..." line of stderr becomes the failure message.  The output_K.pb files it writes are
// read with the declared types of the graph outputs and compared with the expected ones by the functions the
// in-process path uses (conformance_runner.cc), so both paths judge a case alike.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "conformance.h"
#include "onnx_io.h"

namespace tessera::conformance {
namespace {

constexpr size_t kMaxCaptured = 1 << 20;  // bytes of stdout, and of the end of stderr, kept per process

struct ProcessResult {
    int wait_status = 0;
    bool timed_out = false;
    std::string out;  // the first kMaxCaptured bytes of stdout
    std::string err;  // stderr, its end when it is long
};

void write_text(int fd, const char* text) {
    size_t left = std::strlen(text);
    while (left > 0) {
        const ssize_t n = write(fd, text, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        text += n;
        left -= static_cast<size_t>(n);
    }
}

void make_pipe(int fds[2]) {
    if (pipe2(fds, O_CLOEXEC) != 0) {
        std::perror("tessera_conformance: pipe");
        std::exit(1);
    }
}

// Runs `args` (args[0] looked up as execvp does) with stdin on /dev/null, capturing stdout and stderr; kills it at
// `deadline`.
ProcessResult run_process(const std::vector<std::string>& args, Clock::time_point deadline) {
    ProcessResult result;
    // Everything the child needs is made before fork: it only calls async-signal-safe functions.
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const std::string exec_failure = "tessera_conformance: cannot run '" + args[0] + "': ";
    int out[2], err[2];
    make_pipe(out);
    make_pipe(err);
    const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const pid_t parent = getpid();
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
        std::perror("tessera_conformance: fork");
        std::exit(1);
    }
    if (pid == 0) {
#ifdef __linux__
        // Dies with the runner's child, so that a child killed at its timeout leaves no `tessera run` behind.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
#else
        (void)parent;
#endif
        setpgid(0, 0);  // its own process group, so that a timeout kills whatever it started too
        if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
        execvp(argv[0], argv.data());
        const int error = errno;
        write_text(STDERR_FILENO, exec_failure.c_str());
        write_text(STDERR_FILENO, strerror(error));
        write_text(STDERR_FILENO, "\n");
        _exit(127);
    }
    setpgid(pid, pid);  // as the child does, whichever runs first
    close(out[1]);
    close(err[1]);
    if (devnull >= 0) close(devnull);

    // Read both pipes until the process closes them (it exits) or the deadline passes.
    int fds[2] = {out[0], err[0]};
    std::string* buffers[2] = {&result.out, &result.err};
    while (fds[0] >= 0 || fds[1] >= 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            result.timed_out = true;
            break;
        }
        pollfd polled[2];
        int which[2];
        nfds_t count = 0;
        for (int k = 0; k < 2; ++k)
            if (fds[k] >= 0) {
                which[count] = k;
                polled[count++] = pollfd{fds[k], POLLIN, 0};
            }
        const int ready = poll(polled, count, static_cast<int>(std::min<long long>(left + 1, INT_MAX)));
        if (ready < 0 && errno != EINTR) break;
        for (nfds_t i = 0; ready > 0 && i < count; ++i) {
            if (polled[i].revents == 0) continue;
            const int k = which[i];
            char chunk[65536];
            const ssize_t n = read(fds[k], chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                close(fds[k]);
                fds[k] = -1;
                continue;
            }
            std::string& buffer = *buffers[k];
            if (k == 0) {
                if (buffer.size() < kMaxCaptured) buffer.append(chunk, static_cast<size_t>(n));
            } else {
                buffer.append(chunk, static_cast<size_t>(n));
                if (buffer.size() > 2 * kMaxCaptured) buffer.erase(0, buffer.size() - kMaxCaptured);
            }
        }
    }
    for (const int fd : fds)
        if (fd >= 0) close(fd);

    // Reap it.  Closed pipes mean it is exiting; the deadline still holds should it linger.
    for (;;) {
        if (result.timed_out) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            while (waitpid(pid, &result.wait_status, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        const pid_t done = waitpid(pid, &result.wait_status, WNOHANG);
        if (done == pid || (done < 0 && errno != EINTR)) break;
        if (Clock::now() >= deadline) result.timed_out = true;
        else usleep(1000);
    }
    return result;
}

std::vector<std::string> cli_arguments(const Case& c, const Options& o, const fs::path* data_set,
                                       const fs::path& out_dir) {
    std::vector<std::string> args = {o.via_cli, "run", c.model.string()};
    if (data_set != nullptr) args.insert(args.end(), {"--inputs", data_set->string()});
    args.insert(args.end(), {"--outputs", out_dir.string(), "--values", "0"});
    if (!o.providers.empty()) {
        std::string list;
        for (const std::string& p : o.providers) list += (list.empty() ? "" : ",") + p;
        args.insert(args.end(), {"--providers", list});
    }
    if (o.strict) args.push_back("--strict");
    if (o.threads >= 0) args.insert(args.end(), {"--threads", std::to_string(o.threads)});
    if (!o.plugin_path.empty()) args.insert(args.end(), {"--plugin-path", o.plugin_path});
    // As in-process, the runtime's log only shows with --verbose; failures are reported by the runner.
    if (!o.verbose) args.insert(args.end(), {"--log-level", "error"});
    return args;
}

std::string trim(std::string text) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return "";
    text.erase(0, first);
    text.erase(text.find_last_not_of(" \t\r\n") + 1);
    return text;
}

// The command's own error line ("tessera: error: MESSAGE" -> MESSAGE), else the last line of its stderr.
std::string error_message(const std::string& err) {
    static const std::string prefix = "tessera: error: ";
    const size_t at = err.rfind(prefix);
    if (at != std::string::npos) {
        const size_t start = at + prefix.size();
        return trim(err.substr(start, err.find('\n', start) - start));
    }
    const std::string text = trim(err);
    const size_t newline = text.rfind('\n');
    return newline == std::string::npos ? text : text.substr(newline + 1);
}

// The case's result when `tessera run` did not succeed, in the in-process path's terms.
Result failed_run(const ProcessResult& p, const Options& o, const fs::path& model, bool session_created) {
    const std::string stage =
        session_created ? "after its session was created" : "before its session was created";
    Result r;
    r.session_created = session_created;
    if (p.timed_out) {
        r.outcome = Outcome::Timeout;
        r.message = "no result after " + std::to_string(o.timeout_s) + " s, " + stage;
    } else if (WIFSIGNALED(p.wait_status)) {
        const int sig = WTERMSIG(p.wait_status);
        r.outcome = Outcome::Crash;
        r.message = "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ") " + stage;
    } else {
        const int status = WIFEXITED(p.wait_status) ? WEXITSTATUS(p.wait_status) : -1;
        r.message = error_message(p.err);
        if (r.message.empty()) r.message = "tessera run exited with status " + std::to_string(status);
        // The command reads its input files, then creates the session, then runs; its messages say which failed.
        const std::string load_failed = "cannot load model '" + model.string() + "': ";
        if (session_created) {
            r.outcome = Outcome::RunError;
            if (r.message.rfind("run failed: ", 0) == 0) r.message.erase(0, std::strlen("run failed: "));
        } else if (r.message.rfind(load_failed, 0) == 0) {
            r.outcome = Outcome::SessionError;
            r.message.erase(0, load_failed.size());  // the runner names the case
        } else if (status != 1 || r.message.rfind("cannot create the environment", 0) == 0) {
            r.outcome = Outcome::SessionError;  // 2: a command line it refused; 127: it could not be started
        } else {
            r.outcome = Outcome::LoadError;
        }
    }
    return r;
}

}  // namespace

fs::path make_temp_dir() {
    std::error_code ec;
    fs::path base = fs::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string path = (base / "tessera_conformance.XXXXXX").string();
    if (mkdtemp(path.data()) == nullptr) {
        std::fprintf(stderr, "tessera_conformance: cannot create a folder like %s: %s\n", path.c_str(),
                     std::strerror(errno));
        std::exit(1);
    }
    return path;
}

void remove_temp_dir(const fs::path& dir) {
    std::error_code ec;
    fs::remove_all(dir, ec);
}

Result run_case_via_cli(const Case& c, const Options& o, const fs::path& temp_dir, Clock::time_point deadline) {
    Result r;
    Outcome stage = Outcome::LoadError;
    try {
        std::vector<ValueInfo> inputs, outputs;
        {
            const onnx::ModelProto model = onnx_io::load_model(c.model.string());
            inputs = onnx_io::graph_inputs(model);
            outputs = onnx_io::graph_outputs(model);
        }
        std::vector<const fs::path*> data_sets;
        for (const fs::path& data_set : c.data_sets) data_sets.push_back(&data_set);
        if (data_sets.empty()) data_sets.push_back(nullptr);  // light case

        for (const fs::path* data_set : data_sets) {
            const fs::path out_dir = temp_dir / (data_set != nullptr ? data_set->filename() : fs::path("light"));
            const ProcessResult p = run_process(cli_arguments(c, o, data_set, out_dir), deadline);
            if (o.verbose && !p.err.empty()) std::fputs(p.err.c_str(), stderr);
            const bool exited_0 = !p.timed_out && WIFEXITED(p.wait_status) && WEXITSTATUS(p.wait_status) == 0;
            // The partition plan is printed once the session exists; a run failure is reported after it.
            const bool session_created = exited_0 || p.out.rfind("partitions: ", 0) == 0 ||
                                         p.out.find("\npartitions: ") != std::string::npos ||
                                         error_message(p.err).rfind("run failed", 0) == 0;
            r.session_created = r.session_created || session_created;
            if (!exited_0) {
                Result failed = failed_run(p, o, c.model, session_created);
                failed.session_created = r.session_created;
                return failed;
            }

            // The expected outputs are read after the run, as in-process where the session exists by then.
            stage = Outcome::LoadError;
            std::optional<DataSetFiles> files;
            if (data_set != nullptr) files = data_set_files(*data_set, inputs.size(), outputs.size());
            const std::vector<Value> expected = load_expected(c, outputs, files ? &*files : nullptr);

            // The output files, as many as there are expected outputs, read as the graph declares them.
            stage = Outcome::RunError;
            std::vector<Value> actual;
            for (const fs::path& file : numbered_files(out_dir, "output_")) {
                if (actual.size() == expected.size()) break;
                actual.push_back(onnx_io::load_value(file.string(), outputs[actual.size()]));
            }
            r.message = compare_outputs(c, actual, expected, outputs, stage);
            remove_temp_dir(out_dir);
            if (!r.message.empty()) {
                if (data_sets.size() > 1) r.message = data_set->filename().string() + ": " + r.message;
                break;
            }
        }
        r.outcome = r.message.empty() ? Outcome::Pass : Outcome::Mismatch;
    } catch (const Error& e) {
        r.outcome = stage;
        r.message = stage == Outcome::LoadError ? std::string(e.what()) : status_text(e);
    } catch (const std::exception& e) {
        r.outcome = stage;
        r.message = e.what();
    }
    return r;
}

}  // namespace tessera::conformance
