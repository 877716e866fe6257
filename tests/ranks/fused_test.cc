// Fused all-gather + matmul and matmul + reduce-scatter on the host backend: random inputs in
// bf16 / fp16 / fp32 against an independent float64 reference (harness/fused_reference.h), batch dims,
// every gather/scatter dim, the pipelined path with several chunk counts and the unfused fallback (no
// workspace, a workspace one byte too small, forced, one rank), poisoned outputs with guard bytes, and
// argument errors that throw kInvalidArgument and leave the communicator usable.

#include "symcomm/fused.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "harness/fused_reference.h"
#include "harness/rank_harness.h"

namespace symcomm::testing {
namespace {

constexpr DataType kFusedDtypes[] = {DataType::kBFloat16, DataType::kFloat16, DataType::kFloat32};
constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0x5a, kPoison = 0xff;  // 0xff..: NaN in every float dtype

/// Output buffer with guard bytes, poisoned.
struct OutBuf {
  std::vector<uint8_t> raw;
  size_t bytes;
  explicit OutBuf(size_t n) : raw(n + 2 * kGuard, kGuardByte), bytes(n) { std::memset(data(), kPoison, n); }
  uint8_t* data() { return raw.data() + kGuard; }
  bool guards_ok() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (raw[i] != kGuardByte || raw[kGuard + bytes + i] != kGuardByte) return false;
    }
    return true;
  }
};

TensorRef ref_of(HostTensor& t) { return TensorRef{t.bytes.data(), t.dtype, t.shape}; }

enum class WsMode { kNone, kExact, kTooSmall, kForced };
const char* name(WsMode m) {
  switch (m) {
    case WsMode::kNone: return "no workspace";
    case WsMode::kExact: return "workspace";
    case WsMode::kTooSmall: return "workspace too small";
    case WsMode::kForced: return "forced unfused";
  }
  return "?";
}

// Every dtype × workspace mode, with several chunk counts when the workspace fits; stops at the first failure.
void for_each_variant(std::initializer_list<int> chunk_counts, const std::function<void(DataType, WsMode, int)>& f) {
  for (DataType dt : kFusedDtypes) {
    for (WsMode m : {WsMode::kNone, WsMode::kExact, WsMode::kTooSmall, WsMode::kForced}) {
      for (int chunks : m == WsMode::kExact ? std::vector<int>(chunk_counts) : std::vector<int>{0}) {
        if (::testing::Test::HasFailure()) return;
        f(dt, m, chunks);
      }
    }
  }
}

struct AgCase {
  std::vector<int64_t> shard;
  int dim;
  std::vector<int64_t> n;  // N of every B
  bool gathered;
};

// Expected errors of every element of `got` against the reference, within the bound of fused_reference.h.
// With abs_partials (matmul + reduce-scatter), the bound of rs_tolerance.
int64_t count_bad(DataType dt, const uint8_t* got, const std::vector<double>& ref, const std::vector<double>& abs_dot,
                  int64_t k, int parts, std::string* first, const std::vector<double>* abs_partials = nullptr) {
  int64_t bad = 0;
  const size_t es = dtype_size(dt);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = read_as_double(dt, got + i * es);
    const double tol = abs_partials ? rs_tolerance(dt, ref[i], abs_dot[i], (*abs_partials)[i], k, parts)
                                    : fused_tolerance(dt, ref[i], abs_dot[i], k, parts);
    if (!(std::fabs(g - ref[i]) <= tol)) {
      if (bad++ == 0) *first = fmt::format("element {}: got {}, want {} (tolerance {})", i, g, ref[i], tol);
    }
  }
  return bad;
}

