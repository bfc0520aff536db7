#!/usr/bin/env bash
# The CPU provider builds on a non-x86 target: every plugins/cpu source is compiled with the aarch64 cross compiler
# (each header on its own too), where the x86 kernels are absent (TESSERA_CPU_X86 in plugins/cpu/util/cpu_isa.h)
# and only the Generic level exists, and the objects are linked into the plugin module.  Nothing is run.
#
#   generic_build.sh [SOURCE_DIR [WORK_DIR]]     (defaults: the checkout holding this script, a temporary folder)
#
# Needs g++-aarch64-linux-gnu and the arm64 OpenBLAS (libopenblas-pthread-dev:arm64), which
# scripts/install_deps.sh installs; without them it exits 77 (skipped) and says why.
#
# (ImageDecoder, whose codec headers exist only per architecture, is the image provider's, plugins/image: not here.)
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
work=${2:-}
cxx=${TESSERA_CROSS_CXX:-aarch64-linux-gnu-g++}
blas_dir=/usr/include/aarch64-linux-gnu/openblas-pthread
blas_lib=/usr/lib/aarch64-linux-gnu

skip() { echo "SKIPPED: aarch64 generic build of plugins/cpu: $*"; exit 77; }
command -v "$cxx" >/dev/null || skip "no cross compiler $cxx (apt-get install g++-aarch64-linux-gnu)"
[ -f "$blas_dir/cblas.h" ] && [ -e "$blas_lib/libopenblas.so" ] ||
  skip "no arm64 OpenBLAS in $blas_dir and $blas_lib (libopenblas-pthread-dev:arm64)"

if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
rm -rf "$work/obj"  # no object of a source since removed
mkdir -p "$work/include/tessera" "$work/obj"

# tessera/version.h, as CMake's configure_file writes it from project(Tessera VERSION ...).
version=$(sed -n 's/^project(Tessera VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
IFS=. read -r major minor patch <<<"$version"
sed -e "s/@PROJECT_VERSION_MAJOR@/$major/" -e "s/@PROJECT_VERSION_MINOR@/$minor/" \
    -e "s/@PROJECT_VERSION_PATCH@/$patch/" -e "s/@PROJECT_VERSION@/$version/" \
    "$src/cmake/version.h.in" >"$work/include/tessera/version.h"

# The project's flags (CMakeLists.txt: C++20, tessera_warnings, plugins/cpu's -Wno-psabi) with warnings as errors,
# so that code left unused on this target shows up too.  /usr/include is the cross compiler's own last resort; the
# x86-64 folder under it is never searched.
flags=(-c -O0 -std=c++20 -fPIC -Wall -Wextra -Wno-missing-field-initializers -Wno-psabi -Werror
       -I"$src/plugins/cpu" -I"$src/plugin_api/include" -I"$work/include" -I"$blas_dir"
       -isystem /usr/include/libpng16 -isystem /usr/include/openjpeg-2.5)

cd "$src/plugins/cpu"
mapfile -t sources < <(find . -name '*.cc' | sed 's|^\./||' | sort)
mapfile -t headers < <(find . -name '*.h' | sed 's|^\./||' | sort)
echo "compiling ${#sources[@]} sources and ${#headers[@]} headers for $($cxx -dumpmachine)"

printf '%s\n' "${flags[@]}" >"$work/flags"  # a response file: the compiler reads its options from it
export cxx work
status=0
{
  printf 'cc %s\n' "${sources[@]}"
  printf 'h %s\n' "${headers[@]}"  # each header on its own too: one that no source includes is checked as well
} | xargs -P "${TESSERA_GENERIC_BUILD_JOBS:-2}" -L 1 bash -c '
  if [ "$0" = h ]; then out=$(echo "#include \"$1\"" | "$cxx" @"$work/flags" -fsyntax-only -x c++ - 2>&1)
  else out=$("$cxx" @"$work/flags" -o "$work/obj/${1//\//_}.o" "$1" 2>&1); fi
  if [ $? -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; echo "$out" | head -40; exit 1; fi
' || status=1

# The objects are aarch64 ones, and no x86 builtin or intrinsic is left in them as an undefined symbol.
if [ $status -eq 0 ]; then
  for o in "$work"/obj/*.o; do
    readelf -h "$o" | grep -q 'Machine:.*AArch64' || { echo "FAIL ${o##*/} is not an aarch64 object"; status=1; }
    x86=$(nm -u "$o" | awk '$2 ~ /ia32|_mm[0-9]*_|cpuid/ {print $2}')
    [ -z "$x86" ] || { echo "FAIL ${o##*/} refers to x86 symbols: $x86"; status=1; }
  done
fi

# They link into the plugin module with nothing undefined (every x86 entry point the portable code still names has
# its stand-in).  OpenBLAS is opened at run time (util/gemm.cc), so it is not linked.
if [ $status -eq 0 ]; then
  # As the real plugin links: the entry symbol is its only export (plugin_api/plugin.map).
  if out=$("$cxx" -shared -o "$work/libtessera_cpu.so" "$work"/obj/*.o \
             -Wl,--version-script="$src/plugin_api/plugin.map" \
             -Wl,--no-undefined -lpthread -ldl 2>&1); then
    echo "ok   link: libtessera_cpu.so for aarch64"
  else
    echo "FAIL link"; echo "$out" | head -40; status=1
  fi
fi
[ $status -eq 0 ] && echo "PASS plugins/cpu compiles and links for aarch64 (generic level only)"
exit $status
