// Topology files on the CUDA backend (Config::topology_file, docs/design/topology.md): on GPUs that reach each
// other (several GPUs restricted by the file, or ranks sharing one GPU, SYMCOMM_SHARED_GPU=1), all-reduces,
// all-gathers and reduce-scatters run the topology's schedule (KernelPath::kScheduled), which reaches only the
// peers the links join, and are exact, whatever algorithm is asked for: every dtype and op, counts 0 to several
// inbox rounds, in place or not, cudaMalloc or heap buffers, misaligned; also in a CUDA graph replayed many times
// and in groups. A topology no schedule serves sends them to NCCL or, without it, refuses them (kUnsupported) and
// leaves the communicator usable; a split gets its members' links. A killed rank is reported by every survivor
// naming it, abort() ends the wait, and a rank that never calls makes its neighbours time out naming it and nobody
// hang. World size: the GPU test world (3 ranks or more).
#include "algos/topology.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collective_sweep.h"
#include "gpu_test_util.h"
#include "harness/rank_harness.h"
#include "harness/temp_files.h"
#include "symcomm/bucketer.h"

namespace symcomm::gputest {
namespace {

using detail::LinkKind;
using detail::Topology;

struct Layout {
  std::string name;
  Topology topology;
};

/// The restricted layouts of `n` ranks (4 or more; a ring of 3 links every pair): a ring and, at 8 ranks, the
/// hybrid cube mesh.
std::vector<Layout> layouts(int n) {
  std::vector<Layout> v{{"ring", Topology::ring(n)}};
  if (n == 8) v.push_back({"hybrid_cube_mesh", Topology::hybrid_cube_mesh()});
  return v;
}

/// Every dtype and op at an odd count (the all-gather has no op), counts 0, 1 and 7, counts of several inbox rounds
/// (with kScratchBytes of staging the inbox halves are 128 KB), in place and not, misaligned by one element, and each
/// algorithm that may be asked for (the schedule runs whatever it is).
std::vector<Case> topology_cases() {
  std::vector<Case> v;
  for (Collective kind : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather}) {
    for (DataType dt : kAllDtypes) {
      for (ReduceOp op : kAllOps) {
        if (kind == Collective::kAllGather && op != ReduceOp::kSum) continue;
        const bool ip = (static_cast<int>(dt) + static_cast<int>(op)) % 2 == 0;
        v.push_back({kind, dt, op, 1031, ip, ip ? 0 : dtype_size(dt)});
      }
    }
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}}) {
      v.push_back({kind, DataType::kFloat32, ReduceOp::kSum, count, false, 0});
    }
  }
  v.push_back({Collective::kAllReduce, DataType::kBFloat16, ReduceOp::kSum, 300007, false, 0, Algorithm::kOneShot});
  v.push_back({Collective::kAllReduce, DataType::kFloat32, ReduceOp::kAvg, 300007, true, 4, Algorithm::kTwoShot});
  v.push_back({Collective::kAllGather, DataType::kFloat32, ReduceOp::kSum, 300007, true, 0, Algorithm::kCopyEngine});
  v.push_back({Collective::kAllGather, DataType::kInt8, ReduceOp::kSum, 700001, false, 1, Algorithm::kDirect});
  v.push_back({Collective::kReduceScatter, DataType::kFloat32, ReduceOp::kMax, 300007, false, 0, Algorithm::kDirect});
  v.push_back({Collective::kReduceScatter, DataType::kFloat16, ReduceOp::kAvg, 150001, true, 2});
  return v;
}

constexpr size_t kScratchBytes = 256 << 10;

/// A CUDA communicator of the test config reading the topology file at `path`.
std::unique_ptr<Communicator> make_topology_comm(RankEnv& env, const std::string& path) {
  CommOptions o = cuda_comm_options();
  o.config = env.config;
  o.config->topology_file = path;
  return env.make_comm(o);
}

#define SKIP_BELOW_FOUR_RANKS() \
  if (gpus() < 4) GTEST_SKIP() << "needs 4 ranks or more: every topology of fewer with a schedule links every pair"

