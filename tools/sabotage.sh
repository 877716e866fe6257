#!/usr/bin/env bash
# sabotage.sh: shows that the fault tests can fail. For each case, one line of the library is broken
# on purpose (a literal text replacement in the working tree), the test binary is rebuilt incrementally, and
# the named tests run under a time limit. The case counts as caught when those tests fail or time out, after
# the same tests passed on the unbroken build. The file is restored after each case and the build brought
# back at the end.
#
#   BUILD=build CASES=host tools/sabotage.sh        # CPU machine (a configured build directory)
#   BUILD=build-gpu CASES=gpu tools/sabotage.sh     # GPU machine, after tools/gpu/check.sh's build step
#   ONLY="ce-mismatch ce-watchdog" BUILD=build-gpu CASES=gpu tools/sabotage.sh   # some cases only
#
# Broken binaries built ahead (the GPU machine's time is scarce; a case's rebuild of the kernels takes minutes):
#   PACK=dir BUILD=build-cuda CASES=gpu ONLY="ll-give-up" tools/sabotage.sh      # here: builds, runs nothing
#   PREBUILT=dir BUILD=build-gpu CASES=gpu ONLY="ll-give-up" tools/sabotage.sh   # there: runs, builds nothing
#   CHECK=1 CASES=all tools/sabotage.sh   # only checks that every case's text occurs once (tools/test.sh runs it)
# PACK writes each case's broken test binary to dir/<case>.<binary> (xz-compressed); PREBUILT runs the
# baseline with $BUILD's binary (unpacked from tools/gpu/check.sh's prebuilt archive) and the case with dir's.
#
# Prints one line per case (also to $OUT/sabotage.txt when OUT is set; logs in $OUT or /tmp). Exit status:
# 0 all caught, 1 a case was not caught or its baseline failed, 2 a case could not be applied.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
LOGS=${OUT:-/tmp/symcomm-sabotage}
mkdir -p "$LOGS"
REPORT=$LOGS/sabotage.txt
: >"$REPORT"

# One case: group name file text-to-replace replacement test-binary gtest-filter time-limit-s [environment
# of the test run, as VAR=value words].
NAMES=() FILES=() FROMS=() TOS=() BINS=() FILTERS=() LIMITS=() ENVS=()
case_def() {
  local want=${CASES:-host}
  [ "$want" = all ] || [ "$want" = "$1" ] || return 0
  NAMES+=("$2") FILES+=("$3") FROMS+=("$4") TOS+=("$5") BINS+=("$6") FILTERS+=("$7") LIMITS+=("$8") ENVS+=("${9:-}")
}
# Two ranks sharing one GPU, deadlines scaled for the time slices (most GPU cases run so).
SHARED2="SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=2 SYMCOMM_TEST_TIMEOUT_SCALE=10"
# The four GpuKernelFaults paths that wait in signal.h's block_barrier, under one fault (missing|killed|abort).
barrier_paths() {
  local p out=
  for p in barrier all_reduce_two_shot_push bucket_flush group_all_reduce; do out+="${out:+:}Paths/GpuKernelFaults.*/${p}_$1"; done
  echo "$out"
}
case ${CASES:-host} in
  host | gpu | all) ;;
  *) echo "sabotage: CASES must be host, gpu or all" >&2; exit 2 ;;
esac
case_def host host-deadline src/backends/host/host_engine.cc \
  "(ctx_.mesh->left_mask() & (uint64_t{1} << p)) || Clock::now() >= deadline_at_ ||" \
  "(ctx_.mesh->left_mask() & (uint64_t{1} << p)) ||" \
  symcomm_rank_tests Faults.RankThatNeverArrivesTimesOutNamingIt 90
# Ranks must agree on the links of their topology files at creation (NOTE [configuration agreement]): without the
# topology in the compared settings, ranks with different links create the communicator and run different schedules.
case_def host topology-agreement src/core/communicator.cc \
  $'  mine += "topology=" + (ctx.topology ? ctx.topology->to_json() : std::string("(every pair linked)")) + "\\n";' "" \
  symcomm_rank_tests TopologyRanksRefusals.DisagreeingOrWrongFilesFailTheCreationOnEveryRank 90
# The ring reduce-scatter adds chunk o[i - 1 - k] into the next position (NOTE [gather schedules]): one position off,
# each rank's block completes at the wrong rank and the reduce-scatter over a ring topology is wrong.
case_def host gather-schedule-ring src/algos/schedule.cc \
  "o[mod(rs ? i - 1 - k : i - k)]" "o[mod(rs ? i - k : i - k)]" \
  symcomm_rank_tests 'Layouts/TopologyRanks.CollectivesUseTheirSchedulesAndAreExact/ring_of_four' 90
