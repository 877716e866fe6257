// One CUDA communicator used from two threads, and from a thread whose current device is another GPU.
//
// Like NCCL, a communicator runs one collective at a time in issue order, so threads that share one must take
// turns in the same order on every rank and order their streams (an event). Within that contract nothing may
// depend on which thread calls: no per-thread state, and no dependence on the caller's current device. A new
// thread starts on device 0, whatever GPU the communicator uses; the calls must still run on the
// communicator's device and leave the caller's current device as it was (NOTE [caller's device]).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"
#include "symcomm/bucketer.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

/// Another visible GPU than `device`, or -1 where there is only one.
int other_device(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) return -1;
  return (device + 1) % n;
}

size_t count_wrong_gather(const float* dev, size_t count, uint64_t seed, int world) {
  std::vector<float> got(count * world);
  if (cudaMemcpy(got.data(), dev, got.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return got.size();
  size_t wrong = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) {
      wrong += got[r * count + i] != static_cast<float>(input_value(DataType::kFloat32, ReduceOp::kSum, seed, r, i));
    }
  }
  return wrong;
}

/// count_wrong_sum with `device` current: symmetric-heap memory is mapped for the communicator's device only, so
/// a copy out of it made while another GPU is current fails (cudaErrorInvalidValue on 2 x H100).
size_t count_wrong_sum_on(int device, const float* dev, size_t count, uint64_t seed, int world, size_t first = 0) {
  int current = -1;
  cudaGetDevice(&current);
  cudaSetDevice(device);
  const size_t wrong = count_wrong_sum(dev, count, seed, world, first);
  cudaSetDevice(current);
  return wrong;
}

/// Buffers and a stream of one thread, on the communicator's device.
struct Lane {
  explicit Lane(int device) {
    cudaSetDevice(device);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    cudaMalloc(&a, kMaxCount * 4);
    cudaMalloc(&b, kMaxCount * 4);
    cudaMalloc(&gathered, kMaxGather * 4 * 8);
  }
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  ~Lane() {
    cudaFree(a);
    cudaFree(b);
    cudaFree(gathered);
    cudaEventDestroy(done);
    cudaStreamDestroy(stream);
  }
  static constexpr size_t kMaxCount = 3000000, kMaxGather = 70001;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  float *a = nullptr, *b = nullptr, *gathered = nullptr;
};

/// fill_input_async on the communicator's device (a kernel goes to its stream's device only when that device
/// is current), with the caller's device current again afterwards.
void fill_on(int device, float* p, uint64_t seed, int rank, size_t count, cudaStream_t s) {
  int current = -1;
  cudaGetDevice(&current);
  cudaSetDevice(device);
  fill_input_async(p, DataType::kFloat32, ReduceOp::kSum, seed, rank, count, s);
  cudaSetDevice(current);
}

/// Round j of thread `who`: a small all-reduce (LL), a large one (two-shot), an all-gather, or a group of two
/// all-reduces, on the thread's own stream after the other thread's last call. Returns the wrong elements.
size_t one_round(Communicator& comm, Lane& lane, cudaEvent_t previous, int who, int j) {
  const int me = comm.rank(), world = comm.world_size(), device = comm.device();
  const uint64_t seed = 1000 + 100 * who + j;
  const CollOptions o{.stream = lane.stream};
  EXPECT_EQ(cudaStreamWaitEvent(lane.stream, previous, 0), cudaSuccess);
  size_t wrong = 0;
  switch (j % 4) {
    case 0:
    case 1: {
      const size_t count = j % 4 == 0 ? 1031 : Lane::kMaxCount;
      fill_on(device, lane.a, seed, me, count, lane.stream);
      comm.all_reduce(lane.a, lane.b, count, DataType::kFloat32, ReduceOp::kSum, o);
      EXPECT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
      wrong = count_wrong_sum(lane.b, count, seed, world);
      break;
    }
    case 2: {
      fill_on(device, lane.a, seed, me, Lane::kMaxGather, lane.stream);
      comm.all_gather(lane.a, lane.gathered, Lane::kMaxGather, DataType::kFloat32, o);
      EXPECT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
      wrong = count_wrong_gather(lane.gathered, Lane::kMaxGather, seed, world);
      break;
    }
    default: {
      const size_t count = 40000;
      fill_on(device, lane.a, seed, me, count, lane.stream);
      fill_on(device, lane.a + count, seed + 1, me, count, lane.stream);
      comm.group_start();
      comm.all_reduce(lane.a, lane.b, count, DataType::kFloat32, ReduceOp::kSum, o);
      comm.all_reduce(lane.a + count, lane.b + count, count, DataType::kFloat32, ReduceOp::kSum, o);
      comm.group_end_async()->wait();
      wrong = count_wrong_sum(lane.b, count, seed, world) + count_wrong_sum(lane.b + count, count, seed + 1, world);
      break;
    }
  }
  EXPECT_EQ(cudaEventRecord(lane.done, lane.stream), cudaSuccess);
  comm.check();
  return wrong;
}

