#!/usr/bin/env bash
# Builds the host test suite under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer
# (separate build directories, no CUDA) and runs the unit and multi-process tests in each.
set -euo pipefail
cd "$(dirname "$0")/.."
# The presets asan and tsan (CMakePresets.json) hold the flags, the targets and the tests' environment: the soak runs
# 20,000 collectives there, and the tests labelled slow (2^31-element counts, 4 GiB buffers) run in the normal
# build only.
for kind in asan tsan; do
  cmake --preset $kind >/dev/null
  cmake --build --preset $kind -j "$(nproc)"
  echo "== $kind: unit and multi-process tests =="
  ctest --preset $kind
done
