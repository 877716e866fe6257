// Coalescing on the CUDA backend: the body of tests/backend_cases/group_cases.h (six all-reduces in one group,
// which form one run: one multi-tensor kernel), groups over several streams (random mixed groups and graph
// capture are in group_multi_test.cc).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

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
    const DataType dt = DataType::kFloat32;
    const ReduceOp op = ReduceOp::kSum;
    cudaStream_t a = nullptr, b = nullptr;
    GPU_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    GPU_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    for (const std::vector<size_t>& counts : {std::vector<size_t>{1031, 1031, 1031}, {1031, 300007, 4099}}) {
      std::vector<void*> ins(3), outs(3);
      for (int k = 0; k < 3; ++k) {
        GPU_CHECK(cudaMalloc(&ins[k], counts[k] * 4));
        GPU_CHECK(cudaMalloc(&outs[k], counts[k] * 4));
      }
      for (int it = 0; it < 40; ++it) {
        const uint64_t seed = 7000 + 10 * it;
        for (int k = 0; k < 3; ++k) {
          std::vector<uint8_t> host = make_input(dt, op, seed + k, me, 0, counts[k]);
          GPU_CHECK(cudaMemcpy(ins[k], host.data(), host.size(), cudaMemcpyHostToDevice));
          GPU_CHECK(cudaMemset(outs[k], 0xcd, counts[k] * 4));
        }
        GPU_CHECK(cudaDeviceSynchronize());
        comm->group_start();
        for (int k = 0; k < 3; ++k) {
          comm->all_reduce(ins[k], outs[k], counts[k], dt, op, {.stream = k == 1 ? b : a});
        }
        if (it % 2 == 0) {
          comm->group_end();
        } else {
          comm->group_end_async()->wait();
        }
        GPU_CHECK(cudaDeviceSynchronize());
        for (int k = 0; k < 3; ++k) {
          std::vector<uint8_t> got(counts[k] * 4), want(4);
          GPU_CHECK(cudaMemcpy(got.data(), outs[k], got.size(), cudaMemcpyDeviceToHost));
          for (size_t i = 0; i < counts[k]; ++i) {
            expected_reduce(dt, op, seed + k, world, i, want.data());
            ASSERT_EQ(std::memcmp(&got[4 * i], want.data(), 4), 0)
                << "iteration " << it << " tensor " << k << " (count " << counts[k] << ") element " << i;
          }
        }
      }
      for (int k = 0; k < 3; ++k) {
        cudaFree(ins[k]);
        cudaFree(outs[k]);
      }
    }
    comm->check();
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
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
