// tessera provider-test: running one check in a child process, so that a provider that crashes, aborts, exits or
// hangs fails that check (with what happened) instead of ending the whole report.
#pragma once

#include <functional>
#include <string>

namespace tessera::provider_kit {

struct IsolatedOutcome {
    bool finished = false;  // the body returned; `text` is what it returned
    std::string text;
    std::string failure;    // otherwise: "crashed with SIGSEGV", "exited with status 3", "hung (no answer in 60 s)"
};

// Runs `body` in a fork of this process and returns what it returned.  The child shares everything loaded so far
// (plugins, environment) and ends with _exit, so it never runs the parent's destructors.  Exceptions the body lets
// escape come back as "error: what".
IsolatedOutcome run_isolated(const std::function<std::string()>& body, int timeout_seconds);

}  // namespace tessera::provider_kit
