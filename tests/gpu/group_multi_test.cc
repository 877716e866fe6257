// Multi-tensor group execution on the CUDA backend: random groups made of runs of same-(kind,
// dtype, op) all-reduces, reduce-scatters and all-gathers (fused into one kernel per run) must give, byte for
// byte, what the same collectives give one by one on poisoned outputs, and the host reference of
// gpu_test_util.h. Buffers: all symmetric (zero-copy), all cudaMalloc (staged) or mixed; runs longer than
// one launch's segment list; a captured group replayed with changing inputs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

struct Tensor {
  Collective kind;
  DataType dt;
  ReduceOp op;
  size_t count;
  uint64_t seed;
  bool sym;
  char* in = nullptr;
  char* out = nullptr;     ///< grouped result
  char* single = nullptr;  ///< one-by-one result (always cudaMalloc)
  size_t in_bytes = 0, out_bytes = 0;
};

size_t align16(size_t b) { return (b + 15) / 16 * 16; }

// Deterministic (the same on every rank): the symmetric slab is allocated collectively.
std::vector<Tensor> random_group(uint64_t seed, int n) {
  std::vector<Tensor> ts;
  const int runs = 1 + static_cast<int>(testing::mix64(seed) % 5);
  for (int r = 0; r < runs; ++r) {
    uint64_t h = testing::mix64(seed * 131 + r);
    const Collective kinds[] = {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather};
    const Collective kind = kinds[h % 3];
    const DataType dt = kAllDtypes[(h >> 4) % 8];
    const ReduceOp op = kind == Collective::kAllGather ? ReduceOp::kSum : kAllOps[(h >> 8) % 5];
    const int len = (h >> 12) % 4 == 0 ? 60 + static_cast<int>((h >> 16) % 30) : 1 + static_cast<int>((h >> 16) % 12);
    const int buf_mode = static_cast<int>((h >> 24) % 3);  // 0 symmetric, 1 device, 2 mixed
    for (int k = 0; k < len; ++k) {
      uint64_t g = testing::mix64(h + k);
      Tensor t{kind, dt, op, 0, seed * 1000 + r * 100 + k, buf_mode == 0 || (buf_mode == 2 && g % 2 == 0)};
      const size_t sizes[] = {1, 7, 1031, 4099, 20011, (g >> 8) % 3000};
      t.count = len > 20 ? (g >> 20) % 700 + 1 : sizes[(g >> 4) % 6];
      const size_t es = dtype_size(dt);
      t.in_bytes = (kind == Collective::kReduceScatter ? n : 1) * t.count * es;
      t.out_bytes = (kind == Collective::kAllGather ? n : 1) * t.count * es;
      ts.push_back(t);
    }
  }
  if (seed % 4 == 0) {  // runs over the NCCL size threshold of reduce-scatter / all-gather: the symcomm kernels
    for (Collective kind : {Collective::kReduceScatter, Collective::kAllGather}) {
      for (int k = 0; k < 8; ++k) {
        Tensor t{
            kind,      DataType::kFloat32, ReduceOp::kSum, 40000 + static_cast<size_t>(k) * 3, seed * 1000 + 900 + k,
            k % 3 != 2};
        t.in_bytes = (kind == Collective::kReduceScatter ? n : 1) * t.count * 4;
        t.out_bytes = (kind == Collective::kAllGather ? n : 1) * t.count * 4;
        ts.push_back(t);
      }
    }
  }
  return ts;
}

std::vector<uint8_t> reference(const Tensor& t, int n, int me) {
  const size_t es = dtype_size(t.dt), elems = t.out_bytes / es;
  std::vector<uint8_t> w(t.out_bytes);
  for (size_t i = 0; i < elems; ++i) {
    if (t.kind == Collective::kAllReduce) expected_reduce(t.dt, t.op, t.seed, n, i, &w[i * es]);
    if (t.kind == Collective::kReduceScatter) expected_reduce(t.dt, t.op, t.seed, n, me * t.count + i, &w[i * es]);
    if (t.kind == Collective::kAllGather) {
      encode(t.dt, input_value(t.dt, t.op, t.seed, static_cast<int>(i / t.count), i % t.count), &w[i * es]);
    }
  }
  return w;
}

void issue(Communicator& c, const Tensor& t, void* out, cudaStream_t s) {
  CollOptions o{.stream = s};
  if (t.kind == Collective::kAllReduce) c.all_reduce(t.in, out, t.count, t.dt, t.op, o);
  if (t.kind == Collective::kReduceScatter) c.reduce_scatter(t.in, out, t.count, t.dt, t.op, o);
  if (t.kind == Collective::kAllGather) c.all_gather(t.in, out, t.count, t.dt, o);
}

// Carves the symmetric tensors out of one heap allocation (cuMem allocations are 2 MB granular).
char* place(Communicator& comm, std::vector<Tensor>& ts) {
  size_t slab = 16;
  for (const Tensor& t : ts) slab += t.sym ? align16(t.in_bytes) + align16(t.out_bytes) : 0;
  char* base = static_cast<char*>(comm.alloc(slab));
  size_t off = 0;
  for (Tensor& t : ts) {
    if (t.sym) {
      t.in = base + off;
      off += align16(t.in_bytes);
      t.out = base + off;
      off += align16(t.out_bytes);
    } else {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&t.in), t.in_bytes + 16), cudaSuccess);
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&t.out), t.out_bytes + 16), cudaSuccess);
    }
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&t.single), t.out_bytes + 16), cudaSuccess);
  }
  return base;
}

void release(Communicator& comm, std::vector<Tensor>& ts, char* slab) {
  for (Tensor& t : ts) {
    if (!t.sym) {
      cudaFree(t.in);
      cudaFree(t.out);
    }
    cudaFree(t.single);
  }
  comm.free(slab);
}

