#pragma once
// all_gather_matmul and matmul_reduce_scatter on either backend (tests/backend_cases/README.md): one call of either
// operation with random bf16 / fp16 / fp32 inputs, checked against the independent float64 reference of
// harness/fused_reference.h within its error bound (fused_tolerance, rs_tolerance); its outputs poisoned (0xff: NaN
// in every float dtype) before every call, with guard bytes around them; a_gathered compared exactly (a copy) or,
// when not asked for, left poisoned; and the path it took (pipelined or unfused) checked against the workspace it
// had: none, exactly what *_workspace_bytes() says suffices, one byte less, or enough but force_unfused.
//
// A FusedRunner runs the call: the default runs it once, eagerly; the GPU program's (tests/gpu/fused_test.cc) runs
// it on a stream of its own, eagerly or captured into a CUDA graph replayed with new inputs, and checks the memory
// the operation keeps.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/fused_reference.h"
#include "harness/rank_harness.h"
#include "harness/test_memory.h"
#include "symcomm/fused.h"

namespace symcomm::testing {

inline constexpr DataType kFusedDtypes[] = {DataType::kBFloat16, DataType::kFloat16, DataType::kFloat32};
/// Poison of the fused outputs: 0xff.. is NaN in every float dtype.
inline constexpr uint8_t kFusedPoison = 0xff;

/// The workspace a call gets: none, exactly what the header says suffices, one byte too few, or exactly enough
/// with FusedOptions::force_unfused.
enum class FusedWs { kNone, kExact, kTooSmall, kForced };
inline const char* name(FusedWs m) {
  switch (m) {
    case FusedWs::kNone: return "no workspace";
    case FusedWs::kExact: return "workspace";
    case FusedWs::kTooSmall: return "workspace too small";
    case FusedWs::kForced: return "forced unfused";
  }
  return "?";
}

/// One variant of a call: dtype, workspace, FusedOptions::chunks (0: automatic).
struct FusedVariant {
  DataType dt;
  FusedWs ws;
  int chunks;
};

/// The workspace variant `v` gives a call that needs `need` bytes: none, exactly that, one byte short (none where
/// that leaves nothing), or exactly that with the unfused path forced (see fused_options()).
inline std::unique_ptr<FusedWorkspace> fused_workspace(Communicator& comm, const FusedVariant& v, size_t need) {
  if (v.ws == FusedWs::kExact || v.ws == FusedWs::kForced) return FusedWorkspace::create(comm, need);
  if (v.ws == FusedWs::kTooSmall && need > 1) return FusedWorkspace::create(comm, need - 1);
  return nullptr;
}

/// The FusedOptions of variant `v` on workspace `ws` (every size pipelined unless kForced), the path taken to `path`.
inline FusedOptions fused_options(const FusedVariant& v, FusedWorkspace* ws, FusedPath* path) {
  return FusedOptions{.workspace = ws,
                      .chunks = v.chunks,
                      .min_pipelined_flops = 0,
                      .force_unfused = v.ws == FusedWs::kForced,
                      .path_out = path};
}

/// Every dtype × workspace, each of `chunk_counts` where the workspace fits (kExact), else 0 chunks.
inline std::vector<FusedVariant> fused_variants(std::initializer_list<int> chunk_counts) {
  std::vector<FusedVariant> out;
  for (DataType dt : kFusedDtypes) {
    for (FusedWs ws : {FusedWs::kNone, FusedWs::kExact, FusedWs::kTooSmall, FusedWs::kForced}) {
      for (int chunks : ws == FusedWs::kExact ? std::vector<int>(chunk_counts) : std::vector<int>{0}) {
        out.push_back({dt, ws, chunks});
      }
    }
  }
  return out;
}

/// How a body runs its call. `refresh(round)` writes the inputs of a round and poisons the outputs, `issue(stream)`
/// enqueues the call on `stream`, `check(round)` verifies a round's outputs (it waits for the backend first).
/// This one: round 0 once, eagerly, on the default stream.
class FusedRunner {
 public:
  virtual ~FusedRunner() = default;
  virtual const char* name() const { return "eager"; }
  virtual void run(TestMemory& mem, const std::function<void(Stream)>& issue,
                   const std::function<void(uint64_t)>& refresh, const std::function<void(uint64_t)>& check) {
    refresh(0);
    issue(nullptr);
    mem.sync();
    check(0);
  }
};

/// Seeds of the random inputs: every rank rebuilds every rank's input of every round from them.
inline uint64_t fused_a_seed(uint64_t seed, uint64_t round, int rank) { return (seed + round * 7919) * 1000 + rank; }
inline uint64_t fused_b_seed(uint64_t seed, size_t i) { return seed * 100 + 50 + i; }

inline size_t fused_numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t e : shape) n *= static_cast<size_t>(e);
  return n;
}

