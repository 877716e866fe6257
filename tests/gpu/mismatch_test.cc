// Cross-rank mismatches and a skipped call on the CUDA backend's SM-kernel paths (LL, LL128 and staged
// one-shot all-reduce; two-shot staged, push and zero-copy; the all-gather and broadcast kernels) and on its
// copy-engine paths (all-gather and broadcast; found by the watchdog's early readings, NOTE [copy-engine early
// mismatch]), at the GPU suite's world size (testing::gpu_test_world(): the GPUs, or SYMCOMM_TEST_WORLD where
// ranks share a GPU) with rank 1 the odd one out: every rank gets an Error with the code the path promises (a
// mismatch before 0.8 x the op deadline, a timeout at it), naming rank 1 (the others) or another rank (rank 1;
// every other rank in debug mode);
// no byte is written outside an output, none into an output that the path promises to leave alone, and the
// GPU runs fresh work afterwards. Then the same cases with Config::debug_checks (SYMCOMM_DEBUG_CHECKS=1):
// kMismatch thrown by the mismatched call itself before anything is launched, naming the field and both ranks.
//
// NOTE [what the header check sees] Each all-reduce path and kernel compares op_header() (collective, path,
// dtype, op, count, root, zero-copy: src/backends/cuda/cuda_launch_cuda.cc) with the peer's before it uses the peer's
// data: the staged one-shot, two-shot, all-gather and broadcast kernels in their first block_barrier
// (include/symcomm/device/signal.h), LL128 in the flag of every line, LL in a header line that thread 0
// compares (NOTE [LL header line]). Ranks that meet on one path with different arguments both get kMismatch
// as soon as both arrived. Before the comparison the barrier kernels write only staging memory and, in the
// staged all-gather and broadcast, this rank's own data into its own output, so the all-reduce outputs stay
// untouched; LL128 stores only lines whose flag matched, so its outputs stay untouched too; LL's other threads
// reduce the lines they receive while thread 0 compares, so its outputs are undefined (inside their bounds).
// Ranks on different paths (LL lines, LL128 lines, staging + signals) exchange nothing; each kernel announces
// {seq, header} when it starts, and a wait that polls finds the peer's announcement for the same seq with
// another header (NOTE [op announcements] in device/signal.h): kMismatch too, long before the deadline. Only
// an SM kernel against a copy-engine op (which announces nothing: its stream cannot know the device seq) still
// ends at the deadline.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using Clock = std::chrono::steady_clock;
using testing::RankEnv;

/// The ranks of every case: all but rank 1 issue the same calls, rank 1 differs. First called by a test body
/// in the parent process (counting GPUs forks a child that initialises CUDA, which a rank that already did
/// must not do); the ranks forked after inherit the value.
int world() {
  static const int w = testing::gpu_test_world();
  return w;
}

/// The op deadline of every case: short, so that the cases that end in it take about a second (scaled for
/// slow tools, NOTE [test timeout scale]).
std::chrono::milliseconds deadline() { return std::chrono::seconds(1) * testing::timeout_scale(); }

// One collective call as one rank issues it (float32 unless said otherwise).
struct Call {
  Collective kind = Collective::kAllReduce;
  size_t count = 0;
  DataType dt = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;  ///< broadcast
  Algorithm algo = Algorithm::kAuto;
};

enum class Outcome { kMismatch, kTimeout };

struct MismatchCase {
  std::string name;
  std::vector<Call> rank0, rank1;  ///< what every rank but 1 / rank 1 issues, in order
  size_t mismatch_at = 0;          ///< index of the first call that differs (on both ranks)
  BufKind buf = BufKind::kDevice;
  Outcome normal = Outcome::kMismatch;  ///< what every rank gets without debug checks
  std::string field = {};               ///< what the debug check must name
  /// Normal mode: the outputs of the mismatched calls keep their poison (but for this rank's own data, see
  /// own_range()); false where the path leaves them undefined (LL).
  bool output_kept = true;
};

