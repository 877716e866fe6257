// The GPU collective matrix: every collective x dtype x op x {in place, out of place} x counts {0, 1, odd,
// prime, large} x {cudaMalloc buffers (staged path), symmetric-heap buffers (zero-copy path)} x {16-byte
// aligned, misaligned by one element}, with exact expected values built on the host, poisoned outputs and
// guard bytes around every buffer. World size = number of GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <map>
#include <string>

#include "collective_sweep.h"
#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

TEST(GpuCollectives, AllReduce) {
  const int n = gpus();
  testing::expect_success(n, [](RankEnv& env) {
    const PathCounts paths =
        sweep(env, reduction_cases(Collective::kAllReduce, {Algorithm::kOneShot, Algorithm::kTwoShot}));
    // Two-shot on device buffers is staged; on heap buffers it reads or pushes in place.
    expect_paths(paths, {KernelPath::kTwoShotStaged});
    EXPECT_GT(paths.count(KernelPath::kTwoShotZeroCopy) + paths.count(KernelPath::kTwoShotPush), 0u);
  });
}

// The push-to-output two-shot (NOTE [two-shot push to output]) on every case of the matrix, plus inputs of
// several staging rounds (8 MB per round at 2 ranks with the default 16 MB of staging), in and out of place.
// Symmetric outputs take it; device outputs keep the staged path.
TEST(GpuCollectives, AllReduceTwoShotPushToOutput) {
  const int n = gpus();
  testing::expect_success(n, [](RankEnv& env) {
    std::vector<Case> cases = reduction_cases(Collective::kAllReduce, {Algorithm::kTwoShot});
    for (bool ip : {false, true}) {
      cases.push_back(
          {Collective::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 5000001, ip, 0, Algorithm::kTwoShot});
      cases.push_back(
          {Collective::kAllReduce, DataType::kBFloat16, ReduceOp::kMax, 9000003, ip, 2, Algorithm::kTwoShot});
    }
    const PathCounts paths = sweep(env, cases, [](Config& c) {
      c.tuning.cuda_two_shot_push_min_bytes = 0;
      c.heap_bytes = size_t{1} << 30;
    });
    expect_paths(paths, {KernelPath::kTwoShotPush, KernelPath::kTwoShotStaged}, {KernelPath::kTwoShotZeroCopy});
  });
}

// The LL128 one-shot (NOTE [LL128 lines]) on every case of the matrix with LL off, so that small counts take
// it too, on a grid of 3 blocks (every warp runs several batches of lines, and partial batches), plus counts
// at its 4 MB cap and just below, in and out of place; then the defaults' grid on the large counts.
TEST(GpuCollectives, AllReduceLL128) {
  const int n = gpus();
  testing::expect_success(n, [](RankEnv& env) {
    std::vector<Case> cases = reduction_cases(Collective::kAllReduce, {Algorithm::kOneShot});
    std::vector<Case> large;
    for (bool ip : {false, true}) {
      large.push_back(
          {Collective::kAllReduce, DataType::kBFloat16, ReduceOp::kSum, 2097152, ip, 0, Algorithm::kOneShot});
      large.push_back(
          {Collective::kAllReduce, DataType::kFloat16, ReduceOp::kMax, 2097151, ip, 2, Algorithm::kOneShot});
      large.push_back({Collective::kAllReduce, DataType::kFloat32, ReduceOp::kAvg, 700001, ip, 4, Algorithm::kOneShot});
    }
    cases.insert(cases.end(), large.begin(), large.end());
    const PathCounts paths = sweep(env, cases, [](Config& c) {
      c.tuning.cuda_ll_max_bytes = 0;
      c.tuning.cuda_ll128_max_blocks = 3;
      c.heap_bytes = size_t{1} << 30;
    });
    expect_paths(paths, {KernelPath::kLL128}, {KernelPath::kLL});
    sweep(env, large, [](Config& c) { c.heap_bytes = size_t{1} << 30; });
  });
}

