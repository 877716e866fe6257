#!/usr/bin/env bash
# sweep.sh: runs symcomm-bench once per tuning setting and collects the ratio tables, for choosing a
# Tuning default from measurements (config.h cites the sweep it came from). Needs a build (tools/gpu/check.sh's
# build step). Settings are ';'-separated lists of SYMCOMM_* assignments (an empty one = the defaults):
#
#   OUT=/tmp/sw SWEEP="; SYMCOMM_CUDA_LL_BLOCK_THREADS=128 SYMCOMM_CUDA_LL_MAX_BLOCKS=512" tools/gpu/sweep.sh
#   BENCH_ARGS="--collective all_reduce --min-bytes 4K --max-bytes 1M" ...   (default: all-reduce, 4 KB-1 MB)
#
# Writes $OUT/sweep.txt (one table per setting) and $OUT/sweep_N.json.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
OUT=${OUT:-/tmp/symcomm-sweep}
mkdir -p "$OUT"
ARGS=${BENCH_ARGS:-"--collective all_reduce --min-bytes 4K --max-bytes 1M"}
REPORT=$OUT/sweep.txt
: >"$REPORT"
IFS=';' read -r -a settings <<<"${SWEEP:-}"
[ ${#settings[@]} -gt 0 ] || settings=("")
i=0
for setting in "${settings[@]}"; do
  i=$((i + 1))
  env_args=()
  for kv in $setting; do
    [[ $kv == SYMCOMM_*=* ]] || { echo "gpu_sweep: not a SYMCOMM_ assignment: $kv" >&2; exit 2; }
    env_args+=("$kv")
  done
  t0=$(date +%s)
  # shellcheck disable=SC2086
  env "${env_args[@]}" timeout "${SWEEP_TIMEOUT:-120}" "$BUILD/tools/symcomm-run" -n "${NRANKS:-2}" \
    --timeout "$((${SWEEP_TIMEOUT:-120} - 5))" -- "$BUILD/bench/symcomm-bench" --backend cuda --dtype bf16 --op sum \
    --baseline nccl --mode eager,graph $ARGS --json "$OUT/sweep_$i.json" >"$OUT/sweep_$i.log" 2>&1
  rc=$?
  {
    echo "## setting $i: '${setting# }' (rc=$rc, $(($(date +%s) - t0)) s)"
    sed -n '/# symcomm \/ best NCCL/,$p' "$OUT/sweep_$i.log" | sed 's/^\[rank 0\] //'
  } | tee -a "$REPORT"
done
