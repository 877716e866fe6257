#!/usr/bin/env bash
# spills.sh: register spills of symcomm's CUDA kernels, as ptxas reports them (no GPU needed). Recompiles each
# kernel file of a configured CUDA build with -Xptxas -v into a scratch object and prints, per file, the kernels
# that spill, largest first. A few bytes are usually the registers saved around the cold error path's calls; tens
# to thousands of bytes in an instance that runs (see NOTE in src/algos/cuda_all_reduce_ll.cu, kLLBatch) are
# register pressure in the hot loop.
#
#   BUILD=build-cuda tools/gpu/spills.sh [file.cu ...]     # default: every src/algos/*.cu
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-cuda}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
MIN=${MIN:-1}  # report spills of at least this many bytes (stores)
files=("$@")
[ ${#files[@]} -gt 0 ] || mapfile -t files < <(cd "$ROOT/src/algos" && ls ./*.cu | sed 's|^\./||')
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$BUILD"
for f in "${files[@]}"; do
  b=$(basename "$f")
  cmd=$(ninja -t commands "src/CMakeFiles/symcomm_obj.dir/algos/$b.o" 2>/dev/null | tail -1)
  if [ -z "$cmd" ]; then
    echo "== $b: not in this build" >&2
    continue
  fi
  cmd=$(echo "$cmd" | sed "s| -o [^ ]*| -o $scratch/k.o|; s|-MD -MT [^ ]* -MF [^ ]*||")
  eval "$cmd -Xptxas -v" >"$scratch/ptxas.txt" 2>&1 || { echo "== $b: compile failed" >&2; cat "$scratch/ptxas.txt" >&2; exit 1; }
  report=$(grep -o "Function properties for [^ ]*\|[0-9]* bytes spill stores, [0-9]* bytes spill loads" "$scratch/ptxas.txt" |
    paste - - | awk -F'\t' -v min="$MIN" '{split($2, a, " "); if (a[1] + 0 >= min) print a[1] "\t" $1}' |
    sed 's/Function properties for //' | sort -rn | c++filt | sed 's/symcomm::detail::cuda:://g; s/(anonymous namespace):://g')
  n=$(echo -n "$report" | grep -c . || true)
  echo "== $b: $n kernel(s) spill >= $MIN bytes"
  [ -z "$report" ] || echo "$report" | awk -F'\t' '{printf "  %6d B  %s\n", $1, $2}'
done