// The LL128 two-shot (NOTE [LL128 two-shot]) on every case of the matrix with its limit above its capacity, on a
// grid of 3 blocks (every warp runs several positions, and partial ones), plus counts at its capacity (a little
// over world_size / 2 x 4 MB) and just below, in and out of place, and one just above (the two-shot
// with barriers); then the defaults' grid on the large counts. Counts of fewer lines than ranks take the
// two-shot with barriers too.
TEST(GpuCollectives, AllReduceLL128TwoShot) {
  const int n = gpus();
  // Lines of 120 payload bytes; a slot holds 4 MB of them and 4 more, half for each of the two phases' positions.
  constexpr size_t kSlotLines = ((size_t{4} << 20) + 119) / 120 + 4;
  const size_t cap = kSlotLines / 2 * 120 * static_cast<size_t>(n);
  testing::expect_success(n, [cap](RankEnv& env) {
    std::vector<Case> cases = reduction_cases(Collective::kAllReduce, {Algorithm::kTwoShot});
    std::vector<Case> large;
    for (bool ip : {false, true}) {
      large.push_back(
          {Collective::kAllReduce, DataType::kBFloat16, ReduceOp::kSum, cap / 2, ip, 0, Algorithm::kTwoShot});
      large.push_back(
          {Collective::kAllReduce, DataType::kFloat16, ReduceOp::kMax, cap / 2 - 1, ip, 2, Algorithm::kTwoShot});
      large.push_back({Collective::kAllReduce, DataType::kFloat32, ReduceOp::kAvg, 700001, ip, 4, Algorithm::kTwoShot});
    }
    large.push_back(
        {Collective::kAllReduce, DataType::kBFloat16, ReduceOp::kSum, cap / 2 + 1, false, 0, Algorithm::kTwoShot});
    cases.insert(cases.end(), large.begin(), large.end());
    auto two_shot_ll = [](Config& c) {
      c.tuning.cuda_ll128_two_shot_max_bytes = size_t{16} << 20;
      c.tuning.cuda_two_shot_push_min_bytes = SIZE_MAX;  // above the LL128 range: the pulling two-shot
      c.heap_bytes = size_t{1} << 30;
    };
    const PathCounts paths = sweep(env, cases, [&](Config& c) {
      two_shot_ll(c);
      c.tuning.cuda_ll128_max_blocks = 3;
    });
    expect_paths(paths, {KernelPath::kLL128TwoShot, KernelPath::kTwoShotStaged, KernelPath::kTwoShotZeroCopy});
    expect_paths(sweep(env, large, two_shot_ll), {KernelPath::kLL128TwoShot});
  });
}

TEST(GpuCollectives, ReduceScatter) {
  const int n = gpus();
  testing::expect_success(
      n, [](RankEnv& env) { sweep(env, reduction_cases(Collective::kReduceScatter, {Algorithm::kAuto})); });
}

TEST(GpuCollectives, AllGather) {
  const int n = gpus();
  testing::expect_success(n, [n](RankEnv& env) { sweep(env, move_cases(Collective::kAllGather, n)); });
}

/// The matrix of the direct algorithm: reduce-scatter's reduction cases, all-gather's, all-to-all's and
/// broadcast's move cases.
std::vector<Case> direct_cases(int world) {
  std::vector<Case> cases = reduction_cases(Collective::kReduceScatter, {Algorithm::kDirect});
  for (Collective k : {Collective::kAllGather, Collective::kAllToAll, Collective::kBroadcast}) {
    const std::vector<Case> moves = move_cases(k, world, Algorithm::kDirect);
    cases.insert(cases.end(), moves.begin(), moves.end());
  }
  return cases;
}

