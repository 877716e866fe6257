#!/usr/bin/env bash
# Builds the store's libFuzzer target with clang (ASan + UBSan + coverage) and runs it for a fixed time.
# Usage: tools/fuzz.sh [seconds] (default 60). A crash, leak or abort fails the run (exit non-zero).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
cmake --preset fuzz >/dev/null  # CMakePresets.json: clang, ASan + UBSan + coverage, the fuzzer only
cmake --build --preset fuzz -j "$(nproc)"
mkdir -p build-fuzz/corpus
SYMCOMM_LOG=error UBSAN_OPTIONS=halt_on_error=1 build-fuzz/tests/symcomm_store_fuzz -max_total_time="$seconds" -max_len=4096 \
  -print_final_stats=1 build-fuzz/corpus