void run_ag_case(Communicator& comm, const AgCase& c, DataType dt, WsMode ws_mode, int chunks, uint64_t seed) {
  const int world = comm.world_size(), me = comm.rank();
  std::vector<HostTensor> shards, bs;
  for (int q = 0; q < world; ++q) shards.push_back(random_tensor(dt, c.shard, seed * 100 + q));
  const int64_t k = c.shard.back();
  for (size_t i = 0; i < c.n.size(); ++i) bs.push_back(random_tensor(dt, {k, c.n[i]}, seed * 100 + 50 + i));
  const int dim = c.dim < 0 ? c.dim + static_cast<int>(c.shard.size()) : c.dim;
  const AgReference ref = ag_reference(shards, dim, bs);

  const size_t es = dtype_size(dt);
  std::vector<OutBuf> outs;
  std::vector<TensorRef> out_refs, b_refs;
  for (size_t i = 0; i < bs.size(); ++i) {
    outs.emplace_back(ref.out[i].size() * es);
    b_refs.push_back(ref_of(bs[i]));
  }
  for (size_t i = 0; i < bs.size(); ++i) {
    std::vector<int64_t> shape = ref.gathered_shape;
    shape.back() = c.n[i];
    out_refs.push_back(TensorRef{outs[i].data(), dt, shape});
  }
  OutBuf gathered(ref.gathered.size() * es);
  TensorRef gathered_ref{gathered.data(), dt, ref.gathered_shape};

  TensorRef a = ref_of(shards[me]);
  const size_t need = all_gather_matmul_workspace_bytes(world, a, c.dim, c.gathered, chunks);
  std::unique_ptr<FusedWorkspace> ws;
  if (ws_mode == WsMode::kExact || ws_mode == WsMode::kForced)
    ws = FusedWorkspace::create(comm, need);  // exactly what the header says suffices
  if (ws_mode == WsMode::kTooSmall && need > 1) ws = FusedWorkspace::create(comm, need - 1);
  FusedPath path = FusedPath::kPipelined;
  FusedOptions fo{.workspace = ws.get(),
                  .chunks = chunks,
                  .min_pipelined_flops = 0,
                  .force_unfused = ws_mode == WsMode::kForced,
                  .path_out = &path};
  all_gather_matmul(comm, a, b_refs, c.dim, out_refs, c.gathered ? &gathered_ref : nullptr, {}, fo);

  const bool want_pipelined = world > 1 && ws_mode == WsMode::kExact;
  const std::string what = fmt::format("shard [{}] dim {} {} {} chunks {} rank {}", fmt::join(c.shard, ","), c.dim,
                                       to_string(dt), name(ws_mode), chunks, me);
  EXPECT_EQ(path, want_pipelined ? FusedPath::kPipelined : FusedPath::kUnfused) << what;
  for (size_t i = 0; i < bs.size(); ++i) {
    std::string first;
    EXPECT_EQ(count_bad(dt, outs[i].data(), ref.out[i], ref.abs_dot[i], k, 1, &first), 0)
        << what << " out[" << i << "]: " << first;
    EXPECT_TRUE(outs[i].guards_ok()) << what << " out[" << i << "] guard bytes";
  }
  if (c.gathered) {
    for (size_t i = 0; i < ref.gathered.size(); ++i) {
      ASSERT_EQ(read_as_double(dt, gathered.data() + i * es), ref.gathered[i]) << what << " a_gathered " << i;
    }
    EXPECT_TRUE(gathered.guards_ok()) << what << " a_gathered guard bytes";
  } else {
    EXPECT_EQ(gathered.data()[0], kPoison) << what << ": a_gathered was not asked for";
  }
}

std::vector<AgCase> ag_cases() {
  return {
      {{5, 7}, 0, {3, 10}, true},     // 2-D, two Bs
      {{5, 7}, -2, {9}, false},       // negative dim
      {{2, 3, 8}, 1, {5}, true},      // batch dim before the gather dim (outer 2)
      {{2, 3, 8}, 0, {4, 6}, false},  // gather along the batch dim
      {{3, 2, 3, 4}, 1, {5}, true},   // 4-D: outer 3, rows 2·3 per rank
      {{1, 6, 16}, 1, {8}, true},     // outer 1 through a unit batch dim
      {{4, 0}, 0, {3}, true},         // K = 0: the products are zeros
  };
}

class FusedAllGatherMatmul : public ::testing::TestWithParam<int> {};

