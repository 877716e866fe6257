#!/usr/bin/env bash
# Installs dependencies, builds everything and runs the test suite (ctest): unit tests, the multi-process
# host-backend tests, and the GPU tests, which ctest reports as skipped where fewer than 2 GPUs exist.
# Usage: tools/test.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bash tools/install-deps.sh
cmake -G Ninja -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)"
bash tools/lint.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$build" && ctest --output-on-failure --timeout 1800
