// tessera provider-test: the plugin's entry function against cores of other ABI versions and struct sizes, called
// directly (not through the core) with a host table the kit makes, each check in a child process.
#pragma once

#include <string>
#include <vector>

namespace tessera::provider_kit {

struct CheckResult {
    std::string name;
    bool passed = false;
    std::string detail;  // why it failed, or what was seen
};

std::vector<CheckResult> check_entry(const std::string& plugin_path, int timeout_seconds);

}  // namespace tessera::provider_kit