TEST_P(FusedAllGatherMatmul, MatchesFloat64Reference) {
  expect_success(GetParam(), [](RankEnv& env) {
    auto comm = env.make_comm();
    uint64_t seed = 1;
    for (const AgCase& c : ag_cases()) {
      for_each_variant({0, 1, 2, 3},
                       [&](DataType dt, WsMode m, int chunks) { run_ag_case(*comm, c, dt, m, chunks, seed++); });
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FusedAllGatherMatmul, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

struct RsCase {
  std::vector<int64_t> a;  // extents; the scatter extent is multiplied by the world size
  int dim;
  int64_t n;
  ReduceOp op;
};

void run_rs_case(Communicator& comm, const RsCase& c, DataType dt, WsMode ws_mode, int chunks, uint64_t seed) {
  const int world = comm.world_size(), me = comm.rank();
  std::vector<int64_t> shape = c.a;
  const int dim = c.dim < 0 ? c.dim + static_cast<int>(shape.size()) : c.dim;
  shape[dim] *= world;
  const int64_t k = shape.back();
  std::vector<HostTensor> as, bs;
  for (int q = 0; q < world; ++q) {
    as.push_back(random_tensor(dt, shape, seed * 100 + q));
    bs.push_back(random_tensor(dt, {k, c.n}, seed * 100 + 50 + q));
  }
  const RsReference ref = rs_reference(as, bs, dim, me, c.op == ReduceOp::kAvg);
  std::vector<int64_t> out_shape = shape;
  out_shape[dim] /= world;
  out_shape.back() = c.n;
  const size_t es = dtype_size(dt);
  OutBuf out(ref.out.size() * es);
  TensorRef out_ref{out.data(), dt, out_shape};
  TensorRef a = ref_of(as[me]), b = ref_of(bs[me]);

  const size_t need = matmul_reduce_scatter_workspace_bytes(world, a, b, c.dim, chunks);
  std::unique_ptr<FusedWorkspace> ws;
  if (ws_mode == WsMode::kExact || ws_mode == WsMode::kForced) ws = FusedWorkspace::create(comm, need);
  if (ws_mode == WsMode::kTooSmall) ws = FusedWorkspace::create(comm, need - 1);
  FusedPath path = FusedPath::kPipelined;
  FusedOptions fo{.workspace = ws.get(),
                  .chunks = chunks,
                  .min_pipelined_flops = 0,
                  .force_unfused = ws_mode == WsMode::kForced,
                  .path_out = &path};
  matmul_reduce_scatter(comm, a, b, c.op, c.dim, out_ref, {}, fo);

  // One chunk (asked for, or all the columns allow) cannot overlap anything: the unfused path runs.
  const int64_t unit = static_cast<int64_t>(16 / es);
  const bool several = chunks != 1 && (c.n + unit - 1) / unit >= 2;
  // Only two ranks have a pipelined matmul + reduce-scatter (RsMode::kExchange).
  const bool want_pipelined = world == 2 && ws_mode == WsMode::kExact && several;
  const std::string what = fmt::format("a [{}] dim {} N {} {} {} {} chunks {} rank {}", fmt::join(shape, ","), c.dim,
                                       c.n, to_string(c.op), to_string(dt), name(ws_mode), chunks, me);
  EXPECT_EQ(path, want_pipelined ? FusedPath::kPipelined : FusedPath::kUnfused) << what;
  std::string first;
  EXPECT_EQ(count_bad(dt, out.data(), ref.out, ref.abs_dot, k, world + 1, &first, &ref.abs_partials), 0)
      << what << ": " << first;
  EXPECT_TRUE(out.guards_ok()) << what << " guard bytes";
}

std::vector<RsCase> rs_cases() {
  return {
      {{3, 6}, 0, 20, ReduceOp::kSum},        // 2-D
      {{3, 6}, -2, 33, ReduceOp::kAvg},       // avg, N not a multiple of the chunk unit
      {{2, 2, 5}, 1, 17, ReduceOp::kSum},     // batch dim before the scatter dim (outer 2)
      {{2, 3, 4}, 0, 24, ReduceOp::kSum},     // scatter along the batch dim (rows 2·3 per rank)
      {{2, 1, 3, 8}, 1, 40, ReduceOp::kAvg},  // 4-D
      {{2, 9}, 0, 5, ReduceOp::kSum},         // N below one chunk unit: one chunk only
  };
}

class FusedMatmulReduceScatter : public ::testing::TestWithParam<int> {};

TEST_P(FusedMatmulReduceScatter, MatchesFloat64Reference) {
  expect_success(GetParam(), [](RankEnv& env) {
    auto comm = env.make_comm();
    uint64_t seed = 1000;
    for (const RsCase& c : rs_cases()) {
      for_each_variant({0, 1, 2, 3, 16},
                       [&](DataType dt, WsMode m, int chunks) { run_rs_case(*comm, c, dt, m, chunks, seed++); });
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FusedMatmulReduceScatter, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// Larger shapes at 8 ranks (more ranks than cores): all-gather + matmul pipelined, matmul + reduce-scatter
// unfused (float32), bf16.
TEST(FusedEightRanks, BothOperationsPipelined) {
  expect_success(8, [](RankEnv& env) {
    auto comm = env.make_comm();
    run_ag_case(*comm, AgCase{{2, 12, 32}, 1, {24, 8}, true}, DataType::kBFloat16, WsMode::kExact, 3, 7);
    run_rs_case(*comm, RsCase{{2, 4, 32}, 1, 64, ReduceOp::kSum}, DataType::kBFloat16, WsMode::kExact, 4, 8);
  });
}

void expect_invalid(const std::function<void()>& f, const char* what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what << ": " << e.what();
  }
}

TEST(FusedArguments, BadArgumentsThrowAndLeaveTheCommunicatorUsable) {
  expect_success(2, [](RankEnv& env) {
    auto comm = env.make_comm();
    const DataType dt = DataType::kBFloat16;
    HostTensor a = random_tensor(dt, {4, 8}, 1), b = random_tensor(dt, {8, 6}, 2);
    std::vector<uint8_t> out_bytes(8 * 6 * 2), small(4 * 6 * 2);
    TensorRef ar = ref_of(a), br = ref_of(b), out{out_bytes.data(), dt, {8, 6}};
    std::vector<TensorRef> bv{br}, ov{out};
    auto ag = [&](TensorRef x, std::vector<TensorRef> bb, int dim, std::vector<TensorRef> oo) {
      return [&comm, x, bb, dim, oo] { all_gather_matmul(*comm, x, bb, dim, oo); };
    };
    expect_invalid(ag(ar, bv, 1, ov), "gather along the contraction dim");
    expect_invalid(ag(ar, bv, 2, ov), "gather_dim out of range");
    expect_invalid(ag(ar, bv, -3, ov), "gather_dim below -ndim");
    expect_invalid(ag(ar, {}, 0, {}), "no B");
    expect_invalid(ag(ar, bv, 0, {}), "B and out counts differ");
    expect_invalid(ag(ar, {TensorRef{b.bytes.data(), dt, {7, 6}}}, 0, ov), "B's K differs");
    expect_invalid(ag(ar, bv, 0, {TensorRef{out_bytes.data(), dt, {4, 6}}}), "out has the shard's rows");
    expect_invalid(ag(ar, bv, 0, {TensorRef{out_bytes.data(), DataType::kFloat32, {8, 6}}}), "out dtype differs");
    expect_invalid(ag(TensorRef{a.bytes.data(), DataType::kFloat64, {4, 8}}, bv, 0, ov), "float64");
    expect_invalid(ag(TensorRef{a.bytes.data(), DataType::kInt32, {4, 8}}, bv, 0, ov), "int32");
    expect_invalid(ag(TensorRef{a.bytes.data(), dt, {32}}, bv, 0, ov), "1-D A");
    expect_invalid(ag(TensorRef{nullptr, dt, {4, 8}}, bv, 0, ov), "null A");
    expect_invalid(ag(TensorRef{a.bytes.data(), dt, {4, -8}}, bv, 0, ov), "negative extent");
    expect_invalid(
        [&] {
          TensorRef g{out_bytes.data(), dt, {4, 8}};
          all_gather_matmul(*comm, ar, bv, 0, ov, &g);
        },
        "a_gathered of the shard's shape");

    TensorRef rs_out{small.data(), dt, {2, 6}};
    auto rs = [&](TensorRef x, TensorRef y, ReduceOp op, int dim, TensorRef o) {
      return [&comm, x, y, op, dim, o] { matmul_reduce_scatter(*comm, x, y, op, dim, o); };
    };
    expect_invalid(rs(ar, br, ReduceOp::kSum, 1, rs_out), "scatter along the contraction dim");
    expect_invalid(rs(ar, br, ReduceOp::kMax, 0, rs_out), "max");
    expect_invalid(rs(ar, br, static_cast<ReduceOp>(77), 0, rs_out), "invalid op");
    expect_invalid(rs(TensorRef{a.bytes.data(), dt, {3, 8}}, br, ReduceOp::kSum, 0, rs_out), "3 rows over 2 ranks");
    expect_invalid(rs(ar, br, ReduceOp::kSum, 0, TensorRef{small.data(), dt, {4, 6}}), "out not scattered");
    expect_invalid(rs(ar, TensorRef{b.bytes.data(), DataType::kFloat16, {8, 6}}, ReduceOp::kSum, 0, rs_out),
                   "B dtype differs");

    // Still in step: a valid operation on both ranks gives the reference.
    run_ag_case(*comm, AgCase{{4, 8}, 0, {6}, true}, dt, WsMode::kExact, 2, 3);
    run_rs_case(*comm, RsCase{{2, 8}, 0, 16, ReduceOp::kSum}, dt, WsMode::kExact, 2, 4);
  });
}

TEST(FusedArguments, WorkspaceOfAnotherCommunicatorIsRejected) {
  expect_success(2, [](RankEnv& env) {
    auto comm = env.make_comm();
    auto other = env.make_comm();
    auto ws = FusedWorkspace::create(*other, 1 << 16);
    const DataType dt = DataType::kFloat32;
    HostTensor a = random_tensor(dt, {4, 8}, 1), b = random_tensor(dt, {8, 6}, 2);
    std::vector<uint8_t> out_bytes(8 * 6 * 4);
    std::vector<TensorRef> bv{ref_of(b)}, ov{TensorRef{out_bytes.data(), dt, {8, 6}}};
    expect_invalid([&] { all_gather_matmul(*comm, ref_of(a), bv, 0, ov, nullptr, {}, {.workspace = ws.get()}); },
                   "foreign workspace");
    expect_invalid([&] { FusedWorkspace::create(*comm, 0); }, "zero-byte workspace");
  });
}

}  // namespace
}  // namespace symcomm::testing
