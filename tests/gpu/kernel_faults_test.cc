// Every device-side wait gives up, on every path: the requirements are that "every device wait checks an abort
// word and a deadline and exits with an error that the host turns into an exception naming the rank", and
// that a peer's death is reported within about a second. GpuFailure's tests show it for one kernel each (the
// barrier for the deadline, the LL all-reduce for abort() and a killed peer; the copy-engine all-gather). Here
// each path that waits for peers, the SM kernels' (staged, zero-copy, push, LL, LL128, multi-tensor, gathered
// bucket flush) and the copy engine's, meets each of three faults while it waits for rank 1:
//   - missing: rank 1 never issues the call; the others get kTimeout naming rank 1 at the op deadline;
//   - killed:  rank 1 SIGKILLs itself 300 ms after the others issued; they get kPeerDead naming rank 1 well
//              before the deadline (20 s here, so that it cannot be what ends the wait);
//   - abort:   rank 0 alone issues the call and calls abort() from another thread 200 ms later: kAborted.
// Every time the stream drains without a CUDA error (the kernel returned, nothing trapped), the error is
// sticky, no byte around the output was written, and the GPU runs fresh work. Before the fault every rank runs
// the same call once, matched, so the path is known to work and the fault comes mid-stream. Each case runs
// eagerly and (suffix _graph) as a replay of a CUDA graph captured once and replayed once matched before.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"
#include "symcomm/bucketer.h"