// The two kernels behind a direct all-gather, reduce-scatter, all-to-all and broadcast, each on every case of
// the matrix: the LL kernels (NOTE [LL all-gather and reduce-scatter], NOTE [LL broadcast]) up to the LL
// buffer's capacity on a grid of 3 blocks (every thread runs several batches, and partial ones), plus blocks
// at that capacity and just below; then the direct kernels with LL off. (The tests of each collective run the
// defaults: LL for small counts.)
TEST(GpuCollectives, MovesAndReduceScatterLLAndDirect) {
  const int n = gpus();
  testing::expect_success(n, [n](RankEnv& env) {
    std::vector<Case> cases = direct_cases(n);
    std::vector<Case> edge;  // the LL buffer holds 1 MB - 8 bytes per block (cuda::all_reduce_ll_max_bytes)
    for (bool ip : {false, true}) {
      edge.push_back(
          {Collective::kReduceScatter, DataType::kBFloat16, ReduceOp::kSum, (1 << 19) - 4, ip, 0, Algorithm::kDirect});
      edge.push_back(
          {Collective::kReduceScatter, DataType::kFloat32, ReduceOp::kMax, (1 << 18) - 3, ip, 4, Algorithm::kDirect});
      edge.push_back(
          {Collective::kAllGather, DataType::kUInt8, ReduceOp::kSum, (1 << 20) - 8, ip, 0, Algorithm::kDirect});
      edge.push_back(
          {Collective::kAllGather, DataType::kFloat16, ReduceOp::kSum, (1 << 19) - 5, ip, 2, Algorithm::kDirect});
      edge.push_back(
          {Collective::kAllToAll, DataType::kInt32, ReduceOp::kSum, (1 << 18) - 2, ip, 4, Algorithm::kDirect});
      edge.push_back(
          {Collective::kBroadcast, DataType::kUInt8, ReduceOp::kSum, (1 << 20) - 8, ip, 0, Algorithm::kDirect, n - 1});
      edge.push_back({Collective::kBroadcast, DataType::kFloat64, ReduceOp::kSum, (1 << 17) - 1, ip, 8,
                      Algorithm::kDirect, n / 2});
    }
    cases.insert(cases.end(), edge.begin(), edge.end());
    expect_paths(sweep(env, cases,
                       [](Config& c) {
                         c.tuning.cuda_ll_gather_max_bytes = size_t{1} << 20;
                         c.tuning.cuda_ll_max_blocks = 3;
                         c.heap_bytes = std::max(c.heap_bytes, size_t{256} << 20);
                       }),
                 {KernelPath::kLL, KernelPath::kDirectStaged});
    expect_paths(sweep(env, cases,
                       [](Config& c) {
                         c.tuning.cuda_ll_gather_max_bytes = 0;
                         c.heap_bytes = std::max(c.heap_bytes, size_t{256} << 20);
                       }),
                 {KernelPath::kDirectStaged, KernelPath::kDirectZeroCopy}, {KernelPath::kLL});
  });
}

// The LL128 kernel's all-gather, reduce-scatter and all-to-all (NOTE [LL128 all-gather and reduce-scatter]) on
// every case of the matrix, LL off, on a grid of 3 blocks (every 8-lane group runs several batches, and partial
// ones), plus blocks at the LL128 buffer's capacity (4 MB) and just below; broadcasts of the same cases stay on
// the direct kernel.
TEST(GpuCollectives, MovesAndReduceScatterLL128) {
  const int n = gpus();
  testing::expect_success(n, [n](RankEnv& env) {
    std::vector<Case> cases = direct_cases(n);
    for (bool ip : {false, true}) {
      cases.push_back({Collective::kReduceScatter, DataType::kBFloat16, ReduceOp::kSum, size_t{1} << 21, ip, 0,
                       Algorithm::kDirect});
      cases.push_back(
          {Collective::kReduceScatter, DataType::kFloat32, ReduceOp::kMin, (1 << 20) - 3, ip, 4, Algorithm::kDirect});
      cases.push_back(
          {Collective::kAllGather, DataType::kUInt8, ReduceOp::kSum, size_t{1} << 22, ip, 0, Algorithm::kDirect});
      cases.push_back(
          {Collective::kAllGather, DataType::kFloat16, ReduceOp::kSum, (1 << 21) - 5, ip, 2, Algorithm::kDirect});
      cases.push_back(
          {Collective::kAllToAll, DataType::kInt32, ReduceOp::kSum, (1 << 20) - 2, ip, 4, Algorithm::kDirect});
    }
    expect_paths(sweep(env, cases,
                       [](Config& c) {
                         c.tuning.cuda_ll_gather_max_bytes = 0;
                         c.tuning.cuda_ll128_gather_max_bytes = size_t{4} << 20;
                         c.tuning.cuda_ll128_reduce_scatter_max_bytes = size_t{4} << 20;
                         c.tuning.cuda_ll128_max_blocks = 3;
                         c.heap_bytes = std::max(c.heap_bytes, size_t{256} << 20);
                       }),
                 {KernelPath::kLL128, KernelPath::kDirectStaged}, {KernelPath::kLL});
  });
}

