#!/usr/bin/env bash
# Runs tools/gpu/check.sh on every GPU of the machine and again on the first two (the 2-rank numbers of
# the speed targets and the N-rank numbers in one batch), then the GPU tests under compute-sanitizer
# (memcheck, racecheck) on two GPUs. Everything lands in $OUT/results.tgz (the device tool returns at most 8
# files), re-packed after every phase so that a run stopped by the device's time limit still returns what
# it finished; the summaries are printed last.
#   OUT=/tmp/out JOBS=64 tools/gpu/multi.sh
#   MULTI_STEPS="build tests cebench contention fused group bucket" W2_STEPS="" SANITIZE=0 tools/gpu/multi.sh
# MULTI_STEPS: check.sh steps on all GPUs (default "build tests bench cebench fused"); W2_STEPS: steps on
# GPUs 0 and 1 when there are more (default "tests bench"; empty skips); SANITIZE=0 skips compute-sanitizer.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RES=/tmp/symcomm-results
OUT=${OUT:-$ROOT/gpu-multi-out}
mkdir -p "$OUT"
rm -rf "$RES" && mkdir -p "$RES"
pack() { tar czf "$OUT/results.tgz" -C /tmp symcomm-results; }
ngpu=$(nvidia-smi -L | wc -l)
OUT=$RES/w$ngpu NRANKS=$ngpu GPU_CHECK_STEPS="${MULTI_STEPS:-build tests bench cebench fused}" \
  bash "$ROOT/tools/gpu/check.sh" >"$RES/w$ngpu.console" 2>&1
pack
w2=${W2_STEPS-tests bench}
if [ "$ngpu" -gt 2 ] && [ -n "$w2" ]; then
  CUDA_VISIBLE_DEVICES=0,1 OUT=$RES/w2 NRANKS=2 GPU_CHECK_STEPS="$w2" bash "$ROOT/tools/gpu/check.sh" \
    >"$RES/w2.console" 2>&1
  pack
fi
if [ "${SANITIZE:-1}" != 0 ]; then
  CUDA_VISIBLE_DEVICES=0,1 OUT=$RES/san NRANKS=2 GPU_CHECK_STEPS="sanitize" bash "$ROOT/tools/gpu/check.sh" \
    >"$RES/san.console" 2>&1
  pack
fi
for f in "$RES"/w*/summary.txt; do echo "==== $f"; cat "$f"; done
cat "$RES/san/summary.txt" 2>/dev/null
