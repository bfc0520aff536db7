#include "util/cpu_isa.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#if TESSERA_CPU_X86
#include <cpuid.h>
#endif

namespace tessera::cpu {

namespace {

CpuFeatures detect() {
    CpuFeatures f;
#if TESSERA_CPU_X86
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    // F16C from CPUID: clang before 15 does not know __builtin_cpu_supports("f16c").
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
    bool amx_int8 = false;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) amx_int8 = ((edx >> 24) & 1u) && ((edx >> 25) & 1u);

    const char* cap_env = std::getenv("TESSERA_CPU_MAX_ISA");
    const std::string cap = cap_env != nullptr ? cap_env : "";
    const CpuIsa cap_level = cap == "none" ? CpuIsa::Generic : cap == "avx2" ? CpuIsa::Avx2 : CpuIsa::Avx512;
    const CpuIsa have = avx512 && avx2 && f16c ? CpuIsa::Avx512 : avx2 && f16c ? CpuIsa::Avx2 : CpuIsa::Generic;
    f.level = static_cast<int>(have) < static_cast<int>(cap_level) ? have : cap_level;
    if (f.level == CpuIsa::Avx512) {
        f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
        f.avx512_vbmi = __builtin_cpu_supports("avx512vbmi");
        f.amx_allowed = amx_int8 && cap != "avx512";
    }
#endif
    return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = detect();
    return features;
}

#if !TESSERA_CPU_X86
void x86_kernel_unavailable(const char* entry_point) {
    throw std::logic_error(std::string(entry_point) + ": an x86 kernel, called in a build for another architecture");
}
#endif

}  // namespace tessera::cpu