# A reduce in the scheduled kernel's plan reads the run of slots its chunk was pushed into (NOTE [scheduled kernel
# plan]): starting every run at slot 0, a rank that gets two chunks in one step reduces the wrong one.
case_def host schedule-plan-slots src/algos/schedule_plan.cc \
  "p.apply[applies++] = PlanApply{static_cast<uint8_t>(x.chunk), static_cast<uint8_t>(slots[i])," \
  "p.apply[applies++] = PlanApply{static_cast<uint8_t>(x.chunk), static_cast<uint8_t>(0)," \
  symcomm_unit_tests 'SchedulePlan.*' 60
# The hierarchical stages hold blocks local index by local index (algos/node_plan.h): taking them node by node,
# the all-gather puts blocks at other ranks' places.
case_def host node-block-order src/algos/node_plan.cc \
  "return layout.members[i % n_nodes][i / n_nodes];" "return layout.members[i / layout.node_size()][i % layout.node_size()];" \
  symcomm_unit_tests 'LocalMajorRank.*' 60
# The staged two-shot leaves out of scratch only the slice no peer reads (NOTE [two-shot staging]): leaving out more,
# a peer reduces stale scratch bytes.
case_def host two-shot-unread src/backends/host/host_two_shot.cc \
  "in_zc, {mine.lo * es, mine.hi * es});" "in_zc, {0, mine.hi * es});" \
  symcomm_rank_tests 'WorldSizes/HostCollectives.*' 120
case_def host host-count-check src/backends/host/host_engine.cc \
  "if (h.count != r.count) mismatch(" "if (false) mismatch(" \
  symcomm_rank_tests Faults.CrossRankMismatchIsReportedNotAHang 90
case_def host step-variant src/backends/host/host_engine.cc \
  "if (h.variant != variant_) {  // NOTE [step variant]" "if (false) {" \
  symcomm_rank_tests "Faults.CrossRankMismatchIsReportedNotAHang:HostBucketerRules.FlushesLaidOutDifferentlyAreAMismatch" 90
# Debug checks that do not share a rank's own refusal (NOTE [refused on one rank]): its peers run the call and
# wait for it until their deadline.
case_def host refused-shared src/core/comm_core.cc \
  "         refused ? 1u : 0u," "         0u," \
  symcomm_rank_tests "Faults.DebugChecksRefuseOnEveryRankWhatOneRankRefuses" 90
case_def host nested-group-cancel src/core/comm_core.cc \
  "  if (group_.scopes.empty()) group_ = Group{};" "  group_ = Group{};" \
  symcomm_rank_tests HostGroupRules.NestedLevelsCancelOnlyThemselves 60
case_def host bucket-large-buffers src/core/bucketer.cc \
  "  impl_->retire_large_buffers();" "" \
  symcomm_rank_tests HostBucketerRules.LargeInputBuffersAreReusedNotHeldUntilTeardown 60
case_def host split-default-names src/core/communicator.cc \
  "    g_comm_counter.fetch_add(1);" "" \
  symcomm_rank_tests Split.DefaultNamesStayInStepAfterARankOptsOut 60
case_def host sticky-dump src/backends/comm_context.cc \
  '    log_write(LogLevel::kError, brief);' "" \
  symcomm_rank_tests Faults.FirstFatalErrorOfAnAsyncCollectiveIsDumpedOnce 60
# The log gets every remembered operation instead of the short record (NOTE [op record]).
case_def host op-record-short src/backends/comm_context.cc \
  '    for (const std::string& line : compact_record(ops)) brief += "\n  " + line;' \
  '    for (const OpRecord& r : ops) brief += "\n  " + format_op(r);' \
  symcomm_rank_tests Faults.ARankKilledMidAllReduceLeavesAShortLogAndTheFullRecordInAFile 60
case_def host rendezvous-liveness src/bootstrap/peer_mesh.cc \
  "  if (pid > 0 && !pid_alive(pid)) {" "  if (false) {" \
  symcomm_rank_tests "AllWays/RankDeath.*/rendezvous_sigkill" 120
# The connecting side never waits for the lower ranks' acceptances (NOTE [mesh hellos]).
case_def host mesh-acceptance src/bootstrap/peer_mesh.cc \
  "  await_acceptances(store, prefix, deadline);" "" \
  symcomm_rank_tests Faults.PeerMeshCreationFailsWhenTheLowerRankClosesWithoutAccepting 60
case_def host rendezvous-generation src/core/communicator.cc \
  '  return *generation == 0 ? token : fmt::format("{}#{}", token, *generation);' "  return token;" \
  symcomm_rank_tests RendezvousRanks.RecreatedOnTheSamePortWhileTheEarlierServerStillRuns 60
