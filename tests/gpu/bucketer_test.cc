// ReduceScatterBucketer on the CUDA backend (issue 6): random sequences of bucketed reduce-scatters (device
// inputs, mixed dtypes/ops/counts, inputs larger than a bucket, explicit flushes, teardowns) must equal byte
// for byte the same reduce-scatters issued one by one on poisoned outputs, and the host reference; a
// captured flush replays correctly with changing inputs; invalid use throws kInvalidArgument.
#include "symcomm/bucketer.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <deque>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

struct Item {
  DataType dt;
  ReduceOp op;
  size_t count;
  uint64_t seed;
  char* in = nullptr;
  char* single = nullptr;  ///< one-by-one result
  char* copy = nullptr;    ///< what the callback copied out of the bucket (stream-ordered)
  int calls = 0;
};

std::vector<uint8_t> reference(const Item& it, int n, int me) {
  const size_t es = dtype_size(it.dt);
  std::vector<uint8_t> w(it.count * es);
  for (size_t i = 0; i < it.count; ++i) expected_reduce(it.dt, it.op, it.seed, n, me * it.count + i, &w[i * es]);
  return w;
}

std::vector<uint8_t> to_host(const char* p, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  if (bytes) {
    EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return h;
}

TEST(GpuBucketer, RandomSequencesEqualOneByOneAndReference) {
  const int n = testing::count_gpus_in_child();
  testing::expect_success(n, [](RankEnv& env) {
    // Over-size inputs keep their own heap buffers until teardown: more heap than the 64 MB test default.
    CommOptions copts = cuda_comm_options();
    copts.config = env.config;
    copts.config->heap_bytes = size_t{512} << 20;
    auto comm = env.make_comm(copts);
    const int me = comm->rank(), world = comm->world_size();
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (uint64_t round = 1; round <= 8; ++round) {
      const size_t caps[] = {4096, 65536, 1 << 20};
      const size_t cap = caps[round % 3];
      ReduceScatterBucketer b(*comm, {.bucket_cap_mb = static_cast<double>(cap) * world / 1048576.0});
      std::deque<Item> items;
      const int how_many = 30 + static_cast<int>(testing::mix64(round) % 90);
      for (int k = 0; k < how_many; ++k) {
        uint64_t h = testing::mix64(round * 1000 + k);
        Item it{kAllDtypes[h % 8], kAllOps[(h >> 4) % 5], 0, round * 1000 + k};
        const size_t es = dtype_size(it.dt);
        it.count = (h >> 8) % 25 == 0 ? cap / es + 1 + (h >> 16) % 100 : (h >> 16) % (cap / es / 4 + 2);
        GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&it.in), world * it.count * es + 16));
        GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&it.single), it.count * es + 16));
        GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&it.copy), it.count * es + 16));
        std::vector<uint8_t> host = make_input(it.dt, it.op, it.seed, me, 0, world * it.count);
        if (!host.empty()) {
          GPU_CHECK(cudaMemcpy(it.in, host.data(), host.size(), cudaMemcpyHostToDevice));
        }
        GPU_CHECK(cudaMemset(it.single, kPoisonByte, it.count * es + 16));
        GPU_CHECK(cudaMemset(it.copy, kPoisonByte, it.count * es + 16));
        items.push_back(it);
      }
      GPU_CHECK(cudaDeviceSynchronize());
      for (Item& it : items) comm->reduce_scatter(it.in, it.single, it.count, it.dt, it.op, {.stream = s});
      for (size_t k = 0; k < items.size(); ++k) {
        Item& it = items[k];
        b.reduce_scatter_async(
            it.in, it.count, it.dt, it.op,
            [&it, s](const void* result, size_t count) {
              ASSERT_EQ(count, it.count);
              ++it.calls;
              // The view is valid until this bucket flushes again: copy it out in stream order.
              if (count) {
                ASSERT_EQ(cudaMemcpyAsync(it.copy, result, count * dtype_size(it.dt), cudaMemcpyDeviceToDevice, s),
                          cudaSuccess);
              }
            },
            {.stream = s});
        const uint64_t action = testing::mix64(round * 77 + k) % 24;
        if (action == 0) b.flush();
        if (action == 1) {
          b.flush();
          b.teardown();
        }
      }
      b.flush();
      GPU_CHECK(cudaStreamSynchronize(s));
      comm->check();
      for (size_t k = 0; k < items.size(); ++k) {
        const Item& it = items[k];
        const size_t bytes = it.count * dtype_size(it.dt);
        ASSERT_EQ(it.calls, 1) << "round " << round << " item " << k;
        std::vector<uint8_t> got = to_host(it.copy, bytes + 16), single = to_host(it.single, bytes);
        for (size_t i = bytes; i < bytes + 16; ++i) ASSERT_EQ(got[i], kPoisonByte) << "write past the result";
        got.resize(bytes);
        ASSERT_EQ(got, single) << "round " << round << " item " << k << " " << to_string(it.dt) << " "
                               << to_string(it.op) << " count " << it.count;
        ASSERT_EQ(got, reference(it, world, me)) << "round " << round << " item " << k;
      }
      for (Item& it : items) {
        cudaFree(it.in);
        cudaFree(it.single);
        cudaFree(it.copy);
      }
    }
    cudaStreamDestroy(s);
  });
}