namespace symcomm::gputest {
namespace {

using Clock = std::chrono::steady_clock;
using testing::RankEnv;

enum class Fault { kMissing, kKilled, kAbort };
enum class Shape { kSingle, kGroup, kBucket };

/// One path: a call (float32 sum; `count` is the all-reduce / broadcast count, or the per-rank block of
/// all-gather, reduce-scatter and all-to-all) with its buffers' kind pinning the path.
struct Path {
  std::string name;
  Collective kind = Collective::kAllReduce;
  size_t count = 0;
  Algorithm algo = Algorithm::kAuto;
  bool sym_in = false, sym_out = false;  ///< buffers in the symmetric heap (zero-copy and push paths)
  Shape shape = Shape::kSingle;          ///< group: two such calls in one group; bucket: two inputs, one flush
};

constexpr size_t kKB = 256, kMB = 1024 * kKB;  // float32 elements
constexpr int kRoot = 1;                       // broadcasts wait for the missing (or dead) rank's data

std::vector<Path> paths() {
  const auto ar = [](std::string n, size_t count, bool sym_in = false, bool sym_out = false) {
    return Path{
        .name = std::move(n), .kind = Collective::kAllReduce, .count = count, .sym_in = sym_in, .sym_out = sym_out};
  };
  const auto direct = [](std::string n, Collective k, size_t count, bool sym_in = false, bool sym_out = false) {
    return Path{.name = std::move(n),
                .kind = k,
                .count = count,
                .algo = Algorithm::kDirect,
                .sym_in = sym_in,
                .sym_out = sym_out};
  };
  const auto ce = [](std::string n, Collective k) {
    return Path{.name = std::move(n), .kind = k, .count = 256 * kKB, .algo = Algorithm::kCopyEngine};
  };
  const auto group = [](std::string n, Collective k) {
    return Path{.name = std::move(n), .kind = k, .count = 256 * kKB, .shape = Shape::kGroup};
  };
  using C = Collective;
  return {
      Path{.name = "barrier", .kind = C::kBarrier},
      // All-reduce (the path table is pinned by kernel_fault_config()).
      ar("all_reduce_ll", 1 * kKB),
      ar("all_reduce_ll128", 1 * kMB),
      ar("all_reduce_one_shot", 3 * kMB),
      Path{.name = "all_reduce_ll128_two_shot", .count = 1 * kMB, .algo = Algorithm::kTwoShot},
      ar("all_reduce_two_shot", 16 * kMB),
      ar("all_reduce_two_shot_push", 16 * kMB, true, true),
      ar("all_reduce_two_shot_zero_copy", 6 * kMB, true, true),
      // Gather-style kernels: LL up to 512 KB blocks, then the staged and the zero-copy exchange (2 MB blocks).
      direct("reduce_scatter_ll", C::kReduceScatter, 16 * kKB),
      direct("reduce_scatter", C::kReduceScatter, 2 * kMB),
      direct("reduce_scatter_zero_copy", C::kReduceScatter, 2 * kMB, true, false),
      direct("all_gather_ll", C::kAllGather, 16 * kKB),
      direct("all_gather", C::kAllGather, 2 * kMB),
      direct("all_gather_zero_copy", C::kAllGather, 2 * kMB, false, true),
      direct("all_to_all_ll", C::kAllToAll, 16 * kKB),
      direct("all_to_all", C::kAllToAll, 2 * kMB),
      direct("all_to_all_zero_copy", C::kAllToAll, 2 * kMB, false, true),
      // LL128 above LL's 512 KB blocks, up to 1 MB blocks (kernel_fault_config()).
      direct("reduce_scatter_ll128", C::kReduceScatter, 768 * kKB),
      direct("all_gather_ll128", C::kAllGather, 768 * kKB),
      direct("all_to_all_ll128", C::kAllToAll, 768 * kKB),
      direct("broadcast_ll", C::kBroadcast, 16 * kKB),
      direct("broadcast", C::kBroadcast, 2 * kMB),
      direct("broadcast_zero_copy", C::kBroadcast, 2 * kMB, false, true),
      // Multi-tensor kernels of a group (NOTE [cuda group fusion]).
      group("group_all_reduce", C::kAllReduce),
      group("group_reduce_scatter", C::kReduceScatter),
      group("group_all_gather", C::kAllGather),
      // The bucketer's gathered reduce-scatter (one kernel reading the inputs where they are).
      Path{.name = "bucket_flush", .kind = C::kReduceScatter, .count = 16 * kKB, .shape = Shape::kBucket},
      // Copy engine: stream memory waits released by the backend's watchdog.
      ce("copy_engine_all_gather", C::kAllGather),
      ce("copy_engine_reduce_scatter", C::kReduceScatter),
      ce("copy_engine_all_to_all", C::kAllToAll),
      ce("copy_engine_broadcast", C::kBroadcast),
  };
}

size_t in_elems(const Path& p, int world) {
  switch (p.kind) {
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return p.count * world;
    default: return p.count;
  }
}
size_t out_elems(const Path& p, int world) {
  switch (p.kind) {
    case Collective::kAllGather:
    case Collective::kAllToAll: return p.count * world;
    default: return p.count;
  }
}

/// The op deadline of the missing-rank cases: short, scaled only for slow tools (SYMCOMM_TEST_TIMEOUT_SCALE
/// 20 where ranks share a GPU gives 2 s: the matched call before the fault runs with the ranks time-sliced), and
/// where more than four ranks share a GPU, by world / 4: the ranks' kernels take turns on it, and at 8 ranks the
/// matched staged two-shot (64 MB, two barriers per round) takes ~2.3 s, past a 2 s deadline. The ranks
/// read it back from their communicator's config.
std::chrono::milliseconds deadline(int world) {
  const int turns = ranks_share_gpus() ? std::max(1, world / 4) : 1;
  return std::chrono::seconds(1) * std::max(1, testing::timeout_scale() / 10) * turns;
}

/// The test config with the all-reduce path table pinned as in mismatch_test.cc (LL up to 512 KB, LL128 up to
/// 2 MB, staged one-shot up to 4 MB, two-shot on the LL128 lines up to 2 MB, pushing to heap outputs from 8 MB),
/// 16 bytes off the defaults so that measured_cuda_tuning keeps them at every world size; the gathers on LL up to
/// 512 KB blocks, on LL128 up to 1 MB.
Config kernel_fault_config(Fault f, int world) {
  Config c = testing::HarnessOptions::default_test_config();
  c.timeout = f == Fault::kMissing ? deadline(world) : std::chrono::seconds(20) * testing::timeout_scale();
  c.nccl = NcclInit::kOff;  // no path here runs through NCCL, whose creation would count against the deadline
  c.tuning.cuda_ll_max_bytes = size_t{512} << 10;
  c.tuning.cuda_ll_gather_max_bytes = size_t{512} << 10;
  c.tuning.cuda_ll128_max_bytes = size_t{2} << 20;
  c.tuning.cuda_one_shot_max_bytes = (size_t{4} << 20) - 16;
  c.tuning.cuda_two_shot_push_min_bytes = (size_t{8} << 20) - 16;
  c.tuning.cuda_ll128_two_shot_max_bytes = (size_t{2} << 20) - 16;
  c.tuning.cuda_ll128_gather_max_bytes = (size_t{1} << 20) - 16;
  c.tuning.cuda_ll128_reduce_scatter_max_bytes = (size_t{1} << 20) - 16;
  return c;
}

/// The harness options of a fault case: its config, and a limit per case (a case takes seconds; a wait that never
/// gives up fails its case at this limit instead of stalling the rest).
testing::HarnessOptions fault_options(Fault f, int world) {
  testing::HarnessOptions opt;
  opt.config = kernel_fault_config(f, world);
  opt.timeout = std::chrono::seconds(20) * std::max(1, testing::timeout_scale() / 10);
  return opt;
}

/// Buffers of one case and the calls on them (the same on every rank: heap allocations are collective).
class Calls {
 public:
  Calls(Communicator& comm, const Path& p, cudaStream_t s)
      : comm_(comm),
        p_(p),
        s_(s),
        world_(comm.world_size()),
        reps_(p.shape == Shape::kSingle ? 1 : 2),
        in_(comm, p.sym_in ? BufKind::kSymmetric : BufKind::kDevice, bytes(in_elems(p, world_)) + 2 * kGuard),
        out_(comm, p.sym_out ? BufKind::kSymmetric : BufKind::kDevice, bytes(out_elems(p, world_)) + 2 * kGuard) {
    if (p.shape == Shape::kBucket)
      bucketer_ = std::make_unique<ReduceScatterBucketer>(comm, BucketOptions{.bucket_cap_mb = 1.0});
  }

