// GPU soak: the body of tests/backend_cases/soak_cases.h (a long randomized mix of collectives, every result
// verified element by element against values computed on the host, bitwise identical across ranks) over random
// collective, size, dtype, op, algorithm (including the copy engine and NCCL), buffer kind (cudaMalloc or symmetric
// heap), eager or captured into a CUDA graph (1 op in 8), with small random per-rank delays. SYMCOMM_GPU_SOAK_OPS
// sets the number of collectives (default 2000; the GPU machine script runs 20000).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>

#include "backend_cases/soak_cases.h"
#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::mix64;
using testing::RankEnv;
using testing::SoakOp;

constexpr size_t kMaxCount = 1 << 18;

// Identical on every rank: a function of (seed, i) only.
SoakOp pick(uint64_t seed, uint64_t i, int world) {
  uint64_t h = mix64(seed * 1000003 + i), g = mix64(h);
  SoakOp p{};
  const Collective kinds[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kBroadcast, Collective::kAllToAll};
  p.kind = kinds[h % 5];
  p.dtype = kAllDtypes[(h >> 8) % 8];
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
  p.heap = (h >> 40) & 1;
  p.graph = ((h >> 41) % 8) == 0 && p.count > 0;
  p.root = static_cast<int>((h >> 44) % world);
  p.seed = 5000 + i;
  return p;
}

/// Issues every collective on one non-blocking stream, made at the first launch (on the communicator's device,
/// current by then); an op marked `graph` is captured into a CUDA graph, which is launched once. CUDA errors throw
/// (the body reports them with the op).
class StreamLauncher final : public testing::SoakLauncher {
 public:
  StreamLauncher() = default;
  StreamLauncher(const StreamLauncher&) = delete;
  StreamLauncher& operator=(const StreamLauncher&) = delete;
  ~StreamLauncher() override {
    if (!s_) return;
    cudaStreamSynchronize(s_);
    cudaStreamDestroy(s_);
  }
  void launch(const SoakOp& op, const std::function<void(Stream)>& issue) override {
    if (!s_) check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    if (!op.graph) {
      issue(s_);
      return;
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    check(cudaStreamBeginCapture(s_, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    issue(s_);
    check(cudaStreamEndCapture(s_, &graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    check(cudaGraphLaunch(exec, s_), "cudaGraphLaunch");
    check(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }

 private:
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
  cudaStream_t s_ = nullptr;
};

TEST(GpuSoak, RandomMixedWorkloadIsExact) {
  const int n = testing::gpu_test_world();
  const char* env_ops = std::getenv("SYMCOMM_GPU_SOAK_OPS");
  const long ops = env_ops ? std::strtol(env_ops, nullptr, 10) : 2000;
  testing::HarnessOptions opt;
  opt.timeout = std::chrono::seconds(1500);
  opt.config.timeout = std::chrono::seconds(60);
  const testing::SoakPlan plan{
      .ops = static_cast<uint64_t>(ops),
      .max_count = kMaxCount,
      .pick = [](uint64_t i, int world) { return pick(77, i, world); },
      // 3 ops in 8: 0, 50 or 100 µs.
      .delay_us =
          [](uint64_t i, int rank) {
            const uint64_t d = mix64(i * 31 + rank) % 8;
            return d < 3 ? 50 * d : 0;
          },
  };
  testing::expect_success(
      n,
      [&](RankEnv& env) {
        CudaMemory mem;
        StreamLauncher launcher;
        testing::soak_case(env, mem, plan, launcher);
      },
      opt);
}

}  // namespace
}  // namespace symcomm::gputest
