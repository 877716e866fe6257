#!/usr/bin/env bash
# check.sh: the one command for the GPU machine. Configures and builds with Ninja (build-gpu), runs the
# GPU tests, runs symcomm-bench on the CUDA backend under symcomm-run, writes logs and JSON under $OUT
# (at most 8 files, flat) and prints a short summary table last.
#
#   OUT=/tmp/out tools/gpu/check.sh            # everything
#   GPU_CHECK_STEPS="build tests" tools/gpu/check.sh
#   BENCH_ARGS="--max-bytes 64M" tools/gpu/check.sh
#   GPU_CHECK_STEPS="build tests bench cebench contention fused group bucket sanitize sabotage" tools/gpu/check.sh
#   (everything; sabotage rebuilds parts of the tree several times)
#   GPU_CHECK_STEPS="build lifecycle" LIFECYCLE_CYCLES=1000 tools/gpu/check.sh   (the full 1000 cycles)
#   GPU_CHECK_STEPS="build shared" tools/gpu/check.sh   (the suite at 2 ranks sharing one GPU, where one is lent)
#   GPU_CHECK_STEPS="build python" tools/gpu/check.sh   (symcomm.torch on CUDA against NCCL, and its benchmark)
#   GPU_CHECK_STEPS="build python apps" tools/gpu/check.sh   (and torch's FSDP2, DTensor, TP, DCP on both backends)
#   GPU_CHECK_STEPS="build multinode" tools/gpu/check.sh   (flat against hierarchical CUDA paths on 2 fake nodes)
#   GPU_CHECK_STEPS="build dropin" tools/gpu/check.sh   (the NCCL drop-in against the real NCCL, also over fake nodes)
#
#   BUILD=build-cuda GPU_CHECK_STEPS=pack tools/gpu/check.sh   (here, on the CPU machine: see "prebuilt" below)
#
# Prebuilt binaries: the `pack` step (no GPU needed) builds the GPU tests, symcomm-bench and symcomm-run in
# $BUILD and writes them with a stamp of the sources to .gpu-prebuilt.tgz (~45 MB; carry it to the machine).
# PACK=dropin packs the GPU tests, the NCCL drop-in library and its conformance program instead of the
# benchmarks (~47 MB), for the `shared` and `dropin` steps.
# There, a run without the `build` step unpacks it into $BUILD when the stamp matches the sources it was sent
# with, which saves the ~2 minutes of device time the build takes; a stale archive is ignored and the tree is
# built. The sabotage step still needs a `build` (it rebuilds parts of the tree).
#
# Missing headers (fmt, gtest, CLI11, nlohmann-json) are taken from Debian packages in .debs/ (carried to the
# machine; see tests/README.md), unpacked into /tmp/symcomm-deps.
set -uo pipefail

# NVLink multicast (NVLS) must stay off for every program started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
BUILD=${BUILD:-$ROOT/build-gpu}
STEPS=${GPU_CHECK_STEPS:-"build tests bench"}
JOBS=${JOBS:-16}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1
  nvidia-smi topo -m 2>&1
  nvcc --version 2>&1 | tail -2
  cmake --version | head -1
  ninja --version
  for d in /usr/include/fmt /usr/include/gtest /usr/include/CLI /usr/include/nlohmann; do
    [ -e "$d" ] && echo "have $d" || echo "missing $d"
  done
  ls /usr/local/cuda/lib64 2>/dev/null | grep -i nccl
} >"$OUT/env.txt" 2>&1