/// Elements of `got` outside the bound of fused_reference.h (with abs_partials: rs_tolerance, else
/// fused_tolerance); "" when none, else their number and the first.
inline std::string fused_mismatches(DataType dt, const std::vector<uint8_t>& got, const std::vector<double>& ref,
                                    const std::vector<double>& abs_dot, int64_t k, int parts,
                                    const std::vector<double>* abs_partials = nullptr) {
  const size_t es = dtype_size(dt);
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = read_as_double(dt, got.data() + i * es);
    const double tol = abs_partials ? rs_tolerance(dt, ref[i], abs_dot[i], (*abs_partials)[i], k, parts)
                                    : fused_tolerance(dt, ref[i], abs_dot[i], k, parts);
    if (!(std::fabs(g - ref[i]) <= tol) && bad++ == 0) {
      first = fmt::format("element {}: got {}, want {} (tolerance {})", i, g, ref[i], tol);
    }
  }
  return bad ? fmt::format("{} wrong elements; first {}", bad, first) : "";
}

/// A shard of `shard` extents per rank, gathered along `dim` (negative: from the end), times one B of N = n[i]
/// each; a_gathered asked for or not.
struct FusedAgShape {
  std::vector<int64_t> shard;
  int dim;
  std::vector<int64_t> n;
  bool gathered;
};

inline void fused_ag_case(Communicator& comm, TestMemory& mem, const FusedAgShape& c, const FusedVariant& v,
                          uint64_t seed, FusedRunner& runner) {
  const int world = comm.world_size(), me = comm.rank();
  const DataType dt = v.dt;
  const size_t es = dtype_size(dt);
  const int64_t k = c.shard.back();
  const int dim = c.dim < 0 ? c.dim + static_cast<int>(c.shard.size()) : c.dim;
  std::vector<HostTensor> bs;
  std::vector<std::unique_ptr<TestBuffer>> b_bufs;
  std::vector<TensorRef> b_refs, out_refs;
  for (size_t i = 0; i < c.n.size(); ++i) {
    bs.push_back(random_tensor(dt, {k, c.n[i]}, fused_b_seed(seed, i)));
    b_bufs.push_back(std::make_unique<TestBuffer>(mem, bs[i].bytes.size()));
    mem.write_vector(b_bufs[i]->get(), bs[i].bytes);
    b_refs.push_back(TensorRef{b_bufs[i]->get(), dt, bs[i].shape});
  }
  TestBuffer a_buf(mem, fused_numel(c.shard) * es);
  std::vector<int64_t> gshape = c.shard;
  gshape[dim] *= world;
  int64_t grows = 1;
  for (size_t i = 0; i + 1 < gshape.size(); ++i) grows *= gshape[i];
  std::vector<std::unique_ptr<GuardedTestBuffer>> outs;
  for (size_t i = 0; i < c.n.size(); ++i) {
    const size_t bytes = grows * c.n[i] * es;
    outs.push_back(std::make_unique<GuardedTestBuffer>(mem, bytes));
    std::vector<int64_t> shape = gshape;
    shape.back() = c.n[i];
    out_refs.push_back(TensorRef{outs[i]->prepare(bytes), dt, shape});
  }
  GuardedTestBuffer gathered(mem, grows * k * es);
  TensorRef g_ref{gathered.prepare(grows * k * es), dt, gshape};

  const TensorRef a{a_buf.get(), dt, c.shard};
  const size_t need = all_gather_matmul_workspace_bytes(world, a, c.dim, c.gathered, v.chunks);
  const std::unique_ptr<FusedWorkspace> ws = fused_workspace(comm, v, need);
  FusedPath path = FusedPath::kPipelined;
  const FusedOptions fo = fused_options(v, ws.get(), &path);
  const std::string what =
      fmt::format("{}: {} shard [{}] dim {} N [{}] {} chunks {} {} rank {}", mem.name(), to_string(dt),
                  fmt::join(c.shard, ","), c.dim, fmt::join(c.n, ","), name(v.ws), v.chunks, runner.name(), me);
  const auto issue = [&](Stream s) {
    all_gather_matmul(comm, a, b_refs, c.dim, out_refs, c.gathered ? &g_ref : nullptr, {.stream = s}, fo);
  };
  const auto refresh = [&](uint64_t round) {
    mem.write_vector(a_buf.get(), random_tensor(dt, c.shard, fused_a_seed(seed, round, me)).bytes);
    for (auto& o : outs) o->poison(kFusedPoison);
    gathered.poison(kFusedPoison);
  };
  const auto check = [&](uint64_t round) {
    comm.check();
    std::vector<HostTensor> shards;
    for (int q = 0; q < world; ++q) shards.push_back(random_tensor(dt, c.shard, fused_a_seed(seed, round, q)));
    const AgReference ref = ag_reference(shards, dim, bs);
    for (size_t i = 0; i < c.n.size(); ++i) {
      bool guards = false;
      const std::vector<uint8_t> got = outs[i]->read(&guards);
      EXPECT_TRUE(guards) << what << " out[" << i << "] guard bytes";
      const std::string err = fused_mismatches(dt, got, ref.out[i], ref.abs_dot[i], k, 1);
      EXPECT_TRUE(err.empty()) << what << " round " << round << " out[" << i << "]: " << err;
    }
    bool guards = false;
    const std::vector<uint8_t> got = gathered.read(&guards);
    EXPECT_TRUE(guards) << what << " a_gathered guard bytes";
    if (!c.gathered) {
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], kFusedPoison) << what << ": a_gathered not asked for";
      return;
    }
    for (size_t i = 0; i < ref.gathered.size(); ++i) {
      ASSERT_EQ(read_as_double(dt, got.data() + i * es), ref.gathered[i]) << what << " a_gathered " << i;
    }
  };
  runner.run(mem, issue, refresh, check);
  const bool want_pipelined = world > 1 && v.ws == FusedWs::kExact;
  EXPECT_EQ(path, want_pipelined ? FusedPath::kPipelined : FusedPath::kUnfused) << what;
}