  bool allocated() const { return in_.base() != nullptr && out_.base() != nullptr; }

  /// Fills the input and poisons the output.
  void prepare() {
    in_ptr_ = in_.prepare(0, bytes(in_elems(p_, world_)), 0);
    fill_input_async(in_ptr_, DataType::kFloat32, ReduceOp::kSum, 5, comm_.rank(), reps_ * in_elems(p_, world_), s_);
    out_ptr_ = out_.prepare(0, bytes(out_elems(p_, world_)), kPoisonByte);
    cudaStreamSynchronize(s_);
  }

  /// Issues the path's call(s) on the prepared buffers; returns what covers them (null for a bucket flush, which
  /// reports through the communicator, and for the blocking forms, which a graph capture records).
  std::shared_ptr<Work> issue(bool blocking) {
    const CollOptions o{.stream = s_, .algorithm = p_.algo};
    const size_t in_step = in_elems(p_, world_) * 4, out_step = out_elems(p_, world_) * 4;
    if (p_.shape == Shape::kBucket) {
      for (int k = 0; k < reps_; ++k) {
        bucketer_->reduce_scatter_async(
            in_ptr_ + k * in_step, p_.count, DataType::kFloat32, ReduceOp::kSum,
            [this](const void*, size_t n) { delivered_ += n; }, o);
      }
      bucketer_->flush();
      return nullptr;
    }
    if (p_.shape == Shape::kGroup) comm_.group_start();
    std::shared_ptr<Work> w;
    for (int k = 0; k < reps_; ++k) w = one(in_ptr_ + k * in_step, out_ptr_ + k * out_step, o, blocking);
    if (p_.shape == Shape::kGroup) {
      if (!blocking) return comm_.group_end_async();
      comm_.group_end();
    }
    return w;
  }

  /// The guards around everything the calls may write.
  bool guards_intact() {
    bool ok = false;
    out_.read(out_ptr_, bytes(out_elems(p_, world_)), &ok);
    return ok;
  }
  size_t delivered() const { return delivered_; }

 private:
  size_t bytes(size_t elems) const { return reps_ * elems * 4; }

