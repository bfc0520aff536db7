// tessera provider-test: the provider's operators on ONNX backend-test cases (a directory per case: model.onnx and
// test_data_set_N/ with input_K.pb and output_K.pb), each case in a child process.
#pragma once

#include <string>
#include <vector>

#include "tessera/tessera.hpp"

namespace tessera::provider_kit {

struct CaseSettings {
    std::string provider;           // the provider under test
    std::string reference = "cpu";  // the provider its outputs are compared with on randomized inputs
    int threads = 4;                // concurrent runs of one session
    int timeout_seconds = 60;
};

struct CaseResult {
    std::string name;              // the case directory's name
    enum class Verdict { Passed, Failed, Skipped } verdict = Verdict::Skipped;
    std::vector<std::string> ops;  // operators the provider ran in it (skipped: the model's operators)
    std::string detail;            // failed: what failed; skipped: why (the provider's decline reason)
};

// Runs one case against the provider, in a child process sharing `env` (which has loaded it):
//  - the session's plan: which nodes the provider claimed (none: skipped, with its reason); a second session must
//    get the same plan (capability answers are consistent);
//  - the case's own inputs, outputs compared with the expected ones (onnx's tolerance, or the case's data.json);
//  - randomized inputs (the case's floating-point inputs perturbed, seeded by the case name) compared with the
//    reference provider's outputs on the same inputs;
//  - `threads` concurrent runs of one session, each matching the single run;
//  - bad inputs (one missing, one of another element type, one of another rank) answered by an error status;
//  - once the sessions and their outputs are released, no instance, compiled partition or allocation of the
//    provider is alive (tess_env_provider_stats).
CaseResult run_case(Env& env, const std::string& case_dir, const CaseSettings& settings);

}  // namespace tessera::provider_kit