size_t in_bytes(const Call& c) { return c.count * dtype_size(c.dt); }
size_t out_bytes(const Call& c) {
  return (c.kind == Collective::kAllGather ? world() : 1) * c.count * dtype_size(c.dt);
}

// The output bytes [first, first + in_bytes) that the call may fill with this rank's own input before its
// first barrier (staged all-gather: its own block; staged broadcast: the root's local copy). Empty: none.
std::pair<size_t, size_t> own_range(const Call& c, int me) {
  if (c.kind == Collective::kAllGather) return {me * in_bytes(c), in_bytes(c)};
  if (c.kind == Collective::kBroadcast && c.root == me) return {0, in_bytes(c)};
  return {0, 0};
}

// Sizes in float32 elements.
constexpr size_t kKB = 256;  // 1 KB of float32
constexpr size_t kMB = 1024 * kKB;

/// The harness's test config (1 MB staging) with the all-reduce path table pinned, so that every case stays
/// on the path it is about whatever the defaults become: LL up to 512 KB, LL128 up to 2 MB, the staged
/// one-shot up to 4 MB, then two-shot (pushing to the peers' outputs from 8 MB when the output is in the heap;
/// two-shot calls up to 2 MB on the LL128 lines). The last three are 16 bytes off the library's defaults:
/// measured_cuda_tuning (src/algos/select.cc) replaces fields left at their defaults with its values for more than 2
/// ranks, and the cases must keep their paths at every world size.
Config mismatch_config(bool debug) {
  Config c = testing::HarnessOptions::default_test_config();
  c.timeout = deadline();
  // No case runs through NCCL, and its creation would have to finish within the 1 s deadline too (it took
  // longer on 2 x H200 while another 2-rank suite ran on the same host).
  c.nccl = NcclInit::kOff;
  c.debug_checks = debug;
  c.tuning.cuda_ll_max_bytes = size_t{512} << 10;
  c.tuning.cuda_ll_gather_max_bytes = size_t{512} << 10;  // all-gather blocks: LL up to 512 KB, then direct
  c.tuning.cuda_ll128_max_bytes = size_t{2} << 20;
  c.tuning.cuda_one_shot_max_bytes = (size_t{4} << 20) - 16;
  c.tuning.cuda_two_shot_push_min_bytes = (size_t{8} << 20) - 16;
  c.tuning.cuda_ll128_two_shot_max_bytes = (size_t{2} << 20) - 16;
  c.tuning.cuda_ll128_gather_max_bytes = (size_t{1} << 20) - 16;  // all-gather blocks above 512 KB: LL128 to 1 MB
  c.tuning.cuda_ll128_reduce_scatter_max_bytes = (size_t{1} << 20) - 16;
  return c;
}