case_def host rendezvous-name src/core/communicator.cc \
  '  if (opts.name.empty()) opts.name = "rendezvous";' "" \
  symcomm_rank_tests RendezvousRanks.ACommunicatorOfEveryRankAfterASubGroupsOwn 60
# all_gather_matmul on one rank without a_gathered multiplies the shard in place: every outer index of it.
case_def host fused-one-rank src/fused/fused_ops.cc \
  "    ag_gemms(e, p, x, world, me, static_cast<const char*>(x.a.data), p.chunks[0]);" \
  "    ag_gemms(e, p, x, world, me, static_cast<const char*>(x.a.data), RowChunk{.o0 = 0, .o1 = 1, .r0 = 0, .r1 = s.m});" \
  symcomm_rank_tests "WorldSizes/FusedAllGatherMatmul.*" 60
# matmul_reduce_scatter on one rank writes the product into the output in the output's dtype.
case_def host fused-rs-one-rank src/fused/fused_ops.cc \
  "    rs_gemms(e, p, a, b, world, out.data, a.dtype, p.chunks[0]);" \
  "    rs_gemms(e, p, a, b, world, out.data, DataType::kFloat32, p.chunks[0]);" \
  symcomm_rank_tests "WorldSizes/FusedMatmulReduceScatter.*" 60
case_def host failed-creation-fd src/backends/host/host_heap.cc \
  "      FdCloser peer_closer{peer_fd};" "" \
  symcomm_rank_tests Lifecycle.FailedCreationsLeakNothing 60
case_def host failed-creation-keys src/bootstrap/peer_mesh.cc \
  "      store.remove(mesh_key(prefix, ranks.rank));" "" \
  symcomm_rank_tests Lifecycle.FailedCreationsLeakNothing 60
case_def host creation-store-deadline src/core/communicator.cc \
  "ctx->store_get(nonce_key, meet)" "ctx->store->get(nonce_key)" \
  symcomm_rank_tests Lifecycle.FailedCreationsLeakNothing 60
case_def host config-agreement src/core/communicator.cc \
  "  check_same_config(*ctx, options.backend, tuning_sources);" "" \
  symcomm_rank_tests Faults.RanksWithDifferentSettingsFailAtCreationNamingThem:TuningFileRanks.RanksWithDifferentFilesFailOnEveryRankNamingThem 60
case_def host tuning-file-entry src/core/communicator.cc \
  "    entry = file.find(n, name);" "" \
  symcomm_rank_tests TuningFileRanks.RanksReadingOneFileSelectByItsEntry 60
case_def host tuning-agreement src/core/communicator.cc \
  "  if (!failed.empty()) {" "  if (false) {" \
  symcomm_rank_tests TuningFileRanks.AFileOneRankCannotReadFailsEveryRank 60
case_def host split-store-server src/core/communicator.cc \
  "  comm->core_->ctx().server = ctx.server;" "" \
  symcomm_rank_tests Split.ChildKeepsTheParentsStoreServerAlive 60
# The NCCL drop-in library (src/nccl_shim). Two arguments of one type trade places in the forwarding table;
# the search takes a drop-in library (itself, or a copy) for the real NCCL, and each call comes back to it
# without end (NOTE [drop-in note]); a failure in the real library leaves the drop-in library's older text as
# the last error.
case_def host nccl-args-swapped src/nccl_shim/nccl_api.h \
  "    (comm, color, key, newcomm, config))" "    (comm, key, color, newcomm, config))" \
  nccl_shim/symcomm_nccl_shim_tests Forwarding.EveryResultFunctionPassesItsArgumentsAndResultUnchanged 60
case_def host nccl-self-load src/nccl_shim/real_nccl.cc \
  "  if (handle_is_drop_in(h)) {  // NOTE [drop-in note]" "  if (false) {" \
  nccl_shim/symcomm_nccl_shim_tests "NcclDropIn.*Itself*:NcclDropIn.TheSearch*" 60
case_def host nccl-stale-last-error src/nccl_shim/forward.h \
  "      clear_shim_error();" "" \
  nccl_shim/symcomm_nccl_shim_tests NcclDropIn.AFunctionTheRealLibraryLacksIsASystemErrorNamingIt 60
# The native layer's pure parts: integer averages planned for symcomm (its integer division is not NCCL's
# contract), and an id stamp read without its checksum (a changed id would still name a store).
case_def host nccl-plan-int-avg src/nccl_shim/native_plan.cc \
  "  if (o == ReduceOp::kAvg && !is_float(t)) return false;" "" \
  nccl_shim/symcomm_nccl_plan_tests NativePlan.ReductionsMapExactlyWhereSymcommHasNcclsSemantics 60
