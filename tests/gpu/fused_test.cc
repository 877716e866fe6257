// Fused all-gather + matmul and matmul + reduce-scatter on the CUDA backend: the calls of
// tests/backend_cases/fused_cases.h (random bf16 / fp16 / fp32 inputs built on the host, a float64 reference
// computed on the host, outputs poisoned before every call with guard bytes, the path taken) over batch dims and
// several gather/scatter dims, the pipelined path (several chunk counts) and the unfused fallback, each on a stream of
// its own, eagerly and captured into a CUDA graph replayed with new inputs, and the memory the operations keep
// (cuda_memory_use). World size = number of GPUs.
//
// Error bound (fused_tolerance in fused_reference.h): cuBLASLt accumulates in float32 (CUBLAS_COMPUTE_32F,
// no TF32 for float32 inputs) in an unspecified order, |error| ≤ γ_K·Σ|a·b| with γ_K ≈ K·2^-24; the float32
// reduce-scatter of R partial products adds ≤ R·2^-24·Σ|a·b|; the final rounding to the output dtype adds
// half an ulp (2^-8 bf16, 2^-11 fp16, 2^-24 fp32) of |ref|; matmul + reduce-scatter may also round each
// rank's partial product once to the output dtype (rs_tolerance: the bar of an unfused GEMM followed by a
// float32-accumulating reduce-scatter). Nothing is compared bitwise except a_gathered, which is a copy.
#include "symcomm/fused.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <iterator>
#include <string>

#include "backend_cases/fused_cases.h"
#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::FusedAgShape;
using testing::FusedRsShape;
using testing::FusedVariant;
using testing::FusedWs;
using testing::RankEnv;

constexpr int kReplays = 3;
constexpr size_t kLtWorkspace = size_t{32} << 20;  // kLtWorkspaceBytes in src/fused/cublaslt_gemm_cuda.cc

/// The fused operations give back their temporaries (cuda_memory_use, exact): between `before` and now symcomm's
/// memory on `device` may only have grown by one cuBLASLt workspace (a stream's own, or the pool's reserve; one
/// allocation in the count either way; NOTE [cuBLASLt workspace]).
void expect_only_new_workspaces(int device, const CudaMemoryUse& before, const std::string& when) {
  const CudaMemoryUse now = cuda_memory_use(device);
  const size_t grew = now.device_bytes - before.device_bytes;
  EXPECT_TRUE(now.device_bytes >= before.device_bytes && grew % kLtWorkspace == 0 &&
              now.allocations >= before.allocations && now.allocations - before.allocations <= 1 &&
              now.peer_mapped_bytes == before.peer_mapped_bytes && now.pinned_host_bytes == before.pinned_host_bytes)
      << when << ": symcomm's memory went from " << to_string(before) << " to " << to_string(now);
}

/// Runs a call on a non-blocking stream of its own: once eagerly, or (graph) once eagerly so that cuBLASLt plans and
/// workspaces exist before capture, then captured into a graph replayed kReplays times, each replay with the inputs
/// of its round (1, 2, ...) and checked. Either way what the operation allocated for itself is given back by the end.
class StreamRunner final : public testing::FusedRunner {
 public:
  StreamRunner(int device, bool graph) : device_(device), graph_(graph) {}
  const char* name() const override { return graph_ ? "graph" : "eager"; }
  void run(testing::TestMemory&, const std::function<void(Stream)>& issue, const std::function<void(uint64_t)>& refresh,
           const std::function<void(uint64_t)>& check) override {
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    run_on(s, issue, refresh, check);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaStreamDestroy(s);
  }