// Two threads per rank take turns (the same order on every rank); the second starts on device 0, as every new
// thread does, and keeps it current while it issues (on 2+ GPUs the first thread also moves to another GPU
// before each call): every result is exact and each thread's current device is what it was before each call.
TEST(GpuThreads, TwoThreadsTakeTurnsOnOneCommunicator) {
  testing::expect_success(testing::gpu_test_world(), [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int device = comm->device();
    std::mutex mu;
    std::condition_variable cv;
    int turn = 0;
    constexpr int kRounds = 16;
    Lane lanes[2] = {Lane(device), Lane(device)};
    EXPECT_EQ(cudaEventRecord(lanes[1].done, lanes[1].stream), cudaSuccess);
    auto body = [&](int who) {
      // Thread 1: a new thread's current device (0). Thread 0: another GPU than the communicator's, if any.
      const int other = other_device(device);
      if (who == 0 && other >= 0) cudaSetDevice(other);
      int mine = -1;
      ASSERT_EQ(cudaGetDevice(&mine), cudaSuccess);
      for (int j = 0; j < kRounds; ++j) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return turn == 2 * j + who; });
        size_t wrong = 0;
        try {
          wrong = one_round(*comm, lanes[who], lanes[1 - who].done, who, j);
        } catch (const Error& e) {
          ADD_FAILURE() << "thread " << who << " round " << j << ": " << e.what();
        }
        EXPECT_EQ(wrong, 0u) << "thread " << who << " round " << j;
        int now = -1;
        EXPECT_EQ(cudaGetDevice(&now), cudaSuccess);
        EXPECT_EQ(now, mine) << "thread " << who << " round " << j << ": the call changed the current device";
        ++turn;  // also after a failure, so that the other thread is not left waiting
        cv.notify_all();
      }
    };
    std::thread second([&] { body(1); });
    body(0);
    second.join();
    EXPECT_EQ(turn, 2 * kRounds);
    cudaSetDevice(device);
    comm->barrier();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  });
}

// Two communicators over the same ranks, each driven by its own thread on its own stream, with no order between
// the threads: their kernels run at the same time and interleave differently on every rank. Each communicator
// has its own signal pads and staging, so every result is exact. LL sizes only: kernels of two communicators
// must be able to run side by side (CollOptions), which grids of one block per SM cannot.
TEST(GpuThreads, TwoCommunicatorsFromTwoThreadsAtOnce) {
  testing::expect_success(testing::gpu_test_world(), [](RankEnv& env) {
    auto a = env.make_comm(cuda_comm_options());
    auto b = env.make_comm(cuda_comm_options());
    const int device = a->device();
    auto body = [device](Communicator& comm, uint64_t seed0) {
      cudaSetDevice(device);
      Lane lane(device);
      const CollOptions o{.stream = lane.stream};
      for (int it = 0; it < 150; ++it) {
        const size_t count = it % 2 ? 1031 : 16384;
        const uint64_t seed = seed0 + it;
        fill_input_async(lane.a, DataType::kFloat32, ReduceOp::kSum, seed, comm.rank(), count, lane.stream);
        comm.all_reduce(lane.a, lane.b, count, DataType::kFloat32, ReduceOp::kSum, o);
        ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
        ASSERT_EQ(count_wrong_sum(lane.b, count, seed, comm.world_size()), 0u) << "iteration " << it;
      }
      comm.check();
    };
    std::thread other([&] { body(*b, 50000); });
    body(*a, 0);
    other.join();
  });
}

