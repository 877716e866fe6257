// main() of symcomm_gpu_tests: runs the GPU tests when at least two GPUs are present, otherwise reports a
// skip (exit 77, which ctest shows as "skipped", never as a pass). The GPUs are counted in a forked child:
// this process must not initialise CUDA, since the rank harness forks the ranks from it.
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
  const int gpus = symcomm::testing::count_gpus_in_child();
  if (gpus < 2) {
    std::printf("SKIPPED: needs 2 GPUs (found %d)\n", gpus);
    return 77;
  }
  std::printf("symcomm_gpu_tests: %d GPUs, world size %d\n", gpus, gpus);
  return RUN_ALL_TESTS();
}