case_def host nccl-stamp-checksum src/nccl_shim/id_stamp.cc \
  "      get<uint64_t>(s + kSumAt) != checksum(id)) {" "      false) {" \
  nccl_shim/symcomm_nccl_plan_tests IdStamp.AnyChangedBitMakesTheIdUnstamped 60
# signal.h's waits (block_barrier and what uses it): each case meets the barrier, the two-shot push all-reduce,
# the bucket flush and the group all-reduce (the GpuFailure tests that caught these on 2 GPUs hang for the
# whole-job limit where ranks share a GPU; GpuKernelFaults' cases end at 20 s each).
case_def gpu device-deadline include/symcomm/device/signal.h \
  "if (globaltimer_ns() > deadline_ns) {" "if (false) {" \
  symcomm_gpu_tests "$(barrier_paths missing)" 200 \
  "$SHARED2"
case_def gpu device-dead-peer include/symcomm/device/signal.h \
  "  } else if (dead || ((ld_volatile_u64(&c.control->left_mask) >> peer) & 1)) {" "  } else if (false) {" \
  symcomm_gpu_tests "$(barrier_paths killed)" 200 \
  "$SHARED2"
case_def gpu device-abort include/symcomm/device/signal.h \
  "  if (ld_volatile_u32(&c.control->aborted)) {" "  if (false) {" \
  symcomm_gpu_tests "$(barrier_paths abort)" 200 \
  "$SHARED2"
case_def gpu ce-watchdog src/backends/cuda/cuda_copy_engine_cuda.cc \
  "if (v != 0 && (failed || timed_out)) {" "if (false) {" \
  symcomm_gpu_tests "Paths/GpuKernelFaults.*/copy_engine_all_gather_missing:Paths/GpuKernelFaults.*/copy_engine_reduce_scatter_abort:Paths/GpuKernelFaults.*/copy_engine_broadcast_killed" 150 \
  "$SHARED2"
# The watchdog never reports kMismatch (every stall reading, early or at the deadline, becomes kTimeout).
case_def gpu ce-mismatch src/backends/cuda/cuda_copy_engine_cuda.cc \
  "stall.kind == CeStall::kMismatch    ? DeviceError::kMismatch" "stall.kind == CeStall::kMismatch    ? DeviceError::kTimeout" \
  symcomm_gpu_tests "GpuFailure.CopyEngineMismatchIsReported:Cases/GpuMismatch.*/*copy_engine*" 200 \
  "$SHARED2"
# Calls on two streams that the caller does not order (NOTE [one operation at a time]): unordered, the held stream's
# call runs second on half of the ranks and first on the others.
case_def gpu op-order src/backends/cuda/op_order_cuda.cc \
  "  if (!any_ || s == last_) return;" "  return;" \
  symcomm_gpu_tests "GpuStreams.*" 120 "$SHARED2"
case_def gpu gpu-rendezvous-liveness src/bootstrap/peer_mesh.cc \
  "  if (pid > 0 && !pid_alive(pid)) {" "  if (false) {" \
  symcomm_gpu_tests GpuFailure.PeerDiesDuringRendezvous 120 "SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=2 SYMCOMM_TEST_TIMEOUT_SCALE=2"
case_def gpu nccl-blocking-creation src/backends/cuda/cuda_backend_cuda.cc \
  "config.blocking = 0;" "config.blocking = 1;" \
  symcomm_gpu_tests "GpuFailure.PeerDiesInside*NcclCreation" 90
# The LL and LL128 kernels poll their peers' lines in loops of their own (not signal.h's block_barrier): each
# loop must give up on abort(), a dead peer and the deadline; GpuKernelFaults meets each path with each fault
# (broken, each of the three cases fails at its 20 s job limit).
case_def gpu ll-give-up src/algos/cuda_all_reduce_ll.cu \
  "device::poll_give_up(c, peer, seq, deadline, device::announcement(seq, header))" "false" \
  symcomm_gpu_tests "Paths/GpuKernelFaults.*/all_reduce_ll_*-*_graph" 100 "$SHARED2"
case_def gpu ll128-give-up src/algos/cuda_all_reduce_ll.cu \
  "lane == 0 && device::poll_give_up(" "false && device::poll_give_up(" \
  symcomm_gpu_tests "Paths/GpuKernelFaults.*/all_reduce_ll128_*-*_graph" 100 "$SHARED2"