// Every kind of call made while another GPU is current: the symmetric heap (alloc, free), an eager and an
// asynchronous all-reduce, a barrier, a group and a bucket flush. Each runs on the communicator's GPU (exact
// results) and leaves the other GPU current. Needs 2 visible GPUs.
TEST(GpuThreads, CallsLeaveTheCallersCurrentDeviceAlone) {
  const int world = testing::gpu_test_world();
  // Counted in a child: CUDA initialised in this process would be unusable in the ranks forked from it.
  if (testing::count_gpus_in_child() < 2) {
    GTEST_SKIP() << "needs 2 visible GPUs (one for the communicator, another to be current)";
  }
  testing::expect_success(world, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int device = comm->device(), me = comm->rank(), n = comm->world_size();
    const int other = other_device(device);
    Lane lane(device);
    const CollOptions o{.stream = lane.stream};
    auto still_other = [&](const char* what) {
      int now = -1;
      EXPECT_EQ(cudaGetDevice(&now), cudaSuccess);
      EXPECT_EQ(now, other) << what << " changed the current device";
      cudaSetDevice(other);
    };
    const size_t count = 100003;
    auto fill = [&](float* p, uint64_t seed) { fill_on(device, p, seed, me, count, lane.stream); };
    cudaSetDevice(other);

    auto* heap = static_cast<float*>(comm->alloc(count * 4));
    still_other("alloc");
    ASSERT_NE(heap, nullptr);
    fill(lane.a, 1);
    comm->all_reduce(lane.a, heap, count, DataType::kFloat32, ReduceOp::kSum, o);
    still_other("all_reduce");
    ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
    EXPECT_EQ(count_wrong_sum_on(device, heap, count, 1, n), 0u) << "all_reduce into the heap";

    fill(lane.a, 2);
    auto w = comm->all_reduce_async(lane.a, lane.b, count, DataType::kFloat32, ReduceOp::kSum, o);
    still_other("all_reduce_async");
    w->wait();
    EXPECT_EQ(count_wrong_sum(lane.b, count, 2, n), 0u) << "all_reduce_async";

    comm->barrier(o);
    still_other("barrier");

    fill(lane.a, 3);
    fill(lane.a + count, 4);
    comm->group_start();
    comm->all_reduce(lane.a, lane.b, count, DataType::kFloat32, ReduceOp::kSum, o);
    comm->all_reduce(lane.a + count, lane.b + count, count, DataType::kFloat32, ReduceOp::kSum, o);
    comm->group_end();
    still_other("group_end");
    ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
    EXPECT_EQ(count_wrong_sum(lane.b, count, 3, n) + count_wrong_sum(lane.b + count, count, 4, n), 0u) << "group";

    {
      // Each rank's input: n blocks of `block` elements; this rank's result is block `me` reduced.
      const size_t block = 4099;
      fill_on(device, lane.a, 5, me, block * n, lane.stream);
      ReduceScatterBucketer bucketer(*comm, BucketOptions{.bucket_cap_mb = 1.0});
      const void* result = nullptr;
      size_t result_count = 0;
      bucketer.reduce_scatter_async(
          lane.a, block, DataType::kFloat32, ReduceOp::kSum,
          [&](const void* r, size_t k) {
            result = r;
            result_count = k;
          },
          o);
      bucketer.flush();
      still_other("the bucket flush");
      ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
      ASSERT_EQ(result_count, block);
      EXPECT_EQ(count_wrong_sum_on(device, static_cast<const float*>(result), block, 5, n, me * block), 0u)
          << "bucket flush";
    }
    still_other("the bucketer's teardown");

    // The copy engine (its stream memory operations and copies) and, where NCCL exists, the NCCL fallback.
    fill_on(device, lane.a, 6, me, Lane::kMaxGather, lane.stream);
    comm->all_gather(lane.a, lane.gathered, Lane::kMaxGather, DataType::kFloat32,
                     CollOptions{.stream = lane.stream, .contention = Contention::kLow});
    still_other("a copy-engine all_gather");
    ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
    EXPECT_EQ(count_wrong_gather(lane.gathered, Lane::kMaxGather, 6, n), 0u) << "copy-engine all_gather";
    if (!ranks_share_gpus()) {
      fill(lane.a, 7);
      comm->all_reduce(lane.a, lane.b, count, DataType::kFloat32, ReduceOp::kSum,
                       CollOptions{.stream = lane.stream, .algorithm = Algorithm::kNccl});
      still_other("an all_reduce through NCCL");
      ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
      EXPECT_EQ(count_wrong_sum(lane.b, count, 7, n), 0u) << "all_reduce through NCCL";
    }

    comm->free(heap);
    still_other("free");
    comm->check();
    comm.reset();
    still_other("the communicator's destruction");
    cudaSetDevice(device);
  });
}