TEST(GpuCollectives, Broadcast) {
  const int n = gpus();
  testing::expect_success(n, [n](RankEnv& env) { sweep(env, move_cases(Collective::kBroadcast, n)); });
}

TEST(GpuCollectives, AllToAll) {
  const int n = gpus();
  testing::expect_success(n, [n](RankEnv& env) { sweep(env, move_cases(Collective::kAllToAll, n)); });
}

// Copy-engine (low-contention) paths: the same matrix as the SM kernels, forced to kCopyEngine. The large
// count runs several staging rounds (test scratch 1 MB) and several reduce chunks per lane.
TEST(GpuCollectives, CopyEngine) {
  const int n = gpus();
  testing::expect_success(n, [n](RankEnv& env) {
    std::vector<Case> v = reduction_cases(Collective::kReduceScatter, {Algorithm::kCopyEngine});
    for (Collective k : {Collective::kAllGather, Collective::kBroadcast, Collective::kAllToAll}) {
      std::vector<Case> m = move_cases(k, n, Algorithm::kCopyEngine);
      v.insert(v.end(), m.begin(), m.end());
    }
    sweep(env, v);
  });
}

// Contention::kLow selects the copy engine for every collective that has one, at every size (also where the
// throughput choice would be NCCL); all-reduce keeps its SM algorithms.
TEST(GpuCollectives, LowContentionSelectsTheCopyEngine) {
  const int n = gpus();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int world = comm->world_size();
    void *in = nullptr, *out = nullptr;
    const size_t count = 1 << 20;
    GPU_CHECK(cudaMalloc(&in, world * count * 2));
    GPU_CHECK(cudaMalloc(&out, world * count * 2));
    for (size_t c : {size_t{16}, count}) {
      CollOptions o{.contention = Contention::kLow};
      comm->all_gather(in, out, c, DataType::kBFloat16, o);
      EXPECT_EQ(comm->last_algorithm(), Algorithm::kCopyEngine);
      comm->reduce_scatter(in, out, c, DataType::kBFloat16, ReduceOp::kSum, o);
      EXPECT_EQ(comm->last_algorithm(), Algorithm::kCopyEngine);
      comm->all_to_all(in, out, c, DataType::kBFloat16, o);
      EXPECT_EQ(comm->last_algorithm(), Algorithm::kCopyEngine);
      comm->broadcast(in, out, c, DataType::kBFloat16, 0, o);
      EXPECT_EQ(comm->last_algorithm(), Algorithm::kCopyEngine);
      comm->all_reduce(in, out, c, DataType::kBFloat16, ReduceOp::kSum, o);
      EXPECT_NE(comm->last_algorithm(), Algorithm::kCopyEngine);
    }
    GPU_CHECK(cudaDeviceSynchronize());
    cudaFree(in);
    cudaFree(out);
  });
}

// One rank (also where only one GPU is lent): the whole matrix with every algorithm that can be forced,
// where each collective is a copy (or nothing) but still goes through the kernels, the copy engine and
// NCCL's one-rank communicator; automatic selection takes the local copy.
TEST(GpuCollectives, SingleGpuEveryCollectiveAndAlgorithmAtOneRank) {
  testing::expect_success(1, [](RankEnv& env) {
    std::vector<Case> v =
        reduction_cases(Collective::kAllReduce, {Algorithm::kAuto, Algorithm::kOneShot, Algorithm::kTwoShot});
    std::vector<Case> rs = reduction_cases(Collective::kReduceScatter, {Algorithm::kAuto, Algorithm::kCopyEngine});
    v.insert(v.end(), rs.begin(), rs.end());
    for (Collective k : {Collective::kAllGather, Collective::kBroadcast, Collective::kAllToAll}) {
      for (Algorithm a : {Algorithm::kAuto, Algorithm::kDirect, Algorithm::kCopyEngine}) {
        std::vector<Case> m = move_cases(k, 1, a);
        v.insert(v.end(), m.begin(), m.end());
      }
    }
    for (Collective k : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                         Collective::kBroadcast, Collective::kAllToAll})
      for (size_t count : kCounts)
        for (bool ip : {false, true})
          if (!ranks_share_gpus())
            v.push_back({k, DataType::kBFloat16, ReduceOp::kSum, count, ip, 0, Algorithm::kNccl});
    sweep(env, v);
  });
}