  std::shared_ptr<Work> one(const char* in, char* out, const CollOptions& o, bool blocking) {
    constexpr DataType f = DataType::kFloat32;
    if (blocking) {
      switch (p_.kind) {
        case Collective::kBarrier: comm_.barrier(o); break;
        case Collective::kAllReduce: comm_.all_reduce(in, out, p_.count, f, ReduceOp::kSum, o); break;
        case Collective::kReduceScatter: comm_.reduce_scatter(in, out, p_.count, f, ReduceOp::kSum, o); break;
        case Collective::kAllGather: comm_.all_gather(in, out, p_.count, f, o); break;
        case Collective::kAllToAll: comm_.all_to_all(in, out, p_.count, f, o); break;
        case Collective::kBroadcast: comm_.broadcast(in, out, p_.count, f, kRoot, o); break;
      }
      return nullptr;
    }
    switch (p_.kind) {
      case Collective::kBarrier: return comm_.barrier_async(o);
      case Collective::kAllReduce: return comm_.all_reduce_async(in, out, p_.count, f, ReduceOp::kSum, o);
      case Collective::kReduceScatter: return comm_.reduce_scatter_async(in, out, p_.count, f, ReduceOp::kSum, o);
      case Collective::kAllGather: return comm_.all_gather_async(in, out, p_.count, f, o);
      case Collective::kAllToAll: return comm_.all_to_all_async(in, out, p_.count, f, o);
      case Collective::kBroadcast: return comm_.broadcast_async(in, out, p_.count, f, kRoot, o);
    }
    return nullptr;
  }