# From 3 ranks on the LL kernels wait for all their peers' lines together (NOTE [LL concurrent polling]): that
# loop must give up too (the header lines wait in it as well), and the header comparison after it must hold.
SHARED4="SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=4 SYMCOMM_TEST_TIMEOUT_SCALE=20"
case_def gpu ll-give-up-together src/algos/cuda_all_reduce_ll.cu \
  "device::poll_give_up(c, peer(__ffs(static_cast<int>(pending)) - 1)" "false && device::poll_give_up(c, peer(0)" \
  symcomm_gpu_tests "Paths/GpuKernelFaults.*/all_reduce_ll_*-*_graph" 200 "$SHARED4"
case_def gpu ll-header-together src/algos/cuda_all_reduce_ll.cu \
  "(lines[q].x != static_cast<uint32_t>(header) || lines[q].z != static_cast<uint32_t>(header >> 32))" "false" \
  symcomm_gpu_tests "Cases/GpuMismatch.EveryRankGetsThePromisedError/*_ll:*skipped_ll" 200 "$SHARED4"
# An element offset kept in 32 bits (signed) in the staged two-shot all-reduce: only counts past 2^31 reach it.
case_def gpu two-shot-int-offset src/algos/cuda_all_reduce_two_shot.cu \
  $'T* out = static_cast<T*>(p.out);\n  for (uint32_t j = 0; j < rounds; ++j) {\n    const size_t e0 = j * round_elems,' \
  $'T* out = static_cast<T*>(p.out);\n  for (uint32_t j = 0; j < rounds; ++j) {\n    const size_t e0 = static_cast<int>(j * round_elems),' \
  symcomm_gpu_tests "GpuLargeCounts.AllReduce*" 120 "$SHARED2"
case_def gpu ll-header src/algos/cuda_all_reduce_ll.cu \
  "      if (line.x != static_cast<uint32_t>(header) || line.z != static_cast<uint32_t>(header >> 32)) {" \
  "      if (false) {" \
  symcomm_gpu_tests "Cases/GpuMismatch.EveryRankGetsThePromisedError/*_ll:*skipped_ll" 120 "$SHARED2"
# The LL128 two-shot's all-gather phase stores each peer's result at that peer's shard (NOTE [LL128 two-shot]);
# stored at this rank's own shard instead, every payload of more than one shard comes out wrong.
case_def gpu ll128-two-shot-shard src/algos/cuda_all_reduce_ll.cu \
  "const size_t ci = (first(q) + i) * kLL128ChunksPerLine" "const size_t ci = (first(me) + i) * kLL128ChunksPerLine" \
  symcomm_gpu_tests "GpuCollectives.AllReduceLL128TwoShot" 120 "$SHARED2"
# The scheduled kernel's step barrier with its neighbours orders their pushes before its applies (NOTE [scheduled
# kernel plan]): with the barrier reaching nobody, a rank applies inbox slots its neighbours have not filled yet.
case_def gpu scheduled-barrier src/algos/cuda_scheduled.cu \
  "f.deadline, g == 0 ? p.header : 0, pl.neighbors)" "f.deadline, g == 0 ? p.header : 0, 0u)" \
  symcomm_gpu_tests "GpuTopology.GraphReplaysStayExact" 240 "SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=4 SYMCOMM_TEST_TIMEOUT_SCALE=10"
case_def gpu ll128-gather-store src/algos/cuda_all_reduce_ll.cu \
  "q == me ? own[u][h] : LL128Lane::half(got[u][q], h)" "own[u][h]" \
  symcomm_gpu_tests "GpuCollectives.MovesAndReduceScatterLL128" 300 "$SHARED2"
case_def gpu ll128-header src/algos/cuda_all_reduce_ll.cu \
  "const bool bad = seen && got[q].w != header;" "const bool bad = false;" \
  symcomm_gpu_tests "Cases/GpuMismatch.EveryRankGetsThePromisedError/*_ll128" 120 "$SHARED2"
# Ranks on different paths find each other only through the op announcements (NOTE [op announcements]):
# broken, those cases wait out their deadline and fail (they must be kMismatch before 0.8 x it).
case_def gpu op-announce include/symcomm/device/signal.h \
  "  } else if (mine != 0 && announced_other_op(mine, ld_volatile_u64(announcements(c.signals[c.rank]) + peer))) {" \
  "  } else if (false) {" \
  symcomm_gpu_tests "Cases/GpuMismatch.EveryRankGetsThePromisedError/*_vs_*:*across_paths:*collective_ll128" 200 \
  "$SHARED2"
# Needs more than 2 ranks (a rank two collectives ahead of another), so 4 ranks share the GPUs; the overwrite
# is a race: the tests run three times.
case_def gpu failed-communicator src/algos/cuda_common.cuh \
  "  f.failed = (s.z | s.w) != 0;" "  f.failed = false;" \
  symcomm_gpu_tests "Cases/GpuMismatch.EveryRankGetsThePromisedError/skipped*" 300 \
  "SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=4 SYMCOMM_TEST_TIMEOUT_SCALE=20 GTEST_REPEAT=3"
