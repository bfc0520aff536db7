#!/usr/bin/env bash
# The stable ABI exports C names only: libtessera exports tess_* functions, plugins only their entry symbol.
set -euo pipefail
status=0
for lib in "$@"; do
  cxx=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWDBRVu]$/ && $3 ~ /^_Z/ {print $3}')
  if [ -n "$cxx" ]; then
    echo "FAIL $lib exports C++ symbols:"; echo "$cxx" | head -20; status=1
  fi
  case "$(basename "$lib")" in
    libtessera.so*) other=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWDBRV]$/ && $3 !~ /^tess_/ {print $3}') ;;
    *) other=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWDBRV]$/ && $3 != "tess_plugin_entry" {print $3}') ;;
  esac
  if [ -n "$other" ]; then
    echo "FAIL $lib exports unexpected symbols:"; echo "$other" | head -20; status=1
  fi
  [ $status -eq 0 ] && echo "ok   $lib"
done
exit $status