// NOTE [launch result] in src/algos/cuda_common.cuh: a failure the caller's own CUDA calls left in the thread's
// last error is neither taken for a failure of symcomm's launches (which would fail the communicator for good)
// nor cleared. Before every call the test leaves cudaErrorInvalidDevice there (a cudaSetDevice to no device);
// every path still runs exactly, and the error is still there afterwards. One GPU is enough.
TEST(GpuThreads, ACallersEarlierCudaErrorIsNeitherTakenNorCleared) {
  testing::expect_success(testing::gpu_test_world(), [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int device = comm->device(), me = comm->rank(), n = comm->world_size();
    Lane lane(device);
    const CollOptions o{.stream = lane.stream};
    auto plant = [] {
      cudaGetLastError();
      ASSERT_EQ(cudaSetDevice(1 << 20), cudaErrorInvalidDevice);
      ASSERT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    };
    auto still_there = [](const char* what) {
      EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice) << what << " took or cleared the caller's error";
      cudaGetLastError();
    };
    // Small (LL), medium (LL128 / staged one-shot) and large (two-shot) all-reduces, eager and asynchronous.
    uint64_t seed = 10;
    for (size_t count : {size_t{1031}, size_t{200003}, Lane::kMaxCount}) {
      fill_input_async(lane.a, DataType::kFloat32, ReduceOp::kSum, seed, me, count, lane.stream);
      plant();
      comm->all_reduce(lane.a, lane.b, count, DataType::kFloat32, ReduceOp::kSum, o);
      still_there("all_reduce");
      ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
      EXPECT_EQ(count_wrong_sum(lane.b, count, seed, n), 0u) << "all_reduce of " << count;
      ++seed;
    }
    fill_input_async(lane.a, DataType::kFloat32, ReduceOp::kSum, seed, me, 4099, lane.stream);
    plant();
    auto w = comm->all_reduce_async(lane.a, lane.b, 4099, DataType::kFloat32, ReduceOp::kSum, o);
    w->wait();
    still_there("all_reduce_async and wait");
    EXPECT_EQ(count_wrong_sum(lane.b, 4099, seed, n), 0u) << "all_reduce_async";

    for (size_t count : {size_t{77}, Lane::kMaxGather}) {
      ++seed;
      fill_input_async(lane.a, DataType::kFloat32, ReduceOp::kSum, seed, me, count, lane.stream);
      plant();
      comm->all_gather(lane.a, lane.gathered, count, DataType::kFloat32, o);
      still_there("all_gather");
      ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
      EXPECT_EQ(count_wrong_gather(lane.gathered, count, seed, n), 0u) << "all_gather of " << count;
    }

    const size_t block = 40009;  // each rank's output: block `me` of every rank's n blocks, reduced
    ++seed;
    fill_input_async(lane.a, DataType::kFloat32, ReduceOp::kSum, seed, me, block * n, lane.stream);
    plant();
    comm->reduce_scatter(lane.a, lane.b, block, DataType::kFloat32, ReduceOp::kSum, o);
    still_there("reduce_scatter");
    ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
    EXPECT_EQ(count_wrong_sum(lane.b, block, seed, n, me * block), 0u) << "reduce_scatter";

    plant();
    comm->barrier(o);
    still_there("barrier");

    seed += 2;
    fill_input_async(lane.a, DataType::kFloat32, ReduceOp::kSum, seed, me, 2 * block, lane.stream);
    plant();
    comm->group_start();
    comm->all_reduce(lane.a, lane.b, block, DataType::kFloat32, ReduceOp::kSum, o);
    comm->all_reduce(lane.a + block, lane.b + block, block, DataType::kFloat32, ReduceOp::kSum, o);
    comm->group_end();
    still_there("a group");
    ASSERT_EQ(cudaStreamSynchronize(lane.stream), cudaSuccess);
    EXPECT_EQ(count_wrong_sum(lane.b, 2 * block, seed, n), 0u) << "group";
    comm->check();
  });
}

}  // namespace
}  // namespace symcomm::gputest
