// CudaMultiNodeCommunicator (symcomm/multinode_cuda.h) on fake nodes of the test world's GPUs: every collective,
// dtype and op on each path the layout has (one node, hierarchical, flat), each output element compared with the
// value computed on the host, outputs poisoned before every call; sends and receives in a group; a killed rank
// named by every survivor. Where the ranks share GPUs (SYMCOMM_SHARED_GPU=1) symcomm communicators stand in for
// NCCL between the fake nodes, so every layout runs there too (point-to-point needs NCCL); with
// SYMCOMM_TEST_NCCL_HOST_PER_RANK=1 as well, each rank presents an NCCL host of its own (NCCL_HOSTID), so NCCL takes
// ranks that share a GPU and runs between the fake nodes over its network transport on loopback.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collective_sweep.h"
#include "gpu_test_util.h"
#include "harness/rank_harness.h"
#include "symcomm/multinode_cuda.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

struct Layout {
  int fake_node_size;
  bool round_robin;
};

std::string describe(const Layout& l) {
  return "fake nodes of " + std::to_string(l.fake_node_size) + (l.round_robin ? " round-robin" : " consecutive");
}

/// The layouts of the test world: one node; nodes of one rank (flat), of two ranks (uniform where the world is
/// even), and two nodes of half the world, consecutive and round-robin.
std::vector<Layout> layouts(int world) {
  std::vector<Layout> v{{world, false}};
  if (world < 2) return v;
  v.push_back({1, false});
  if (world >= 3) v.push_back({2, false});
  if (world >= 4 && world % 2 == 0) {
    if (world / 2 != 2) v.push_back({world / 2, false});
    v.push_back({world / 2, true});
  }
  return v;
}

/// NCCL runs between the nodes: a GPU per rank, or ranks sharing GPUs that each present a host of their own.
bool nccl_between_nodes() {
  if (!ranks_share_gpus()) return true;
  const char* v = std::getenv("SYMCOMM_TEST_NCCL_HOST_PER_RANK");
  return v != nullptr && std::string(v) == "1";
}