  Communicator& comm_;
  const Path& p_;
  cudaStream_t s_;
  int world_;
  int reps_;
  GuardedBuffer in_, out_;
  char* in_ptr_ = nullptr;
  char* out_ptr_ = nullptr;
  std::unique_ptr<ReduceScatterBucketer> bucketer_;
  size_t delivered_ = 0;
};

bool issues(Fault f, int rank) { return f == Fault::kAbort ? rank == 0 : rank != 1; }

/// Every rank runs each of `calls` once, matched (the path works on this communicator), then prepares them again.
void run_matched(Communicator& comm, cudaStream_t s, std::initializer_list<Calls*> calls) {
  for (Calls* c : calls) {
    c->prepare();
    c->issue(false)->wait();
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  comm.check();
  for (Calls* c : calls) c->prepare();
}

/// Captures `calls` (the blocking forms) into a graph, instantiates it into *exec and replays it once, matched on
/// every rank, on prepared buffers.
void capture_and_replay(Communicator& comm, Calls& calls, cudaStream_t s, cudaGraphExec_t* exec) {
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  calls.issue(true);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(exec, g, 0), cudaSuccess);
  cudaGraphDestroy(g);
  calls.prepare();
  ASSERT_EQ(cudaGraphLaunch(*exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  comm.check();
}

/// What a call that should fail threw (none: it completed), and how long it took from `t0`: `call` issues it
/// (a returned Work is waited for), then the stream is synchronised and the communicator checked (a graph replay
/// and a bucket flush report there). The stream must drain cleanly whatever happened.
struct Outcome {
  std::optional<Error> err;
  double took = 0;
};
Outcome run_to_error(Communicator& comm, cudaStream_t s, const std::function<std::shared_ptr<Work>()>& call,
                     Clock::time_point t0) {
  Outcome o;
  try {
    if (auto w = call()) w->wait();
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess) << "the failed call must leave the stream cleanly";
    comm.check();
  } catch (const Error& e) {
    o.err = e;
  }
  o.took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess) << "the failed call must leave the stream cleanly";
  return o;
}

/// The faulted call (`call`: eager, or a graph replay) on a rank that issues it, and every check of what it got.
void fail_and_check(Communicator& comm, Calls& calls, Fault fault, cudaStream_t s,
                    const std::function<std::shared_ptr<Work>()>& call) {
  const int me = comm.rank();
  const auto t0 = Clock::now();
  std::thread aborter;
  if (fault == Fault::kAbort) {
    aborter = std::thread([&comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      comm.abort();
    });
  }
  const auto [err, took] = run_to_error(comm, s, call, t0);
  if (aborter.joinable()) aborter.join();
  ASSERT_TRUE(err.has_value()) << "rank " << me << ": the call completed without rank 1";
  SCOPED_TRACE(fmt::format("rank {} after {:.3f} s: {}", me, took, err->what()));
  const double limit = std::chrono::duration<double>(comm.config().timeout).count();
  switch (fault) {
    case Fault::kMissing:
      EXPECT_EQ(err->code(), ErrorCode::kTimeout);
      EXPECT_EQ(err->ranks(), std::vector<int>{1});
      EXPECT_GE(took, 0.9 * limit) << "a timeout before the deadline";
      EXPECT_LT(took, limit + 1.5);
      break;
    case Fault::kKilled:
      EXPECT_EQ(err->code(), ErrorCode::kPeerDead);
      EXPECT_EQ(err->ranks(), std::vector<int>{1});
      EXPECT_LT(took, 0.3 + 1.5);
      break;
    case Fault::kAbort:
      EXPECT_EQ(err->code(), ErrorCode::kAborted);
      EXPECT_LT(took, 0.2 + 1.3);
      break;
  }
  EXPECT_THROW(comm.check(), Error) << "the error is not sticky";
  EXPECT_TRUE(calls.guards_intact()) << "bytes around the output were written";
  expect_gpu_usable();
}

void run_case(RankEnv& env, const Path& path, Fault fault, bool graph) {
  auto comm = env.make_comm(cuda_comm_options());
  const int me = comm->rank(), world = comm->world_size();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  {
    Calls calls(*comm, path, s);
    ASSERT_TRUE(calls.allocated());
    // The matched call: the path works on this communicator (and a bucket exists before any capture).
    calls.prepare();
    if (auto w = calls.issue(false)) w->wait();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    comm->check();
    if (path.shape == Shape::kBucket) {
      ASSERT_EQ(calls.delivered(), 2 * path.count) << "the matched flush";
    }
    if (graph) {
      // Captured once, replayed once matched; the fault then meets a replay (device-side sequence numbers and
      // a deadline taken when the kernel starts, not when it was captured).
      ASSERT_NO_FATAL_FAILURE(capture_and_replay(*comm, calls, s, &exec));
    }
    calls.prepare();
    testing::store_barrier(*env.store, "kernel_faults/armed", world);

    if (issues(fault, me)) {
      fail_and_check(*comm, calls, fault, s, [&]() -> std::shared_ptr<Work> {
        if (!graph) return calls.issue(false);
        EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
        return nullptr;
      });
    } else if (fault == Fault::kKilled) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      ::kill(::getpid(), SIGKILL);
    }
    testing::wait_until_checked(env, "kernel_faults", [fault](int r) { return issues(fault, r); });
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
}

using Param = std::tuple<Path, Fault, bool>;  ///< path, fault, graph replay

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::kMissing: return "missing";
    case Fault::kKilled: return "killed";
    case Fault::kAbort: return "abort";
  }
  return "?";
}
std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::get<0>(info.param).name + "_" + fault_name(std::get<1>(info.param)) +
         (std::get<2>(info.param) ? "_graph" : "");
}
void PrintTo(const Path& p, std::ostream* os) { *os << p.name; }
void PrintTo(Fault f, std::ostream* os) { *os << fault_name(f); }

class GpuKernelFaults : public ::testing::TestWithParam<Param> {};

TEST_P(GpuKernelFaults, EveryWaitGivesUpNamingTheRank) {
  const auto& [path, fault, graph] = GetParam();
  const int world = testing::gpu_test_world();
  testing::HarnessOptions opt = fault_options(fault, world);
  if (fault == Fault::kKilled) opt.may_fail.push_back(1);
  testing::expect_success(
      world, [&](RankEnv& env) { run_case(env, path, fault, graph); }, opt);
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuKernelFaults,
                         ::testing::Combine(::testing::ValuesIn(paths()),
                                            ::testing::Values(Fault::kMissing, Fault::kKilled, Fault::kAbort),
                                            ::testing::Bool()),
                         param_name);

