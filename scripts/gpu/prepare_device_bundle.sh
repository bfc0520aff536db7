#!/usr/bin/env bash
# Builds Tessera here and packs what the GPU machine needs to run the CUDA tests and the benchmark into
# .device/bundle/ and .device/bundle.tar.gz (ignored by git).  The GPU machine has the CUDA driver, CUDA 13, cuDNN,
# PyTorch and onnxruntime, but none of our Debian -dev packages and no network, so the bundle carries:
#   bin/     tessera, cuda_tests, tessera_conformance
#   lib/     libtessera.so*, lib/tessera/tessera-plugin-scanner and lib/tessera/plugins/ (cpu, cuda,
#            cuda/libtessera_cuda_impl.so, custom-op libraries)
#   deps/    every shared library they load that a base image lacks (protobuf, onnx, boost, fmt, OpenBLAS, ...),
#            found with ldd; never glibc and never the CUDA libraries (the GPU machine has its own)
#   compat/  libstdc++ and libgcc_s, used only where the machine's libstdc++ is older than ours
#   data/    the conformance suites the device run uses (light, simple, pytorch-operator, pytorch-converted; node/
#            too with TESSERA_BUNDLE_NODE=1)
#   models/  the benchmark's encoder model and its input (made here, where the onnx package exists)
# Then: scripts/gpu/run_on_device.sh on the GPU machine (see plugins/cuda/README.md).
#
#   scripts/gpu/prepare_device_bundle.sh            # uses build/ (TESSERA_BUILD_DIR), builds the needed targets
#   TESSERA_BUNDLE_SKIP_BUILD=1 scripts/gpu/...     # pack what is already built
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${TESSERA_BUILD_DIR:-build}
out=.device/bundle
data_src=${TESSERA_BACKEND_DATA:-$root/../shared/onnx-backend-data}
limit_mib=64

# ---- Build ----------------------------------------------------------------------------------------------------------
locked() {  # the shared build lock of this workplace, when there is one
  if command -v flock >/dev/null 2>&1; then flock /tmp/tessera-build.lock "$@"; else "$@"; fi
}
if [ "${TESSERA_BUNDLE_SKIP_BUILD:-0}" != 1 ]; then
  [ -f "$build/CMakeCache.txt" ] || locked cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  locked cmake --build "$build" -j "${JOBS:-2}" --target tessera_cli tessera_cpu tessera_cuda cuda_tests \
    tessera_conformance tessera_plugin_scanner
fi
for f in "$build/bin/tessera" "$build/bin/cuda_tests" "$build/lib/tessera/plugins/libtessera_cuda.so" \
         "$build/lib/tessera/plugins/cuda/libtessera_cuda_impl.so"; do
  [ -e "$f" ] || { echo "missing $f: was the CUDA provider built (CUDA toolkit and cuDNN found)?" >&2; exit 1; }
done

# ---- Layout ---------------------------------------------------------------------------------------------------------
rm -rf "$out" .device/bundle.tar.gz
mkdir -p "$out"/{bin,lib,deps,compat,data,models}
for b in tessera cuda_tests tessera_conformance; do
  [ -e "$build/bin/$b" ] && cp -a "$build/bin/$b" "$out/bin/"
done
cp -a "$build"/lib/libtessera.so* "$out/lib/"
mkdir -p "$out/lib/tessera"
cp -a "$build/lib/tessera/plugins" "$out/lib/tessera/"
cp -a "$build/lib/tessera/tessera-plugin-scanner" "$out/lib/tessera/"  # probes plugins before they are loaded

# ---- Shared libraries the GPU machine lacks -------------------------------------------------------------------------
base_re='^(linux-vdso|ld-linux[^ ]*|libc|libm|libdl|librt|libpthread|libresolv|libutil|libmvec)\.so'
cuda_re='^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nvrtc[a-z-]*|nvJitLink|cufft|curand|cusparse|cusolver)\.so'
compat_re='^lib(stdc\+\+|gcc_s)\.so'
mapfile -t objects < <(find "$out/bin" "$out/lib" -type f \( -perm -u+x -o -name '*.so*' \))
# OpenBLAS is opened at run time (plugins/cpu/util/gemm.cc), so no ldd lists it: it goes in by name, with its deps.
blas=$(sed -n 's/^TESSERA_OPENBLAS_SERIAL:FILEPATH=//p' "$build/CMakeCache.txt")
[ -n "$blas" ] && [ -e "$blas" ] || blas=$(ldconfig -p | awk '/libopenblas\.so\.0 /{print $NF; exit}')
if [ -n "$blas" ] && [ -e "$blas" ]; then
  cp -L "$blas" "$out/deps/libopenblas.so.0"
  objects+=("$blas")
