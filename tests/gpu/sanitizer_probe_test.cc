// The positive controls of the compute-sanitizer runs (tools/gpu/check.sh, step `sanitize`), one per tool. In
// every rank, forked from the test binary as in every GPU test, a kernel does the one thing its tool exists to
// report, once:
//   - memcheck: one byte stored past the end of a 100-byte cudaMalloc buffer (it lands in the allocation's
//     padding, so the test passes without the tool);
//   - synccheck: a block barrier reached by one lane of a warp, the others going on;
//   - racecheck: two warps storing one shared-memory word with no barrier between;
//   - initcheck: a load of device memory that nothing wrote.
// Each completes and passes without its tool. Disabled: run them with --gtest_also_run_disabled_tests, each
// under its own tool. A tool that reports nothing here does not see the ranks' kernels, and its clean results
// would mean nothing.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

TEST(GpuSanitizerProbe, DISABLED_EveryRankStoresOneBytePastItsBuffer) {
  testing::expect_success(testing::gpu_test_world(), [](testing::RankEnv& env) {
    GPU_CHECK(cudaSetDevice(rank_device(env.info.local_rank)));
    void* p = nullptr;
    GPU_CHECK(cudaMalloc(&p, 100));
    store_byte_async(p, 100, nullptr);
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_CHECK(cudaFree(p));
  });
}

void run_probe(SanitizerProbe probe) {
  testing::expect_success(testing::gpu_test_world(), [probe](testing::RankEnv& env) {
    GPU_CHECK(cudaSetDevice(rank_device(env.info.local_rank)));
    int* out = nullptr;
    GPU_CHECK(cudaMalloc(&out, 64 * sizeof(int)));
    if (probe != SanitizerProbe::kUninitializedRead) {
      GPU_CHECK(cudaMemset(out, 0, 64 * sizeof(int)));
    }
    sanitizer_probe_async(probe, out, nullptr);
    GPU_CHECK(cudaDeviceSynchronize());
    int first = -1;
    GPU_CHECK(cudaMemcpy(&first, out, sizeof first, cudaMemcpyDeviceToHost));
    // The race's two stores leave either writer's index; the barrier probe leaves lane 0's 1.
    if (probe == SanitizerProbe::kSharedRace) {
      EXPECT_TRUE(first == 0 || first == 32) << first;
    }
    if (probe == SanitizerProbe::kLoneBarrier) {
      EXPECT_EQ(first, 1);
    }
    GPU_CHECK(cudaFree(out));
  });
}

TEST(GpuSanitizerProbe, DISABLED_EveryRankReachesABarrierWithOneLane) { run_probe(SanitizerProbe::kLoneBarrier); }
TEST(GpuSanitizerProbe, DISABLED_EveryRankRacesOnASharedWord) { run_probe(SanitizerProbe::kSharedRace); }
TEST(GpuSanitizerProbe, DISABLED_EveryRankReadsMemoryNothingWrote) { run_probe(SanitizerProbe::kUninitializedRead); }

}  // namespace
}  // namespace symcomm::gputest
