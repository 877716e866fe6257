// GPU soak: a randomized mixed workload — random collective, size, dtype, op, algorithm (including the copy
// engine and NCCL), buffer kind (cudaMalloc or symmetric heap), eager or captured into a CUDA graph, with
// small random per-rank delays — where every result is verified element by element against values computed
// on the host. SYMCOMM_GPU_SOAK_OPS sets the number of collectives (default 2000; the GPU machine script runs
// 20000).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::mix64;
using testing::RankEnv;

constexpr size_t kMaxCount = 1 << 18;

struct Pick {
  Collective kind;
  DataType dt;
  ReduceOp op;
  size_t count;
  Algorithm algo;
  bool symmetric, graph;
  int root;
  std::string describe() const {
    return std::string(to_string(kind)) + " " + std::string(to_string(dt)) + " " + std::string(to_string(op)) +
           " count=" + std::to_string(count) + " algo=" + std::string(to_string(algo)) +
           (symmetric ? " symmetric" : " device") + (graph ? " graph" : " eager") + " root=" + std::to_string(root);
  }
};

// Identical on every rank: a function of (seed, i) only.
Pick pick(uint64_t seed, uint64_t i, int world) {
  uint64_t h = mix64(seed * 1000003 + i), g = mix64(h);
  Pick p{};
  const Collective kinds[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kBroadcast, Collective::kAllToAll};
  p.kind = kinds[h % 5];
  p.dt = kAllDtypes[(h >> 8) % 8];
  p.op = p.kind == Collective::kAllReduce || p.kind == Collective::kReduceScatter ? kAllOps[(h >> 16) % 5]
                                                                                  : ReduceOp::kSum;
  // Mostly small (latency paths), some medium, a few large (staging rounds).
  switch ((h >> 24) % 8) {
    case 0: p.count = 0; break;
    case 1:
    case 2:
    case 3: p.count = g % 300; break;
    case 4:
    case 5: p.count = g % 20000; break;
    default: p.count = g % kMaxCount; break;
  }
  if (p.kind != Collective::kAllReduce) p.count /= world;
  // Where ranks share a GPU there is no NCCL (Config::shared_gpu): the automatic choice stands in for it.
  static const bool no_nccl = ranks_share_gpus();
  const uint64_t a = (h >> 32) % (no_nccl ? 3 : 4);
  if (p.kind == Collective::kAllReduce) {
    const Algorithm algos[] = {Algorithm::kAuto, Algorithm::kOneShot, Algorithm::kTwoShot, Algorithm::kNccl};
    p.algo = algos[a];
  } else {
    const Algorithm algos[] = {Algorithm::kAuto, Algorithm::kDirect, Algorithm::kCopyEngine, Algorithm::kNccl};
    p.algo = algos[a];
  }
  p.symmetric = (h >> 40) & 1;
  p.graph = ((h >> 41) % 8) == 0 && p.count > 0;
  p.root = static_cast<int>((h >> 44) % world);
  return p;
}

