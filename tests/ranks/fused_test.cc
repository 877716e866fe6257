// Fused all-gather + matmul and matmul + reduce-scatter on the host backend: the calls of
// tests/backend_cases/fused_cases.h (random bf16 / fp16 / fp32 inputs against an independent float64 reference,
// poisoned outputs with guard bytes, the path taken) over batch dims, every gather/scatter dim, the pipelined path
// with several chunk counts and the unfused fallback (no workspace, a workspace one byte too small, forced, one
// rank), at world sizes 1-4 and 8; and argument errors that throw kInvalidArgument and leave the communicator
// usable.

#include "symcomm/fused.h"

#include <gtest/gtest.h>

#include <functional>

#include "backend_cases/fused_cases.h"
#include "harness/fused_reference.h"
#include "harness/rank_harness.h"
#include "harness/test_memory.h"

namespace symcomm::testing {
namespace {

TensorRef ref_of(HostTensor& t) { return TensorRef{t.bytes.data(), t.dtype, t.shape}; }

std::vector<FusedAgShape> ag_shapes() {
  return {
      {{5, 7}, 0, {3, 10}, true},     // 2-D, two Bs
      {{5, 7}, -2, {9}, false},       // negative dim
      {{2, 3, 8}, 1, {5}, true},      // batch dim before the gather dim (outer 2)
      {{2, 3, 8}, 0, {4, 6}, false},  // gather along the batch dim
      {{3, 2, 3, 4}, 1, {5}, true},   // 4-D: outer 3, rows 2·3 per rank
      {{3, 2, 3, 4}, 1, {5}, false},  // the same without a_gathered
      {{1, 6, 16}, 1, {8}, true},     // outer 1 through a unit batch dim
      {{4, 0}, 0, {3}, true},         // K = 0: the products are zeros
  };
}

class FusedAllGatherMatmul : public ::testing::TestWithParam<int> {};

// Every shape × dtype × workspace (chunk counts 0-3 with the exact workspace); stops at the first failure.
TEST_P(FusedAllGatherMatmul, MatchesFloat64Reference) {
  expect_success(GetParam(), [](RankEnv& env) {
    HostMemory mem;
    FusedRunner eager;
    auto comm = env.make_comm(mem.options());
    uint64_t seed = 1;
    for (const FusedAgShape& c : ag_shapes()) {
      for (const FusedVariant& v : fused_variants({0, 1, 2, 3})) {
        if (::testing::Test::HasFailure()) return;
        fused_ag_case(*comm, mem, c, v, seed++, eager);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FusedAllGatherMatmul, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

std::vector<FusedRsShape> rs_shapes() {
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

// Every shape × dtype × workspace (chunk counts 0-3 and 16 with the exact workspace); stops at the first failure.
TEST_P(FusedMatmulReduceScatter, MatchesFloat64Reference) {
  expect_success(GetParam(), [](RankEnv& env) {
    HostMemory mem;
    FusedRunner eager;
    auto comm = env.make_comm(mem.options());
    uint64_t seed = 1000;
    for (const FusedRsShape& c : rs_shapes()) {
      for (const FusedVariant& v : fused_variants({0, 1, 2, 3, 16})) {
        if (::testing::Test::HasFailure()) return;
        fused_rs_case(*comm, mem, c, v, seed++, eager);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FusedMatmulReduceScatter, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// Larger shapes at 8 ranks (more ranks than cores): all-gather + matmul pipelined, matmul + reduce-scatter
// unfused (float32), bf16.
TEST(FusedEightRanks, BothOperationsPipelined) {
  expect_success(8, [](RankEnv& env) {
    HostMemory mem;
    FusedRunner eager;
    auto comm = env.make_comm(mem.options());
    fused_ag_case(*comm, mem, {{2, 12, 32}, 1, {24, 8}, true}, {DataType::kBFloat16, FusedWs::kExact, 3}, 7, eager);
    fused_rs_case(*comm, mem, {{2, 4, 32}, 1, 64, ReduceOp::kSum}, {DataType::kBFloat16, FusedWs::kExact, 4}, 8, eager);
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
    HostMemory mem;
    FusedRunner eager;
    fused_ag_case(*comm, mem, {{4, 8}, 0, {6}, true}, {dt, FusedWs::kExact, 2}, 3, eager);
    fused_rs_case(*comm, mem, {{2, 8}, 0, 16, ReduceOp::kSum}, {dt, FusedWs::kExact, 2}, 4, eager);
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