TEST(GpuBucketer, CapturedFlushReplaysWithChangingInputs) {
  const int n = testing::count_gpus_in_child();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int me = comm->rank(), world = comm->world_size();
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 4});
    std::vector<Item> items(300);
    for (size_t k = 0; k < items.size(); ++k) {
      Item& it = items[k];
      it.dt = DataType::kBFloat16;
      it.op = ReduceOp::kSum;
      it.count = 1 + (k * 131) % 2000;
      GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&it.in), world * it.count * 2));
      GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&it.copy), it.count * 2));
    }
    auto sequence = [&] {
      for (Item& it : items) {
        b.reduce_scatter_async(
            it.in, it.count, it.dt, it.op,
            [&it, s](const void* r, size_t c) { cudaMemcpyAsync(it.copy, r, c * 2, cudaMemcpyDeviceToDevice, s); },
            {.stream = s});
      }
      b.flush();
    };
    sequence();  // eager: allocates the bucket (a collective allocation cannot be captured)
    GPU_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    sequence();
    GPU_CHECK(cudaStreamEndCapture(s, &graph));
    GPU_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 1; rep <= 20; ++rep) {
      for (size_t k = 0; k < items.size(); ++k) {
        items[k].seed = 9000 + rep * 1000 + k;
        fill_input_async(items[k].in, items[k].dt, items[k].op, items[k].seed, me, world * items[k].count, s);
        GPU_CHECK(cudaMemsetAsync(items[k].copy, kPoisonByte, items[k].count * 2, s));
      }
      GPU_CHECK(cudaGraphLaunch(exec, s));
      if (rep % 6 != 0 && rep != 20) continue;
      GPU_CHECK(cudaStreamSynchronize(s));
      comm->check();
      for (size_t k = 0; k < items.size(); ++k) {
        ASSERT_EQ(to_host(items[k].copy, items[k].count * 2), reference(items[k], world, me))
            << "replay " << rep << " item " << k;
      }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    for (Item& it : items) {
      cudaFree(it.in);
      cudaFree(it.copy);
    }
    cudaStreamDestroy(s);
  });
}

TEST(GpuBucketer, InvalidUseThrows) {
  const int n = testing::count_gpus_in_child();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int world = comm->world_size();
    ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 1});
    void* in = nullptr;
    GPU_CHECK(cudaMalloc(&in, world * 64 * 4));
    GPU_CHECK(cudaMemset(in, 0, world * 64 * 4));
    auto code = [](auto&& f) {
      try {
        f();
      } catch (const Error& e) {
        return e.code();
      }
      return ErrorCode::kInternal;
    };
    auto noop = [](const void*, size_t) {};
    EXPECT_EQ(code([&] { b.reduce_scatter_async(in, 64, DataType::kFloat32, ReduceOp::kSum, nullptr); }),
              ErrorCode::kInvalidArgument);
    EXPECT_EQ(code([&] { b.reduce_scatter_async(nullptr, 64, DataType::kFloat32, ReduceOp::kSum, noop); }),
              ErrorCode::kInvalidArgument);
    b.reduce_scatter_async(in, 64, DataType::kFloat32, ReduceOp::kSum, noop);
    EXPECT_EQ(code([&] { b.teardown(); }), ErrorCode::kInvalidArgument);
    const void* view = nullptr;
    b.reduce_scatter_async(in, 64, DataType::kFloat32, ReduceOp::kSum, [&](const void* r, size_t) { view = r; });
    b.flush();
    EXPECT_EQ(code([&] { b.reduce_scatter_async(view, 16, DataType::kFloat32, ReduceOp::kSum, noop); }),
              ErrorCode::kInvalidArgument);
    b.teardown();
    GPU_CHECK(cudaDeviceSynchronize());
    comm->check();
    cudaFree(in);
  });
}

}  // namespace
}  // namespace symcomm::gputest
