// Coalescing on the CUDA backend: collectives recorded in a group (synchronous and asynchronous end) give
// exactly the expected results. The six all-reduces form one run: one multi-tensor kernel (issue 6; random
// mixed groups and graph capture are in group_multi_test.cc).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

TEST(GpuGroup, GroupedAllReducesMatchExpected) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int me = comm->rank(), world = comm->world_size();
    const DataType dt = DataType::kFloat32;
    const ReduceOp op = ReduceOp::kSum;
    const std::vector<size_t> counts = {1, 7, 1031, 4099, 65537, 300007};
    std::vector<void*> ins(counts.size()), outs(counts.size());
    for (size_t k = 0; k < counts.size(); ++k) {
      GPU_CHECK(cudaMalloc(&ins[k], counts[k] * 4));
      GPU_CHECK(cudaMalloc(&outs[k], counts[k] * 4));
      std::vector<uint8_t> host = make_input(dt, op, 100 + k, me, 0, counts[k]);
      GPU_CHECK(cudaMemcpy(ins[k], host.data(), host.size(), cudaMemcpyHostToDevice));
    }
    GPU_CHECK(cudaDeviceSynchronize());
    for (int style = 0; style < 2; ++style) {
      for (size_t k = 0; k < counts.size(); ++k) GPU_CHECK(cudaMemset(outs[k], 0xcd, counts[k] * 4));
      GPU_CHECK(cudaDeviceSynchronize());
      comm->group_start();
      for (size_t k = 0; k < counts.size(); ++k) comm->all_reduce(ins[k], outs[k], counts[k], dt, op);
      if (style == 0) {
        comm->group_end();
      } else {
        comm->group_end_async()->wait();
      }
      GPU_CHECK(cudaDeviceSynchronize());
      for (size_t k = 0; k < counts.size(); ++k) {
        std::vector<uint8_t> got(counts[k] * 4), want(4);
        GPU_CHECK(cudaMemcpy(got.data(), outs[k], got.size(), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < counts[k]; ++i) {
          expected_reduce(dt, op, 100 + k, world, i, want.data());
          ASSERT_EQ(std::memcmp(&got[4 * i], want.data(), 4), 0)
              << "style " << style << " tensor " << k << " element " << i;
        }
      }
    }
    for (size_t k = 0; k < counts.size(); ++k) {
      cudaFree(ins[k]);
      cudaFree(outs[k]);
    }
  });
}

}  // namespace
}  // namespace symcomm::gputest
