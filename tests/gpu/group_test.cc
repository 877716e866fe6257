// Coalescing on the CUDA backend: the body of tests/backend_cases/group_cases.h (six all-reduces in one group,
// which form one run: one multi-tensor kernel), groups over several streams, and separate calls over several
// streams (random mixed groups and graph capture are in group_multi_test.cc).
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend_cases/group_cases.h"
#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

TEST(GpuGroup, GroupedAllReducesMatchTheReference) {
  testing::expect_success(testing::gpu_test_world(), [](RankEnv& env) {
    CudaMemory mem;
    testing::grouped_all_reduces_case(env, mem);
  });
}

// Float32 sum all-reduces of several tensors on two streams, with fresh inputs each iteration (tensor k's seed is
// `seed + k`) and poisoned outputs.
struct StreamCase {
  std::vector<size_t> counts;
  std::vector<void*> ins, outs;
  cudaStream_t a = nullptr, b = nullptr;

  explicit StreamCase(std::vector<size_t> c) : counts(std::move(c)), ins(counts.size()), outs(counts.size()) {}
  ~StreamCase() {
    for (size_t k = 0; k < counts.size(); ++k) {
      cudaFree(ins[k]);
      cudaFree(outs[k]);
    }
    if (a != nullptr) cudaStreamDestroy(a);
    if (b != nullptr) cudaStreamDestroy(b);
  }
  void make() {
    GPU_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    GPU_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    for (size_t k = 0; k < counts.size(); ++k) {
      GPU_CHECK(cudaMalloc(&ins[k], counts[k] * 4));
      GPU_CHECK(cudaMalloc(&outs[k], counts[k] * 4));
    }
  }
  void fill(uint64_t seed, int rank) {
    for (size_t k = 0; k < counts.size(); ++k) {
      std::vector<uint8_t> host = make_input(DataType::kFloat32, ReduceOp::kSum, seed + k, rank, 0, counts[k]);
      GPU_CHECK(cudaMemcpy(ins[k], host.data(), host.size(), cudaMemcpyHostToDevice));
      GPU_CHECK(cudaMemset(outs[k], 0xcd, counts[k] * 4));
    }
    GPU_CHECK(cudaDeviceSynchronize());
  }
  void all_reduce(Communicator& comm, size_t k, cudaStream_t s) {
    comm.all_reduce(ins[k], outs[k], counts[k], DataType::kFloat32, ReduceOp::kSum, {.stream = s});
  }
  void expect_sums(uint64_t seed, int world, const std::string& what) {
    GPU_CHECK(cudaDeviceSynchronize());
    for (size_t k = 0; k < counts.size(); ++k) {
      std::vector<uint8_t> got(counts[k] * 4), want(4);
      GPU_CHECK(cudaMemcpy(got.data(), outs[k], got.size(), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < counts[k]; ++i) {
        expected_reduce(DataType::kFloat32, ReduceOp::kSum, seed + k, world, i, want.data());
        ASSERT_EQ(std::memcmp(&got[4 * i], want.data(), 4), 0)
            << what << " tensor " << k << " (count " << counts[k] << ") element " << i;
      }
    }
  }
};

// NOTE [group streams]: a group's collectives on several streams run in issue order, one kernel of the
// communicator at a time. Were each run sent to its stream with nothing between them, two kernels of one
// communicator would run at once on the same sequence number and signal slots (two 4 KB LL all-reduces
// exchange each other's lines). Three runs (stream A, B, A) of LL-sized and larger all-reduces, each
// iteration with fresh inputs, synchronous and asynchronous ends, exact.
TEST(GpuGroup, CollectivesOnSeveralStreamsRunInIssueOrder) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int me = comm->rank(), world = comm->world_size();
    for (const std::vector<size_t>& counts : {std::vector<size_t>{1031, 1031, 1031}, {1031, 300007, 4099}}) {
      StreamCase c(counts);
      ASSERT_NO_FATAL_FAILURE(c.make());
      for (int it = 0; it < 40; ++it) {
        const uint64_t seed = 7000 + 10 * it;
        ASSERT_NO_FATAL_FAILURE(c.fill(seed, me));
        comm->group_start();
        for (size_t k = 0; k < 3; ++k) c.all_reduce(*comm, k, k == 1 ? c.b : c.a);
        if (it % 2 == 0) {
          comm->group_end();
        } else {
          comm->group_end_async()->wait();
        }
        ASSERT_NO_FATAL_FAILURE(c.expect_sums(seed, world, "iteration " + std::to_string(it)));
      }
    }
    comm->check();
  });
}

