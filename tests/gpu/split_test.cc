// Communicator::split on the CUDA backend: the body of tests/backend_cases/split_cases.h (pairs of ranks with
// their own heap and signals, exact beside and after the parent) on the test world's GPUs.
#include <gtest/gtest.h>

#include "backend_cases/split_cases.h"
#include "gpu_test_util.h"

namespace symcomm::gputest {
namespace {

TEST(GpuSplit, PairsReduceExactlyBesideAndAfterTheParent) {
  testing::expect_success(testing::gpu_test_world(), [](testing::RankEnv& env) {
    CudaMemory mem;
    testing::split_pairs_case(env, mem);
  });
}

}  // namespace
}  // namespace symcomm::gputest
