// The device sequence counter is 32 bits and wraps (include/symcomm/device/signal.h). Two ways a wrap could
// go wrong, each tested without running 2^28 collectives first: Config::debug_seq_start starts the counter
// where the test needs it, Config::debug_signal_lag starts the signal slots behind it.
//   - Stale slots (NOTE [signal refresh]): a block index that goes unused while the counter moves 2^31 reads
//     as already reached. The slots start as far behind as the refresh rule allows, the counter 64 advances
//     before a multiple of 2^28; 300 one-block barriers cross it (the refresh) and take the counter past the
//     point where a slot left at its start would read as reached; then a two-shot all-reduce over every SM
//     runs with its upper blocks on those slots, the last rank 300 ms late. Without the refresh the early
//     ranks' upper blocks pass their first barrier at once (a false kMismatch on the zeroed headers, or wrong
//     sums).
//   - The wrap itself (NOTE [LL flag zero]): an op whose sequence number is 0, on LL lines never written
//     before, then a mix of collectives across the wrap, all exact.
// Eager and as CUDA-graph replays (the counter is advanced by the kernels, so replays cross too).
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

constexpr uint32_t kCrossing = 9u << 28;  // a multiple of 2^28 (device::kSignalRefreshShift)
constexpr uint32_t kStaleStart = kCrossing - 64;
constexpr uint32_t kStaleLag = (1u << 31) - 128;  // slots start this far behind the counter
constexpr int kStaleBarriers = 300;         // one advance each: past kStaleStart - kStaleLag + 2^31 = kStaleStart + 128
constexpr size_t kCount = size_t{4} << 20;  // float32 elements of the large all-reduce (16 MB)

std::unique_ptr<Communicator> make_comm(RankEnv& env, uint32_t start, uint32_t lag) {
  EXPECT_EQ(cudaSetDevice(rank_device(env.info.local_rank)), cudaSuccess);
  CommOptions o = cuda_comm_options_without_nccl(env.config);
  o.config->heap_bytes = (env.info.world_size + 1) * kCount * sizeof(float);
  o.config->debug_seq_start = start;
  o.config->debug_signal_lag = lag;
  // Two-shot all-reduces up to 2 MB on the LL128 lines at every world size, larger ones with barriers; all-gather
  // blocks above 512 KB on the LL128 lines up to 1 MB, larger ones on the direct kernel.
  o.config->tuning.cuda_ll128_two_shot_max_bytes = (size_t{2} << 20) - 16;
  o.config->tuning.cuda_ll_gather_max_bytes = (size_t{512} << 10) - 16;
  o.config->tuning.cuda_ll128_gather_max_bytes = (size_t{1} << 20) - 16;
  o.config->tuning.cuda_ll128_reduce_scatter_max_bytes = (size_t{1} << 20) - 16;
  return env.make_comm(o);
}

/// Runs `issue` on `s`, eagerly or captured once and replayed `times` times.
template <class F>
void run(bool graph, int times, cudaStream_t s, F issue) {
  if (!graph) {
    for (int i = 0; i < times; ++i) issue();
    return;
  }
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  issue();
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  for (int i = 0; i < times; ++i) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
}

class GpuSequence : public ::testing::TestWithParam<bool> {};  // graph replays