// NOTE [one operation at a time]: separate calls on two streams that the caller does not order run in issue order,
// as NCCL's do (torch's FSDP relies on it). Each iteration holds one of the two streams back with a host function
// that sleeps, a different stream on each half of the ranks: were each call sent to its stream alone, some ranks
// would run the second all-reduce first and the others the first, two different collectives on one sequence number
// (kMismatch, or wrong sums). A 1031-element (LL) and a 300007-element all-reduce, alternating which goes first,
// eager and as one CUDA-graph capture of both streams (the hold a host node of the graph).
TEST(GpuStreams, CallsOnTwoStreamsRunInIssueOrder) {
  const int n = testing::gpu_test_world();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int me = comm->rank(), world = comm->world_size();
    StreamCase c({1031, 300007});
    ASSERT_NO_FATAL_FAILURE(c.make());
    const cudaHostFn_t hold = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); };
    cudaEvent_t fork = nullptr, join = nullptr;
    GPU_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    GPU_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    for (int it = 0; it < 16; ++it) {
      const uint64_t seed = 9100 + 10 * it;
      const int first = it % 2;  // which all-reduce is issued first
      const bool graph = it >= 8;
      ASSERT_NO_FATAL_FAILURE(c.fill(seed, me));
      // All-reduce k goes to stream k; the held stream is the first call's on half the ranks, the second's on the
      // others.
      cudaStream_t streams[2] = {c.a, c.b};
      if (graph) {  // one capture of both streams: b forked from a and joined back
        GPU_CHECK(cudaStreamBeginCapture(c.a, cudaStreamCaptureModeThreadLocal));
        GPU_CHECK(cudaEventRecord(fork, c.a));
        GPU_CHECK(cudaStreamWaitEvent(c.b, fork, 0));
      }
      GPU_CHECK(cudaLaunchHostFunc(streams[(2 * me < world) ? first : 1 - first], hold, nullptr));
      for (int j = 0; j < 2; ++j) {
        const int k = j == 0 ? first : 1 - first;
        c.all_reduce(*comm, k, streams[k]);
      }
      if (graph) {
        GPU_CHECK(cudaEventRecord(join, c.b));
        GPU_CHECK(cudaStreamWaitEvent(c.a, join, 0));
        cudaGraph_t g = nullptr;
        cudaGraphExec_t exec = nullptr;
        GPU_CHECK(cudaStreamEndCapture(c.a, &g));
        GPU_CHECK(cudaGraphInstantiate(&exec, g, 0));
        GPU_CHECK(cudaGraphLaunch(exec, c.a));
        GPU_CHECK(cudaStreamSynchronize(c.a));
        GPU_CHECK(cudaGraphExecDestroy(exec));
        GPU_CHECK(cudaGraphDestroy(g));
      }
      comm->check();
      ASSERT_NO_FATAL_FAILURE(
          c.expect_sums(seed, world, fmt::format("iteration {} ({})", it, graph ? "graph" : "eager")));
    }
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
  });
}

// An `*_async` call inside a group ended by the synchronous group_end() returns a Work that waits for the
// group's device work, not an empty Work (complete at once, whatever the stream holds).
TEST(GpuGroup, AsyncWorkOfASynchronouslyEndedGroupWaitsForTheDevice) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int me = comm->rank(), world = comm->world_size();
    const size_t count = 4099;
    void *in = nullptr, *out = nullptr;
    GPU_CHECK(cudaMalloc(&in, count * 4));
    GPU_CHECK(cudaMalloc(&out, count * 4));
    std::vector<uint8_t> host = make_input(DataType::kFloat32, ReduceOp::kSum, 77, me, 0, count);
    GPU_CHECK(cudaMemcpy(in, host.data(), host.size(), cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemset(out, 0xcd, count * 4));
    cudaStream_t s = nullptr;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // The stream is held for 500 ms by a host function before the group's kernel can start.
    GPU_CHECK(cudaLaunchHostFunc(
        s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(500)); }, nullptr));
    comm->group_start();
    auto w = comm->all_reduce_async(in, out, count, DataType::kFloat32, ReduceOp::kSum, {.stream = s});
    comm->group_end();
    EXPECT_FALSE(w->is_completed()) << "the stream is still held";
    w->wait();
    EXPECT_TRUE(w->is_completed());
    std::vector<uint8_t> got(count * 4), want(4);
    GPU_CHECK(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));  // no stream sync: wait() was it
    for (size_t i = 0; i < count; ++i) {
      expected_reduce(DataType::kFloat32, ReduceOp::kSum, 77, world, i, want.data());
      ASSERT_EQ(std::memcmp(&got[4 * i], want.data(), 4), 0) << "element " << i;
    }
    GPU_CHECK(cudaStreamSynchronize(s));
    cudaStreamDestroy(s);
    cudaFree(in);
    cudaFree(out);
  });
}

}  // namespace
}  // namespace symcomm::gputest
