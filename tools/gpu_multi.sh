#!/usr/bin/env bash
# Runs tools/gpu_check.sh on every GPU of the machine and again on the first two (the 2-rank numbers of
# issue 3 and the N-rank numbers of issue 8 in one batch), then the GPU tests under compute-sanitizer
# (memcheck, racecheck) on two GPUs. Everything lands in $OUT/results.tgz (the device tool returns at most 8
# files) and the summaries are printed last.
#   OUT=/tmp/out JOBS=64 tools/gpu_multi.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RES=/tmp/symcomm-results
rm -rf "$RES" && mkdir -p "$RES"
ngpu=$(nvidia-smi -L | wc -l)
OUT=$RES/w$ngpu NRANKS=$ngpu GPU_CHECK_STEPS="build tests bench" bash "$ROOT/tools/gpu_check.sh" >"$RES/w$ngpu.console" 2>&1
if [ "$ngpu" -gt 2 ]; then
  CUDA_VISIBLE_DEVICES=0,1 OUT=$RES/w2 NRANKS=2 GPU_CHECK_STEPS="tests bench" bash "$ROOT/tools/gpu_check.sh" \
    >"$RES/w2.console" 2>&1
fi
# compute-sanitizer on two GPUs (gpu_check.sh's sanitize step).
CUDA_VISIBLE_DEVICES=0,1 OUT=$RES/san NRANKS=2 GPU_CHECK_STEPS="sanitize" bash "$ROOT/tools/gpu_check.sh" \
  >"$RES/san.console" 2>&1
tar czf "$OUT/results.tgz" -C /tmp symcomm-results
for f in "$RES"/w*/summary.txt; do echo "==== $f"; cat "$f"; done
cat "$RES/san/summary.txt" 2>/dev/null
