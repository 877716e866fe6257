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
# symcomm's own kernels only: NCCL's LL kernels read up to 4 bytes past the end of odd-sized buffers (seen
# 2026-11-22: ncclDevKernel_AllGather_RING_LL on an 8198-byte buffer), and NCCL probes kernels that were not
# built for this GPU; neither is symcomm's to fix.
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    t0=$(date +%s)
    SAN=${SANITIZE_FILTER:-GpuCollectives.AllReduce:GpuCollectives.AllGather:GpuCollectives.Broadcast}
    [ $tool = memcheck ] && SAN="$SAN:GpuGraph.*"
    CUDA_VISIBLE_DEVICES=0,1 timeout 150 compute-sanitizer --tool $tool --target-processes all --error-exitcode 9 \
      --kernel-name-exclude kns=nccl --report-api-errors no \
      "$ROOT/build-gpu/tests/symcomm_gpu_tests" --gtest_filter="$SAN" >"$RES/sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool ($SAN): rc=$? in $(($(date +%s) - t0)) s; $(grep -c "ERROR SUMMARY: 0 errors" "$RES/sanitizer_$tool.log") clean process summaries, $(grep -E "ERROR SUMMARY: [1-9]" "$RES/sanitizer_$tool.log" | head -2)" \
      | tee -a "$RES/sanitizer.txt"
  done
fi
tar czf "$OUT/results.tgz" -C /tmp symcomm-results
for f in "$RES"/w*/summary.txt; do echo "==== $f"; cat "$f"; done
cat "$RES/sanitizer.txt" 2>/dev/null