# The copy-engine watchdog's stall reading names the first peer holding another op's header before a peer that
# never came (the reverse of NOTE [copy-engine stall]'s order): at 3+ ranks the rank that gave up first and went on
# is then blamed (kMismatch) for the missing rank's timeout.
case_def gpu ce-stall-mismatch-first src/algos/ce_plan.cc \
  "    if (p != rank && arrive[p] == 0 && depart[p] == 0 && gave_up[p] == 0) return {CeStall::kMissing, p};" \
  "    for (int q = 0; q < world_size; ++q) if (q != rank && other(q)) return {CeStall::kMismatch, q}; if (p != rank && arrive[p] == 0 && depart[p] == 0) return {CeStall::kMissing, p};" \
  symcomm_gpu_tests "GpuCopyEngineFaults.*" 120 "SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=3 SYMCOMM_TEST_TIMEOUT_SCALE=20"
# Eager copy-engine ops without their instance number in the header (NOTE [copy-engine op instance]): a rank
# released from a failed op into its next one completes a slower peer's equal-looking call silently.
case_def gpu ce-instance src/backends/cuda/cuda_copy_engine_cuda.cc \
  "  in.instance = stream_capturing(s) ? 0 : eager_ops_ + 1;" "  in.instance = 0;" \
  symcomm_gpu_tests "GpuCopyEngineFaults.Skipped*" 120 "SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=2 SYMCOMM_TEST_TIMEOUT_SCALE=20"
# The watchdog does not write its gave-up word into the peers' pads (NOTE [copy-engine stall]): a rank released
# through two ops leaves no trace of having gone on, and a slower peer blames it for another rank's skipped
# call. A race (which rank reaches its deadline first), so at 4 ranks and three times.
case_def gpu ce-gave-up src/backends/cuda/cuda_copy_engine_cuda.cc \
  "    ops.push_back(write_op(pads_[p] + kGaveUp + me, header));" "    (void)header;" \
  symcomm_gpu_tests "GpuCopyEngineFaults.Skipped*:Cases/GpuMismatch.*/skipped_copy_engine" 300 \
  "SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=4 SYMCOMM_TEST_TIMEOUT_SCALE=10 GTEST_REPEAT=4"
# The watchdog never acts on its early readings (NOTE [copy-engine early mismatch]): mismatches are reported at
# the deadline again, which the tests refuse.
case_def gpu ce-early src/backends/cuda/cuda_copy_engine_cuda.cc \
  "      if (early.peer >= 0 && early.peer == suspect) fail_and_release(" "      if (false) fail_and_release(" \
  symcomm_gpu_tests "GpuFailure.CopyEngineMismatchIsReported:Cases/GpuMismatch.*/*copy_engine*:GpuCopyEngineFaults.Skipped*" 200 \
  "$SHARED2"
# The last barrier does not wait for the peers' abandon words (NOTE [copy-engine late peer]): a rank that calls
# after every peer's deadline passes the barriers their watchdogs released and completes, reading buffers the
# peers have moved on from, with no error.
case_def gpu ce-late-peer src/backends/cuda/cuda_copy_engine_cuda.cc \
  "    if (p != me) ops_.push_back(wait_top_bit_clear(pads_[me] + kAbandon + p));" "    (void)p;" \
  symcomm_gpu_tests "GpuCopyEngineFaults.*AfterThePeersGaveUp*" 120 "$SHARED2"
# The early reading never names a peer that abandoned the op: the late rank's call then fails only at its own
# deadline, which the tests refuse (nothing else can end that wait).
case_def gpu ce-abandon-early src/backends/cuda/cuda_copy_engine_cuda.cc \
  "  return abandoned_ce_op(words + kArrive, words + kDepart, words + kGaveUp, n, me, header);" "  return {};" \
  symcomm_gpu_tests "GpuCopyEngineFaults.*AfterThePeersGaveUp*" 120 "$SHARED2"
# The creation's set-up exchange ignores a peer whose copy engine could not be set up: that rank fails its
# creation alone, and the others make a communicator it never joins.
case_def gpu ce-setup-agreement src/backends/cuda/cuda_backend_cuda.cc \
  "    if (theirs.ce_failed) ce_failed.push_back(p);" "    (void)theirs.ce_failed;" \
  symcomm_gpu_tests "GpuMemoryUse.CopyEngineSetUp*" 120 "$SHARED2"