TEST_P(GpuSequence, StaleSlotsAreRefreshedBeforeTheyReadAsReached) {
  const bool graph = GetParam();
  const int world = testing::gpu_test_world();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::expect_success(world, [graph, world](RankEnv& env) {
    auto comm = make_comm(env, kStaleStart, kStaleLag);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    auto* buf = static_cast<float*>(comm->alloc(kCount * sizeof(float)));
    run(graph, kStaleBarriers, s, [&] { comm->barrier({.stream = s}); });
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    comm->check();
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      fill_input_async(buf, DataType::kFloat32, ReduceOp::kSum, seed, comm->rank(), kCount, s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      // The last rank comes late, so the others' blocks wait on the slots in question (the first time).
      if (seed == 1 && comm->rank() == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      run(graph, 1, s, [&] {
        comm->all_reduce(buf, buf, kCount, DataType::kFloat32, ReduceOp::kSum,
                         {.stream = s, .algorithm = Algorithm::kTwoShot});
      });
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      comm->check();
      EXPECT_EQ(count_wrong_sum(buf, kCount, seed, world), 0u) << "seed " << seed << " on rank " << comm->rank();
    }
    cudaStreamDestroy(s);
  });
}

/// What runs at sequence number 0 (the first op after the counter wraps), each the first of its kind in the
/// communicator, so its LL lines were never written.
enum class AtZero { kLLAllReduce, kLL128AllReduce, kLL128TwoShot, kLLAllGather, kTwoShot };
struct WrapCase {
  const char* name;
  AtZero op;
  bool graph;
};
void PrintTo(const WrapCase& c, std::ostream* os) { *os << c.name; }

class GpuSequenceWrap : public ::testing::TestWithParam<WrapCase> {};

TEST_P(GpuSequenceWrap, CountersWrapAroundExactly) {
  const WrapCase c = GetParam();
  const int world = testing::gpu_test_world();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::expect_success(world, [c, world](RankEnv& env) {
    // 8 barriers bring the counter to 2^32 - 1, so the next kernel's first sequence number is 0.
    auto comm = make_comm(env, 0xffffffffu - 8, 0);
    const int me = comm->rank();
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    auto* buf = static_cast<float*>(comm->alloc(kCount * sizeof(float) * world));
    run(c.graph, 8, s, [&] { comm->barrier({.stream = s}); });
    // The op at 0, then a mix across the wrap: LL, LL128 and staged one-shot, two-shot, direct, LL128 and LL
    // all-gather.
    struct Step {
      size_t count;
      Algorithm algo;
      bool gather;
    };
    const Step at_zero = c.op == AtZero::kLLAllReduce      ? Step{1024, Algorithm::kOneShot, false}
                         : c.op == AtZero::kLL128AllReduce ? Step{size_t{1} << 18, Algorithm::kOneShot, false}
                         : c.op == AtZero::kLL128TwoShot   ? Step{size_t{1} << 18, Algorithm::kTwoShot, false}
                         : c.op == AtZero::kLLAllGather    ? Step{1024, Algorithm::kDirect, true}
                                                           : Step{kCount, Algorithm::kTwoShot, false};
    const Step steps[] = {at_zero,
                          {1024, Algorithm::kOneShot, false},
                          {size_t{1} << 18, Algorithm::kOneShot, false},
                          {size_t{1} << 20, Algorithm::kOneShot, false},
                          {kCount, Algorithm::kTwoShot, false},
                          {size_t{1} << 18, Algorithm::kTwoShot, false},
                          {size_t{1} << 18, Algorithm::kDirect, true},
                          {size_t{3} << 16, Algorithm::kDirect, true},
                          {1024, Algorithm::kDirect, true}};
    uint64_t seed = 10;
    for (const Step& st : steps) {
      ++seed;
      if (st.gather) {
        fill_input_async(buf + me * st.count, DataType::kFloat32, ReduceOp::kSum, seed, me, st.count, s);
      } else {
        fill_input_async(buf, DataType::kFloat32, ReduceOp::kSum, seed, me, st.count, s);
      }
      run(c.graph, 1, s, [&] {
        if (st.gather) {
          comm->all_gather(buf + me * st.count, buf, st.count, DataType::kFloat32, {.stream = s, .algorithm = st.algo});
        } else {
          comm->all_reduce(buf, buf, st.count, DataType::kFloat32, ReduceOp::kSum, {.stream = s, .algorithm = st.algo});
        }
      });
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      comm->check();
      if (st.gather) {
        // Block r of the output is rank r's input: compare with a world-1 "sum" of that rank's values.
        std::vector<float> host(st.count * world);
        ASSERT_EQ(cudaMemcpy(host.data(), buf, host.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
        size_t wrong = 0;
        for (int r = 0; r < world; ++r) {
          for (size_t i = 0; i < st.count; ++i) {
            if (host[r * st.count + i] !=
                static_cast<float>(input_value(DataType::kFloat32, ReduceOp::kSum, seed, r, i)))
              ++wrong;
          }
        }
        EXPECT_EQ(wrong, 0u) << "all-gather of " << st.count << " on rank " << me;
      } else {
        EXPECT_EQ(count_wrong_sum(buf, st.count, seed, world), 0u) << "all-reduce of " << st.count << " on rank " << me;
      }
    }
    cudaStreamDestroy(s);
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, GpuSequence, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "graph" : "eager"; });
INSTANTIATE_TEST_SUITE_P(Cases, GpuSequenceWrap,
                         ::testing::Values(WrapCase{"ll_all_reduce", AtZero::kLLAllReduce, false},
                                           WrapCase{"ll128_all_reduce", AtZero::kLL128AllReduce, false},
                                           WrapCase{"ll128_two_shot", AtZero::kLL128TwoShot, false},
                                           WrapCase{"ll_all_gather", AtZero::kLLAllGather, false},
                                           WrapCase{"two_shot", AtZero::kTwoShot, false},
                                           WrapCase{"ll_all_reduce_graph", AtZero::kLLAllReduce, true},
                                           WrapCase{"ll128_all_reduce_graph", AtZero::kLL128AllReduce, true}),
                         [](const ::testing::TestParamInfo<WrapCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace symcomm::gputest
