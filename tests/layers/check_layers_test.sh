#!/usr/bin/env bash
# tools/check_layers.sh passes on this repository's src/ and fails on a copy of it with one planted violation
# each: a lower layer including a higher one, two folders of one layer including each other, and a folder
# that is not in the layer table.
#   tests/layers/check_layers_test.sh [REPO]
set -uo pipefail
REPO=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
CHECK=$REPO/tools/check_layers.sh
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail=0

if ! bash "$CHECK" "$REPO" >"$WORK/real.log" 2>&1; then
  echo "FAIL: the repository's src/ has layer violations:"; cat "$WORK/real.log"; fail=1
fi

# Copies src/ to $WORK/<name>/src, applies "$2" there (a shell command), and expects the check to fail
# naming the file $3.
planted() {
  local name=$1 plant=$2 file=$3 tree=$WORK/$1
  mkdir -p "$tree" && cp -r "$REPO/src" "$tree/src"
  if ! bash "$CHECK" "$tree" >/dev/null 2>&1; then echo "FAIL: $name: the copy failed before planting"; fail=1; return; fi
  (cd "$tree/src" && eval "$plant")
  if bash "$CHECK" "$tree" >"$tree.log" 2>&1; then
    echo "FAIL: $name: planted violation not reported"; fail=1
  elif ! grep -q "src/$file" "$tree.log"; then
    echo "FAIL: $name: the report does not name src/$file:"; cat "$tree.log"; fail=1
  else
    echo "ok: $name: $(grep -m1 "src/$file" "$tree.log" | sed 's/^ *//')"
  fi
}
planted upward 'echo "#include \"core/comm_core.h\"" >>base/hash.h' base/hash.h
planted sibling 'echo "#include \"memory/heap_allocator.h\"" >>bootstrap/peer_mesh.cc' bootstrap/peer_mesh.cc
planted backend-to-backend 'echo "#include \"backends/cuda/cuda_backend_cuda.h\"" >>backends/host/host_engine.h' \
  backends/host/host_engine.h
planted unknown-folder 'mkdir extra && echo "int x;" >extra/x.cc' extra/x.cc

[ "$fail" -eq 0 ] && echo "check_layers_test: ok"
exit "$fail"