TEST(GpuTopology, CollectivesRunTheirSchedulesExactly) {
  SKIP_BELOW_FOUR_RANKS();
  const int n = gpus();
  testing::TempFiles files;
  std::vector<std::pair<std::string, std::string>> paths;
  for (const Layout& l : layouts(n)) paths.emplace_back(l.name, files.write(l.name + ".json", l.topology.to_json()));
  testing::expect_success(n, [&](RankEnv& env) {
    for (const auto& [name, path] : paths) {
      SCOPED_TRACE(name);
      // One buffer kind: the schedule reads no buffer in place, heap or not.
      const PathCounts p = sweep(env, topology_cases(),
                                 [&](Config& c) {
                                   c.topology_file = path;
                                   c.cuda_scratch_bytes = kScratchBytes;
                                 },
                                 {BufKind::kDevice});
      EXPECT_EQ(p.size(), 1u) << name << ": a case ran on another path than the schedule";
      EXPECT_GT(p.count(KernelPath::kScheduled), 0u) << name;
    }
  });
}

// Three collectives captured once and replayed 200 times, inputs refilled between replays: the schedule's
// sequence and inbox parity live on the device, so every replay is exact. The ranks leave as they finish, without a
// closing barrier: a rank that left cleanly fails only the waits for it (HostControl::left_mask), not a
// neighbour's wait for a rank one step behind.
TEST(GpuTopology, GraphReplaysStayExact) {
  SKIP_BELOW_FOUR_RANKS();
  const int n = gpus();
  testing::TempFiles files;
  const std::string path = files.write("ring.json", Topology::ring(n).to_json());
  testing::expect_success(n, [&](RankEnv& env) {
    auto comm = make_topology_comm(env, path);
    const int me = comm->rank();
    constexpr size_t kCount = 5003;  // all-reduce elements; the gathers' blocks are kCount too
    float *ar = nullptr, *ag_in = nullptr, *ag_out = nullptr, *rs_in = nullptr, *rs_out = nullptr;
    GPU_CHECK(cudaMalloc(&ar, kCount * sizeof(float)));
    GPU_CHECK(cudaMalloc(&ag_in, kCount * sizeof(float)));
    GPU_CHECK(cudaMalloc(&ag_out, n * kCount * sizeof(float)));
    GPU_CHECK(cudaMalloc(&rs_in, n * kCount * sizeof(float)));
    GPU_CHECK(cudaMalloc(&rs_out, kCount * sizeof(float)));
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const CollOptions co{.stream = s};
    cudaGraph_t g = nullptr;
    GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    comm->all_reduce(ar, ar, kCount, DataType::kFloat32, ReduceOp::kSum, co);
    comm->all_gather(ag_in, ag_out, kCount, DataType::kFloat32, co);
    comm->reduce_scatter(rs_in, rs_out, kCount, DataType::kFloat32, ReduceOp::kSum, co);
    GPU_CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec = nullptr;
    GPU_CHECK(cudaGraphInstantiate(&exec, g, 0));
    EXPECT_EQ(comm->last_path(), KernelPath::kScheduled);
    std::vector<float> got(n * kCount);
    for (uint64_t rep = 0; rep < 200; ++rep) {
      const uint64_t seed = 1000 + rep;
      fill_input_async(ar, DataType::kFloat32, ReduceOp::kSum, seed, me, kCount, s);
      fill_input_async(ag_in, DataType::kFloat32, ReduceOp::kSum, seed, me, kCount, s);
      fill_input_async(rs_in, DataType::kFloat32, ReduceOp::kSum, seed, me, n * kCount, s);
      GPU_CHECK(cudaGraphLaunch(exec, s));
      GPU_CHECK(cudaStreamSynchronize(s));
      ASSERT_EQ(count_wrong_sum(ar, kCount, seed, n), 0u) << "all-reduce, replay " << rep;
      GPU_CHECK(cudaMemcpy(got.data(), ag_out, n * kCount * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n * kCount; ++i) {
        float want = 0;
        encode(DataType::kFloat32, input_value(DataType::kFloat32, ReduceOp::kSum, seed, i / kCount, i % kCount),
               &want);
        ASSERT_EQ(got[i], want) << "all-gather, replay " << rep << " element " << i;
      }
      ASSERT_EQ(count_wrong_sum(rs_out, kCount, seed, n, me * kCount), 0u) << "reduce-scatter, replay " << rep;
    }
    comm->check();
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    for (float* p : {ar, ag_in, ag_out, rs_in, rs_out}) cudaFree(p);
  });
}

// A group of like all-reduces runs them one by one on the schedule (the multi-tensor kernels reach every peer),
// exact; the bucketer's flush copies its inputs into the bucket and reduce-scatters it on the schedule (its gathered
// flush reads every peer's inputs).
TEST(GpuTopology, GroupsRunEachCollectiveOnItsSchedule) {
  SKIP_BELOW_FOUR_RANKS();
  const int n = gpus();
  testing::TempFiles files;
  const std::string path = files.write("ring.json", Topology::ring(n).to_json());
  testing::expect_success(n, [&](RankEnv& env) {
    auto comm = make_topology_comm(env, path);
    EXPECT_FALSE(comm->full_peer_access());
    const size_t counts[] = {1, 4099, 70001};
    std::vector<float*> bufs;
    for (size_t c : counts) {
      float* p = nullptr;
      GPU_CHECK(cudaMalloc(&p, c * sizeof(float)));
      fill_input_async(p, DataType::kFloat32, ReduceOp::kSum, c, comm->rank(), c, nullptr);
      bufs.push_back(p);
    }
    GPU_CHECK(cudaDeviceSynchronize());
    comm->group_start();
    for (size_t k = 0; k < bufs.size(); ++k) {
      comm->all_reduce(bufs[k], bufs[k], counts[k], DataType::kFloat32, ReduceOp::kSum);
    }
    comm->group_end();
    GPU_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(comm->last_path(), KernelPath::kScheduled);
    for (size_t k = 0; k < bufs.size(); ++k) {
      EXPECT_EQ(count_wrong_sum(bufs[k], counts[k], counts[k], n), 0u) << "count " << counts[k];
    }
    // The bucketer: two reduce-scatters of n x count inputs in one bucket, one flush.
    {
      ReduceScatterBucketer bucketer(*comm, BucketOptions{.bucket_cap_mb = 4.0});
      std::vector<float*> ins;
      std::vector<size_t> delivered;
      for (size_t c : {size_t{1031}, size_t{20011}}) {
        float* p = nullptr;
        GPU_CHECK(cudaMalloc(&p, n * c * sizeof(float)));
        fill_input_async(p, DataType::kFloat32, ReduceOp::kSum, 70 + c, comm->rank(), n * c, nullptr);
        ins.push_back(p);
      }
      GPU_CHECK(cudaDeviceSynchronize());
      const size_t bucket_counts[] = {1031, 20011};
      for (size_t k = 0; k < ins.size(); ++k) {
        const size_t c = bucket_counts[k];
        bucketer.reduce_scatter_async(
            ins[k], c, DataType::kFloat32, ReduceOp::kSum, [&, c](const void* result, size_t count) {
              EXPECT_EQ(count, c);
              EXPECT_EQ(count_wrong_sum(static_cast<const float*>(result), count, 70 + c, n, comm->rank() * c), 0u)
                  << "bucket part of " << c;
              delivered.push_back(count);
            });
      }
      bucketer.flush();
      GPU_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(delivered.size(), 2u);
      EXPECT_EQ(comm->last_path(), KernelPath::kScheduled);
      for (float* p : ins) cudaFree(p);
    }
    for (float* p : bufs) cudaFree(p);
  });
}

// Pairs only (no schedule): without NCCL (ranks sharing a GPU) the three collectives are refused naming the
// topology and the communicator stays usable (broadcast, barrier); with NCCL they run there. A split into the pairs
// links each pair fully (the usual kernels); a split into the ranks of even number, which a ring leaves unlinked,
// has no schedule either.
TEST(GpuTopology, TopologiesWithoutASchedule) {
  SKIP_BELOW_FOUR_RANKS();
  const int n = gpus();
  if (n % 2 != 0) GTEST_SKIP() << "pairs need an even world size";
  testing::TempFiles files;
  Topology pairs(n);
  for (int a = 0; a + 1 < n; a += 2) pairs.set(a, a + 1, {LinkKind::kNvlink, 2});
  const std::string path = files.write("pairs.json", pairs.to_json());
  const std::string ring = files.write("ring.json", Topology::ring(n).to_json());
  testing::expect_success(n, [&](RankEnv& env) {
    auto comm = make_topology_comm(env, path);
    const int me = comm->rank();
    float *buf = nullptr, *wide = nullptr;
    GPU_CHECK(cudaMalloc(&buf, 64 * sizeof(float)));
    GPU_CHECK(cudaMalloc(&wide, 64 * n * sizeof(float)));
    fill_input_async(buf, DataType::kFloat32, ReduceOp::kSum, 3, me, 64, nullptr);
    GPU_CHECK(cudaDeviceSynchronize());
    const auto all_reduce = [&](Communicator& c) {
      c.all_reduce(buf, buf, 64, DataType::kFloat32, ReduceOp::kSum);
      GPU_CHECK(cudaDeviceSynchronize());
    };
    if (ranks_share_gpus()) {
      const auto refused = [](const char* what, const std::function<void()>& call) {
        try {
          call();
          ADD_FAILURE() << what << " without a schedule or NCCL ran";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
          EXPECT_NE(std::string(e.what()).find(std::string("no ") + what + " schedule"), std::string::npos) << e.what();
        }
      };
      refused("all-reduce", [&] { all_reduce(*comm); });
      refused("all-gather", [&] { comm->all_gather(buf, wide, 64, DataType::kFloat32); });
      refused("reduce-scatter", [&] { comm->reduce_scatter(wide, buf, 64, DataType::kFloat32, ReduceOp::kSum); });
    } else {
      all_reduce(*comm);
      EXPECT_EQ(comm->last_path(), KernelPath::kNccl);
      EXPECT_EQ(count_wrong_sum(buf, 64, 3, n), 0u);
    }
    comm->broadcast(buf, buf, 64, DataType::kFloat32, 1);
    comm->barrier();
    GPU_CHECK(cudaDeviceSynchronize());
    comm->check();
    auto pair = comm->split(me / 2, 0);
    fill_input_async(buf, DataType::kFloat32, ReduceOp::kSum, 4, pair->rank(), 64, nullptr);
    GPU_CHECK(cudaDeviceSynchronize());
    all_reduce(*pair);
    EXPECT_NE(pair->last_path(), KernelPath::kScheduled);
    EXPECT_EQ(count_wrong_sum(buf, 64, 4, 2), 0u);
    pair.reset();
    comm.reset();
    auto ringed = make_topology_comm(env, ring);
    auto evens = ringed->split(me % 2, 0);  // a ring of 4 or more leaves each parity's ranks unlinked
    if (ranks_share_gpus()) {
      EXPECT_THROW(all_reduce(*evens), Error);
    }
    evens->barrier();
    GPU_CHECK(cudaFree(buf));
    GPU_CHECK(cudaFree(wide));
  });
}

enum class Fault { kKilled, kAbort, kMissing };

// Rank 1 dies (SIGKILL) while the others wait in a scheduled all-reduce over a ring: every survivor gets kPeerDead
// naming it within about a second. Rank 0 alone issues one and aborts it: kAborted. Rank 1 never calls: its
// neighbours time out naming it at the deadline, the others time out too (each naming the neighbour it waited for),
// and nobody hangs. In every case the stream drains, the error is sticky and the GPU runs fresh work.
void fault_case(Fault fault) {
  const int n = gpus();
  testing::TempFiles files;
  const std::string path = files.write("ring.json", Topology::ring(n).to_json());
  testing::HarnessOptions opt;
  const int scale = std::max(1, testing::timeout_scale() / 10) * (ranks_share_gpus() ? std::max(1, n / 4) : 1);
  opt.config.timeout = fault == Fault::kMissing ? std::chrono::seconds(1) * scale : std::chrono::seconds(20) * scale;
  opt.config.nccl = NcclInit::kOff;
  opt.config.topology_file = path;
  opt.timeout = std::chrono::seconds(40) * scale;
  if (fault == Fault::kKilled) opt.may_fail = {1};
  const auto issues = [fault](int r) { return fault == Fault::kAbort ? r == 0 : r != 1; };
  testing::expect_success(
      n,
      [&](RankEnv& env) {
        auto comm = env.make_comm(cuda_comm_options());
        const int me = comm->rank();
        constexpr size_t kCount = 1 << 20;
        float* buf = nullptr;
        GPU_CHECK(cudaMalloc(&buf, kCount * sizeof(float)));
        cudaStream_t s;
        GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        fill_input_async(buf, DataType::kFloat32, ReduceOp::kSum, 9, me, kCount, s);
        comm->all_reduce(buf, buf, kCount, DataType::kFloat32, ReduceOp::kSum, {.stream = s});  // matched
        GPU_CHECK(cudaStreamSynchronize(s));
        EXPECT_EQ(comm->last_path(), KernelPath::kScheduled);
        EXPECT_EQ(count_wrong_sum(buf, kCount, 9, n), 0u);
        testing::store_barrier(*env.store, "topology_faults/armed", n);
        if (issues(me)) {
          const auto t0 = std::chrono::steady_clock::now();
          std::thread aborter;
          if (fault == Fault::kAbort) {
            aborter = std::thread([&] {
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              comm->abort();
            });
          }
          std::optional<Error> err;
          try {
            comm->all_reduce(buf, buf, kCount, DataType::kFloat32, ReduceOp::kSum, {.stream = s});
            EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
            comm->check();
          } catch (const Error& e) {
            err = e;
          }
          EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess) << "the failed call must leave the stream cleanly";
          if (aborter.joinable()) aborter.join();
          const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          ASSERT_TRUE(err.has_value()) << "rank " << me << ": the all-reduce completed";
          SCOPED_TRACE(fmt::format("rank {} after {:.3f} s: {}", me, took, err->what()));
          const double limit = std::chrono::duration<double>(comm->config().timeout).count();
          const bool neighbour = me == 0 || me == 2;
          switch (fault) {
            case Fault::kKilled:
              EXPECT_EQ(err->code(), ErrorCode::kPeerDead);
              EXPECT_EQ(err->ranks(), std::vector<int>{1});
              EXPECT_LT(took, 0.3 + 1.5);
              break;
            case Fault::kAbort:
              EXPECT_EQ(err->code(), ErrorCode::kAborted);
              EXPECT_LT(took, 0.2 + 1.3);
              break;
            case Fault::kMissing:
              EXPECT_TRUE(err->code() == ErrorCode::kTimeout || err->code() == ErrorCode::kMismatch) << err->what();
              if (neighbour) {
                EXPECT_EQ(err->code(), ErrorCode::kTimeout);
                EXPECT_EQ(err->ranks(), std::vector<int>{1});
              }
              EXPECT_LT(took, limit + 1.5 * scale);
              break;
          }
          EXPECT_THROW(comm->check(), Error) << "the error is not sticky";
          expect_gpu_usable();
        } else if (fault == Fault::kKilled) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ::kill(::getpid(), SIGKILL);
        }
        testing::wait_until_checked(env, "topology_faults", issues);
        cudaStreamDestroy(s);
        cudaFree(buf);
      },
      opt);
}

TEST(GpuTopology, KilledRankIsNamedByEverySurvivor) {
  SKIP_BELOW_FOUR_RANKS();
  fault_case(Fault::kKilled);
}
TEST(GpuTopology, AbortEndsTheWait) {
  SKIP_BELOW_FOUR_RANKS();
  fault_case(Fault::kAbort);
}
TEST(GpuTopology, MissingRankTimesOutItsNeighboursAndNobodyHangs) {
  SKIP_BELOW_FOUR_RANKS();
  fault_case(Fault::kMissing);
}

}  // namespace
}  // namespace symcomm::gputest
