#!/usr/bin/env bash
# Installs dependencies, builds everything and runs the whole test suite:
#   1. the host suite under ASan+UBSan and under TSan (tools/sanitize.sh),
#   2. the store fuzzer for 60 s (tools/fuzz.sh),
#   3. lint and a check that every sabotage case still applies to the sources (tools/sabotage.sh), then
#      ctest on the normal build: unit, multi-process (with a 100,000-collective soak), install, and the GPU
#      tests, which ctest reports as skipped where fewer than 2 GPUs exist.
# Usage: tools/test.sh [--quick] [preset]   (--quick: only step 3; preset: a configure, build and test preset of
# CMakePresets.json, default "default" in build/; .ci/run uses "ci", in build-ci/)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
preset=${1:-default}
bash tools/install-deps.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
if [ $quick = 0 ]; then
  bash tools/sanitize.sh
  bash tools/fuzz.sh 60
fi
bash tools/lint.sh
CHECK=1 CASES=all OUT=/tmp/symcomm-sabotage-check bash tools/sabotage.sh >/dev/null ||
  { cat /tmp/symcomm-sabotage-check/sabotage.txt; echo "a sabotage case no longer applies (tools/sabotage.sh)"; exit 1; }
ctest --preset "$preset"