/// A of `a` extents per rank, the scatter extent (`dim`, negative: from the end) times the world size, times a B
/// of N = n; reduced with `op` (sum or avg).
struct FusedRsShape {
  std::vector<int64_t> a;
  int dim;
  int64_t n;
  ReduceOp op;
};

inline void fused_rs_case(Communicator& comm, TestMemory& mem, const FusedRsShape& c, const FusedVariant& v,
                          uint64_t seed, FusedRunner& runner) {
  const int world = comm.world_size(), me = comm.rank();
  const DataType dt = v.dt;
  const size_t es = dtype_size(dt);
  std::vector<int64_t> shape = c.a;
  const int dim = c.dim < 0 ? c.dim + static_cast<int>(shape.size()) : c.dim;
  shape[dim] *= world;
  const int64_t k = shape.back();
  std::vector<HostTensor> bs;
  for (int q = 0; q < world; ++q) bs.push_back(random_tensor(dt, {k, c.n}, fused_b_seed(seed, q)));
  TestBuffer a_buf(mem, fused_numel(shape) * es), b_buf(mem, bs[me].bytes.size());
  mem.write_vector(b_buf.get(), bs[me].bytes);
  std::vector<int64_t> out_shape = shape;
  out_shape[dim] /= world;
  out_shape.back() = c.n;
  const size_t out_elems = fused_numel(out_shape);
  GuardedTestBuffer out(mem, out_elems * es);
  const TensorRef a{a_buf.get(), dt, shape}, b{b_buf.get(), dt, {k, c.n}},
      o{out.prepare(out_elems * es), dt, out_shape};

  const size_t need = matmul_reduce_scatter_workspace_bytes(world, a, b, c.dim, v.chunks);
  const std::unique_ptr<FusedWorkspace> ws = fused_workspace(comm, v, need);
  FusedPath path = FusedPath::kPipelined;
  const FusedOptions fo = fused_options(v, ws.get(), &path);
  const std::string what =
      fmt::format("{}: {} a [{}] dim {} N {} {} {} chunks {} {} rank {}", mem.name(), to_string(dt),
                  fmt::join(shape, ","), c.dim, c.n, to_string(c.op), name(v.ws), v.chunks, runner.name(), me);
  const auto issue = [&](Stream s) { matmul_reduce_scatter(comm, a, b, c.op, c.dim, o, {.stream = s}, fo); };
  const auto refresh = [&](uint64_t round) {
    mem.write_vector(a_buf.get(), random_tensor(dt, shape, fused_a_seed(seed, round, me)).bytes);
    out.poison(kFusedPoison);
  };
  const auto check = [&](uint64_t round) {
    comm.check();
    std::vector<HostTensor> as;
    for (int q = 0; q < world; ++q) as.push_back(random_tensor(dt, shape, fused_a_seed(seed, round, q)));
    const RsReference ref = rs_reference(as, bs, dim, me, c.op == ReduceOp::kAvg);
    bool guards = false;
    const std::vector<uint8_t> got = out.read(&guards);
    EXPECT_TRUE(guards) << what << " guard bytes";
    const std::string err = fused_mismatches(dt, got, ref.out, ref.abs_dot, k, world + 1, &ref.abs_partials);
    EXPECT_TRUE(err.empty()) << what << " round " << round << ": " << err;
  };
  runner.run(mem, issue, refresh, check);
  // One chunk (asked for, or all the columns allow) cannot overlap anything: the unfused path runs. Only two ranks
  // have a pipelined matmul + reduce-scatter (RsMode::kExchange).
  const int64_t unit = static_cast<int64_t>(16 / es);
  const bool several = v.chunks != 1 && (c.n + unit - 1) / unit >= 2;
  const bool want_pipelined = world == 2 && v.ws == FusedWs::kExact && several;
  EXPECT_EQ(path, want_pipelined ? FusedPath::kPipelined : FusedPath::kUnfused) << what;
}

}  // namespace symcomm::testing