// Runs 24 random groups on a communicator whose configuration `tweak` adjusts.
void random_groups(RankEnv& env, const std::function<void(Config&)>& tweak) {
  CommOptions copts = cuda_comm_options();
  copts.config = env.config;
  if (tweak) tweak(*copts.config);
  auto comm = env.make_comm(copts);
  const int me = comm->rank(), world = comm->world_size();
  cudaStream_t s;
  GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    std::vector<Tensor> ts = random_group(seed, world);
    char* slab = place(*comm, ts);
    for (const Tensor& t : ts) {
      std::vector<uint8_t> host = make_input(t.dt, t.op, t.seed, me, 0, t.in_bytes / dtype_size(t.dt));
      GPU_CHECK(cudaMemcpy(t.in, host.data(), host.size(), cudaMemcpyHostToDevice));
      GPU_CHECK(cudaMemset(t.out, kPoisonByte, t.out_bytes));
      GPU_CHECK(cudaMemset(t.single, kPoisonByte, t.out_bytes));
    }
    GPU_CHECK(cudaDeviceSynchronize());
    for (const Tensor& t : ts) issue(*comm, t, t.single, s);
    const bool async = seed % 3 == 0;
    comm->group_start();
    for (const Tensor& t : ts) issue(*comm, t, t.out, s);
    if (async) {
      comm->group_end_async()->wait();
    } else {
      comm->group_end();
    }
    GPU_CHECK(cudaStreamSynchronize(s));
    comm->check();
    for (size_t k = 0; k < ts.size(); ++k) {
      const Tensor& t = ts[k];
      std::vector<uint8_t> grouped(t.out_bytes), single(t.out_bytes);
      GPU_CHECK(cudaMemcpy(grouped.data(), t.out, t.out_bytes, cudaMemcpyDeviceToHost));
      GPU_CHECK(cudaMemcpy(single.data(), t.single, t.out_bytes, cudaMemcpyDeviceToHost));
      ASSERT_EQ(grouped, single) << "seed " << seed << " tensor " << k << " " << to_string(t.kind) << " "
                                 << to_string(t.dt) << " " << to_string(t.op) << " count " << t.count
                                 << (t.sym ? " symmetric" : " device");
      ASSERT_EQ(grouped, reference(t, world, me)) << "seed " << seed << " tensor " << k;
    }
    release(*comm, ts, slab);
  }
  cudaStreamDestroy(s);
}

TEST(GpuGroupMulti, RandomGroupsEqualOneByOneAndReference) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) { random_groups(env, {}); });
}

// Every all-reduce run whose outputs all lie in the heap takes the push-to-output kernel (NOTE [two-shot push
// to output]); with the tests' 1 MB of staging, the larger runs take several rounds.
TEST(GpuGroupMulti, RandomGroupsPushToOutputEqualOneByOne) {
  const int n = testing::gpu_test_world();
  testing::expect_success(
      n, [](RankEnv& env) { random_groups(env, [](Config& c) { c.tuning.cuda_two_shot_push_min_bytes = 0; }); });
}

TEST(GpuGroupMulti, CapturedGroupReplaysWithChangingInputs) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const int me = comm->rank(), world = comm->world_size();
    // 70 all-reduces (two launches of the segment list), the last 6 outside the heap (staged), then a run of
    // reduce-scatters and one of all-gathers.
    std::vector<Tensor> ts;
    for (int k = 0; k < 82; ++k) {
      const Collective kind = k < 70   ? Collective::kAllReduce
                              : k < 76 ? Collective::kReduceScatter
                                       : Collective::kAllGather;
      // Reduce-scatters and all-gathers of ~100 KB per rank: 600 KB per run, above the NCCL threshold.
      const size_t count = k < 70 ? 1 + (k * 7919) % 5000 : 50000 + k * 7;
      Tensor t{kind, DataType::kBFloat16, ReduceOp::kSum, count, 0, !(k >= 64 && k < 70)};
      t.in_bytes = (kind == Collective::kReduceScatter ? world : 1) * t.count * 2;
      t.out_bytes = (kind == Collective::kAllGather ? world : 1) * t.count * 2;
      ts.push_back(t);
    }
    char* slab = place(*comm, ts);
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto group = [&] {
      comm->group_start();
      for (const Tensor& t : ts) issue(*comm, t, t.out, s);
      comm->group_end();
    };
    group();  // eager first: device counters are non-zero when the graph starts
    GPU_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    group();
    GPU_CHECK(cudaStreamEndCapture(s, &graph));
    GPU_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 1; rep <= 40; ++rep) {
      for (Tensor& t : ts) {
        t.seed = 5000 + rep * 100 + (&t - ts.data());
        fill_input_async(t.in, t.dt, t.op, t.seed, me, t.in_bytes / 2, s);
        GPU_CHECK(cudaMemsetAsync(t.out, kPoisonByte, t.out_bytes, s));
      }
      GPU_CHECK(cudaGraphLaunch(exec, s));
      if (rep % 9 != 0 && rep != 40) continue;
      GPU_CHECK(cudaStreamSynchronize(s));
      comm->check();
      for (size_t k = 0; k < ts.size(); ++k) {
        std::vector<uint8_t> got(ts[k].out_bytes);
        GPU_CHECK(cudaMemcpy(got.data(), ts[k].out, got.size(), cudaMemcpyDeviceToHost));
        ASSERT_EQ(got, reference(ts[k], world, me)) << "replay " << rep << " tensor " << k;
      }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    GPU_CHECK(cudaStreamSynchronize(s));
    release(*comm, ts, slab);
    cudaStreamDestroy(s);
  });
}

}  // namespace
}  // namespace symcomm::gputest