std::vector<MismatchCase> cases() {
  auto ar = [](size_t count, DataType dt = DataType::kFloat32, ReduceOp op = ReduceOp::kSum) {
    return Call{.kind = Collective::kAllReduce, .count = count, .dt = dt, .op = op};
  };
  auto ar_algo = [](size_t count, Algorithm algo) {
    return Call{.kind = Collective::kAllReduce, .count = count, .algo = algo};
  };
  auto ag = [](size_t count) {
    return Call{.kind = Collective::kAllGather, .count = count, .algo = Algorithm::kDirect};
  };
  auto bc = [](size_t count, int root) {
    return Call{.kind = Collective::kBroadcast, .count = count, .root = root, .algo = Algorithm::kDirect};
  };
  auto ag_ce = [](size_t count) {
    return Call{.kind = Collective::kAllGather, .count = count, .algo = Algorithm::kCopyEngine};
  };
  auto bc_ce = [](size_t count, int root) {
    return Call{.kind = Collective::kBroadcast, .count = count, .root = root, .algo = Algorithm::kCopyEngine};
  };
  constexpr size_t kLL = 1 * kKB, kLL128 = 1 * kMB, kStaged = 3 * kMB;  // one size on each one-shot path
  constexpr DataType kI32 = DataType::kInt32;
  constexpr ReduceOp kMaxOp = ReduceOp::kMax;
  return {
      // LL: the header line (NOTE [LL header line]); outputs undefined.
      {.name = "count_ll", .rank0 = {ar(kLL)}, .rank1 = {ar(2 * kLL)}, .field = "count", .output_kept = false},
      {.name = "dtype_ll", .rank0 = {ar(kLL)}, .rank1 = {ar(kLL, kI32)}, .field = "dtype", .output_kept = false},
      {.name = "op_ll",
       .rank0 = {ar(kLL)},
       .rank1 = {ar(kLL, DataType::kFloat32, kMaxOp)},
       .field = "op",
       .output_kept = false},
      {.name = "skipped_ll",
       .rank0 = {ar(kLL), ar(2 * kLL), ar(3 * kLL)},
       .rank1 = {ar(kLL), ar(3 * kLL)},
       .mismatch_at = 1,
       .field = "count",
       .output_kept = false},
      // Different one-shot paths exchange nothing (LL lines, LL128 lines and staging + signals are apart): the
      // op announcements (NOTE [op announcements]). No path stores a line it did not receive from its own path's
      // peer, so the outputs keep their poison (LL too: it receives nothing here).
      {.name = "count_ll_vs_ll128", .rank0 = {ar(512 * kKB)}, .rank1 = {ar(kLL128)}, .field = "count"},
      {.name = "count_ll128_vs_staged", .rank0 = {ar(2 * kMB)}, .rank1 = {ar(kStaged)}, .field = "count"},
      {.name = "skipped_across_paths",  // the skipping rank's next call is on another path
       .rank0 = {ar(kLL), ar(kLL128), ar(kStaged)},
       .rank1 = {ar(kLL), ar(kStaged)},
       .mismatch_at = 1,
       .field = "count"},
      // LL128: the header in every line's flag.
      {.name = "count_ll128", .rank0 = {ar(kLL128)}, .rank1 = {ar(kLL128 + 4)}, .field = "count"},
      {.name = "dtype_ll128", .rank0 = {ar(kLL128)}, .rank1 = {ar(kLL128, kI32)}, .field = "dtype"},
      {.name = "op_ll128", .rank0 = {ar(kLL128)}, .rank1 = {ar(kLL128, DataType::kFloat32, kMaxOp)}, .field = "op"},
      // The LL128 two-shot: the header in every line's flag, in both phases; against the LL128 one-shot on the
      // same lines, the headers' path.
      {.name = "count_ll128_two_shot",
       .rank0 = {ar_algo(kLL128, Algorithm::kTwoShot)},
       .rank1 = {ar_algo(kLL128 + 4, Algorithm::kTwoShot)},
       .field = "count"},
      {.name = "algorithm_ll128_one_vs_two_shot",
       .rank0 = {ar_algo(kLL128, Algorithm::kOneShot)},
       .rank1 = {ar_algo(kLL128, Algorithm::kTwoShot)},
       .field = "algorithm"},
      // Staged one-shot and two-shot: the header in the first barrier.
      {.name = "count_one_shot", .rank0 = {ar(kStaged)}, .rank1 = {ar(kStaged + 4)}, .field = "count"},
      {.name = "dtype", .rank0 = {ar(kStaged)}, .rank1 = {ar(kStaged, kI32)}, .field = "dtype"},
      {.name = "op", .rank0 = {ar(kStaged)}, .rank1 = {ar(kStaged, DataType::kFloat32, kMaxOp)}, .field = "op"},
      {.name = "count_two_shot", .rank0 = {ar(16 * kMB)}, .rank1 = {ar(8 * kMB)}, .field = "count"},
      {.name = "count_two_shot_push",  // outputs in the heap from 8 MB: push to the peers' outputs
       .rank0 = {ar(16 * kMB)},
       .rank1 = {ar(8 * kMB)},
       .buf = BufKind::kSymmetric,
       .field = "count"},
      {.name = "count_two_shot_zero_copy",  // both buffers in the heap, under 8 MB: pull from the peers' inputs
       .rank0 = {ar(6 * kMB)},
       .rank1 = {ar(5 * kMB)},
       .buf = BufKind::kSymmetric,
       .field = "count"},
      // An all-reduce against an all-gather: the header where both kernels have a barrier or both send LL lines
      // (a small all-gather runs the LL kernel: NOTE [LL all-gather and reduce-scatter]; outputs undefined),
      // else the op announcements.
      {.name = "collective", .rank0 = {ar(kStaged)}, .rank1 = {ag(kStaged / 2)}, .field = "collective"},
      {.name = "collective_heap",
       .rank0 = {ar(kStaged)},
       .rank1 = {ag(kStaged / 2)},
       .buf = BufKind::kSymmetric,
       .field = "collective"},
      {.name = "collective_ll",
       .rank0 = {ar(kLL)},
       .rank1 = {ag(kLL / 2)},
       .field = "collective",
       .output_kept = false},
      {.name = "collective_ll128", .rank0 = {ar(kLL128)}, .rank1 = {ag(kLL128 / 2)}, .field = "collective"},
      // The all-gather on the LL128 lines (NOTE [LL128 all-gather and reduce-scatter]): the header in every line's
      // flag, against another count and against an all-reduce on the same lines.
      {.name = "count_ll128_all_gather", .rank0 = {ag(768 * kKB)}, .rank1 = {ag(768 * kKB + 4)}, .field = "count"},
      {.name = "collective_ll128_lines", .rank0 = {ar(kLL128)}, .rank1 = {ag(768 * kKB)}, .field = "collective"},
      // An SM all-gather against a copy-engine one: the copy engine's stream announces nothing and the kernel
      // writes nothing the watchdog reads, so both wait for their deadline.
      {.name = "algorithm_sm_vs_copy_engine",
       .rank0 = {ag(256 * kKB)},
       .rank1 = {ag_ce(256 * kKB)},
       .normal = Outcome::kTimeout,
       .field = "algorithm",
       .output_kept = false},
      {.name = "root", .rank0 = {bc(kMB, 0)}, .rank1 = {bc(kMB, 1)}, .field = "root"},
      {.name = "root_ll",  // a small broadcast runs its LL kernel (NOTE [LL broadcast]); outputs undefined
       .rank0 = {bc(kLL, 0)},
       .rank1 = {bc(kLL, 1)},
       .field = "root",
       .output_kept = false},
      {.name = "root_heap", .rank0 = {bc(kMB, 0)}, .rank1 = {bc(kMB, 1)}, .buf = BufKind::kSymmetric, .field = "root"},
      // Rank 1 skips the second of three all-reduces of different sizes (a gradient sequence): its third meets
      // rank 0's second. (A skipped call with the same arguments as the next one is invisible to any check.)
      {.name = "skipped",
       .rank0 = {ar(5 * kMB / 2), ar(kStaged), ar(7 * kMB / 2)},
       .rank1 = {ar(5 * kMB / 2), ar(7 * kMB / 2)},
       .mismatch_at = 1,
       .field = "count"},
      {.name = "skipped_ll128",
       .rank0 = {ar(kLL128), ar(3 * kMB / 2), ar(2 * kMB)},
       .rank1 = {ar(kLL128), ar(2 * kMB)},
       .mismatch_at = 1,
       .field = "count"},
      // Copy engine: the op header in every barrier slot; the watchdog names the rank whose slots prove it runs
      // another op within a few readings (NOTE [copy-engine early mismatch]), well before the deadline, and
      // releases the stream, whose copies then run on garbage (outputs undefined). The rank released first
      // goes on to its next call and writes that call's header into the slower ranks' slots, with its gave-up
      // word (NOTE [copy-engine stall]): the skipped case checks that they still name rank 1, and that rank 1
      // names another rank early too.
      {.name = "count_copy_engine",
       .rank0 = {ag_ce(256 * kKB)},
       .rank1 = {ag_ce(256 * kKB + 4)},
       .field = "count",
       .output_kept = false},
      {.name = "count_copy_engine_heap",  // zero-copy: the peers' heap buffers are read in place
       .rank0 = {ag_ce(256 * kKB)},
       .rank1 = {ag_ce(256 * kKB + 4)},
       .buf = BufKind::kSymmetric,
       .field = "count",
       .output_kept = false},
      {.name = "collective_copy_engine",
       .rank0 = {ag_ce(kMB / 2)},
       .rank1 = {bc_ce(kMB, 0)},
       .field = "collective",
       .output_kept = false},
      {.name = "root_copy_engine",
       .rank0 = {bc_ce(kMB, 0)},
       .rank1 = {bc_ce(kMB, 1)},
       .field = "root",
       .output_kept = false},
      {.name = "skipped_copy_engine",
       .rank0 = {ag_ce(64 * kKB), ag_ce(128 * kKB), ag_ce(192 * kKB)},
       .rank1 = {ag_ce(64 * kKB), ag_ce(192 * kKB)},
       .mismatch_at = 1,
       .field = "count",
       .output_kept = false},
  };
}