// Copy-engine calls queued behind a timeout (NOTE [copy-engine stall] in src/algos/ce_plan.cc). Rank 1 never
// calls; rank 0 issues a copy-engine all-gather and then a reduce-scatter (another op header) at once, the
// other ranks the same two 300 ms later. Rank 0 reaches its deadline first, and its watchdog releases it into
// the reduce-scatter, whose arrival lands in the pads of the ranks still waiting in the all-gather. They must
// still name rank 1 (kTimeout), not rank 0, which only went on. Needs 3 ranks or more.
void run_queued_copy_engine_case(RankEnv& env) {
  auto comm = env.make_comm(cuda_comm_options());
  const int me = comm->rank(), world = comm->world_size();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    const Path ag{.name = "ag", .kind = Collective::kAllGather, .count = 256 * kKB, .algo = Algorithm::kCopyEngine};
    const Path rs{.name = "rs", .kind = Collective::kReduceScatter, .count = 256 * kKB, .algo = Algorithm::kCopyEngine};
    Calls first(*comm, ag, s), second(*comm, rs, s);
    ASSERT_TRUE(first.allocated() && second.allocated());
    ASSERT_NO_FATAL_FAILURE(run_matched(*comm, s, {&first, &second}));
    testing::store_barrier(*env.store, "queued_ce/armed", world);
    if (me != 1) {
      if (me != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      fail_and_check(*comm, first, Fault::kMissing, s, [&] {
        first.issue(false);
        return second.issue(false);
      });
      EXPECT_TRUE(second.guards_intact()) << "bytes around the second call's output were written";
    }
    testing::wait_until_checked(env, "queued_ce", [](int r) { return r != 1; });
  }
  cudaStreamDestroy(s);
}

// A skipped copy-engine call (NOTE [copy-engine op instance] in src/algos/ce_plan.cc). Every rank but 1 issues
// an all-gather of one size and then one of another; rank 1 skips the first and issues the second 300 ms late.
// The others see rank 1's other op in their slots and fail (NOTE [copy-engine early mismatch]), and their
// watchdogs release them into the second all-gather, which has rank 1's arguments: that must not complete
// rank 1's call. Every rank gets kMismatch well before the deadline: the others naming rank 1, rank 1 naming
// another rank.
void run_skipped_copy_engine_case(RankEnv& env) {
  auto comm = env.make_comm(cuda_comm_options());
  const int me = comm->rank(), world = comm->world_size();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    const auto ag = [](size_t count) {
      return Path{.name = "ag", .kind = Collective::kAllGather, .count = count, .algo = Algorithm::kCopyEngine};
    };
    const Path first_path = ag(256 * kKB), second_path = ag(128 * kKB);
    Calls first(*comm, first_path, s), second(*comm, second_path, s);
    ASSERT_TRUE(first.allocated() && second.allocated());
    ASSERT_NO_FATAL_FAILURE(run_matched(*comm, s, {&first, &second}));
    testing::store_barrier(*env.store, "skipped_ce/armed", world);
    if (me == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto [err, took] = run_to_error(
        *comm, s,
        [&] {
          if (me != 1) first.issue(false);
          return second.issue(false);
        },
        Clock::now());
    ASSERT_TRUE(err.has_value()) << "rank " << me << ": the calls completed although rank 1 skipped one";
    SCOPED_TRACE(fmt::format("rank {} after {:.3f} s: {}", me, took, err->what()));
    EXPECT_EQ(err->code(), ErrorCode::kMismatch);
    const std::vector<int> named = err->ranks();
    if (me != 1) {
      EXPECT_EQ(named, std::vector<int>{1});
    } else {
      EXPECT_TRUE(named.size() == 1 && named[0] != 1);
    }
    const double limit = std::chrono::duration<double>(comm->config().timeout).count();
    EXPECT_LT(took, 0.8 * limit) << "the watchdog reports a proven mismatch before the deadline";
    EXPECT_TRUE(first.guards_intact() && second.guards_intact()) << "bytes around an output were written";
    expect_gpu_usable();
    testing::wait_until_checked(env, "skipped_ce", [](int) { return true; });
  }
  cudaStreamDestroy(s);
}