std::unique_ptr<CudaMultiNodeCommunicator> make(RankEnv& env, const Layout& l) {
  if (ranks_share_gpus() && nccl_between_nodes()) {
    // Before this process's first NCCL call, which reads the host id once.
    setenv("NCCL_HOSTID", ("symcomm-test-rank" + std::to_string(env.info.rank)).c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  }
  MultiNodeOptions o;
  o.node = cuda_comm_options();
  o.node.config = env.config;
  o.fake_node_size = l.fake_node_size;
  o.fake_round_robin = l.round_robin;
  return CudaMultiNodeCommunicator::create(env.store, env.info, o);
}

/// The hierarchies a call may ask for on layout `l`: kAuto, and the two explicit ones where the layout has them
/// (hierarchical: nodes of equal size above one rank).
std::vector<Hierarchy> hierarchies(const Layout& l, int world) {
  std::vector<Hierarchy> v{Hierarchy::kAuto};
  if (l.fake_node_size >= world) return v;
  v.push_back(Hierarchy::kFlat);
  if (world % l.fake_node_size == 0 && l.fake_node_size > 1) v.push_back(Hierarchy::kHierarchical);
  return v;
}

/// One rank's run of one case: guarded buffers (plain cudaMalloc: the communicator takes ordinary device memory),
/// output poisoned, values compared with the host's.
class NodeRunner {
 public:
  NodeRunner(CudaMultiNodeCommunicator& comm, size_t capacity)
      : comm_(comm),
        in_(comm.node_communicator(), BufKind::kDevice, capacity),
        out_(comm.node_communicator(), BufKind::kDevice, capacity) {
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  }
  ~NodeRunner() { cudaStreamDestroy(stream_); }

  std::string run(const Case& c, Hierarchy h, uint64_t seed) {
    const int n = comm_.world_size(), me = comm_.rank();
    const size_t es = dtype_size(c.dt);
    const CaseElems elems = case_elems(c, n);
    // In place the output buffer holds the input too (reduce-scatter: the whole input); out of place only the
    // output, so that the guard bytes start right after it.
    char* out = out_.prepare(0, (c.in_place ? std::max(elems.in, elems.out) : elems.out) * es, kPoisonByte);
    std::vector<uint8_t> input =
        make_input(c.dt, c.op, seed, c.kind == Collective::kBroadcast ? c.root : me, 0, elems.in);
    const char* in = nullptr;
    if (c.in_place) {
      char* dst = out;
      if (c.kind == Collective::kAllGather) dst = out + me * c.count * es;
      if (c.kind == Collective::kReduceScatter) out = out + me * c.count * es;
      cudaMemcpy(dst, input.data(), input.size(), cudaMemcpyHostToDevice);
      in = dst;
    } else {
      char* p = in_.prepare(0, elems.in * es, 0);
      cudaMemcpy(p, input.data(), input.size(), cudaMemcpyHostToDevice);
      in = p;
    }
    cudaDeviceSynchronize();
    const NodeCollOptions o{.hierarchy = h, .stream = stream_};
    try {
      issue_case(comm_, c, in, out, o);
    } catch (const std::exception& e) {
      return std::string("threw: ") + e.what();
    }
    path_ = comm_.last_path();
    if (cudaStreamSynchronize(stream_) != cudaSuccess) {
      return std::string("stream: ") + cudaGetErrorString(cudaGetLastError());
    }
    bool guards = false;
    std::vector<uint8_t> got = out_.read(out, elems.out * es, &guards);
    if (!guards && !(c.in_place && c.kind == Collective::kReduceScatter)) {
      return "guard bytes around the output were overwritten";
    }
    return first_difference(c, got, seed, n, me);
  }
  NodePath path() const { return path_; }

 private:
  CudaMultiNodeCommunicator& comm_;
  GuardedBuffer in_, out_;
  cudaStream_t stream_ = nullptr;
  NodePath path_ = NodePath::kNone;
};

/// Every collective x dtype x op, in place and not, at counts that leave a tail over the node size (1, 7, 1031)
/// and of several staging rounds, plus one 64 MB float32 all-reduce and reduce-scatter input.
std::vector<Case> cases(int world) {
  std::vector<Case> v;
  const size_t counts[] = {0, 1, 7, 1031, 65543};
  for (DataType dt : kAllDtypes) {
    for (size_t count : counts) {
      for (bool ip : {false, true}) {
        for (ReduceOp op : kAllOps) {
          v.push_back({Collective::kAllReduce, dt, op, count, ip, 0});
          v.push_back({Collective::kReduceScatter, dt, op, count, ip, 0});
        }
        v.push_back({Collective::kAllGather, dt, ReduceOp::kSum, count, ip, 0});
        v.push_back({Collective::kBroadcast, dt, ReduceOp::kSum, count, ip, 0, Algorithm::kAuto, world - 1});
        if (!ip) v.push_back({Collective::kAllToAll, dt, ReduceOp::kSum, count, false, 0});
      }
    }
  }
  v.push_back({Collective::kAllReduce, DataType::kFloat32, ReduceOp::kSum, size_t{16} << 20, false, 0});
  v.push_back({Collective::kReduceScatter, DataType::kFloat32, ReduceOp::kAvg, (size_t{16} << 20) / world, false, 0});
  v.push_back({Collective::kBarrier, DataType::kFloat32, ReduceOp::kSum, 0, false, 0});
  return v;
}

TEST(GpuMultiNode, EveryCollectiveOnEveryPathMatchesTheHost) {
  const int world = testing::gpu_test_world();
  testing::HarnessOptions opt;
  opt.timeout = std::chrono::seconds(900) * testing::timeout_scale();
  testing::expect_success(
      world,
      [&](RankEnv& env) {
        const std::vector<Case> all = cases(world);
        size_t cap = 0;
        for (const Case& c : all) {
          const CaseElems e = case_elems(c, world);
          cap = std::max(cap, std::max(e.in, e.out) * dtype_size(c.dt) + 64);
        }
        for (const Layout& l : layouts(world)) {
          auto comm = make(env, l);
          NodeRunner runner(*comm, cap);
          int failures = 0;
          for (Hierarchy h : hierarchies(l, world)) {
            uint64_t seed = 1;
            for (const Case& c : all) {
              const std::string err = runner.run(c, h, seed++);
              if (c.kind == Collective::kAllToAll && h == Hierarchy::kHierarchical && comm->num_nodes() > 1) {
                // All-to-all runs whole on the engine between the nodes: asking for a hierarchical path is refused.
                EXPECT_NE(err.find("no hierarchical path"), std::string::npos) << describe(l) << " " << c.describe();
                continue;
              }
              if (!err.empty() && ++failures <= 20) {
                ADD_FAILURE() << "rank " << comm->rank() << " " << describe(l) << " hierarchy " << static_cast<int>(h)
                              << " " << c.describe() << ": " << err;
              }
              const NodePath p = runner.path();
              if (comm->num_nodes() == 1) {
                EXPECT_EQ(p, NodePath::kNode) << describe(l) << " " << c.describe();
              } else if (h == Hierarchy::kFlat || c.kind == Collective::kAllToAll) {
                EXPECT_EQ(p, NodePath::kFlat) << describe(l) << " " << c.describe();
              } else if (h == Hierarchy::kHierarchical) {
                EXPECT_EQ(p, NodePath::kHierarchical) << describe(l) << " " << c.describe();
              }
            }
          }
          EXPECT_EQ(failures, 0) << describe(l);
          comm->barrier();
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_NO_THROW(comm->check());
        }
      },
      opt);
}

TEST(GpuMultiNode, GroupedSendsAndReceivesPassARing) {
  const int world = testing::gpu_test_world();
  if (!nccl_between_nodes()) {
    GTEST_SKIP() << "needs NCCL, made where ranks share a GPU only with SYMCOMM_TEST_NCCL_HOST_PER_RANK=1";
  }
  testing::expect_success(world, [&](RankEnv& env) {
    auto comm = make(env, {world >= 4 ? world / 2 : 1, false});
    const int me = comm->rank(), next = (me + 1) % world, prev = (me + world - 1) % world;
    const size_t count = 100003;
    std::vector<int32_t> mine(count), self_in(count);
    for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(me * 1000003 + i);
    int32_t *send_buf = nullptr, *recv_buf = nullptr, *self_buf = nullptr;
    ASSERT_EQ(cudaMalloc(&send_buf, count * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&recv_buf, count * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&self_buf, count * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(send_buf, mine.data(), count * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(recv_buf, 0xCD, count * 4), cudaSuccess);
    ASSERT_EQ(cudaMemset(self_buf, 0xCD, count * 4), cudaSuccess);
    comm->group_start();
    comm->recv(recv_buf, count, DataType::kInt32, prev);
    comm->send(send_buf, count, DataType::kInt32, next);
    comm->send(send_buf, count, DataType::kInt32, me);
    comm->recv(self_buf, count, DataType::kInt32, me);
    comm->group_end();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int32_t> got(count);
    ASSERT_EQ(cudaMemcpy(got.data(), recv_buf, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(self_in.data(), self_buf, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      wrong += got[i] != static_cast<int32_t>(prev * 1000003 + i);
      wrong += self_in[i] != mine[i];
    }
    EXPECT_EQ(wrong, 0u);
    EXPECT_THROW(comm->send(send_buf, count, DataType::kInt32, me), Error);  // to itself outside a group
    EXPECT_THROW(comm->send(send_buf, count, DataType::kInt32, world), Error);
    comm->barrier();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(send_buf);
    cudaFree(recv_buf);
    cudaFree(self_buf);
  });
}

TEST(GpuMultiNode, KilledRankIsNamedByEverySurvivor) {
  const int world = testing::gpu_test_world();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::HarnessOptions opt;
  opt.config.timeout = std::chrono::seconds(20);  // the deadline must not be what ends the wait
  opt.may_fail.push_back(world - 1);
  testing::expect_success(
      world,
      [&](RankEnv& env) {
        auto comm = make(env, {world >= 4 ? world / 2 : 1, false});
        float* buf = nullptr;
        ASSERT_EQ(cudaMalloc(&buf, 4 << 20), cudaSuccess);
        comm->all_reduce(buf, buf, 1 << 20, DataType::kFloat32, ReduceOp::kSum);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        if (comm->rank() == world - 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ::kill(::getpid(), SIGKILL);
        }
        const auto t0 = std::chrono::steady_clock::now();
        bool named = false;
        for (int i = 0; i < 100000 && !named; ++i) {
          try {
            comm->all_reduce(buf, buf, 1 << 20, DataType::kFloat32, ReduceOp::kSum);
            cudaDeviceSynchronize();  // returns once the abort has ended the stages that wait for the dead rank
            comm->check();
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kPeerDead) << e.what();
            EXPECT_EQ(e.ranks(), std::vector<int>{world - 1}) << e.what();
            named = true;
          }
          if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) break;
        }
        EXPECT_TRUE(named) << "no survivor's call named the killed rank";
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_LT(waited, 0.3 + 2.0) << "kPeerDead took " << waited << " s";
        cudaGetLastError();
        cudaFree(buf);
      },
      opt);
}

}  // namespace
}  // namespace symcomm::gputest