 private:
  void run_on(cudaStream_t s, const std::function<void(Stream)>& issue, const std::function<void(uint64_t)>& refresh,
              const std::function<void(uint64_t)>& check) {
    const CudaMemoryUse before = cuda_memory_use(device_);
    refresh(0);
    issue(s);
    GPU_CHECK(cudaStreamSynchronize(s));
    if (!graph_) {
      check(0);
      expect_only_new_workspaces(device_, before, name());
      return;
    }
    cudaGraph_t g;
    cudaGraphExec_t exec;
    GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    issue(s);
    GPU_CHECK(cudaStreamEndCapture(s, &g));
    GPU_CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (uint64_t round = 1; round <= kReplays; ++round) {
      refresh(round);
      GPU_CHECK(cudaGraphLaunch(exec, s));
      GPU_CHECK(cudaStreamSynchronize(s));
      check(round);
      if (::testing::Test::HasFailure()) break;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    expect_only_new_workspaces(device_, before, name());
  }

  int device_;
  bool graph_;
};

/// The modes of every case: unfused (no workspace) and pipelined (the exact workspace), eagerly and in a graph.
struct Mode {
  FusedWs ws;
  bool graph;
};
constexpr Mode kModes[] = {
    {FusedWs::kNone, false}, {FusedWs::kExact, false}, {FusedWs::kExact, true}, {FusedWs::kNone, true}};

/// A case of the GPU program: a shape, its dtype and chunk count.
template <class Shape>
struct GpuCase {
  DataType dt;
  Shape shape;
  int chunks;
};

TEST(GpuFused, AllGatherMatmulMatchesFloat64Reference) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    CudaMemory mem;
    auto comm = env.make_comm(mem.options());
    const CudaMemoryUse start = cuda_memory_use(comm->device());
    const std::vector<GpuCase<FusedAgShape>> cases = {
        {DataType::kBFloat16, {{256, 512}, 0, {384, 136}, true}, 0},  // 2-D, two Bs, automatic chunks
        {DataType::kBFloat16, {{256, 512}, 0, {384}, true}, 3},       // three row chunks
        {DataType::kFloat16, {{2, 64, 256}, 1, {200}, true}, 2},      // batch dim before the gather dim
        {DataType::kFloat16, {{2, 64, 256}, 1, {200}, false}, 2},     // the same without a_gathered
        {DataType::kFloat32, {{3, 40, 128}, 0, {72}, true}, 0},       // gather along the batch dim
        {DataType::kBFloat16, {{2, 3, 10, 72}, -3, {24}, true}, 2},   // 4-D, odd extents
    };
    uint64_t seed = 1;
    for (const auto& c : cases) {
      for (const Mode& m : kModes) {
        StreamRunner runner(comm->device(), m.graph);
        testing::fused_ag_case(*comm, mem, c.shape, FusedVariant{c.dt, m.ws, c.chunks}, seed++, runner);
        if (::testing::Test::HasFailure()) return;
      }
    }
    // Each case ran on a stream of its own, one after the other: the workspaces do not grow with the streams
    // (a workspace per stream would leave 20 of them, 640 MiB: NOTE [cuBLASLt workspace]): the first four
    // streams' own and one in the pool.
    const CudaMemoryUse end = cuda_memory_use(comm->device());
    EXPECT_LE(end.device_bytes - start.device_bytes, 5 * kLtWorkspace)
        << "from " << to_string(start) << " to " << to_string(end);
    if (comm->rank() == 0) {
      std::printf("GpuFused: after %zu cases on a stream each, symcomm holds %s (%s with the communicator only)\n",
                  cases.size() * std::size(kModes), to_string(end).c_str(), to_string(start).c_str());
    }
  });
}

TEST(GpuFused, MatmulReduceScatterMatchesFloat64Reference) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    CudaMemory mem;
    auto comm = env.make_comm(mem.options());
    const std::vector<GpuCase<FusedRsShape>> cases = {
        {DataType::kBFloat16, {{256, 512}, 0, 1024, ReduceOp::kSum}, 0},    // 2-D, automatic chunks
        {DataType::kBFloat16, {{128, 256}, 0, 520, ReduceOp::kSum}, 5},     // N not a multiple of 8
        {DataType::kFloat16, {{2, 64, 256}, 1, 264, ReduceOp::kAvg}, 3},    // batch dim before the scatter dim
        {DataType::kFloat32, {{32, 2, 64}, 0, 200, ReduceOp::kSum}, 4},     // scatter along the batch dim
        {DataType::kBFloat16, {{2, 3, 5, 96}, -3, 48, ReduceOp::kSum}, 2},  // 4-D, odd extents
    };
    uint64_t seed = 100;
    for (const auto& c : cases) {
      for (const Mode& m : kModes) {
        StreamRunner runner(comm->device(), m.graph);
        testing::fused_rs_case(*comm, mem, c.shape, FusedVariant{c.dt, m.ws, c.chunks}, seed++, runner);
        if (::testing::Test::HasFailure()) return;
      }
    }
  });
}

// Both operations alternating, each followed by the next on another stream with its own workspace: the
// side streams' collectives stay in step across operations and ranks.
TEST(GpuFused, AlternatingOperationsStayInStep) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    CudaMemory mem;
    auto comm = env.make_comm(mem.options());
    StreamRunner runner(comm->device(), false);
    for (int rep = 0; rep < 3 && !::testing::Test::HasFailure(); ++rep) {
      testing::fused_ag_case(*comm, mem, {{128, 256}, 0, {256}, true}, {DataType::kBFloat16, FusedWs::kExact, 2},
                             500 + rep, runner);
      testing::fused_rs_case(*comm, mem, {{64, 256}, 0, 512, ReduceOp::kSum}, {DataType::kBFloat16, FusedWs::kExact, 4},
                             600 + rep, runner);
    }
  });
}

}  // namespace
}  // namespace symcomm::gputest
