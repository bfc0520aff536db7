#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root: the CUDA tests, the conformance suites with providers cuda,cpu,
# and the benchmark, from the bundle scripts/gpu/prepare_device_bundle.sh made (.device/bundle, or unpacked from
# .device/bundle.tar.gz).  Logs go to $OUT (the device run's result folder) when it is set, else .device/out.
#
#   scripts/gpu/run_on_device.sh [all|info|tests|conformance|bench]...   (default: all)
#
# Environment: TESSERA_BUNDLE (bundle folder), TESSERA_BENCH_RUNS (default 50), GTEST_FILTER (for cuda_tests).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bundle=${TESSERA_BUNDLE:-$root/.device/bundle}
if [ ! -x "$bundle/bin/tessera" ]; then
  tarball=$root/.device/bundle.tar.gz
  [ -f "$tarball" ] || { echo "no bundle: run scripts/gpu/prepare_device_bundle.sh first (and carry $tarball)" >&2; exit 2; }
  unpack=${TMPDIR:-/tmp}/tessera-device
  rm -rf "$unpack" && mkdir -p "$unpack" && tar -C "$unpack" -xzf "$tarball" || exit 2
  bundle=$unpack/bundle
fi
out=${OUT:-$root/.device/out}
mkdir -p "$out"

# ---- Library path: the bundle's dependencies, then wherever this machine keeps cuBLAS and cuDNN ----------------------
dirs=("$bundle/deps")
add_dir() { for d in "${dirs[@]}"; do [ "$d" = "$1" ] && return; done; dirs+=("$1"); }
for want in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
  found=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [ -e "$d/$want" ] && { found=$d; break; }
  done
  if [ -z "$found" ]; then  # pip wheels (nvidia-cublas, nvidia-cudnn: PyTorch's own copies)
    for sp in $(python3 -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
      [ -d "$sp/nvidia" ] || continue
      hit=$(find "$sp/nvidia" -maxdepth 4 -name "$want" 2>/dev/null | head -1)
      [ -n "$hit" ] && { found=$(dirname "$hit"); break; }
    done
  fi
  if [ -n "$found" ]; then add_dir "$found"; else echo "warning: $want not found on this machine" >&2; fi
done
# Our libstdc++ only when the machine's is older than the one we were built with.
need=$(objdump -T "$bundle"/lib/tessera/plugins/*.so "$bundle"/bin/* 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
system_stdcxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
if [ -n "$need" ] && { [ -z "$system_stdcxx" ] || ! grep -q "$need" "$system_stdcxx"; }; then
  add_dir "$bundle/compat"
fi
LD_LIBRARY_PATH=$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
export TESSERA_BACKEND_DATA=$bundle/data
export TESSERA_LIBRARY=$bundle/lib/libtessera.so

status=0
step() { echo; echo "==== $*"; }

run_info() {
  step "machine"
  nvidia-smi 2>&1 | head -15 | tee "$out/nvidia-smi.txt"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "bundle commit: $(cat "$bundle/COMMIT" 2>/dev/null)"
  step "tessera plugins"
  "$bundle/bin/tessera" plugins 2>&1 | tee "$out/plugins.txt"
  step "tessera run --providers cuda --strict (the default model)"
  TESSERA_CUDA_USE_TF32=0 "$bundle/bin/tessera" run --providers cuda --strict 2>&1 | tee "$out/run_default.txt" ||
    status=1
}

run_tests() {
  step "cuda_tests"
  "$bundle/bin/cuda_tests" --gtest_output="xml:$out/cuda_tests.xml" ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} \
    2>&1 | tee "$out/cuda_tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

run_conformance() {
  [ -x "$bundle/bin/tessera_conformance" ] || return
  step "conformance with providers cuda,cpu (known CPU failures expected)"
  suites=$(cd "$bundle/data" && ls -d light simple pytorch-operator pytorch-converted node 2>/dev/null | paste -sd,)
  TESSERA_CUDA_USE_TF32=0 "$bundle/bin/tessera_conformance" --data "$bundle/data" --suite "$suites" \
    --providers cuda,cpu --known-failures "$root/tests/conformance/known_failures.txt" --jobs 4 \
    2>&1 | tee "$out/conformance.log" | tail -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

run_bench() {
  step "benchmark: tessera cuda vs onnxruntime cuda"
  python3 "$root/scripts/gpu/bench_cuda.py" --bundle "$bundle" --runs "${TESSERA_BENCH_RUNS:-50}" --with-cpu \
    --markdown "$out/bench.md" 2>&1 | tee "$out/bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

[ $# -eq 0 ] && set -- all
for what in "$@"; do
  case $what in
    all) run_info; run_tests; run_conformance; run_bench ;;
    info) run_info ;;
    tests) run_tests ;;
    conformance) run_conformance ;;
    bench) run_bench ;;
    *) echo "unknown step '$what' (all, info, tests, conformance, bench)" >&2; exit 2 ;;
  esac
done
echo
echo "logs in $out; status $status"
exit $status