std::shared_ptr<Work> issue(Communicator& comm, const Call& c, const void* in, void* out, cudaStream_t s) {
  const CollOptions o{.stream = s, .algorithm = c.algo};
  switch (c.kind) {
    case Collective::kAllReduce: return comm.all_reduce_async(in, out, c.count, c.dt, c.op, o);
    case Collective::kAllGather: return comm.all_gather_async(in, out, c.count, c.dt, o);
    case Collective::kBroadcast: return comm.broadcast_async(in, out, c.count, c.dt, c.root, o);
    default: throw std::logic_error("mismatch_test: no such call in the table");
  }
}

/// A matched LL all-reduce, checked exactly: the communicator works and the mismatch comes mid-stream.
void warm_up(Communicator& comm) {
  const int me = comm.rank();
  const size_t n = 1 * kKB;
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, n * 4), cudaSuccess);
  std::vector<uint8_t> host = make_input(DataType::kFloat32, ReduceOp::kSum, 99, me, 0, n);
  ASSERT_EQ(cudaMemcpy(buf, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  comm.all_reduce(buf, buf, n, DataType::kFloat32, ReduceOp::kSum);
  ASSERT_EQ(cudaMemcpy(host.data(), buf, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  comm.check();
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    uint8_t want[4];
    expected_reduce(DataType::kFloat32, ReduceOp::kSum, 99, world(), i, want);
    wrong += std::memcmp(host.data() + 4 * i, want, 4) != 0;
  }
  ASSERT_EQ(wrong, 0u) << "the matched warm-up all-reduce is wrong";
  cudaFree(buf);
}

/// Checks the output of call j: the guards around it, then its contents: a call before the mismatch holds the
/// exact result; from the mismatch on, every byte is still poison (nothing was launched, in debug mode) or,
/// where the path keeps outputs, poison but for this rank's own data in own_range().
void check_output(GuardedBuffer& buf, const char* out, const Call& c, const std::vector<uint8_t>& input, int me,
                  bool matched, bool debug, bool kept, const std::string& what) {
  bool guards = false;
  std::vector<uint8_t> got = buf.read(out, out_bytes(c), &guards);
  EXPECT_TRUE(guards) << what << ": bytes around the output were overwritten";
  if (matched && c.kind == Collective::kAllGather) {  // block r holds rank r's input
    size_t wrong = 0;
    for (int r = 0; r < world(); ++r) {
      const std::vector<uint8_t> want = make_input(c.dt, c.op, 1, r, 0, c.count);
      wrong += std::memcmp(got.data() + r * want.size(), want.data(), want.size()) != 0;
    }
    EXPECT_EQ(wrong, 0u) << what << ": the matched all-gather before the mismatch is wrong in " << wrong << " blocks";
    return;
  }
  if (matched) {  // the table's other matched calls are all-reduces
    const size_t es = dtype_size(c.dt);
    size_t wrong = 0;
    for (size_t i = 0; i < c.count; ++i) {
      uint8_t want[8];
      expected_reduce(c.dt, c.op, 1, world(), i, want);
      wrong += std::memcmp(got.data() + i * es, want, es) != 0;
    }
    EXPECT_EQ(wrong, 0u) << what << ": the matched call before the mismatch is wrong";
    return;
  }
  if (!debug && !kept) return;
  const auto [first, len] = debug ? std::pair<size_t, size_t>{0, 0} : own_range(c, me);
  size_t written = 0, first_written = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool own = i >= first && i < first + len && got[i] == input[i - first];
    if (got[i] != kPoisonByte && !own) {
      ++written;
      first_written = std::min(first_written, i);
    }
  }
  EXPECT_EQ(written, 0u) << what << ": " << written << " of " << got.size()
                         << " output bytes of a mismatched call were written (first at byte " << first_written << ")";
}

void run_case(RankEnv& env, const MismatchCase& mc, bool debug) {
  auto comm = env.make_comm(cuda_comm_options());
  const int me = comm->rank();
  const std::vector<Call>& mine = me == 1 ? mc.rank1 : mc.rank0;
  ASSERT_NO_FATAL_FAILURE(warm_up(*comm));

  // Buffer slot j serves call j of either rank: the same capacities on both ranks (heap allocations are
  // collective and must match).
  const size_t slots = std::max(mc.rank0.size(), mc.rank1.size());
  std::vector<std::unique_ptr<GuardedBuffer>> ins, outs;
  for (size_t j = 0; j < slots; ++j) {
    size_t cap = 0;
    for (const auto* calls : {&mc.rank0, &mc.rank1}) {
      if (j < calls->size()) cap = std::max({cap, in_bytes((*calls)[j]), out_bytes((*calls)[j])});
    }
    ins.push_back(std::make_unique<GuardedBuffer>(*comm, mc.buf, cap));
    outs.push_back(std::make_unique<GuardedBuffer>(*comm, mc.buf, cap));
    ASSERT_NE(ins.back()->base(), nullptr);
    ASSERT_NE(outs.back()->base(), nullptr);
  }
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<char*> in_ptrs, out_ptrs;
  for (size_t j = 0; j < mine.size(); ++j) {
    const Call& c = mine[j];
    inputs.push_back(make_input(c.dt, c.op, 1, me, 0, c.count));
    in_ptrs.push_back(ins[j]->prepare(0, in_bytes(c), 0));
    ASSERT_EQ(cudaMemcpy(in_ptrs[j], inputs[j].data(), in_bytes(c), cudaMemcpyHostToDevice), cudaSuccess);
    out_ptrs.push_back(outs[j]->prepare(0, out_bytes(c), kPoisonByte));
  }
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  testing::store_barrier(*env.store, "mismatch/armed", world());

  // Issue every call (a later one may throw the error an earlier one recorded), then wait for each.
  const auto t0 = Clock::now();
  std::optional<Error> err;
  std::optional<size_t> thrown_by;  // the call whose issue threw
  double elapsed = 0;
  auto caught = [&](const Error& e) {
    if (err) return;
    err = e;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::vector<std::shared_ptr<Work>> works;
  for (size_t j = 0; j < mine.size() && !err; ++j) {
    try {
      works.push_back(issue(*comm, mine[j], in_ptrs[j], out_ptrs[j], s));
    } catch (const Error& e) {
      caught(e);
      thrown_by = j;
    }
  }
  for (auto& w : works) {
    try {
      w->wait();
    } catch (const Error& e) {
      caught(e);
    }
  }
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess) << "the failed kernels must exit cleanly";
  // A rank that destroys its communicator while the other still waits would turn the other's error into
  // kPeerDead ("left the communicator").
  testing::store_barrier(*env.store, "mismatch/reported", world());

  const std::string who = fmt::format("rank {} ({} mode)", me, debug ? "debug-check" : "normal");
  SCOPED_TRACE(err ? fmt::format("{} got after {:.3f} s: {}", who, elapsed, err->what()) : who + " got no error");
  if (!err) {
    ADD_FAILURE() << who << ": no error: the mismatched call(s) completed silently";
  } else {
    const ErrorCode want = debug || mc.normal == Outcome::kMismatch ? ErrorCode::kMismatch : ErrorCode::kTimeout;
    EXPECT_EQ(err->code(), want) << who << ": " << err->what();
    // The others name rank 1. Rank 1 names every other rank in debug mode (each record differs from its
    // own) and, from a device wait or header compare, the one peer whose failure was recorded first.
    std::vector<int> others;
    for (int p = 0; p < world(); ++p) {
      if (p != 1) others.push_back(p);
    }
    const std::vector<int> named = err->ranks();
    if (me != 1) {
      EXPECT_EQ(named, std::vector<int>{1}) << who << ": " << err->what();
    } else if (debug) {
      EXPECT_EQ(named, others) << who << ": " << err->what();
    } else {
      EXPECT_TRUE(named.size() == 1 && std::ranges::find(others, named[0]) != others.end())
          << who << ": " << err->what();
    }
    const double limit = std::chrono::duration<double>(deadline()).count();
    if (err->code() == ErrorCode::kTimeout) {
      EXPECT_GE(elapsed, 0.9 * limit) << who << ": a timeout before the deadline: " << err->what();
      EXPECT_LT(elapsed, limit + 1.5) << who << ": the timeout took " << elapsed << " s";
    } else {
      // Not at the deadline (>= 0.9 x), for the copy engine too.
      EXPECT_LT(elapsed, 0.8 * limit) << who << ": the mismatch took " << elapsed << " s: " << err->what();
    }
    if (debug) {
      EXPECT_EQ(thrown_by, std::optional<size_t>(mc.mismatch_at))
          << who << ": the debug check must throw from the mismatched call itself, before launching it";
      const std::string msg = err->message();
      EXPECT_NE(msg.find(fmt::format("{}: rank {} has ", mc.field, me)), std::string::npos) << who << ": " << msg;
      for (int p : named)
        EXPECT_NE(msg.find(fmt::format(", rank {} has ", p)), std::string::npos) << who << ": " << msg;
    }
    try {
      comm->check();
      ADD_FAILURE() << who << ": the error is not sticky";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), err->code()) << who << ": " << e.what();
    }
  }
  for (size_t j = 0; j < mine.size(); ++j) {
    check_output(*outs[j], out_ptrs[j], mine[j], inputs[j], me, j < mc.mismatch_at, debug, mc.output_kept,
                 fmt::format("{}, call {}", who, j));
  }
  expect_gpu_usable();
  cudaStreamDestroy(s);
}

