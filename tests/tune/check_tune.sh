#!/usr/bin/env bash
# symcomm-tune end to end on the host backend: 2 ranks measure 4-256 KB and write a tuning file that already
# holds an entry for 3 ranks (which must be kept); then symcomm-bench on 2 ranks, with SYMCOMM_TUNING_FILE naming
# that file, must select one-shot exactly up to the threshold the file holds. The bench's sizes (4-256 KB, factor
# 2) tell every threshold symcomm-tune can derive from its sizes (0, 8 KB, 32 KB, 128 KB, SIZE_MAX) from the
# default (64 KB), so a communicator that did not load the file fails the check.
# Usage: check_tune.sh SYMCOMM_RUN SYMCOMM_TUNE SYMCOMM_BENCH
set -euo pipefail
run=$1 tune=$2 bench=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
file=$dir/tuning.json
fail() {
  echo "check_tune: $1"
  shift
  for f in "$@"; do echo "--- $f"; cat "$f"; done
  exit 1
}
cat >"$file" <<'JSON'
{"format": "symcomm-tuning", "version": 1, "entries": [
  {"world_size": 3, "device": "host", "tuning": {"host_one_shot_max_bytes": 12345}}]}
JSON
"$run" -n 2 -- "$tune" --backend host --out "$file" --min-bytes 4K --max-bytes 256K --step-factor 4 \
  --warmup 1 --iters 4 --batches 3 >"$dir/tune.out" 2>"$dir/tune.err" || fail "symcomm-tune failed" "$dir/tune.err"
grep -q 'estimated' "$dir/tune.err" || fail "no estimate before the measurements" "$dir/tune.err"
grep -q '\[8/8\]' "$dir/tune.err" || fail "no progress of the 8th measurement" "$dir/tune.err"
threshold=$(sed -n 's/^\[rank 0\]   host_one_shot_max_bytes = \([0-9]*\).*/\1/p' "$dir/tune.out")
[ -n "$threshold" ] || fail "no host_one_shot_max_bytes in the derived table" "$dir/tune.out"
grep -q '"host_one_shot_max_bytes": 12345' "$file" || fail "the entry for 3 ranks was not kept" "$file"
grep -q "\"host_one_shot_max_bytes\": $threshold\$" "$file" || fail "the file lacks the derived $threshold" "$file"
for key in '"world_size": 2' '"device": "host"' '"command"' '"symcomm_version"' '"measurements"'; do
  grep -q "$key" "$file" || fail "the file lacks $key" "$file"
done
SYMCOMM_TUNING_FILE=$file "$run" -n 2 -- "$bench" --backend host -b 4K -e 256K -f 2 -w 1 -n 2 --batches 1 \
  >"$dir/bench.out" 2>&1 || fail "symcomm-bench with the file failed" "$dir/bench.out"
# Rows: "[rank 0]   all_reduce host symcomm <algo> eager float32 sum <bytes> ...".
awk -v t="$threshold" '
  $3 == "all_reduce" && $5 == "symcomm" {
    rows++
    want = ($10 + 0 <= t + 0) ? "one_shot" : "two_shot"
    if ($6 != want) { printf "%s bytes ran %s, the file says %s (threshold %s)\n", $10, $6, want, t; bad++ }
  }
  END { if (rows != 7) { printf "%d all_reduce rows, expected 7\n", rows; bad++ } exit bad > 0 }
' "$dir/bench.out" || fail "the selection does not follow the file" "$dir/bench.out" "$file"
echo "check_tune: threshold $threshold from symcomm-tune, followed by symcomm-bench at 7 sizes"