# alloc() without its second exchange: a rank that cannot map a peer's part fails alone, and its peers return
# the allocation.
case_def gpu heap-mapped-exchange src/backends/cuda/cuda_heap_cuda.cc \
  "    const std::vector<int> unmapped = exchange_mapped(id, map_error != nullptr);" \
  "    const std::vector<int> unmapped;" \
  symcomm_gpu_tests "GpuMemoryUse.SymmetricAllocFailingToMap*" 120 "$SHARED2"
case_def gpu ll-gather-store src/algos/cuda_all_reduce_ll.cu \
  "store8(dst, i, bytes, aligned8(dst), vals[q].v);" "store8(dst, i, bytes, aligned8(dst), make_uint2(0, 0));" \
  symcomm_gpu_tests "GpuCollectives.AllGather*" 200 "SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=2 SYMCOMM_TEST_TIMEOUT_SCALE=20"
case_def gpu ll-broadcast-store src/algos/cuda_all_reduce_ll.cu \
  "store8(out, i, bytes, out_al, make_uint2(lines[u].x, lines[u].z));" \
  "store8(out, i, bytes, out_al, make_uint2(lines[u].z, lines[u].x));" \
  symcomm_gpu_tests "GpuCollectives.Broadcast" 200 "SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=2 SYMCOMM_TEST_TIMEOUT_SCALE=20"
# symcomm's memory ledger (cuda_memory_use, the leak counts): a freed heap chunk that is never unmapped
# (its own memory and every peer's mapping kept), and the device state never freed on destruction (a few
# hundred bytes: below what the device-wide free count can see; the ledger counts it exactly).
case_def gpu heap-free-keeps src/backends/cuda/cuda_heap_cuda.cc \
  "  unmap(it->second);" "  (void)it;" \
  symcomm_gpu_tests "GpuMemoryUse.*" 200 "$SHARED2"
case_def gpu state-leak src/backends/cuda/cuda_backend_cuda.cc \
  "  if (state_) {" "  if (false) {" \
  symcomm_gpu_tests "GpuMemoryUse.*:GpuLifecycle.CreateDestroyAndAbortCyclesLeakNothing" 300 \
  "$SHARED2 SYMCOMM_TEST_LIFECYCLE_CYCLES=10"
# A rank whose part of a symmetric alloc fails throws at once instead of telling its peers (what NOTE [failed
# symmetric alloc] prevents): where only some ranks run out of memory, the others wait for its fd until the
# deadline. Only ranks sharing a GPU make that case (one gets 60% of the free memory, the other cannot).
case_def gpu alloc-silent-failure src/backends/cuda/cuda_heap_cuda.cc \
  "    AllocMsg msg{id, stride, bytes, own_error ? 1u : 0u};" \
  "    if (own_error) std::rethrow_exception(own_error); AllocMsg msg{id, stride, bytes, 0u};" \
  symcomm_gpu_tests "GpuMemoryUse.OutOfMemory*" 200 "$SHARED2"
# NOTE [heap keys]: the SM paths' op headers leave out the output's heap place, so ranks that pass different heap
# buffers as outputs meet with matching headers and the zero-copy kernels write the wrong place.
case_def gpu heap-keys src/backends/cuda/cuda_launch_cuda.cc \
  "      .add(out_place)" "      .add(0 * out_place)" \
  symcomm_gpu_tests "Cases/GpuHeapBuffers.*" 200 "$SHARED2"
case_def gpu signal-refresh include/symcomm/device/signal.h \
  "    for (int b = first_block; b < kMaxBlocks; ++b) {" "    for (int b = kMaxBlocks; b < kMaxBlocks; ++b) {" \
  symcomm_gpu_tests "Modes/GpuSequence.*" 200 "$SHARED2"
case_def gpu group-streams src/backends/cuda/cuda_group_cuda.cc \
  "    chain.enter(s);" "" \
  symcomm_gpu_tests "GpuGroup.CollectivesOnSeveralStreamsRunInIssueOrder" 200 "$SHARED2"
case_def gpu ll-flag-zero src/algos/cuda_all_reduce_ll.cu \
  "return seq != 0 ? seq : 1u;" "return seq;" \
  symcomm_gpu_tests "Cases/GpuSequenceWrap.*" 200 "$SHARED2"
# Launches checked by the thread's last error (NOTE [launch result]): the caller's planted error fails them.
case_def gpu launch-result src/algos/cuda_common.cuh \
  "  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, p);" \
  "  cudaLaunchKernelEx(&cfg, kernel, p);
  const cudaError_t err = cudaGetLastError();" \
  symcomm_gpu_tests "GpuThreads.ACallersEarlierCudaErrorIsNeitherTakenNorCleared" 120 "$SHARED2"
# Kernels loaded lazily at their first launch (NOTE [kernel loading]): a first call waits for the held stream.
case_def gpu kernel-loading src/backends/cuda/cuda_backend_cuda.cc \
  "  load_kernel_modules();" \
  "  // kernels left to load lazily" \
  symcomm_gpu_tests "GpuLoading.*" 120 ""

