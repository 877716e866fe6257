// ReduceScatterBucketer on the CUDA backend: random sequences of bucketed reduce-scatters (device
// inputs, mixed dtypes/ops/counts, inputs larger than a bucket, explicit flushes, teardowns) must equal byte
// for byte the same reduce-scatters issued one by one on poisoned outputs, and the host reference; a
// captured flush replays correctly with changing inputs; invalid use throws kInvalidArgument.
#include "symcomm/bucketer.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

#include "backend_cases/bucketer_cases.h"
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
  const int n = testing::gpu_test_world();
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
      const CudaMemoryUse before_bucketer = cuda_memory_use(comm->device());
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
      // The buckets (and the over-size inputs' own buffers) hold heap memory until teardown(), which gives all
      // of it back, to the byte (cuda_memory_use), peers' mappings included.
      b.teardown();
      EXPECT_EQ(cuda_memory_use(comm->device()), before_bucketer) << "round " << round << " after teardown()";
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
  const int n = testing::gpu_test_world();
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

TEST(GpuBucketer, InvalidUseThrowsAndLeavesEverythingUsable) {
  testing::expect_success(testing::gpu_test_world(), [](RankEnv& env) {
    CudaMemory mem;
    testing::bucketer_rules_case(env, mem);
  });
}

// Pageable host memory is refused when recorded, as by Communicator::reduce_scatter; accepted, it would fault
// the copy kernel at the flush (a sticky kCuda error: the communicator unusable).
TEST(GpuBucketer, PageableHostMemoryIsRefused) {
  testing::expect_success(testing::gpu_test_world(), [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 1});
    std::vector<float> pageable(comm->world_size() * 64, 1.0f);
    testing::expect_error(ErrorCode::kInvalidArgument, [&] {
      b.reduce_scatter_async(pageable.data(), 64, DataType::kFloat32, ReduceOp::kSum, [](const void*, size_t) {});
    });
    EXPECT_EQ(b.pending(), 0u);
    b.teardown();
    GPU_CHECK(cudaDeviceSynchronize());
    comm->check();
  });
}

