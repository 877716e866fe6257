#!/usr/bin/env bash
# check_layers.sh: src/ is built in layers, and a folder includes only its own files, the public headers
# (include/symcomm) and folders of lower layers. tools/lint.sh runs it; tests/layers/check_layers_test.sh shows
# that it fails on a planted violation.
#
#   tools/check_layers.sh [ROOT]    # ROOT: a source tree (default: this repository)
#
# Layers, bottom to top (docs/contributing.md draws them):
#   0 base            errors, checks, logging, hashing, deadlines, driver entry points, dtype tables
#   1 bootstrap       store, rendezvous, peer mesh
#   1 memory          the heap allocator
#   2 algos           one algorithm per file (CUDA kernels, host reductions), the selector, requests, plans
#   3 backends        the Backend interface and the context a communicator shares with its backend
#   4 backends/host   the host (shared-memory) backend
#   4 backends/cuda   the CUDA backend (cuMem heap, topology, copy engine, launches, groups)
#   5 core            Communicator, configuration, tuning, bucketer
#   6 fused           fused GEMM + collective operations
#   7 multinode       communicators that span nodes (symcomm inside a node, MPI or NCCL between nodes)
#   8 nccl_shim       the NCCL drop-in library (its native layer uses multinode, core and base)
# Folders of one layer (bootstrap and memory; backends/host and backends/cuda) do not include each other.
# Every folder under src/ that holds sources must be in this table.
#
# Prints "file:line: what" per finding. Exit status: 0 clean, 1 findings.
set -uo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT/src" || exit 1

find . -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cc.in' \) | sed 's#^\./##' |
  LC_ALL=C sort | xargs awk '
  BEGIN {
    n = split("base:0 bootstrap:1 memory:1 algos:2 backends:3 backends/host:4 backends/cuda:4 core:5 fused:6 multinode:7 nccl_shim:8", pairs, " ")
    for (i = 1; i <= n; i++) { split(pairs[i], kv, ":"); rank[kv[1]] = kv[2] }
    bad = 0
  }
  # The layer folder of a path below src/ ("backends/cuda/x.h" -> backends/cuda, "backends/x.h" -> backends).
  function folder(path,    parts, k) {
    k = split(path, parts, "/")
    if (parts[1] == "backends" && k >= 3) return parts[1] "/" parts[2]
    return k >= 2 ? parts[1] : ""
  }
  FNR == 1 {
    own = folder(FILENAME)
    if (!(own in rank)) { printf "  src/%s: folder \"%s\" is not in the layer table\n", FILENAME, own; bad = 1; nextfile }
  }
  /^[ \t]*#[ \t]*include[ \t]*"/ {
    inc = $0
    sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
    if (inc !~ /\//) next                      # a file of the same folder, by its bare name
    if (inc ~ /^symcomm\//) next               # the public headers
    target = folder(inc)
    if (!(target in rank)) next                # not a folder of src/ (a system or third-party path)
    if (target == own) next
    if (rank[target] < rank[own]) next
    printf "  src/%s:%d: %s (layer %d) includes %s (layer %d)\n", FILENAME, FNR, own, rank[own], inc, rank[target]
    bad = 1
  }
  END { exit bad }
' && exit 0
echo "check_layers: a folder of src/ includes one of its own layer or above (tools/check_layers.sh lists the layers)" >&2
exit 1