PREFIX_ARGS=()
if [ ! -e /usr/include/fmt/format.h ] || [ ! -e /usr/include/gtest/gtest.h ] || [ ! -e /usr/include/CLI/CLI.hpp ]; then
  if ls "$ROOT"/.debs/*.deb >/dev/null 2>&1; then
    DEPS=/tmp/symcomm-deps
    mkdir -p "$DEPS"
    for f in "$ROOT"/.debs/*.deb; do dpkg -x "$f" "$DEPS"; done
    # gtest ships as sources (googletest) plus headers: build it into the prefix once.
    if [ -d "$DEPS/usr/src/googletest" ] && [ ! -e "$DEPS/usr/lib/libgtest.a" ]; then
      cmake -G Ninja -S "$DEPS/usr/src/googletest" -B /tmp/gtest-build -DCMAKE_INSTALL_PREFIX="$DEPS/usr" \
        -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/tmp/gtest-build.log 2>&1 &&
        ninja -C /tmp/gtest-build install >>/tmp/gtest-build.log 2>&1 || echo "gtest build failed" >>"$OUT/env.txt"
    fi
    PREFIX_ARGS=(-DCMAKE_PREFIX_PATH="$DEPS/usr")
    export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
    echo "dependencies from .debs unpacked into $DEPS" >>"$OUT/env.txt"
  fi
fi

# What the prebuilt archive is checked against: every source the three binaries are built from.
source_stamp() {
  # LC_ALL=C: a machine with another locale sorts the paths differently, and its stamp would never match.
  (cd "$ROOT" && find CMakeLists.txt cmake include src tests bench tools -type f ! -name '.*' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}
PREBUILT=$ROOT/.gpu-prebuilt.tgz
if [ "${PACK:-}" = dropin ]; then
  PREBUILT_BINS=(tests/symcomm_gpu_tests src/nccl_shim/libsymcomm_nccl.so tests/nccl_shim/symcomm_nccl_conformance
    tools/symcomm-run)
else
  PREBUILT_BINS=(tests/symcomm_gpu_tests bench/symcomm-bench bench/symcomm-targets tools/symcomm-run)
fi

# The one build configuration (the `build` and `pack` steps); its output goes to the log named.
configure() {
  cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DSYMCOMM_WITH_MPI=OFF -DPython3_EXECUTABLE="$(command -v python3)" "${PREFIX_ARGS[@]}" >"$1" 2>&1
}

if has pack; then
  # The stamp is taken before the build: sources edited while it runs make the archive stale, not mislabelled.
  if stamp=$(source_stamp) && configure "$OUT/pack.log" &&
    ninja -C "$BUILD" -j"$JOBS" "${PREBUILT_BINS[@]}" >>"$OUT/pack.log" 2>&1 &&
    echo "$stamp" >"$BUILD/prebuilt.stamp" &&
    tar -czf "$PREBUILT" -C "$BUILD" "${PREBUILT_BINS[@]}" prebuilt.stamp; then
    note "pack: $PREBUILT ($(du -h "$PREBUILT" | cut -f1), stamp $(cat "$BUILD/prebuilt.stamp"))"
  else
    note "pack FAILED (log: pack.log)"
    exit 1
  fi
fi

BUILD_OK=1
if ! has build && ! has pack && [ -e "$PREBUILT" ]; then
  want=$(source_stamp)
  got=$(tar -xzOf "$PREBUILT" prebuilt.stamp 2>/dev/null)
  if [ "$want" = "$got" ]; then
    mkdir -p "$BUILD" && tar -xzf "$PREBUILT" -C "$BUILD" && note "prebuilt binaries unpacked into $BUILD (stamp $got)"
  else
    note "prebuilt archive stale (stamp ${got:-none}, sources $want): building instead"
    STEPS="build $STEPS"
  fi
fi
if has build; then
  t0=$(date +%s)
  configure "$OUT/build.log" &&
    ninja -C "$BUILD" -j"$JOBS" -k 0 >>"$OUT/build.log" 2>&1 || BUILD_OK=0
  note "build: $([ $BUILD_OK = 1 ] && echo ok || echo FAILED) in $(($(date +%s) - t0)) s (log: build.log)"
  [ $BUILD_OK = 1 ] || grep -E "error|FAILED" "$OUT/build.log" | head -20
fi

# Ends the rank processes a timed-out test binary left behind (forks of it: their command lines start with its
# path). Anchored, so that no other process whose command line merely names the binary (the shell that started this
# script) is ended with them.
end_ranks() { pkill -9 -f "^$1( |\$)" 2>/dev/null; }

# The GPU suite in gtest shards (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX: every test in exactly one shard), so
# that each shard ends well inside one device call. SHARDS: how many (default by world size: the whole suite
# takes ~950 s at 2 ranks on 2 x H100, most of it GpuKernelFaults and GpuLifecycle, and grows with the ranks);
# SHARD_LIST: which of them this call runs (default all), each under SHARD_TIMEOUT seconds (default 420). Every
# shard's output goes to gpu_tests.log, one line per shard to the summary, and the summary names the shards
# not run, with the command line that runs them.
#   GPU_CHECK_STEPS=tests SHARDS=8 SHARD_LIST="0 1" tools/gpu/check.sh
default_shards() {
  local w=$1
  if [ "$w" -le 4 ]; then echo 8; else echo 16; fi
}
if has tests && [ -x "$BUILD/tests/symcomm_gpu_tests" ]; then
  world=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ -n "${SYMCOMM_TEST_WORLD:-}" ] && world=$SYMCOMM_TEST_WORLD
  shards=${SHARDS:-$(default_shards "$world")}
  list=${SHARD_LIST:-$(seq -s ' ' 0 $((shards - 1)))}
  : >"$OUT/gpu_tests.log"
  ran=()
  for i in $list; do
    t0=$(date +%s)
    echo "==== shard $i of $shards (world $world) ====" >>"$OUT/gpu_tests.log"
    # shellcheck disable=SC2086
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${SHARD_TIMEOUT:-420}" \
      "$BUILD/tests/symcomm_gpu_tests" ${GTEST_ARGS:-} >"$OUT/gpu_tests.shard" 2>&1
    rc=$?
    cat "$OUT/gpu_tests.shard" >>"$OUT/gpu_tests.log"
    end_ranks "$BUILD/tests/symcomm_gpu_tests"
    ok=$(grep -c '^\[       OK' "$OUT/gpu_tests.shard")
    failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/gpu_tests.shard" | grep -vc ' tests\?, listed below')
    skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$OUT/gpu_tests.shard")
    note "gpu tests shard $i/$shards (world $world): rc=$rc in $(($(date +%s) - t0)) s: $ok passed, $failed failed," \
      "$skipped skipped$([ $rc = 124 ] && echo ', CUT BY THE TIME LIMIT')"
    grep -E '^\[  FAILED  \] [A-Za-z].*\(' "$OUT/gpu_tests.shard" | tee -a "$SUMMARY"
    ran+=("$i")
  done
  rm -f "$OUT/gpu_tests.shard"
  left=()
  for i in $(seq 0 $((shards - 1))); do [[ " ${ran[*]} " == *" $i "* ]] || left+=("$i"); done
  if [ ${#left[@]} -gt 0 ]; then
    note "gpu tests: shards left to run at world $world: ${left[*]} (GPU_CHECK_STEPS=tests SHARDS=$shards SHARD_LIST=\"${left[*]}\")"
  else
    note "gpu tests: all $shards shards run at world $world"
  fi
fi

# The suite with SHARED_WORLD ranks sharing the GPUs (SYMCOMM_SHARED_GPU=1; tests/README.md): every
# kernel's protocol and fault path at 2, 4 or 8 ranks where only one GPU is lent (no NCCL, no NVLink, no
# speed). SHARED_WORLD is a list (default "2"), run in order with SHARED_TIMEOUT seconds each. Contexts on one
# GPU time-slice, so a collective costs about a time slice per rank: the suite takes ~10 minutes at 2 ranks
# (`GpuKernelFaults` alone ~260 s; more than one device call allows: split it with GTEST_TOTAL_SHARDS=2 and
# GTEST_SHARD_INDEX=0 or 1 in the environment), and the collective matrix alone ~10 minutes at 4 and ~20 at 8;
# pick tests with GTEST_ARGS="--gtest_filter=...".
if has shared && [ -x "$BUILD/tests/symcomm_gpu_tests" ]; then
  for world in ${SHARED_WORLD:-2}; do
    t0=$(date +%s)
    # shellcheck disable=SC2086
    SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=$world SYMCOMM_TEST_TIMEOUT_SCALE=${SHARED_TIMEOUT_SCALE:-20} \
      timeout "${SHARED_TIMEOUT:-540}" "$BUILD/tests/symcomm_gpu_tests" ${GTEST_ARGS:-} \
      >"$OUT/gpu_shared$world.log" 2>&1
    note "gpu tests, $world ranks sharing the GPUs: rc=$? in $(($(date +%s) - t0)) s (log: gpu_shared$world.log)"
    end_ranks "$BUILD/tests/symcomm_gpu_tests"
    grep -E "^\[       OK|^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \]" "$OUT/gpu_shared$world.log" |
      tee -a "$SUMMARY"
  done
fi

# symcomm.torch and symcomm._core on CUDA tensors (tests/python/test_torch_cuda.py, against torch's NCCL), then
# bench/torch_backend_bench.py (host overhead over _core, eager and graph against NCCL, fused all-gather +
# matmul, the host time of each piece of a 4 KiB call), on PY_WORLD ranks (default: one per GPU, at most 2).
# Builds the module for the python3 that holds torch (the `build` step's configuration).
if has python && [ $BUILD_OK = 1 ]; then
  t0=$(date +%s)
  [ -e "$BUILD/build.ninja" ] || configure "$OUT/python_build.log"
  if ninja -C "$BUILD" -j"$JOBS" _core symcomm-run >>"$OUT/python_build.log" 2>&1; then
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    pw=${PY_WORLD:-$((ngpu < 2 ? ngpu : 2))}
    export PYTHONPATH=$BUILD/python:$ROOT/python
    timeout "${PY_TEST_TIMEOUT:-360}" "$BUILD/tools/symcomm-run" -n "$pw" --timeout "$((${PY_TEST_TIMEOUT:-360} - 10))" \
      -- python3 -m pytest -q -rs -p no:cacheprovider "$ROOT/tests/python/test_torch_cuda.py" \
      >"$OUT/python_cuda.log" 2>&1
    note "python CUDA tests ($pw ranks): rc=$? in $(($(date +%s) - t0)) s (log: python_cuda.log)"
    grep -E "^(FAILED|ERROR|SKIPPED)|[0-9]+ (passed|failed|skipped)" "$OUT/python_cuda.log" | sort -u | head -40 |
      tee -a "$SUMMARY"
    # PY_FAKE_NODE_SIZE=n: the same tests again with the group spanning fake nodes of n ranks (CUDA tensors on
    # symcomm inside each node and NCCL between the nodes; needs a GPU per rank).
    if [ -n "${PY_FAKE_NODE_SIZE:-}" ]; then
      t0=$(date +%s)
      SYMCOMM_FAKE_NODE_SIZE=$PY_FAKE_NODE_SIZE timeout "${PY_TEST_TIMEOUT:-360}" "$BUILD/tools/symcomm-run" -n "$pw" \
        --timeout "$((${PY_TEST_TIMEOUT:-360} - 10))" -- python3 -m pytest -q -rs -p no:cacheprovider \
        "$ROOT/tests/python/test_torch_cuda.py" >"$OUT/python_cuda_nodes.log" 2>&1
      note "python CUDA tests, fake nodes of $PY_FAKE_NODE_SIZE ($pw ranks): rc=$? in $(($(date +%s) - t0)) s" \
        "(log: python_cuda_nodes.log)"
      grep -E "^(FAILED|ERROR|SKIPPED)|[0-9]+ (passed|failed|skipped)" "$OUT/python_cuda_nodes.log" | sort -u |
        head -40 | tee -a "$SUMMARY"
    fi
    t0=$(date +%s)
    # shellcheck disable=SC2086
    timeout 240 "$BUILD/tools/symcomm-run" -n "$pw" --timeout 230 -- python3 "$ROOT/bench/torch_backend_bench.py" \
      --breakdown ${TORCH_BENCH_ARGS:-} --json "$OUT/torch_bench.json" >"$OUT/torch_bench.log" 2>&1
    note "torch bench ($pw ranks): rc=$? in $(($(date +%s) - t0)) s (log: torch_bench.log)"
    sed -n '/^\[rank 0\] what /,/^\[rank 0\] \[{/p' "$OUT/torch_bench.log" | grep -v '^\[rank 0\] \[{' |
      sed 's/^\[rank 0\] //' | tee -a "$SUMMARY"
  else
    note "python: build of _core FAILED (log: python_build.log)"
    tail -20 "$OUT/python_build.log"
  fi
fi

# torch's parallelism libraries (FSDP2, DTensor, tensor parallelism, distributed checkpoints) over symcomm and over
# NCCL: tests/python/torch_parallel_apps.py once per backend on APPS_WORLD ranks (default 2; ranks share the GPUs
# where there are fewer), every rank's results compared as text: bit for bit, which holds at 2 ranks (every sum has two
# terms, in either order the same). Needs the `python` step's _core.
if has apps && [ -e "$BUILD/tools/symcomm-run" ]; then
  t0=$(date +%s)
  aw=${APPS_WORLD:-2}
  share=0
  [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt "$aw" ] && share=1
  export PYTHONPATH=$BUILD/python:$ROOT/python
  for b in nccl symcomm; do
    rm -rf "/tmp/symcomm-apps-$b"
    SYMCOMM_SHARED_GPU=$share timeout 150 "$BUILD/tools/symcomm-run" -n "$aw" --timeout 140 -- \
      python3 "$ROOT/tests/python/torch_parallel_apps.py" "$b" "/tmp/symcomm-apps-$b" >"$OUT/apps_$b.log" 2>&1
    grep -o 'RESULT .*' "$OUT/apps_$b.log" | sort >"/tmp/symcomm-apps-$b.txt"
  done
  if [ "$(wc -l </tmp/symcomm-apps-symcomm.txt)" = "$aw" ] && cmp -s /tmp/symcomm-apps-nccl.txt /tmp/symcomm-apps-symcomm.txt; then
    note "apps ($aw ranks): symcomm's results equal NCCL's in $(($(date +%s) - t0)) s"
  else
    note "apps ($aw ranks): symcomm's results DIFFER from NCCL's, or a run failed (logs: apps_nccl.log, apps_symcomm.log)"
    diff /tmp/symcomm-apps-nccl.txt /tmp/symcomm-apps-symcomm.txt | cut -c1-400 | tee -a "$SUMMARY"
  fi
fi

# The CUDA multi-node benchmark: every GPU a rank, two fake nodes of half of them (MULTINODE_FAKE_NODE_SIZE), the flat
# path (NCCL) against the hierarchical one (symcomm in each node, NCCL between), and the thresholds they give.
if has multinode && [ -x "$BUILD/bench/symcomm-multinode-cuda-bench" ] && [ -x "$BUILD/tools/symcomm-run" ]; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "$ngpu" -ge 4 ]; then
    t0=$(date +%s)
    # shellcheck disable=SC2086
    timeout 300 "$BUILD/tools/symcomm-run" -n "$ngpu" --timeout 290 -- "$BUILD/bench/symcomm-multinode-cuda-bench" \
      --fake-node-size "${MULTINODE_FAKE_NODE_SIZE:-$((ngpu / 2))}" ${MULTINODE_ARGS:-} \
      --json "$OUT/multinode_cuda.json" >"$OUT/multinode_cuda.log" 2>&1
    note "multinode CUDA bench ($ngpu ranks): rc=$? in $(($(date +%s) - t0)) s (log: multinode_cuda.log)"
    grep -E "^\[rank 0\]" "$OUT/multinode_cuda.log" | sed 's/^\[rank 0\] //' | tee -a "$SUMMARY"
  else
    note "multinode CUDA bench: needs 4 GPUs (2 fake nodes of 2), $ngpu seen"
  fi
fi

# The NCCL drop-in library against the real NCCL (tests/nccl_shim/gpu/nccl_conformance.cc), one process per GPU,
# native-only, --quick; with 4+ GPUs again over two fake nodes (SYMCOMM_FAKE_NODE_SIZE) with every collective on the
# hierarchical path (SYMCOMM_NODE_MIN_BYTES=0 for each), symcomm in each node and the real NCCL between them. The
# real NCCL is the one of the python3 that holds torch (the nvidia-nccl package). With one GPU, DROPIN_SHARED_RANKS
# (default 4) ranks share it (--share-gpus: NCCL between them over loopback sockets; correctness only).
# DROPIN_TIMEOUT (default 280) bounds each of the (up to two) conformance runs, in seconds.
if has dropin; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  real=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  if [ ! -x "$BUILD/tests/nccl_shim/symcomm_nccl_conformance" ] || [ ! -e "$BUILD/src/nccl_shim/libsymcomm_nccl.so" ]; then
    note "dropin: needs the build step, or binaries packed with PACK=dropin (the default pack holds neither the drop-in library nor the conformance program)"
  elif [ "$ngpu" -lt 1 ] || [ ! -e "$real" ]; then
    note "dropin: needs a GPU and the nvidia-nccl package ($ngpu GPUs, real NCCL '${real}')"
  else
    dranks=$ngpu
    dtimeout=${DROPIN_TIMEOUT:-280}  # seconds for each conformance run
    dargs=()  # the conformance program's options of every run below
    if [ "$ngpu" -lt 2 ]; then
      dranks=${DROPIN_SHARED_RANKS:-4}
      dargs=(--share-gpus)
    fi
    conformance() {  # log, then VAR=value ... for the environment
      local log=$1 t0
      shift
      t0=$(date +%s)
      env SYMCOMM_NCCL_SHIM=native-only SYMCOMM_NCCL_SHIM_STATS=1 "$@" timeout "$((dtimeout + 20))" \
        "$BUILD/tests/nccl_shim/symcomm_nccl_conformance" --shim "$BUILD/src/nccl_shim/libsymcomm_nccl.so" \
        --real "$real" --ranks "$dranks" "${dargs[@]}" --quick --timeout "$dtimeout" >"$OUT/$log" 2>&1
      note "dropin conformance $* ($dranks ranks, $ngpu GPUs): rc=$? in $(($(date +%s) - t0)) s (log: $log)"
      grep -E "^conformance: (PASS|FAIL)|symcomm_nccl: pid|kill: failure" "$OUT/$log" | head -5 | tee -a "$SUMMARY"
    }
    conformance dropin.log
    if [ "$dranks" -ge 4 ]; then
      conformance dropin_nodes.log SYMCOMM_FAKE_NODE_SIZE=$((dranks / 2)) \
        SYMCOMM_NODE_MIN_BYTES=all_reduce=0,all_gather=0,reduce_scatter=0,broadcast=0
    fi
    # A rank SIGKILLed (--kill): in one node, then over fake nodes on the hierarchical path and on the flat one.
    if [ "$dranks" -ge 2 ]; then
      dargs+=(--kill)
      conformance dropin_kill.log
      if [ "$dranks" -ge 4 ]; then
        conformance dropin_kill_nodes.log SYMCOMM_FAKE_NODE_SIZE=$((dranks / 2)) SYMCOMM_NODE_MIN_BYTES=all_reduce=0
        conformance dropin_kill_flat.log SYMCOMM_FAKE_NODE_SIZE=$((dranks / 2)) SYMCOMM_NODE_MIN_BYTES=all_reduce=max
      fi
    fi
  fi
fi

# The lifecycle count: LIFECYCLE_CYCLES (default 1000) create/destroy and create/abort cycles with NCCL
# created lazily (a quarter of the cycles use it; ~0.26 s per cycle on 1 x H200), on as many ranks as the
# machine allows; the eager 2-rank test needs ~1 s per cycle (NCCL's teardown), too long for 1000 here.
if has lifecycle && [ -x "$BUILD/tests/symcomm_gpu_tests" ]; then
  t0=$(date +%s)
  LIFE_FILTER='GpuLifecycle.LazyNccl*'  # one rank per GPU; one rank where one GPU is lent
  [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 2 ] && LIFE_FILTER='GpuLifecycle.SingleGpuLazyNccl*'
  SYMCOMM_TEST_LIFECYCLE_CYCLES=${LIFECYCLE_CYCLES:-1000} timeout "${LIFECYCLE_TIMEOUT:-560}" \
    "$BUILD/tests/symcomm_gpu_tests" --gtest_filter="$LIFE_FILTER" >"$OUT/lifecycle.log" 2>&1
  note "lifecycle (${LIFECYCLE_CYCLES:-1000} cycles, NCCL lazy): rc=$? in $(($(date +%s) - t0)) s (log: lifecycle.log)"
  grep -E "^GpuLifecycle|^\[       OK|^\[  FAILED  \]" "$OUT/lifecycle.log" | tee -a "$SUMMARY"
fi

if has bench && [ -x "$BUILD/bench/symcomm-bench" ] && [ -x "$BUILD/tools/symcomm-run" ]; then
  t0=$(date +%s)
  ARGS=${BENCH_ARGS:-"--backend cuda --dtype bf16 --op sum --min-bytes 4K --max-bytes 256M --baseline nccl \
    --collective all_reduce,all_gather,reduce_scatter --mode eager,graph"}
  # shellcheck disable=SC2086
  timeout 300 "$BUILD/tools/symcomm-run" -n "${NRANKS:-2}" --timeout 290 -- "$BUILD/bench/symcomm-bench" $ARGS \
    --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1
  rc=$?
  note "bench: rc=$rc in $(($(date +%s) - t0)) s (log: bench.log, json: bench.json)"
  # The CUDA runner prints its ratio table last (rank 0).
  sed -n '/# symcomm \/ best NCCL/,$p' "$OUT/bench.log" | sed 's/^\[rank 0\] //' | tee -a "$SUMMARY"
fi

# Copy-engine (low-contention) collectives alone, against NCCL (the "symcomm" rows are the copy engine).
if has cebench && [ -x "$BUILD/bench/symcomm-bench" ]; then
  t0=$(date +%s)
  timeout 300 "$BUILD/tools/symcomm-run" -n "${NRANKS:-2}" --timeout 290 -- "$BUILD/bench/symcomm-bench" \
    --backend cuda --dtype bf16 --min-bytes ${CE_MIN_BYTES:-1M} --max-bytes 256M --step-factor 4 --baseline nccl \
    --contention low --collective ${CE_COLLECTIVES:-all_gather,reduce_scatter,all_to_all,broadcast} \
    --mode eager,graph --json "$OUT/ce_bench.json" \
    >"$OUT/ce_bench.log" 2>&1
  note "copy-engine bench: rc=$? in $(($(date +%s) - t0)) s (log: ce_bench.log)"
  sed -n '/# symcomm \/ best NCCL/,/# all_reduce algorithm/p' "$OUT/ce_bench.log" | sed 's/^\[rank 0\] //' |
    tee -a "$SUMMARY"
fi

# A bf16 GEMM beside each collective: GEMM slowdown and collective slowdown (bench/contention_cuda.cu).
if has contention && [ -x "$BUILD/bench/symcomm-bench" ]; then
  t0=$(date +%s)
  timeout 300 "$BUILD/tools/symcomm-run" -n "${NRANKS:-2}" --timeout 290 -- "$BUILD/bench/symcomm-bench" \
    --backend cuda --dtype bf16 --extra contention --min-bytes 64M --max-bytes 256M --step-factor 2 \
    --collective all_gather,reduce_scatter --batches 5 --json "$OUT/contention.json" >"$OUT/contention.log" 2>&1
  note "contention bench: rc=$? in $(($(date +%s) - t0)) s (log: contention.log)"
  grep -E "gemm_us|symcomm_|nccl " "$OUT/contention.log" | sed 's/^\[rank 0\] //' | tee -a "$SUMMARY"
fi

# Runner switches of symcomm-bench (--extra NAME): fused (all-gather+matmul, matmul+reduce-scatter), group
# (coalescing), bucket (reduce-scatter bucketer). Each gets its own log and JSON.
for extra in fused group bucket; do
  has "$extra" && [ -x "$BUILD/bench/symcomm-bench" ] || continue
  t0=$(date +%s)
  # The fused benchmark's 8192^3 workspace needs more than the default 1 GiB symmetric heap.
  heap=1G
  [ "$extra" = fused ] && heap=6G
  SYMCOMM_HEAP_BYTES=$heap timeout "${EXTRA_TIMEOUT:-200}" "$BUILD/tools/symcomm-run" -n "${NRANKS:-2}" --timeout "$((${EXTRA_TIMEOUT:-200} - 10))" \
    -- "$BUILD/bench/symcomm-bench" --backend cuda --dtype bf16 --extra "$extra" --json "$OUT/$extra.json" \
    >"$OUT/$extra.log" 2>&1
  note "$extra bench: rc=$? in $(($(date +%s) - t0)) s (log: $extra.log)"
done

# The GPU tests under compute-sanitizer (SANITIZE_TOOLS, default "memcheck racecheck"; also synccheck and
# initcheck), symcomm's kernels only: NCCL's LL kernels read up to 4 bytes past the end of odd-sized buffers
# (ncclDevKernel_AllGather_RING_LL on an 8198-byte buffer), and NCCL probes kernels that were
# not built for this GPU; neither is symcomm's to fix.
# SANITIZE_FILTER picks the tests (gtest filter) of every tool; SANITIZE_MEMCHECK_EXTRA adds memcheck-only ones.
# SANITIZE_EXCLUDE names the kernels left uninstrumented (default kns=nccl). For GpuFused.* under racecheck use
# kns=gemm: with cuBLASLt's GEMM kernels instrumented, racecheck 2025.3.1 on an H100 stops with "Internal
# Sanitizer Error: The Sanitizer failed to handle a hardware exception" and the GEMM launches fail (also
# with --kernel-name kns=symcomm); with them excluded it runs the fused tests clean.
# The tests' default deadlines are scaled by SANITIZE_TIMEOUT_SCALE (default 20; NOTE [test timeout scale] in
# tests/harness/rank_harness.h): under the tools, host waits around collective set-up take more than the 3 s
# default (unscaled, GpuBucketer/GpuGroupMulti random tests fail with "no message from rank 0 before the
# deadline", with 0 memcheck errors and 0 racecheck hazards).
# Each tool first runs its positive control (tests/gpu/sanitizer_probe_test.cc): every rank makes the one
# mistake the tool exists to report, once, and the tool must report it in every rank, or its clean reports below
# would prove nothing. initcheck passes its probe but cannot run symcomm's CUDA backend: compute-sanitizer
# 2025.3.1's initcheck fails the first cudaMemset of any cuMem allocation whose handle was exported to a POSIX
# fd ("unspecified launch failure", no report; a 40-line program without symcomm does the same), and
# every communicator's heap is such an allocation.
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
probe_test() {
  case $1 in
    memcheck) echo "EveryRankStoresOneBytePastItsBuffer|Invalid __global__ write of size 1" ;;
    synccheck) echo "EveryRankReachesABarrierWithOneLane|Divergent thread(s) in warp" ;;
    racecheck) echo "EveryRankRacesOnASharedWord|Race reported between" ;;
    initcheck) echo "EveryRankReadsMemoryNothingWrote|Uninitialized __global__ memory read" ;;
  esac
}
if has sanitize && [ -x "$SANITIZER" ] && [ -x "$BUILD/tests/symcomm_gpu_tests" ]; then
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    probe=$(probe_test $tool)
    t0=$(date +%s)
    SYMCOMM_TEST_TIMEOUT_SCALE=${SANITIZE_TIMEOUT_SCALE:-20} timeout 120 "$SANITIZER" --tool $tool --target-processes all \
      --error-exitcode 9 --report-api-errors no "$BUILD/tests/symcomm_gpu_tests" --gtest_also_run_disabled_tests \
      --gtest_filter="GpuSanitizerProbe.DISABLED_${probe%%|*}" >"$OUT/sanitizer_probe_$tool.log" 2>&1
    rc=$?
    found=$(grep -cF "${probe#*|}" "$OUT/sanitizer_probe_$tool.log")
    note "compute-sanitizer $tool probe (${probe%%|*}): rc=$rc in $(($(date +%s) - t0)) s, $found reports for ${NRANKS:-2} ranks$([ "$rc" = 9 ] && [ "$found" -ge "${NRANKS:-2}" ] && echo " (the tool sees the ranks)" || echo " -- PROBE NOT SEEN: the $tool run below checks nothing")"
    t0=$(date +%s)
    SAN=${SANITIZE_FILTER:-GpuCollectives.AllReduce:GpuCollectives.AllGather:GpuCollectives.Broadcast}
    [ $tool = memcheck ] && SAN="$SAN:${SANITIZE_MEMCHECK_EXTRA:-GpuGraph.*}"
    SYMCOMM_TEST_TIMEOUT_SCALE=${SANITIZE_TIMEOUT_SCALE:-20} timeout "${SANITIZE_TIMEOUT:-150}" "$SANITIZER" --tool $tool --target-processes all --error-exitcode 9 \
      --kernel-name-exclude "${SANITIZE_EXCLUDE:-kns=nccl}" --report-api-errors no \
      "$BUILD/tests/symcomm_gpu_tests" --gtest_filter="$SAN" >"$OUT/sanitizer_$tool.log" 2>&1
    note "compute-sanitizer $tool ($SAN): rc=$? in $(($(date +%s) - t0)) s; $(grep -c "ERROR SUMMARY: 0 errors" "$OUT/sanitizer_$tool.log") clean process summaries, $(grep -c -E "ERROR SUMMARY: [1-9]" "$OUT/sanitizer_$tool.log") with errors; $(grep -cE '^\[       OK' "$OUT/sanitizer_$tool.log") tests OK, $(grep -cE '^\[  FAILED  \] Gpu' "$OUT/sanitizer_$tool.log") failed"
  done
fi

# The GPU fault tests against deliberately broken builds (tools/sabotage.sh: one line broken per case, tests
# rebuilt incrementally, each case must fail or hang where the unbroken build passes). Rebuilds the tree.
if has sabotage && [ ! -e "$BUILD/build.ninja" ]; then
  note "sabotage: skipped, it needs a build tree (add the build step; prebuilt binaries are not one)"
elif has sabotage && [ $BUILD_OK = 1 ]; then
  t0=$(date +%s)
  BUILD=$BUILD CASES=gpu OUT=$OUT/sabotage bash "$ROOT/tools/sabotage.sh" >"$OUT/sabotage.console" 2>&1
  note "sabotage: rc=$? in $(($(date +%s) - t0)) s (0 = every case caught; logs: sabotage/)"
  tee -a "$SUMMARY" <"$OUT/sabotage/sabotage.txt"
fi

# The speed targets judged from whatever JSON the steps above wrote (bench/targets/targets.h; no GPU
# needed, so the same command works on copies of these files elsewhere).
JSONS=()
for f in bench ce_bench contention group bucket; do [ -s "$OUT/$f.json" ] && JSONS+=("$OUT/$f.json"); done
if [ ${#JSONS[@]} -gt 0 ] && [ -x "$BUILD/bench/symcomm-targets" ]; then
  TARGETS=$(mktemp)  # not under $OUT: the device returns few files, and the summary holds the table
  "$BUILD/bench/symcomm-targets" --world "${NRANKS:-2}" "${JSONS[@]}" >"$TARGETS" 2>&1
  note "targets: rc=$? (0 = every target with data met)"
  tee -a "$SUMMARY" <"$TARGETS"
  rm -f "$TARGETS"
fi

echo "---- summary ($OUT) ----"
cat "$SUMMARY"
