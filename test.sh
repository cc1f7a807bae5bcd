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
test_opts=()
if [ "${1:-}" = "--sanitize" ]; then
  shift
  dir=build-sanitize
  opts=(--buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false)
  # Fail on any UBSan finding, not only print it.
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  export ASAN_OPTIONS=detect_leaks=1
  # The timeouts are sized for the release build; ASan + UBSan run the
  # predictor's fits 2x slower (its suite: 49 s release, 107 s sanitized).
  test_opts=(--timeout-multiplier 2)
fi
baton_install_packages clang libclang-rt-14-dev # the codec fuzzer (libFuzzer)
baton_build "$dir" "${opts[@]}"
meson test -C "$dir" --print-errorlogs "${test_opts[@]}" "$@"

# ---- codec: libFuzzer run of the frame decoder (tests/fuzz_codec.c) --------
# Only for a full run (no suite named), only with clang + libFuzzer (Debian:
# clang, libclang-rt-14-dev); skipped with a message otherwise.
# BATON_FUZZ_SECONDS (default 20) sets the time; 0 skips it.
fuzz_s=${BATON_FUZZ_SECONDS:-20}
if [ $# -eq 0 ] && [ "$fuzz_s" -gt 0 ]; then
  if command -v clang >/dev/null &&
    echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' |
    clang -x c -fsanitize=fuzzer - -o "$dir/fuzz_probe" 2>/dev/null; then
    clang -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined \
      -fno-sanitize-recover=undefined -Iinclude -I. tests/fuzz_codec.c src/codec.c \
      src/codec_simd.c src/err.c -lm -o "$dir/fuzz_codec"
    mkdir -p "$dir/fuzz_codec_corpus"
    if "$dir/fuzz_codec" -max_total_time="$fuzz_s" -artifact_prefix="$dir/" \
      "$dir/fuzz_codec_corpus" >"$dir/fuzz_codec.log" 2>&1; then
      echo "codec fuzzer: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$dir/fuzz_codec.log"), no failure"
    else
      tail -40 "$dir/fuzz_codec.log"
      echo "codec fuzzer FAILED: log $dir/fuzz_codec.log, crashing input in $dir/"
      exit 1
    fi
  else
    echo "test.sh: skipping the codec fuzzer: no clang with libFuzzer (apt-get install clang libclang-rt-14-dev)"
  fi
fi
