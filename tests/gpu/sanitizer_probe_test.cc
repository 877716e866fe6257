// The positive control of the compute-sanitizer runs (tools/gpu_check.sh, step `sanitize`): every rank,
// forked from the test binary as in every GPU test, stores one byte past the end of a 100-byte cudaMalloc
// buffer. The store lands in the allocation's padding, so the test passes without the tool; memcheck must
// report it in every rank. Disabled: run it with --gtest_also_run_disabled_tests, under memcheck only. A
// memcheck run that reports nothing here does not see the ranks' kernels, and its clean results would mean
// nothing.
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

}  // namespace
}  // namespace symcomm::gputest