// A copy-engine call that rank 1 issues only after every other rank's deadline for it has passed (NOTE
// [copy-engine late peer] in src/algos/ce_plan.cc). The others time out naming rank 1; their watchdogs released
// their barriers, whose writes sit in rank 1's slots, and they move on (they overwrite their inputs). Rank 1's
// call must then fail, naming a rank that gave up, well before its own deadline, and not complete by reading
// moved-on buffers. Eagerly and as the replay of a graph captured once and replayed once matched before.
void run_late_copy_engine_case(RankEnv& env, bool graph) {
  auto comm = env.make_comm(cuda_comm_options());
  const int me = comm->rank(), world = comm->world_size();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  {
    const Path ag{.name = "ag", .kind = Collective::kAllGather, .count = 256 * kKB, .algo = Algorithm::kCopyEngine};
    Calls calls(*comm, ag, s);
    ASSERT_TRUE(calls.allocated());
    ASSERT_NO_FATAL_FAILURE(run_matched(*comm, s, {&calls}));
    if (graph) {
      ASSERT_NO_FATAL_FAILURE(capture_and_replay(*comm, calls, s, &exec));
      calls.prepare();
    }
    const auto call = [&]() -> std::shared_ptr<Work> {
      if (!graph) return calls.issue(false);
      EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
      return nullptr;
    };
    testing::store_barrier(*env.store, "late_ce/armed", world);
    if (me != 1) {
      fail_and_check(*comm, calls, Fault::kMissing, s, call);
      calls.prepare();  // moved on: the input holds other data now
      env.store->set(fmt::format("late_ce/moved_on/{}", me), "1");
    } else {
      for (int r = 0; r < world; ++r) {
        if (r != 1) env.store->get(fmt::format("late_ce/moved_on/{}", r));
      }
      const auto [err, took] = run_to_error(*comm, s, call, Clock::now());
      ASSERT_TRUE(err.has_value()) << "the late call completed although every peer had given up on it";
      SCOPED_TRACE(fmt::format("rank {} after {:.3f} s: {}", me, took, err->what()));
      EXPECT_EQ(err->code(), ErrorCode::kTimeout);
      const std::vector<int> named = err->ranks();
      EXPECT_TRUE(named.size() == 1 && named[0] != 1) << "names a rank that gave up";
      const double limit = std::chrono::duration<double>(comm->config().timeout).count();
      EXPECT_LT(took, 0.8 * limit) << "nothing can end the wait: it is reported before the deadline";
      EXPECT_THROW(comm->check(), Error) << "the error is not sticky";
      EXPECT_TRUE(calls.guards_intact()) << "bytes around the output were written";
      expect_gpu_usable();
    }
    testing::wait_until_checked(env, "late_ce", [](int) { return true; });
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
}

TEST(GpuCopyEngineFaults, CallAfterThePeersGaveUpFailsInsteadOfReadingMovedOnBuffers) {
  const int world = testing::gpu_test_world();
  testing::expect_success(
      world, [](RankEnv& env) { run_late_copy_engine_case(env, false); }, fault_options(Fault::kMissing, world));
}

TEST(GpuCopyEngineFaults, ReplayAfterThePeersGaveUpFailsInsteadOfReadingMovedOnBuffers) {
  const int world = testing::gpu_test_world();
  testing::expect_success(
      world, [](RankEnv& env) { run_late_copy_engine_case(env, true); }, fault_options(Fault::kMissing, world));
}

TEST(GpuCopyEngineFaults, SkippedCallIsNotCompletedByRanksThatWentOn) {
  const int world = testing::gpu_test_world();
  testing::expect_success(world, run_skipped_copy_engine_case, fault_options(Fault::kMissing, world));
}

TEST(GpuCopyEngineFaults, QueuedCallsBehindATimeoutNameTheMissingRank) {
  const int world = testing::gpu_test_world();
  if (world < 3) GTEST_SKIP() << "needs 3 ranks or more (world size " << world << ")";
  testing::expect_success(world, run_queued_copy_engine_case, fault_options(Fault::kMissing, world));
}

}  // namespace
}  // namespace symcomm::gputest