std::string case_name(const ::testing::TestParamInfo<MismatchCase>& info) { return info.param.name; }
void PrintTo(const MismatchCase& c, std::ostream* os) { *os << c.name; }

class GpuMismatch : public ::testing::TestWithParam<MismatchCase> {};

// Normal mode: the per-kernel header check (NOTE [what the header check sees]) or, where it cannot see the
// peer, the device deadline; asserted per case exactly as the code promises it.
TEST_P(GpuMismatch, EveryRankGetsThePromisedError) {
  const MismatchCase& mc = GetParam();
  testing::HarnessOptions opt;
  opt.config = mismatch_config(false);
  testing::expect_success(
      world(), [&mc](RankEnv& env) { run_case(env, mc, false); }, opt);
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuMismatch, ::testing::ValuesIn(cases()), case_name);

class GpuMismatchDebugChecks : public ::testing::TestWithParam<MismatchCase> {};

// Debug checks: the arguments are compared through the store before launch, on every path (LL included).
TEST_P(GpuMismatchDebugChecks, ReportTheFieldAndRanksBeforeLaunch) {
  testing::HarnessOptions opt;
  opt.config = mismatch_config(true);
  const MismatchCase& mc = GetParam();
  testing::expect_success(
      world(), [&mc](RankEnv& env) { run_case(env, mc, true); }, opt);
}

// Buffer kinds change nothing before launch: the device-buffer cases only.
std::vector<MismatchCase> device_cases() {
  std::vector<MismatchCase> v = cases();
  std::erase_if(v, [](const MismatchCase& c) { return c.buf != BufKind::kDevice; });
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuMismatchDebugChecks, ::testing::ValuesIn(device_cases()), case_name);

}  // namespace
}  // namespace symcomm::gputest
