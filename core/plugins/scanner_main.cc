// tessera-plugin-scanner: loads one plugin file and unloads it again, so that the process that started it
// (plugins/probe.cc) learns whether the plugin can be loaded safely.  It uses only the public C API, with probing
// off, so the plugin sees exactly what a host would show it.  Progress goes to stdout as three lines ("ready",
// "loaded", "unloaded"); how far it got and how the process ended are the verdict.  Not meant to be run by hand.
//
//   tessera-plugin-scanner --probe FILE
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "tessera/tessera.h"

namespace {

// write(2) rather than stdio: nothing stays buffered when the plugin crashes or calls exit() right after.
void say(const char* what) {
    char line[128];
    int n = std::snprintf(line, sizeof line, "tessera-plugin-scanner: %s\n", what);
    for (int done = 0; done < n;) {
        ssize_t written = ::write(STDOUT_FILENO, line + done, static_cast<size_t>(n - done));
        if (written <= 0) return;
        done += static_cast<int>(written);
    }
}

void discard_log(void*, int32_t, const char*) {}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 || std::strcmp(argv[1], "--probe") != 0) {
        std::fprintf(stderr, "usage: %s --probe PLUGIN_FILE (started by libtessera, not by hand)\n", argv[0]);
        return 2;
    }
    // A scanner whose host died (Ctrl-C, a crash) must not live on, hung in a plugin, as an orphan.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // How the plugin ends this process is the verdict, so a crash must end it by its signal: handlers installed
    // before main (a sanitizer runtime's, which reports and exits with status 1) would turn "crashed" into "exited".
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) std::signal(sig, SIG_DFL);

    TessEnvOptions options{};
    options.struct_size = sizeof options;
    options.log_level = TESS_LOG_ERROR;
    options.log_callback = discard_log;  // the verdict is how this process ends, not what it logs
    options.no_default_plugin_dirs = 1;
    options.plugin_probe = TESS_PLUGIN_PROBE_OFF;  // this is the probe
    TessEnv* env = nullptr;
    TessStatus* status = tess_env_create(&options, &env);
    if (status != nullptr) {
        std::fprintf(stderr, "tessera-plugin-scanner: %s\n", tess_status_message(status));
        tess_status_release(status);
        return 3;
    }
    say("ready");
    // A file that is refused politely (no entry symbol, ABI mismatch) is a fine verdict: the host records the reason
    // itself when it loads the file.
    tess_status_release(tess_env_load_plugin(env, argv[2]));
    say("loaded");
    tess_env_release(env);  // the plugin's shutdown hook, then its unloading (destructors)
    say("unloaded");
    return 0;
}
