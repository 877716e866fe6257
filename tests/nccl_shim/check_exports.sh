#!/usr/bin/env bash
# check_exports.sh DROP_IN REAL_NCCL: libsymcomm_nccl (DROP_IN) exports every nccl*/pnccl* name that the real
# libnccl.so.2 (REAL_NCCL) exports and nothing else, its SONAME is libnccl.so.2, and it needs neither libnccl
# nor the CUDA runtime. The comparison is also run once on the drop-in library's list with a name taken out,
# which it must report: a check that cannot fail would pass anything.
# Exit status: 0 all hold, 1 a difference (listed), 2 usage or tool error.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 DROP_IN REAL_NCCL" >&2
  exit 2
fi
drop_in=$1 real=$2
for tool in nm readelf comm; do
  command -v $tool >/dev/null || { echo "check_exports: $tool not found" >&2; exit 2; }
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The names of the defined dynamic symbols of $1, sorted.
exports() { nm -D --defined-only "$1" | awk 'NF == 3 { print $3 }' | sort -u; }

exports "$drop_in" >"$scratch/drop_in" || exit 2
exports "$real" | grep -E '^p?nccl' >"$scratch/real" || exit 2
if [ ! -s "$scratch/real" ]; then
  echo "check_exports: $real exports no nccl* name" >&2
  exit 2
fi

# Compares a list of the drop-in library's exports ($1) with the real library's; prints what differs.
compare() {
  local missing extra
  missing=$(comm -13 "$1" "$scratch/real")
  extra=$(comm -23 "$1" "$scratch/real")
  [ -z "$missing" ] || printf 'exported by %s, not by the drop-in library:\n%s\n' "$real" "$missing"
  [ -z "$extra" ] || printf 'exported by the drop-in library, not by %s:\n%s\n' "$real" "$extra"
  [ -z "$missing$extra" ]
}

status=0
if ! compare "$scratch/drop_in"; then status=1; fi

# The comparison itself must see a missing name: the list without its first line.
tail -n +2 "$scratch/drop_in" >"$scratch/planted"
if compare "$scratch/planted" >/dev/null; then
  echo "check_exports: the comparison did not see $(head -n 1 "$scratch/drop_in") taken out of the list"
  status=1
fi

dynamic=$(readelf -d "$drop_in") || exit 2
if ! grep -q 'Library soname: \[libnccl\.so\.2\]' <<<"$dynamic"; then
  echo "the drop-in library's SONAME is not libnccl.so.2:"
  grep SONAME <<<"$dynamic"
  status=1
fi
if grep -E 'NEEDED.*\[lib(nccl|cudart)' <<<"$dynamic"; then
  echo "the drop-in library needs the libraries above: it must open the real NCCL itself and need no CUDA runtime"
  status=1
fi

echo "check_exports: $(wc -l <"$scratch/drop_in") names exported by the drop-in library," \
  "$(wc -l <"$scratch/real") nccl* names by $real"
exit $status