// The NCCL fallback path through the same entry points (a narrower matrix: NCCL is not under test).
TEST(GpuCollectives, NcclFallback) {
  SKIP_WITHOUT_NCCL();
  const int n = gpus();
  testing::expect_success(n, [](RankEnv& env) {
    std::vector<Case> v;
    for (Collective k : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                         Collective::kBroadcast, Collective::kAllToAll})
      for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32})
        for (size_t count : kCounts)
          for (bool ip : {false, true}) v.push_back({k, dt, ReduceOp::kSum, count, ip, 0, Algorithm::kNccl});
    sweep(env, v);
  });
}

TEST(GpuCollectives, BarrierOrdersStreams) {
  const int n = gpus();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 100; ++i) comm->barrier({.stream = s});
    auto w = comm->barrier_async({.stream = s});
    w->wait();
    EXPECT_TRUE(w->is_completed());
    GPU_CHECK(cudaStreamSynchronize(s));
    cudaStreamDestroy(s);
  });
}

// The ordering rule (docs/design/cuda-backend.md): one communicator may be used from several streams when each
// switch is ordered by an event. Two streams take turns, each all-reduce waiting for the other stream's last
// one; sizes alternate between the LL, staged one-shot and two-shot kernels so that every kind of device
// counter (sequence numbers, staging halves) is handed over between the streams. Every result is checked
// against the reference.
TEST(GpuCollectives, TwoStreamsOrderedByEventsShareOneCommunicator) {
  const int n = gpus();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int me = comm->rank(), world = comm->world_size();
    cudaStream_t st[2];
    cudaEvent_t ev[2];
    for (int k = 0; k < 2; ++k) {
      GPU_CHECK(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
      GPU_CHECK(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
    }
    const size_t counts[] = {1000, 300000, 3000000};  // float32: 4 KB, 1.2 MB, 12 MB
    const int kIters = 24;
    std::vector<float*> bufs(kIters);
    for (int i = 0; i < kIters; ++i) {
      GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&bufs[i]), counts[i % 3] * sizeof(float)));
    }
    GPU_CHECK(cudaEventRecord(ev[1], st[1]));
    for (int i = 0; i < kIters; ++i) {
      const int k = i % 2;
      const size_t count = counts[i % 3];
      GPU_CHECK(cudaStreamWaitEvent(st[k], ev[1 - k], 0));  // the other stream's last all-reduce
      fill_input_async(bufs[i], DataType::kFloat32, ReduceOp::kSum, 500 + i, me, count, st[k]);
      comm->all_reduce(bufs[i], bufs[i], count, DataType::kFloat32, ReduceOp::kSum, {.stream = st[k]});
      GPU_CHECK(cudaEventRecord(ev[k], st[k]));
    }
    for (int k = 0; k < 2; ++k) GPU_CHECK(cudaStreamSynchronize(st[k]));
    comm->check();
    for (int i = 0; i < kIters; ++i) {
      const size_t count = counts[i % 3];
      std::vector<float> got(count);
      GPU_CHECK(cudaMemcpy(got.data(), bufs[i], count * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t j = 0; j < count; j += 1 + j / 64) {  // every element at first, then sparser
        float want = 0;
        expected_reduce(DataType::kFloat32, ReduceOp::kSum, 500 + i, world, j, &want);
        ASSERT_EQ(got[j], want) << "op " << i << " (stream " << i % 2 << ", count " << count << ") element " << j;
      }
      cudaFree(bufs[i]);
    }
    for (int k = 0; k < 2; ++k) {
      cudaEventDestroy(ev[k]);
      cudaStreamDestroy(st[k]);
    }
  });
}

}  // namespace
}  // namespace symcomm::gputest