fi
declare -A seen=()
for obj in "${objects[@]}"; do
  while read -r name path; do
    [ -n "$path" ] && [ -e "$path" ] || continue
    [[ $name =~ $base_re || $name =~ $cuda_re ]] && continue
    case "$(readlink -f "$path")" in "$(readlink -f "$build")"/*) continue ;; esac
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    if [[ $name =~ $compat_re ]]; then cp -L "$path" "$out/compat/$name"; else cp -L "$path" "$out/deps/$name"; fi
  done < <(LD_LIBRARY_PATH="$build/lib" ldd "$obj" 2>/dev/null | awk '/=>/ {print $1, $3}')
done
# The deps of the deps (ldd lists the whole closure, so this is a check rather than a second pass).
for lib in "$out"/deps/*; do
  LD_LIBRARY_PATH="$out/deps" ldd "$lib" | grep -q "not found" && { echo "unresolved dependency in $lib" >&2; exit 1; }
done
chmod -R u+w "$out"
strip --strip-unneeded "$out"/bin/* "$out"/deps/* 2>/dev/null || true
find "$out/lib" -name '*.so*' -type f -exec strip --strip-unneeded {} + 2>/dev/null || true

# ---- Data and models ------------------------------------------------------------------------------------------------
suites="light simple pytorch-operator pytorch-converted"
[ "${TESSERA_BUNDLE_NODE:-0}" = 1 ] && suites="$suites node"
if [ -d "$data_src" ]; then
  for s in $suites; do [ -d "$data_src/$s" ] && cp -a "$data_src/$s" "$out/data/"; done
  cp -a "$data_src"/LICENSE "$out/data/" 2>/dev/null || true
else
  echo "warning: no conformance data at $data_src (set TESSERA_BACKEND_DATA); the light-model tests will skip" >&2
fi
if python3 -c "import onnx, numpy" 2>/dev/null; then
  python3 - "$out/models" <<'PY'
import pathlib, sys
import numpy as np
sys.path.insert(0, "benchmarks")
import onnx
import models
out = pathlib.Path(sys.argv[1])
# A small BERT-style encoder (4 layers, hidden 256, a 1000-token vocabulary) keeps the bundle small.
vocab = 1000
onnx.save(models.bert(7, layers=4, hidden=256, heads=4, ffn=1024, vocab=vocab), str(out / "encoder.onnx"))
rng = np.random.default_rng(7)
feeds = {"input_ids": rng.integers(0, vocab, (1, 128), dtype=np.int64),
         "attention_mask": np.ones((1, 128), np.int64)}
np.savez(out / "encoder_feeds.npz", **feeds)
PY
else
  echo "warning: python3 with onnx and numpy is missing here; the benchmark runs without the encoder model" >&2
fi

# ---- Pack -------------------------------------------------------------------------------------------------------------
git rev-parse HEAD > "$out/COMMIT" 2>/dev/null || true
tar -C .device -czf .device/bundle.tar.gz bundle
size=$(stat -c %s .device/bundle.tar.gz)
echo "bundle: $(du -sh "$out" | cut -f1) in $out, $((size / 1024 / 1024)) MiB packed in .device/bundle.tar.gz"
du -sh "$out"/* | sed 's/^/  /'
if [ "$size" -gt $((limit_mib * 1024 * 1024)) ]; then
  echo "the packed bundle exceeds ${limit_mib} MiB (what a device run may carry)" >&2
  exit 1
fi
echo "next: run scripts/gpu/run_on_device.sh on the GPU machine, carrying .device/bundle.tar.gz"
