// main() of symcomm_gpu_tests: runs the GPU tests when at least two GPUs are present (or two ranks share
// GPUs: SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=n). With one GPU it runs
// only the tests written for one (named *SingleGpu*) unless a --gtest_filter chooses others, and says so;
// with none it reports a skip (exit 77, which ctest shows as "skipped", never as a pass). The GPUs are counted
// in a forked child: this process must not initialise CUDA, since the rank harness forks the ranks from it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "harness/rank_harness.h"

int main(int argc, char** argv) {
  // Never NVLink multicast (NVLS): it can take the host's shared GPUs out of service.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  ::setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  ::setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  ::testing::InitGoogleTest(&argc, argv);
  if (GTEST_FLAG_GET(list_tests)) return RUN_ALL_TESTS();  // listing needs no GPU
  const int gpus = symcomm::testing::count_gpus_in_child();
  if (gpus < 1) {
    std::printf("SKIPPED: needs a GPU (found none)\n");
    return 77;
  }
  const int world = symcomm::testing::gpu_test_world();
  if (world == 1) {
    if (GTEST_FLAG_GET(filter) == "*") GTEST_FLAG_SET(filter, "*SingleGpu*");
    std::printf(
        "symcomm_gpu_tests: 1 GPU: running only --gtest_filter=%s; every other GPU test needs 2 GPUs (or "
        "SYMCOMM_SHARED_GPU=1 SYMCOMM_TEST_WORLD=2) and is not run\n",
        GTEST_FLAG_GET(filter).c_str());
    return RUN_ALL_TESTS();
  }
  std::printf("symcomm_gpu_tests: %d GPUs, world size %d%s\n", gpus, world,
              world > gpus ? " (ranks share GPUs: SYMCOMM_SHARED_GPU=1)" : "");
  return RUN_ALL_TESTS();
}
