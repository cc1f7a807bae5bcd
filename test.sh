#!/usr/bin/env bash
# Installs what is missing, builds baton, and runs every test with meson.
#   ./test.sh              release build in build/
#   ./test.sh --sanitize   ASan + UBSan build in build-sanitize/
# Further arguments go to `meson test` (e.g. a suite name).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/common.sh
dir=build
opts=(--buildtype=release)
if [ "${1:-}" = "--sanitize" ]; then
  shift
  dir=build-sanitize
  opts=(--buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false)
  # Fail on any UBSan finding, not only print it.
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  export ASAN_OPTIONS=detect_leaks=1
fi
baton_install_packages
baton_build "$dir" "${opts[@]}"
meson test -C "$dir" --print-errorlogs "$@"