// Flushes large enough for symcomm's own reduce-scatter kernel (above Tuning::cuda_direct_nccl_max_bytes per
// rank) run the gathered kernel (NOTE [gathered flush]). Each case targets one of its edges: more inputs than
// one launch's list holds, rows longer than a staging round (several rounds), inputs not 16-byte aligned
// (narrow accesses), the generic integer path. Results must equal the independent host reference, nothing
// may be written past a result, and every callback runs once.
TEST(GpuBucketer, GatheredFlushesEqualReference) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    // A bucket holds world x per_rank_cap bytes of inputs plus the rank's outputs: the largest case (14 MB per
    // rank) outgrows the 64 MB test heap at 4 ranks and more, so the heap scales with the world size.
    CommOptions copts = cuda_comm_options();
    copts.config = env.config;
    copts.config->heap_bytes = std::max(copts.config->heap_bytes, (env.info.world_size + 2) * (size_t{16} << 20));
    auto comm = env.make_comm(copts);
    const int me = comm->rank(), world = comm->world_size();
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct Case {
      const char* what;
      DataType dt;
      ReduceOp op;
      size_t per_rank_cap;  ///< bucket bytes per rank
      int items;
      size_t min_count, max_count;
      size_t misalign;  ///< elements added to every input pointer
    };
    const Case cases[] = {
        {"2100 inputs, two launches", DataType::kFloat32, ReduceOp::kSum, 4 << 20, 2100, 100, 500, 0},
        {"rows over several staging rounds", DataType::kBFloat16, ReduceOp::kMax, 14 << 20, 40, 100000, 170000, 0},
        {"misaligned fp16 inputs", DataType::kFloat16, ReduceOp::kAvg, 2 << 20, 300, 500, 3000, 1},
        {"int32 product (generic path)", DataType::kInt32, ReduceOp::kProd, 2 << 20, 200, 1000, 4000, 3},
    };
    for (const Case& cs : cases) {
      SCOPED_TRACE(cs.what);
      const size_t es = dtype_size(cs.dt);
      ReduceScatterBucketer b(*comm, {.bucket_cap_mb = static_cast<double>(cs.per_rank_cap) * world / 1048576.0});
      std::vector<Item> items(cs.items);
      std::vector<size_t> in_off(cs.items), out_off(cs.items);
      size_t in_bytes = 0, out_bytes = 0, per_rank = 0;
      for (int k = 0; k < cs.items; ++k) {
        Item& it = items[k];
        it.dt = cs.dt;
        it.op = cs.op;
        it.seed = 70000 + 1000 * static_cast<uint64_t>(&cs - cases) + k;
        it.count = cs.min_count + testing::mix64(it.seed) % (cs.max_count - cs.min_count + 1);
        in_off[k] = in_bytes + cs.misalign * es;
        in_bytes = (in_off[k] + world * it.count * es + 255) / 256 * 256;
        out_off[k] = out_bytes;
        out_bytes += (it.count * es + 16 + 255) / 256 * 256;  // 16 guard bytes after each result
        per_rank += (it.count * es + 15) / 16 * 16;
      }
      ASSERT_GT(per_rank, size_t{512} << 10) << "the case must be large enough for symcomm's own kernel";
      ASSERT_LE(per_rank, b.bucket_bytes_per_rank()) << "the case must fit one bucket (one flush)";
      char *in = nullptr, *out = nullptr;
      GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&in), in_bytes));
      GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&out), out_bytes));
      GPU_CHECK(cudaMemset(out, kPoisonByte, out_bytes));
      for (int k = 0; k < cs.items; ++k) {
        items[k].in = in + in_off[k];
        items[k].copy = out + out_off[k];
        fill_input_async(items[k].in, cs.dt, cs.op, items[k].seed, me, world * items[k].count, s);
      }
      for (Item& it : items) {
        b.reduce_scatter_async(it.in, it.count, it.dt, it.op,
                               [&it, s, es](const void* r, size_t c) {
                                 ++it.calls;
                                 ASSERT_EQ(c, it.count);
                                 ASSERT_EQ(cudaMemcpyAsync(it.copy, r, c * es, cudaMemcpyDeviceToDevice, s),
                                           cudaSuccess);
                               },
                               {.stream = s});
      }
      EXPECT_EQ(b.pending(), items.size()) << "nothing may flush before flush() in this case";
      b.flush();
      GPU_CHECK(cudaStreamSynchronize(s));
      comm->check();
      EXPECT_EQ(comm->last_algorithm(), Algorithm::kDirect);
      for (int k = 0; k < cs.items; ++k) {
        const Item& it = items[k];
        const size_t bytes = it.count * es;
        ASSERT_EQ(it.calls, 1) << "item " << k;
        std::vector<uint8_t> got = to_host(it.copy, bytes + 16);
        for (size_t i = bytes; i < bytes + 16; ++i) ASSERT_EQ(got[i], kPoisonByte) << "item " << k;
        got.resize(bytes);
        ASSERT_EQ(got, reference(it, world, me)) << "item " << k << " count " << it.count;
      }
      b.teardown();
      cudaFree(in);
      cudaFree(out);
    }
    cudaStreamDestroy(s);
  });
}

// Ranks whose buckets hold the same total but different inputs (sizes in a different order) are told so
// (kMismatch naming the peer) by the gathered kernel's first barrier, instead of silently mixing rows.
TEST(GpuBucketer, GatheredFlushReportsMismatchedInputs) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int me = comm->rank(), world = comm->world_size();
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 4.0 * world});
    const size_t a = 100000, c = 300000;  // floats per rank: 1.6 MB per rank in all, in either order
    void* in = nullptr;
    GPU_CHECK(cudaMalloc(&in, world * (a + c) * 4));
    GPU_CHECK(cudaMemset(in, 0, world * (a + c) * 4));
    const size_t first = me == 0 ? a : c, second = me == 0 ? c : a;
    auto noop = [](const void*, size_t) {};
    b.reduce_scatter_async(in, first, DataType::kFloat32, ReduceOp::kSum, noop, {.stream = s});
    b.reduce_scatter_async(static_cast<float*>(in) + world * first, second, DataType::kFloat32, ReduceOp::kSum, noop,
                           {.stream = s});
    b.flush();
    GPU_CHECK(cudaStreamSynchronize(s));
    try {
      comm->check();
      ADD_FAILURE() << "no error for mismatched bucket inputs";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
      ASSERT_FALSE(e.ranks().empty()) << e.what();
      EXPECT_NE(e.ranks()[0], me) << e.what();
    }
    expect_gpu_usable();
    cudaFree(in);
    cudaStreamDestroy(s);
  });
}

}  // namespace
}  // namespace symcomm::gputest
