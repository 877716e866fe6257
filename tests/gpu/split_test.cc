// Communicator::split on the CUDA backend: pairs of ranks (color = rank / 2) get communicators of their own on
// the parent's GPU, with their own symmetric heap and signal pads; their collectives are exact beside the
// parent's and after the parent is destroyed.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

/// An all-reduce of `count` float32 (input_value of `seed` for the rank in `comm`), checked exactly.
void expect_all_reduce(Communicator& comm, size_t count, uint64_t seed, bool heap, const char* what) {
  float* in = nullptr;
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(&in, count * 4), cudaSuccess);
  if (heap) {
    out = static_cast<float*>(comm.alloc(count * 4));
  } else {
    ASSERT_EQ(cudaMalloc(&out, count * 4), cudaSuccess);
  }
  fill_input_async(in, DataType::kFloat32, ReduceOp::kSum, seed, comm.rank(), count, nullptr);
  comm.all_reduce(in, out, count, DataType::kFloat32, ReduceOp::kSum);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  comm.check();
  EXPECT_EQ(count_wrong_sum(out, count, seed, comm.world_size()), 0u)
      << what << ": " << count << " elements on " << comm.world_size() << " ranks";
  cudaFree(in);
  if (heap) {
    comm.free(out);
  } else {
    cudaFree(out);
  }
}

TEST(GpuSplit, PairsReduceExactlyBesideAndAfterTheParent) {
  testing::expect_success(testing::gpu_test_world(), [](RankEnv& env) {
    auto parent = env.make_comm(cuda_comm_options());
    const int me = parent->rank(), n = parent->world_size();
    auto child = parent->split(me / 2, me);
    ASSERT_NE(child, nullptr);
    EXPECT_EQ(child->device(), parent->device());
    EXPECT_EQ(child->world_size(), std::min(2, n - me / 2 * 2));
    EXPECT_EQ(child->rank(), me % 2);
    int32_t mine = me, got[2] = {-1, -1};
    int32_t *dev_in = nullptr, *dev_out = nullptr;
    ASSERT_EQ(cudaMalloc(&dev_in, 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dev_out, 8), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dev_in, &mine, 4, cudaMemcpyHostToDevice), cudaSuccess);
    child->all_gather(dev_in, dev_out, 1, DataType::kInt32);
    ASSERT_EQ(cudaMemcpy(got, dev_out, 4 * child->world_size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int r = 0; r < child->world_size(); ++r) EXPECT_EQ(got[r], me / 2 * 2 + r) << "the child's rank order";
    cudaFree(dev_in);
    cudaFree(dev_out);

    // In turn: child (LL, two-shot into the heap), parent, child.
    expect_all_reduce(*child, 1031, 11, false, "child, LL");
    expect_all_reduce(*child, 3000000, 12, true, "child, two-shot into its heap");
    expect_all_reduce(*parent, 300007, 13, false, "parent after the child");
    expect_all_reduce(*child, 300007, 14, false, "child after the parent");
    // Parent gone (every rank's, so that none waits for it), child still exact.
    testing::store_barrier(*env.store, "gpu_split/before-reset", n);
    parent.reset();
    expect_all_reduce(*child, 3000000, 15, false, "child after the parent was destroyed");
  });
}

}  // namespace
}  // namespace symcomm::gputest
