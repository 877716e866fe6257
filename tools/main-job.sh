#!/usr/bin/env bash
# symcomm's main job on a machine without GPUs: build, then benchmark the host backend's collectives against
# Open MPI on the same buffers (2 ranks, float32 sum, 4 KB .. 64 MB) and print the table and the ratios.
# Usage: tools/main-job.sh [ranks] [extra symcomm-bench arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}
shift || true
bash tools/install-deps.sh
# The host backend needs no CUDA: a build without it is several minutes shorter on a small machine.
cmake -G Ninja -S . -B build-host -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYMCOMM_WITH_CUDA=OFF >/dev/null
cmake --build build-host -j "$(nproc)" --target symcomm-bench symcomm-run
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mpirun --oversubscribe -np "$ranks" build-host/bench/symcomm-bench --backend host --baseline mpi \
  -c all_reduce -b 4K -e 64M -f 4 --json build-host/bench-host.jsonl "$@"
echo "JSON lines written to build-host/bench-host.jsonl"