say() { echo "$*" | tee -a "$REPORT"; }
build() { [ -n "${PREBUILT:-}" ] || ninja -C "$BUILD" "tests/$1" >>"$LOGS/build.log" 2>&1; }
run_tests() {  # binary-path filter limit log [VAR=value ...] -> exit status of the tests (124: time limit)
  env ${5:-} timeout "$3" "$1" --gtest_filter="$2" >"$4" 2>&1
  local rc=$?
  # Rank processes are forks of the test binary; when the time limit ends their parent, nothing else would
  # end them (a rank spinning in a wait with no deadline would spin on, on the CPU or the GPU). Anchored: only
  # command lines that start with the binary, not the shell that started this script with its path.
  pkill -9 -f "^$1( |\$)" 2>/dev/null
  return $rc
}
[ -n "${PACK:-}" ] && mkdir -p "$PACK"
if [ -n "${PREBUILT:-}" ]; then
  # One xz archive per case (PACK), unpacked next to itself.
  for f in "$PREBUILT"/*.xz; do [ -e "$f" ] && xz -dkf "$f" && chmod +x "${f%.xz}"; done
fi

# The current case's tests on its broken binary ($1; $2 is added to the report): caught if they fail or hang.
run_broken() {
  local t0 rc why
  t0=$(date +%s)
  run_tests "$1" "$filter" "$limit" "$LOGS/$name.log" "$envs"
  rc=$?
  if [ $rc -eq 0 ]; then
    say "$name: NOT CAUGHT — $filter passed with $file broken$2"
    status=1
  else
    why=$([ $rc -eq 124 ] && echo "hung until the ${limit} s limit" || echo "failed (rc $rc)")
    say "$name: caught — $filter $why in $(($(date +%s) - t0)) s ($file: '$from' -> '$to'$2)"
  fi
}

status=0
for i in "${!NAMES[@]}"; do
  name=${NAMES[$i]} file=${FILES[$i]} from=${FROMS[$i]} to=${TOS[$i]} binary=${BINS[$i]} filter=${FILTERS[$i]}
  limit=${LIMITS[$i]} envs=${ENVS[$i]}
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
  path=$ROOT/$file
  if [ -n "${CHECK:-}" ]; then
    # Only whether the case still applies: its text occurs exactly once in its file.
    text=$(<"$path")
    rest=${text#*"$from"}
    if [[ $text != *"$from"* ]]; then
      say "$name: STALE (text not found in $file)"
      status=2
    elif [[ $rest == *"$from"* ]]; then
      say "$name: AMBIGUOUS (text found more than once in $file)"
      status=2
    else
      say "$name: applies"
    fi
    continue
  fi
  if [ -n "${PREBUILT:-}" ]; then
    broken=$PREBUILT/$name.$binary
    if [ ! -x "$broken" ]; then
      say "$name: NOT APPLIED (no $broken)"
      status=2
      continue
    fi
  fi
  if [ -z "${PACK:-}" ] && { ! build "$binary" || ! run_tests "$BUILD/tests/$binary" "$filter" "$limit" "$LOGS/$name.baseline.log" "$envs"; }; then
    say "$name: BASELINE FAILED ($filter on the unbroken build; log $name.baseline.log)"
    status=1
    continue
  fi
  if [ -n "${PREBUILT:-}" ]; then
    run_broken "$broken" ", prebuilt"
    continue
  fi
  text=$(<"$path")
  if [[ $text != *"$from"* ]]; then
    say "$name: NOT APPLIED (text not found in $file)"
    status=2
    continue
  fi
  cp "$path" "$path.sabotage-orig"
  printf '%s\n' "${text/"$from"/"$to"}" >"$path"
  if ! build "$binary"; then
    say "$name: BUILD FAILED with the change (see build.log)"
    status=2
  elif [ -n "${PACK:-}" ]; then
    xz -T2 -c "$BUILD/tests/$binary" >"$PACK/$name.$binary.xz"
    say "$name: packed $PACK/$name.$binary.xz ($file: '$from' -> '$to')"
  else
    run_broken "$BUILD/tests/$binary" ""
  fi
  mv "$path.sabotage-orig" "$path"
  touch "$path"  # newer than the objects built from the broken text
done
# Back to the unbroken build (the restored files are newer than the objects built from the broken ones).
if [ -z "${PREBUILT:-}" ] && [ -z "${CHECK:-}" ]; then
  ninja -C "$BUILD" >>"$LOGS/build.log" 2>&1 || { say "rebuild of the unbroken tree FAILED"; status=2; }
fi
exit $status
