#!/usr/bin/env bash
# The installed SDK, end to end: `cmake --install` lays out the tree, the tree still works after it is moved, an
# out-of-tree provider (out_of_tree_provider/: find_package(Tessera) and one C++17 file on the installed support
# layer) builds against it, and the installed `tessera` loads that provider from TESSERA_PLUGIN_PATH and runs a model
# on it.  pkg-config serves a consumer program as well.
# Usage: test_sdk.sh BUILD_DIR CMAKE_COMMAND BACKEND_DATA_DIR
set -uo pipefail
build=$1; cmake=$2; data=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
failures=0; passed=0
check() {  # check NAME COMMAND... : the command must succeed
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failures=$((failures + 1)); echo "FAIL $name"; fi
}

"$cmake" --install "$build" --prefix "$work/stage" > "$work/install.log" 2>&1
check "cmake --install succeeds" test $? -eq 0
for f in bin/tessera lib/libtessera.so include/tessera/tessera.h include/tessera/provider.h \
         include/tessera/custom_op.h include/tessera/common.h include/tessera/tessera.hpp include/tessera/version.h \
         include/tessera/plugin_support.hpp include/tessera/support/plugin_entry.hpp include/tessera/support/tensor.hpp \
         lib/tessera/plugins/libtessera_cpu.so lib/cmake/Tessera/TesseraConfig.cmake \
         lib/cmake/Tessera/TesseraConfigVersion.cmake lib/cmake/Tessera/TesseraTargets.cmake \
         lib/cmake/Tessera/tessera-plugin.map lib/pkgconfig/tessera.pc; do
  check "installed $f" test -e "$work/stage/$f"
done

# Relocatable: everything below refers to the moved tree only.
mv "$work/stage" "$work/sdk"
sdk="$work/sdk"

"$cmake" -S "$here/out_of_tree_provider" -B "$work/oot" -DCMAKE_PREFIX_PATH="$sdk" -DCMAKE_BUILD_TYPE=Release \
  > "$work/configure.log" 2>&1
check "out-of-tree provider configures with find_package(Tessera)" test $? -eq 0
check "find_package used the moved SDK" grep -q "^Tessera_DIR:PATH=$sdk/lib/cmake/Tessera$" "$work/oot/CMakeCache.txt"
"$cmake" --build "$work/oot" > "$work/build.log" 2>&1
check "out-of-tree provider builds" test $? -eq 0
[ $failures -eq 0 ] || { cat "$work/configure.log" "$work/build.log"; }
plugin_dir="$work/oot/lib/tessera/plugins"
check "the plugin exports its entry symbol only" \
  sh -c "test \"\$(nm -D --defined-only '$plugin_dir/libhello_relu.so' | awk '\$2 ~ /^[TWDBRV]\$/ {print \$3}')\" = tess_plugin_entry"

TESSERA_PLUGIN_PATH="$plugin_dir" "$sdk/bin/tessera" plugins --json > "$work/plugins.json" 2>&1
check "installed 'tessera plugins' reports the provider loaded" python3 -c "
import json, sys
r = json.load(open('$work/plugins.json'))
ok = any(p['name'] == 'hello-relu' and p['state'] == 'loaded' and p['providers'] == ['hello'] for p in r['plugins'])
ok = ok and any(p['name'] == 'tessera-cpu' and p['path'].startswith('$sdk/') for p in r['plugins'])
sys.exit(0 if ok and 'hello' in r['providers'] else 1)"

case_dir="$data/simple/test_single_relu_model"
if [ -d "$case_dir" ]; then
  TESSERA_PLUGIN_PATH="$plugin_dir" "$sdk/bin/tessera" run "$case_dir/model.onnx" --inputs "$case_dir/test_data_set_0" \
    --providers hello --strict > "$work/run.txt" 2>&1
  check "installed 'tessera run' runs the model on the provider" grep -Eq '^  \[0\] hello +1 node: Relu' "$work/run.txt"
fi

# pkg-config: a consumer program compiles and links against the moved tree.
cat > "$work/consumer.c" <<'C'
#include <stdio.h>
#include <string.h>
#include "tessera/tessera.h"
int main(void) {
    TessEnv* env = NULL;
    TessStatus* status = tess_env_create(NULL, &env);
    if (status != NULL) { fprintf(stderr, "%s\n", tess_status_message(status)); return 1; }
    printf("tessera %s, %zu providers\n", tess_version(), tess_env_provider_count(env));
    tess_env_release(env);
    return strcmp(tess_version(), TESSERA_EXPECTED_VERSION) == 0 ? 0 : 1;
}
C
export PKG_CONFIG_PATH="$sdk/lib/pkgconfig"
version=$(pkg-config --modversion tessera)
# No rpath of its own: the .pc file's Libs carry it.
cc -std=c99 -Wall -Werror -DTESSERA_EXPECTED_VERSION="\"$version\"" "$work/consumer.c" -o "$work/consumer" \
  $(pkg-config --cflags --libs tessera) > "$work/cc.log" 2>&1
check "pkg-config builds a consumer" test $? -eq 0
check "the consumer runs against the installed library and its plugins" \
  sh -c "env -u TESSERA_PLUGIN_PATH '$work/consumer' | grep -q \"^tessera $version, [1-9]\""

# The build tree's own .pc file serves the same consumer without installing.
export PKG_CONFIG_PATH="$build/lib/pkgconfig"
cc -std=c99 -Wall -Werror -DTESSERA_EXPECTED_VERSION="\"$version\"" "$work/consumer.c" -o "$work/consumer_build" \
  $(pkg-config --cflags --libs tessera) > "$work/cc_build.log" 2>&1
check "the build tree's pkg-config file builds a consumer" test $? -eq 0
check "that consumer runs against the build tree" \
  sh -c "env -u TESSERA_PLUGIN_PATH '$work/consumer_build' | grep -q \"^tessera $version, [1-9]\""

echo "$passed passed, $failures failed"
[ $failures -eq 0 ]
