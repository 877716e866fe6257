#!/usr/bin/env bash
# Builds the host test suite under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer
# (separate build directories, no CUDA) and runs the unit and multi-process tests in each.
# The soak test runs a shorter sequence under the sanitizers (SYMCOMM_SOAK_OPS, default here 20000).
set -euo pipefail
cd "$(dirname "$0")/.."
export SYMCOMM_SOAK_OPS=${SYMCOMM_SOAK_OPS:-20000}
# The 2^31-element test moves 4 GiB; it runs in the normal build only.
export GTEST_FILTER=-LargeCounts.*
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 TSAN_OPTIONS=halt_on_error=1:atexit_sleep_ms=0
for kind in asan tsan; do
  case $kind in
    asan) flags=address,undefined ;;
    tsan) flags=thread ;;
  esac
  dir=build-$kind
  cmake -G Ninja -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DSYMCOMM_WITH_CUDA=OFF -DSYMCOMM_BUILD_BENCH=OFF \
    -DSYMCOMM_SANITIZE=$flags >/dev/null
  cmake --build "$dir" -j "$(nproc)" --target symcomm_unit_tests symcomm_rank_tests symcomm-run
  echo "== $kind: unit and multi-process tests =="
  (cd "$dir" && ctest --output-on-failure --timeout 1800 -R '^(unit|ranks)$')
done
