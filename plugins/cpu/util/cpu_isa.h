// CPU provider: the instruction sets its kernels may use, decided once per process in this one place.
//
// Levels are ordered: Generic (portable C++ and OpenBLAS only) < Avx2 (AVX2 + FMA + F16C) < Avx512 (AVX-512 F, DQ,
// VL, BW).  The AVX-512 extensions that some kernels need on top (VNNI for the int8 products, AMX) are reported
// separately and only at the Avx512 level.  TESSERA_CPU_MAX_ISA caps the level for the whole provider, so that the
// tests run every kernel family a machine has at every level below it:
//   avx512  everything but AMX       avx2  the AVX2 tiles, OpenBLAS and generic loops       none  generic only
// An unknown value is ignored.  Read on first use; the answer never changes afterwards.
#pragma once

// 1 where the x86 kernels (AVX2 / AVX-512 intrinsics, target attributes) are compiled at all.  Elsewhere they are
// absent, cpu_features() reports Generic and only the portable paths run.
#if defined(__x86_64__) || defined(__i386__)
#define TESSERA_CPU_X86 1
#else
#define TESSERA_CPU_X86 0
#endif

namespace tessera::cpu {

enum class CpuIsa { Generic = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
    CpuIsa level = CpuIsa::Generic;  // the highest level this CPU has and TESSERA_CPU_MAX_ISA allows
    bool avx512_vnni = false;        // AVX-512 VNNI (int8 dot products), at level Avx512 only
    bool avx512_vbmi = false;        // AVX-512 VBMI (byte permutes: table lookups), at level Avx512 only
    bool amx_allowed = false;        // AMX may be tried (AMX-INT8 present, level Avx512, no avx512 cap); the kernel
                                     // still asks the OS for the tile state before using it
};

const CpuFeatures& cpu_features();

// Whether kernels written for `level` may run.
inline bool cpu_allows(CpuIsa level) { return static_cast<int>(cpu_features().level) >= static_cast<int>(level); }

#if !TESSERA_CPU_X86
// The body of an x86 kernel's entry point on other targets, where the dispatch never calls it (its gate asks
// cpu_allows(Avx2 or Avx512), which is false there): throws std::logic_error naming it.
[[noreturn]] void x86_kernel_unavailable(const char* entry_point);
#endif

}  // namespace tessera::cpu
