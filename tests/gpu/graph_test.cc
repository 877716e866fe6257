// CUDA-graph capture and replay: the graph holds the collectives once; the sequence numbers live on the
// device and advance on every replay, so 1000 replays with changing inputs (a fill kernel with a new seed
// runs on the stream before each replay) must all produce the right results.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

constexpr int kReplays = 1000;
constexpr int kCheckEvery = 97;  // verify several replays spread over the run, and the last

struct Op {
  Collective kind;
  Algorithm algo;
  size_t count;
  BufKind buf;
};

// Expected output bytes of `op` for inputs with `seed` (bf16, sum).
std::vector<uint8_t> expected(const Op& op, uint64_t seed, int n, int me) {
  const DataType dt = DataType::kBFloat16;
  size_t out = op.kind == Collective::kAllGather ? n * op.count : op.count;
  std::vector<uint8_t> w(out * 2);
  for (size_t i = 0; i < out; ++i) {
    if (op.kind == Collective::kAllReduce) expected_reduce(dt, ReduceOp::kSum, seed, n, i, &w[2 * i]);
    if (op.kind == Collective::kReduceScatter)
      expected_reduce(dt, ReduceOp::kSum, seed, n, me * op.count + i, &w[2 * i]);
    if (op.kind == Collective::kAllGather) {
      encode(dt, input_value(dt, ReduceOp::kSum, seed, static_cast<int>(i / op.count), i % op.count), &w[2 * i]);
    }
  }
  return w;
}

void thousand_replays(int n) {
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int me = comm->rank(), world = comm->world_size();
    const DataType dt = DataType::kBFloat16;
    std::vector<Op> ops = {{Collective::kAllReduce, Algorithm::kOneShot, 1031, BufKind::kDevice},
                           {Collective::kAllReduce, Algorithm::kOneShot, 300007, BufKind::kSymmetric},  // LL128
                           {Collective::kAllReduce, Algorithm::kTwoShot, 300007, BufKind::kDevice},
                           {Collective::kAllReduce, Algorithm::kTwoShot, 65537, BufKind::kSymmetric},
                           {Collective::kAllGather, Algorithm::kAuto, 4099, BufKind::kDevice},
                           {Collective::kReduceScatter, Algorithm::kAuto, 4099, BufKind::kSymmetric},
                           // Copy-engine paths: stream memory operations and host nodes in the graph.
                           {Collective::kAllGather, Algorithm::kCopyEngine, 300007, BufKind::kDevice},
                           {Collective::kAllGather, Algorithm::kCopyEngine, 4099, BufKind::kSymmetric},
                           {Collective::kReduceScatter, Algorithm::kCopyEngine, 300007, BufKind::kDevice},
                           {Collective::kReduceScatter, Algorithm::kCopyEngine, 65537, BufKind::kSymmetric}};
    std::vector<void*> ins, outs;
    for (const Op& op : ops) {
      size_t in_bytes = (op.kind == Collective::kReduceScatter ? world : 1) * op.count * 2;
      size_t out_bytes = (op.kind == Collective::kAllGather ? world : 1) * op.count * 2;
      void *i = nullptr, *o = nullptr;
      if (op.buf == BufKind::kSymmetric) {
        i = comm->alloc(in_bytes);
        o = comm->alloc(out_bytes);
      } else {
        GPU_CHECK(cudaMalloc(&i, in_bytes));
        GPU_CHECK(cudaMalloc(&o, out_bytes));
      }
      ins.push_back(i);
      outs.push_back(o);
    }
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Eager warm-up first, so the graph starts from device counters that are already non-zero.
    for (size_t k = 0; k < ops.size(); ++k) {
      const Op& op = ops[k];
      size_t in_count = (op.kind == Collective::kReduceScatter ? world : 1) * op.count;
      fill_input_async(ins[k], dt, ReduceOp::kSum, 0, me, in_count, s);
    }
    auto issue = [&] {
      for (size_t k = 0; k < ops.size(); ++k) {
        const Op& op = ops[k];
        CollOptions o{.stream = s, .algorithm = op.algo};
        if (op.kind == Collective::kAllReduce) comm->all_reduce(ins[k], outs[k], op.count, dt, ReduceOp::kSum, o);
        if (op.kind == Collective::kAllGather) comm->all_gather(ins[k], outs[k], op.count, dt, o);
        if (op.kind == Collective::kReduceScatter)
          comm->reduce_scatter(ins[k], outs[k], op.count, dt, ReduceOp::kSum, o);
      }
    };
    issue();
    GPU_CHECK(cudaStreamSynchronize(s));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    issue();
    GPU_CHECK(cudaStreamEndCapture(s, &graph));
    GPU_CHECK(cudaGraphInstantiate(&exec, graph, 0));

    int checked = 0;
    for (int rep = 1; rep <= kReplays; ++rep) {
      const uint64_t seed = 1000 + rep;
      for (size_t k = 0; k < ops.size(); ++k) {
        const Op& op = ops[k];
        size_t in_count = (op.kind == Collective::kReduceScatter ? world : 1) * op.count;
        fill_input_async(ins[k], dt, ReduceOp::kSum, seed, me, in_count, s);
      }
      GPU_CHECK(cudaGraphLaunch(exec, s));
      if (rep % kCheckEvery != 0 && rep != kReplays) continue;
      GPU_CHECK(cudaStreamSynchronize(s));
      comm->check();
      for (size_t k = 0; k < ops.size(); ++k) {
        std::vector<uint8_t> want = expected(ops[k], seed, world, me);
        std::vector<uint8_t> got(want.size());
        GPU_CHECK(cudaMemcpy(got.data(), outs[k], got.size(), cudaMemcpyDeviceToHost));
        ASSERT_EQ(got, want) << "replay " << rep << " op " << k << " rank " << me;
      }
      ++checked;
    }
    EXPECT_GE(checked, 10);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    comm->barrier({.stream = s});
    GPU_CHECK(cudaStreamSynchronize(s));
    for (size_t k = 0; k < ops.size(); ++k) {
      if (ops[k].buf == BufKind::kSymmetric) {
        comm->free(ins[k]);
        comm->free(outs[k]);
      } else {
        cudaFree(ins[k]);
        cudaFree(outs[k]);
      }
    }
    cudaStreamDestroy(s);
  });
}

TEST(GpuGraph, ThousandReplaysWithChangingInputs) { thousand_replays(testing::gpu_test_world()); }

// The same at one rank (every algorithm forced above runs with no peer), also where only one GPU is lent.
TEST(GpuGraph, SingleGpuThousandReplaysAtOneRank) { thousand_replays(1); }

}  // namespace
}  // namespace symcomm::gputest