TEST(GpuSoak, RandomMixedWorkloadIsExact) {
  const int n = testing::gpu_test_world();
  const char* env_ops = std::getenv("SYMCOMM_GPU_SOAK_OPS");
  const long ops = env_ops ? std::strtol(env_ops, nullptr, 10) : 2000;
  testing::HarnessOptions opt;
  opt.timeout = std::chrono::seconds(1500);
  opt.config.timeout = std::chrono::seconds(60);
  testing::expect_success(
      n,
      [ops](RankEnv& env) {
        auto comm = env.make_comm(cuda_comm_options());
        const int me = comm->rank(), world = comm->world_size();
        const size_t cap = kMaxCount * world * 8;
        void *sym_in = comm->alloc(cap), *sym_out = comm->alloc(cap), *dev_in = nullptr, *dev_out = nullptr;
        GPU_CHECK(cudaMalloc(&dev_in, cap));
        GPU_CHECK(cudaMalloc(&dev_out, cap));
        cudaStream_t s;
        GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        long wrong_ops = 0, graphs = 0;
        std::vector<uint8_t> got, want;
        for (long i = 0; i < ops; ++i) {
          const Pick p = pick(77, static_cast<uint64_t>(i), world);
          const size_t es = dtype_size(p.dt);
          const size_t in_count =
              p.kind == Collective::kReduceScatter || p.kind == Collective::kAllToAll ? world * p.count : p.count;
          const size_t out_count =
              p.kind == Collective::kAllGather || p.kind == Collective::kAllToAll ? world * p.count : p.count;
          void* in = p.symmetric ? sym_in : dev_in;
          void* out = p.symmetric ? sym_out : dev_out;
          const uint64_t seed = 5000 + i;
          fill_input_async(in, p.dt, p.op, seed, p.kind == Collective::kBroadcast ? p.root : me, in_count, s);
          GPU_CHECK(cudaMemsetAsync(out, 0xCD, out_count * es + 16, s));
          // Small random delay per rank: ranks arrive at different times.
          const uint64_t d = mix64(i * 31 + me) % 8;
          if (d < 3) std::this_thread::sleep_for(std::chrono::microseconds(50 * d));
          const CollOptions o{.stream = s, .algorithm = p.algo};
          auto issue = [&] {
            switch (p.kind) {
              case Collective::kAllReduce: comm->all_reduce(in, out, p.count, p.dt, p.op, o); break;
              case Collective::kAllGather: comm->all_gather(in, out, p.count, p.dt, o); break;
              case Collective::kReduceScatter: comm->reduce_scatter(in, out, p.count, p.dt, p.op, o); break;
              case Collective::kBroadcast: comm->broadcast(in, out, p.count, p.dt, p.root, o); break;
              case Collective::kAllToAll: comm->all_to_all(in, out, p.count, p.dt, o); break;
              case Collective::kBarrier: break;
            }
          };
          try {
            if (p.graph) {
              cudaGraph_t graph;
              cudaGraphExec_t exec;
              GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
              issue();
              GPU_CHECK(cudaStreamEndCapture(s, &graph));
              GPU_CHECK(cudaGraphInstantiate(&exec, graph, 0));
              GPU_CHECK(cudaGraphLaunch(exec, s));
              GPU_CHECK(cudaStreamSynchronize(s));
              cudaGraphExecDestroy(exec);
              cudaGraphDestroy(graph);
              ++graphs;
            } else {
              issue();
            }
          } catch (const Error& e) {
            FAIL() << "op " << i << " " << p.describe() << " threw: " << e.what();
          }
          GPU_CHECK(cudaStreamSynchronize(s));
          got.resize(out_count * es);
          GPU_CHECK(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
          want.assign(out_count * es, 0);
          for (size_t k = 0; k < out_count; ++k) {
            uint8_t* w = want.data() + k * es;
            switch (p.kind) {
              case Collective::kAllReduce: expected_reduce(p.dt, p.op, seed, world, k, w); break;
              case Collective::kReduceScatter: expected_reduce(p.dt, p.op, seed, world, me * p.count + k, w); break;
              case Collective::kAllGather:
                encode(p.dt, input_value(p.dt, p.op, seed, static_cast<int>(k / p.count), k % p.count), w);
                break;
              case Collective::kBroadcast: encode(p.dt, input_value(p.dt, p.op, seed, p.root, k), w); break;
              case Collective::kAllToAll:
                encode(p.dt, input_value(p.dt, p.op, seed, static_cast<int>(k / p.count), me * p.count + k % p.count),
                       w);
                break;
              case Collective::kBarrier: break;
            }
          }
          if (got != want && ++wrong_ops <= 5) {
            ADD_FAILURE() << "rank " << me << " op " << i << " " << p.describe() << ": wrong result";
          }
        }
        comm->check();
        EXPECT_EQ(wrong_ops, 0);
        if (me == 0) std::printf("soak: %ld collectives (%ld in graphs), %ld wrong\n", ops, graphs, wrong_ops);
        comm->barrier({.stream = s});
        GPU_CHECK(cudaStreamSynchronize(s));
        comm->free(sym_in);
        comm->free(sym_out);
        cudaFree(dev_in);
        cudaFree(dev_out);
        cudaStreamDestroy(s);
      },
      opt);
}

}  // namespace
}  // namespace symcomm::gputest
