// Fused all-gather + matmul and matmul + reduce-scatter on the CUDA backend. World size = number
// of GPUs. Random bf16 / fp16 / fp32 inputs built on the host, a float64 reference computed on the host
// (tests/harness/fused_reference.h), poisoned outputs (0xff: NaN) with guard bytes, batch dims and several
// gather/scatter dims, the pipelined path (several chunk counts) and the unfused fallback, eagerly and
// captured into a CUDA graph replayed with new inputs.
//
// Error bound (fused_tolerance in fused_reference.h): cuBLASLt accumulates in float32 (CUBLAS_COMPUTE_32F,
// no TF32 for float32 inputs) in an unspecified order, |error| ≤ γ_K·Σ|a·b| with γ_K ≈ K·2^-24; the float32
// reduce-scatter of R partial products adds ≤ R·2^-24·Σ|a·b|; the final rounding to the output dtype adds
// half an ulp (2^-8 bf16, 2^-11 fp16, 2^-24 fp32) of |ref|; matmul + reduce-scatter may also round each
// rank's partial product once to the output dtype (rs_tolerance: the bar of an unfused GEMM followed by a
// float32-accumulating reduce-scatter). Nothing is compared bitwise except a_gathered, which is a copy.
#include "symcomm/fused.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "gpu_test_util.h"
#include "harness/fused_reference.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::AgReference;
using testing::HostTensor;
using testing::RankEnv;
using testing::RsReference;

enum class Mode { kUnfused, kPipelined, kGraphPipelined, kGraphUnfused };
const char* name(Mode m) {
  switch (m) {
    case Mode::kUnfused: return "unfused";
    case Mode::kPipelined: return "pipelined";
    case Mode::kGraphPipelined: return "graph pipelined";
    case Mode::kGraphUnfused: return "graph unfused";
  }
  return "?";
}
bool pipelined(Mode m) { return m == Mode::kPipelined || m == Mode::kGraphPipelined; }
bool graph(Mode m) { return m == Mode::kGraphPipelined || m == Mode::kGraphUnfused; }
constexpr int kReplays = 3;

void* upload(const HostTensor& t) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(t.bytes.size(), 16)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

// With abs_partials (matmul + reduce-scatter), the bound of rs_tolerance.
std::string compare(DataType dt, const std::vector<uint8_t>& got, const std::vector<double>& ref,
                    const std::vector<double>& abs_dot, int64_t k, int parts,
                    const std::vector<double>* abs_partials = nullptr) {
  const size_t es = dtype_size(dt);
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = testing::read_as_double(dt, got.data() + i * es);
    const double tol = abs_partials ? testing::rs_tolerance(dt, ref[i], abs_dot[i], (*abs_partials)[i], k, parts)
                                    : testing::fused_tolerance(dt, ref[i], abs_dot[i], k, parts);
    if (!(std::fabs(g - ref[i]) <= tol) && bad++ == 0) {
      first = fmt::format("element {}: got {}, want {} (tolerance {})", i, g, ref[i], tol);
    }
  }
  return bad ? fmt::format("{} wrong elements; first {}", bad, first) : "";
}

constexpr size_t kLtWorkspace = size_t{32} << 20;  // kLtWorkspaceBytes in src/fused/cublaslt_gemm_cuda.cc

/// The fused operations give back their temporaries (cuda_memory_use, exact): between `before` and now symcomm's
/// memory on `device` may only have grown by one cuBLASLt workspace (a stream's own, or the pool's reserve; one
/// allocation in the count either way; NOTE [cuBLASLt workspace]).
void expect_only_new_workspaces(int device, const CudaMemoryUse& before, const std::string& when) {
  const CudaMemoryUse now = cuda_memory_use(device);
  const size_t grew = now.device_bytes - before.device_bytes;
  EXPECT_TRUE(now.device_bytes >= before.device_bytes && grew % kLtWorkspace == 0 &&
              now.allocations >= before.allocations && now.allocations - before.allocations <= 1 &&
              now.peer_mapped_bytes == before.peer_mapped_bytes && now.pinned_host_bytes == before.pinned_host_bytes)
      << when << ": symcomm's memory went from " << to_string(before) << " to " << to_string(now);
}

