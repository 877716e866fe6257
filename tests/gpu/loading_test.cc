// NOTE [kernel loading] (src/base/kernel_loading_cuda.h): a CUDA communicator loads every symcomm kernel at
// creation, so no collective's first call loads a module, which would wait for the device's queued work (the
// caller's stream included) to drain. Each rank holds its stream with a host function that sleeps for 2 s
// and then sets a flag; every kind of collective is then issued for the first time in this process on that
// stream. Had any call loaded a kernel, it would have returned only after the flag was set.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/kernel_loading_cuda.h"
#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

void CUDART_CB hold_then_release(void* flag) {
  std::this_thread::sleep_for(std::chrono::seconds(2));
  static_cast<std::atomic<bool>*>(flag)->store(true);
}

TEST(GpuLoading, FirstCallsOfEveryCollectiveDoNotWaitForTheirStream) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    EXPECT_GE(detail::kernel_module_count(), 10) << "the modules of symcomm's kernels registered themselves";
    const int me = comm->rank(), world = comm->world_size();
    const size_t small = 1024, large = size_t{1} << 18;  // float32 elements: 4 KB (LL) and 1 MB
    const size_t cap = large * world * 4;
    void *in = nullptr, *out = nullptr;
    GPU_CHECK(cudaMalloc(&in, cap));
    GPU_CHECK(cudaMalloc(&out, cap));
    void* sym_in = comm->alloc(cap);
    void* sym_out = comm->alloc(cap);
    std::vector<uint8_t> host = make_input(DataType::kFloat32, ReduceOp::kSum, 5, me, 0, small);
    GPU_CHECK(cudaMemcpy(in, host.data(), host.size(), cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemset(out, 0xcd, small * 4));
    cudaStream_t s = nullptr;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    GPU_CHECK(cudaDeviceSynchronize());

    std::atomic<bool> released{false};
    GPU_CHECK(cudaLaunchHostFunc(s, hold_then_release, &released));
    const CollOptions o{.stream = s};
    const auto f32 = DataType::kFloat32;
    comm->all_reduce(in, out, small, f32, ReduceOp::kSum, o);  // checked below
    comm->all_reduce(sym_in, sym_out, 64 * 1024, f32, ReduceOp::kSum, o);
    comm->all_reduce(sym_in, sym_out, large, f32, ReduceOp::kMax, {.stream = s, .algorithm = Algorithm::kOneShot});
    comm->all_reduce(in, sym_out, large, f32, ReduceOp::kSum, {.stream = s, .algorithm = Algorithm::kTwoShot});
    comm->all_reduce(sym_in, sym_out, large, f32, ReduceOp::kSum, {.stream = s, .algorithm = Algorithm::kTwoShot});
    comm->all_gather(sym_in, sym_out, large, f32, o);
    comm->all_gather(sym_in, sym_out, small, f32, o);
    comm->reduce_scatter(sym_in, sym_out, large, f32, ReduceOp::kSum, o);
    comm->reduce_scatter(in, sym_out, small, f32, ReduceOp::kMin, o);
    comm->broadcast(sym_in, sym_out, large, f32, 0, o);
    comm->all_to_all(sym_in, sym_out, small, f32, o);
    comm->all_gather(sym_in, sym_out, large, f32, {.stream = s, .contention = Contention::kLow});
    comm->barrier(o);
    {
      CollectiveGroup group(*comm);
      comm->all_reduce(sym_in, sym_out, small, f32, ReduceOp::kSum, o);
      comm->all_reduce(sym_in, static_cast<char*>(sym_out) + small * 4, small, f32, ReduceOp::kSum, o);
    }
    EXPECT_FALSE(released.load()) << "a first call waited for the work queued before it";
    GPU_CHECK(cudaStreamSynchronize(s));
    EXPECT_TRUE(released.load());
    comm->check();

    std::vector<uint8_t> got(small * 4), want(4);
    GPU_CHECK(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < small; ++i) {
      expected_reduce(f32, ReduceOp::kSum, 5, world, i, want.data());
      ASSERT_EQ(std::memcmp(&got[4 * i], want.data(), 4), 0) << "element " << i;
    }
    comm->free(sym_in);
    comm->free(sym_out);
    cudaStreamDestroy(s);
    cudaFree(in);
    cudaFree(out);
  });
}

}  // namespace
}  // namespace symcomm::gputest
