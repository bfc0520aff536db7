// tessera provider-test: checks in child processes (isolated.h).
#include "provider_kit/isolated.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>

namespace tessera::provider_kit {

namespace {

// Ends every answer, so that a body the plugin cut short (exit(0) inside a provider) is told from one that returned.
constexpr char kEnd = '\x04';

void write_all(int fd, const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        done += static_cast<size_t>(n);
    }
}

}  // namespace

IsolatedOutcome run_isolated(const std::function<std::string()>& body, int timeout_seconds) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::fflush(nullptr);  // the child must not print what the parent buffered
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
        ::close(fds[0]);
        std::string text;
        try {
            text = body();
        } catch (const std::exception& e) {
            text = std::string("error: ") + e.what();
        } catch (...) {
            text = "error: unknown exception";
        }
        write_all(fds[1], text + kEnd);
        ::close(fds[1]);
        std::fflush(nullptr);
        ::_exit(0);
    }
    ::close(fds[1]);
    IsolatedOutcome outcome;
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
    bool timed_out = false;
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        pollfd p{fds[0], POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) continue;  // re-checks the deadline
        char buffer[4096];
        const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // EOF: the child closed its end (finished or died)
        text.append(buffer, static_cast<size_t>(n));
    }
    ::close(fds[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) {
        outcome.failure = "hung (no answer in " + std::to_string(timeout_seconds) + " s)";
    } else if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* name = ::sigabbrev_np(sig);
        outcome.failure =
            std::string("crashed with ") + (name != nullptr ? std::string("SIG") + name : std::to_string(sig));
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        outcome.failure = "ended the process with exit status " + std::to_string(WEXITSTATUS(status));
    } else if (text.empty() || text.back() != kEnd) {
        outcome.failure = "ended the process (exit status 0) in the middle of the check";
    } else {
        text.pop_back();
        outcome.finished = true;
        outcome.text = std::move(text);
    }
    return outcome;
}

}  // namespace tessera::provider_kit