/// Runs `issue` once eagerly, or captures it into a graph and replays it kReplays times, refreshing the
/// inputs (with the seed of each replay) before every replay through `refresh`; `check` verifies a seed.
/// Either way what the operation allocated for itself is given back by the end.
void run_mode(Mode mode, int device, cudaStream_t s, const std::function<void()>& issue,
              const std::function<void(uint64_t)>& refresh, const std::function<void(uint64_t)>& check) {
  const CudaMemoryUse before = cuda_memory_use(device);
  if (!graph(mode)) {
    refresh(0);
    issue();
    GPU_CHECK(cudaStreamSynchronize(s));
    check(0);
    expect_only_new_workspaces(device, before, std::string(name(mode)));
    return;
  }
  refresh(0);
  issue();  // eager first: cuBLASLt plans and workspaces exist before capture
  GPU_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t exec;
  GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  issue();
  GPU_CHECK(cudaStreamEndCapture(s, &g));
  GPU_CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (uint64_t rep = 1; rep <= kReplays; ++rep) {
    refresh(rep);
    GPU_CHECK(cudaGraphLaunch(exec, s));
    GPU_CHECK(cudaStreamSynchronize(s));
    check(rep);
    if (::testing::Test::HasFailure()) break;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  expect_only_new_workspaces(device, before, std::string(name(mode)));
}

struct AgCase {
  DataType dt;
  std::vector<int64_t> shard;
  int dim;
  std::vector<int64_t> n;
  int chunks;
};

void run_ag(Communicator& comm, const AgCase& c, Mode mode, uint64_t seed0) {
  const int world = comm.world_size(), me = comm.rank();
  const size_t es = dtype_size(c.dt);
  const int64_t k = c.shard.back();
  const int dim = c.dim < 0 ? c.dim + static_cast<int>(c.shard.size()) : c.dim;
  std::vector<HostTensor> bs;
  std::vector<void*> b_dev;
  std::vector<TensorRef> b_refs, out_refs;
  for (size_t i = 0; i < c.n.size(); ++i) {
    bs.push_back(testing::random_tensor(c.dt, {k, c.n[i]}, seed0 * 100 + 50 + i));
    b_dev.push_back(upload(bs[i]));
    b_refs.push_back(TensorRef{b_dev.back(), c.dt, bs[i].shape});
  }
  HostTensor mine = testing::random_tensor(c.dt, c.shard, seed0 * 1000 + me);
  void* a_dev = upload(mine);
  std::vector<int64_t> gshape = c.shard;
  gshape[dim] *= world;
  int64_t grows = 1;
  for (size_t i = 0; i + 1 < gshape.size(); ++i) grows *= gshape[i];
  std::vector<std::unique_ptr<GuardedBuffer>> outs;
  std::vector<char*> out_ptrs;
  for (size_t i = 0; i < c.n.size(); ++i) {
    outs.push_back(std::make_unique<GuardedBuffer>(comm, BufKind::kDevice, grows * c.n[i] * es));
    out_ptrs.push_back(outs.back()->prepare(0, grows * c.n[i] * es, 0xff));
    std::vector<int64_t> shape = gshape;
    shape.back() = c.n[i];
    out_refs.push_back(TensorRef{out_ptrs.back(), c.dt, shape});
  }
  GuardedBuffer gathered(comm, BufKind::kDevice, grows * k * es);
  char* g_ptr = gathered.prepare(0, grows * k * es, 0xff);
  TensorRef g_ref{g_ptr, c.dt, gshape};

  TensorRef a{a_dev, c.dt, c.shard};
  std::unique_ptr<FusedWorkspace> ws;
  if (pipelined(mode)) {
    ws = FusedWorkspace::create(comm, all_gather_matmul_workspace_bytes(world, a, c.dim, true, c.chunks));
  }
  cudaStream_t s;
  GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  FusedPath path = FusedPath::kUnfused;
  FusedOptions fo{.workspace = ws.get(), .chunks = c.chunks, .min_pipelined_flops = 0, .path_out = &path};
  const std::string what = fmt::format("{} shard [{}] dim {} N [{}] chunks {} {} rank {}", to_string(c.dt),
                                       fmt::join(c.shard, ","), c.dim, fmt::join(c.n, ","), c.chunks, name(mode), me);
  auto issue = [&] { all_gather_matmul(comm, a, b_refs, c.dim, out_refs, &g_ref, {.stream = s}, fo); };
  auto refresh = [&](uint64_t rep) {
    HostTensor t = testing::random_tensor(c.dt, c.shard, (seed0 + rep * 7919) * 1000 + me);
    EXPECT_EQ(cudaMemcpyAsync(a_dev, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);  // t dies at return
  };
  auto check = [&](uint64_t rep) {
    comm.check();
    std::vector<HostTensor> shards;
    for (int q = 0; q < world; ++q)
      shards.push_back(testing::random_tensor(c.dt, c.shard, (seed0 + rep * 7919) * 1000 + q));
    const AgReference ref = testing::ag_reference(shards, dim, bs);
    for (size_t i = 0; i < c.n.size(); ++i) {
      bool guards = false;
      std::vector<uint8_t> got = outs[i]->read(out_ptrs[i], ref.out[i].size() * es, &guards);
      EXPECT_TRUE(guards) << what << " out[" << i << "] guard bytes";
      const std::string err = compare(c.dt, got, ref.out[i], ref.abs_dot[i], k, 1);
      EXPECT_TRUE(err.empty()) << what << " replay " << rep << " out[" << i << "]: " << err;
    }
    bool guards = false;
    std::vector<uint8_t> got = gathered.read(g_ptr, ref.gathered.size() * es, &guards);
    EXPECT_TRUE(guards) << what << " a_gathered guard bytes";
    for (size_t i = 0; i < ref.gathered.size(); ++i) {
      ASSERT_EQ(testing::read_as_double(c.dt, got.data() + i * es), ref.gathered[i]) << what << " a_gathered " << i;
    }
  };
  run_mode(mode, comm.device(), s, issue, refresh, check);
  EXPECT_EQ(path, pipelined(mode) ? FusedPath::kPipelined : FusedPath::kUnfused) << what;
  GPU_CHECK(cudaStreamSynchronize(s));
  cudaStreamDestroy(s);
  cudaFree(a_dev);
  for (void* p : b_dev) cudaFree(p);
}

struct RsCase {
  DataType dt;
  std::vector<int64_t> a;  // the scatter extent is multiplied by the world size
  int dim;
  int64_t n;
  ReduceOp op;
  int chunks;
};

void run_rs(Communicator& comm, const RsCase& c, Mode mode, uint64_t seed0) {
  const int world = comm.world_size(), me = comm.rank();
  const size_t es = dtype_size(c.dt);
  std::vector<int64_t> shape = c.a;
  const int dim = c.dim < 0 ? c.dim + static_cast<int>(shape.size()) : c.dim;
  shape[dim] *= world;
  const int64_t k = shape.back();
  HostTensor b_mine = testing::random_tensor(c.dt, {k, c.n}, seed0 * 100 + 50 + me);
  HostTensor a_mine = testing::random_tensor(c.dt, shape, seed0 * 1000 + me);
  void* a_dev = upload(a_mine);
  void* b_dev = upload(b_mine);
  std::vector<int64_t> out_shape = shape;
  out_shape[dim] /= world;
  out_shape.back() = c.n;
  int64_t out_elems = 1;
  for (int64_t e : out_shape) out_elems *= e;
  GuardedBuffer out(comm, BufKind::kDevice, out_elems * es);
  char* out_ptr = out.prepare(0, out_elems * es, 0xff);
  TensorRef a{a_dev, c.dt, shape}, b{b_dev, c.dt, {k, c.n}}, o{out_ptr, c.dt, out_shape};
  std::unique_ptr<FusedWorkspace> ws;
  if (pipelined(mode))
    ws = FusedWorkspace::create(comm, matmul_reduce_scatter_workspace_bytes(world, a, b, c.dim, c.chunks));
  cudaStream_t s;
  GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  FusedPath path = FusedPath::kUnfused;
  FusedOptions fo{.workspace = ws.get(), .chunks = c.chunks, .min_pipelined_flops = 0, .path_out = &path};
  const std::string what = fmt::format("{} a [{}] dim {} N {} {} chunks {} {} rank {}", to_string(c.dt),
                                       fmt::join(shape, ","), c.dim, c.n, to_string(c.op), c.chunks, name(mode), me);
  auto issue = [&] { matmul_reduce_scatter(comm, a, b, c.op, c.dim, o, {.stream = s}, fo); };
  auto refresh = [&](uint64_t rep) {
    HostTensor t = testing::random_tensor(c.dt, shape, (seed0 + rep * 7919) * 1000 + me);
    EXPECT_EQ(cudaMemcpyAsync(a_dev, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  };
  auto check = [&](uint64_t rep) {
    comm.check();
    std::vector<HostTensor> as, bs;
    for (int q = 0; q < world; ++q) {
      as.push_back(testing::random_tensor(c.dt, shape, (seed0 + rep * 7919) * 1000 + q));
      bs.push_back(testing::random_tensor(c.dt, {k, c.n}, seed0 * 100 + 50 + q));
    }
    const RsReference ref = testing::rs_reference(as, bs, dim, me, c.op == ReduceOp::kAvg);
    bool guards = false;
    std::vector<uint8_t> got = out.read(out_ptr, ref.out.size() * es, &guards);
    EXPECT_TRUE(guards) << what << " guard bytes";
    const std::string err = compare(c.dt, got, ref.out, ref.abs_dot, k, world + 1, &ref.abs_partials);
    EXPECT_TRUE(err.empty()) << what << " replay " << rep << ": " << err;
  };
  run_mode(mode, comm.device(), s, issue, refresh, check);
  // Only two ranks have a pipelined matmul + reduce-scatter (RsMode::kExchange).
  EXPECT_EQ(path, pipelined(mode) && world == 2 ? FusedPath::kPipelined : FusedPath::kUnfused) << what;
  GPU_CHECK(cudaStreamSynchronize(s));
  cudaStreamDestroy(s);
  cudaFree(a_dev);
  cudaFree(b_dev);
}

constexpr Mode kModes[] = {Mode::kUnfused, Mode::kPipelined, Mode::kGraphPipelined, Mode::kGraphUnfused};

TEST(GpuFused, AllGatherMatmulMatchesFloat64Reference) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const CudaMemoryUse start = cuda_memory_use(comm->device());
    const std::vector<AgCase> cases = {
        {DataType::kBFloat16, {256, 512}, 0, {384, 136}, 0},  // 2-D, two Bs, automatic chunks
        {DataType::kBFloat16, {256, 512}, 0, {384}, 3},       // three row chunks
        {DataType::kFloat16, {2, 64, 256}, 1, {200}, 2},      // batch dim before the gather dim
        {DataType::kFloat32, {3, 40, 128}, 0, {72}, 0},       // gather along the batch dim
        {DataType::kBFloat16, {2, 3, 10, 72}, -3, {24}, 2},   // 4-D, odd extents
    };
    uint64_t seed = 1;
    for (const AgCase& c : cases) {
      for (Mode m : kModes) {
        run_ag(*comm, c, m, seed++);
        if (::testing::Test::HasFailure()) return;
      }
    }
    // Each case ran on a stream of its own, one after the other: the workspaces do not grow with the streams
    // (a workspace per stream would leave 20 of them, 640 MiB: NOTE [cuBLASLt workspace]): the first four
    // streams' own and one in the pool.
    const CudaMemoryUse end = cuda_memory_use(comm->device());
    EXPECT_LE(end.device_bytes - start.device_bytes, 5 * kLtWorkspace)
        << "from " << to_string(start) << " to " << to_string(end);
    if (comm->rank() == 0) {
      std::printf("GpuFused: after %zu cases on a stream each, symcomm holds %s (%s with the communicator only)\n",
                  cases.size() * std::size(kModes), to_string(end).c_str(), to_string(start).c_str());
    }
  });
}

TEST(GpuFused, MatmulReduceScatterMatchesFloat64Reference) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    const std::vector<RsCase> cases = {
        {DataType::kBFloat16, {256, 512}, 0, 1024, ReduceOp::kSum, 0},    // 2-D, automatic chunks
        {DataType::kBFloat16, {128, 256}, 0, 520, ReduceOp::kSum, 5},     // N not a multiple of 8
        {DataType::kFloat16, {2, 64, 256}, 1, 264, ReduceOp::kAvg, 3},    // batch dim before the scatter dim
        {DataType::kFloat32, {32, 2, 64}, 0, 200, ReduceOp::kSum, 4},     // scatter along the batch dim
        {DataType::kBFloat16, {2, 3, 5, 96}, -3, 48, ReduceOp::kSum, 2},  // 4-D, odd extents
    };
    uint64_t seed = 100;
    for (const RsCase& c : cases) {
      for (Mode m : kModes) {
        run_rs(*comm, c, m, seed++);
        if (::testing::Test::HasFailure()) return;
      }
    }
  });
}

// Both operations alternating, each followed by the next on another stream with its own workspace: the
// side streams' collectives stay in step across operations and ranks.
TEST(GpuFused, AlternatingOperationsStayInStep) {
  const int n = testing::gpu_test_world();
  testing::expect_success(n, [](RankEnv& env) {
    auto comm = env.make_comm(cuda_comm_options());
    for (int rep = 0; rep < 3 && !::testing::Test::HasFailure(); ++rep) {
      run_ag(*comm, {DataType::kBFloat16, {128, 256}, 0, {256}, 2}, Mode::kPipelined, 500 + rep);
      run_rs(*comm, {DataType::kBFloat16, {64, 256}, 0, 512, ReduceOp::kSum, 4}, Mode::kPipelined, 600 + rep);
    }
  });
}

}  // namespace
}  // namespace symcomm::gputest
