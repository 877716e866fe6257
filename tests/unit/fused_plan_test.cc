// The pure planning of the fused operations (src/fused/fused_plan.cc): select_fused_path() as a table, the
// row and column chunkings (cover every row/column once, in order, aligned), and the plans' paths and
// workspace sizes for a few shapes.

#include "fused/fused_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "symcomm/error.h"

namespace symcomm::detail::fused {
namespace {

FusedSelect base() {
  return FusedSelect{.world_size = 2,
                     .flops = 1e12,
                     .has_workspace = true,
                     .workspace_bytes = 1000,
                     .workspace_needed = 1000,
                     .chunks = 2,
                     .needs_two_chunks = true,
                     .force_unfused = false,
                     .min_flops = 1e9,
                     .empty = false};
}

TEST(FusedSelectPath, Table) {
  struct Row {
    const char* what;
    FusedSelect s;
    FusedPath want;
  };
  auto with = [](auto f) {
    FusedSelect s = base();
    f(s);
    return s;
  };
  const Row rows[] = {
      {"everything allows it", base(), FusedPath::kPipelined},
      {"one rank", with([](auto& s) { s.world_size = 1; }), FusedPath::kUnfused},
      {"forced off", with([](auto& s) { s.force_unfused = true; }), FusedPath::kUnfused},
      {"empty", with([](auto& s) { s.empty = true; }), FusedPath::kUnfused},
      {"no workspace", with([](auto& s) { s.has_workspace = false; }), FusedPath::kUnfused},
      {"workspace one byte short", with([](auto& s) { s.workspace_bytes = 999; }), FusedPath::kUnfused},
      {"larger workspace", with([](auto& s) { s.workspace_bytes = 1 << 30; }), FusedPath::kPipelined},
      {"too few flops", with([](auto& s) { s.flops = 1e8; }), FusedPath::kUnfused},
      {"flops at the threshold", with([](auto& s) { s.flops = 1e9; }), FusedPath::kPipelined},
      {"one chunk, reduce-scatter", with([](auto& s) { s.chunks = 1; }), FusedPath::kUnfused},
      {"one chunk, all-gather", with([](auto& s) {
         s.chunks = 1;
         s.needs_two_chunks = false;
       }),
       FusedPath::kPipelined},
      {"eight ranks", with([](auto& s) { s.world_size = 8; }), FusedPath::kPipelined},
  };
  for (const Row& r : rows) EXPECT_EQ(select_fused_path(r.s), r.want) << r.what;
}

TEST(FusedChunks, RowChunksCoverTheShardInOrder) {
  for (int64_t outer : {1, 2, 5}) {
    for (int64_t m : {1, 3, 7, 64}) {
      for (int req : {0, 1, 2, 3, 4, 16, 100}) {
        const RowSplit s{.outer = outer, .m = m, .k = 4};
        const auto c = row_chunks(s, 4, req, req % 2 == 0);
        ASSERT_FALSE(c.empty());
        EXPECT_LE(static_cast<int>(c.size()), kMaxFusedChunks);
        int64_t next = 0;  // elements of the shard covered so far
        for (const RowChunk& x : c) {
          EXPECT_EQ(x.offset(s), next) << "outer " << outer << " m " << m << " req " << req;
          EXPECT_GT(x.elems(s.k), 0);
          EXPECT_TRUE(outer == 1 || (x.r0 == 0 && x.r1 == m)) << "several outer indices need whole rows";
          next += x.elems(s.k);
        }
        EXPECT_EQ(next, outer * m * s.k);
      }
    }
  }
}

TEST(FusedChunks, ColumnChunksAreAlignedAndCoverEveryColumn) {
  for (size_t es : {2, 4}) {
    for (int64_t n : {1, 5, 8, 17, 512, 8192, 14336}) {
      for (int req : {0, 1, 2, 3, 16, 1000}) {
        const auto c = col_chunks(n, es, req);
        ASSERT_FALSE(c.empty());
        EXPECT_LE(static_cast<int>(c.size()), kMaxFusedChunks);
        int64_t next = 0;
        for (const ColChunk& x : c) {
          EXPECT_EQ(x.c0, next);
          EXPECT_GT(x.width(), 0) << "n " << n << " req " << req;
          EXPECT_EQ(x.c0 * static_cast<int64_t>(es) % 16, 0) << "chunk start not 16-byte aligned";
          next = x.c1;
        }
        EXPECT_EQ(next, n);
      }
    }
  }
  EXPECT_EQ(col_chunks(8192, 2, 0).size(), 4u) << "automatic: 1024 columns per chunk or more, at most 4";
  EXPECT_EQ(col_chunks(3000, 2, 0).size(), 2u) << "automatic: 1024 columns per chunk or more";
  EXPECT_EQ(col_chunks(1024, 2, 0).size(), 2u);
  EXPECT_EQ(col_chunks(100, 2, 0).size(), 2u) << "automatic: at least two chunks";
}

TEST(FusedPlans, AllGatherPathsAndStaging) {
  const DataType dt = DataType::kBFloat16;
  char dummy[16];
  TensorRef a{dummy, dt, {4, 8}}, b{dummy, dt, {8, 6}}, out{dummy, dt, {8, 6}}, g{dummy, dt, {8, 8}};
  std::vector<TensorRef> bs{b}, outs{out};
  FusedOptions o{.min_pipelined_flops = 0};
  FusedWorkspace* fake = reinterpret_cast<FusedWorkspace*>(dummy);  // only compared with null by the planner
  o.workspace = fake;
  EXPECT_EQ(row_chunks(RowSplit{.outer = 1, .m = 64, .k = 4}, 2, 0, false).size(), 1u) << "automatic, 2 ranks";
  EXPECT_EQ(row_chunks(RowSplit{.outer = 1, .m = 64, .k = 4}, 4, 0, false).size(), 3u) << "automatic, 4 ranks";
  EXPECT_EQ(row_chunks(RowSplit{.outer = 1, .m = 64, .k = 4}, 8, 0, true).size(), 1u) << "a_gathered: 1 chunk";
  EXPECT_EQ(row_chunks(RowSplit{.outer = 3, .m = 64, .k = 4}, 8, 0, true).size(), 3u) << "a_gathered, outer 3";
  AgPlan p = plan_all_gather_matmul(2, a, bs, 0, outs, nullptr, o, 1 << 20);
  EXPECT_EQ(p.path, FusedPath::kPipelined);
  EXPECT_EQ(p.staging_bytes, align_up(2 * 4 * 8 * 2));
  EXPECT_FALSE(p.direct);
  p = plan_all_gather_matmul(2, a, bs, 0, outs, &g, o, 1);
  EXPECT_EQ(p.path, FusedPath::kPipelined) << "one chunk gathers straight into a_gathered: no staging";
  EXPECT_TRUE(p.direct);
  EXPECT_EQ(p.staging_bytes, 0u);
  // Nothing staged, but the path runs on the workspace's streams: at least 1 byte, never 0 (which told callers
  // to pass no workspace, and FusedWorkspace::create refuses).
  EXPECT_EQ(all_gather_matmul_workspace_bytes(2, a, 0, true), 1u);
  EXPECT_EQ(all_gather_matmul_workspace_bytes(2, a, 0, false), align_up(2 * 4 * 8 * 2));
  p = plan_all_gather_matmul(2, a, bs, 0, outs, nullptr, o, align_up(2 * 4 * 8 * 2) - 1);
  EXPECT_EQ(p.path, FusedPath::kUnfused);
  EXPECT_EQ(p.chunks.size(), 1u);
  o.min_pipelined_flops = 1e12;
  EXPECT_EQ(plan_all_gather_matmul(2, a, bs, 0, outs, nullptr, o, 1 << 20).path, FusedPath::kUnfused);
  EXPECT_THROW(plan_all_gather_matmul(2, a, bs, 1, outs, nullptr, o, 0), Error) << "contraction dim";
  // Every extent below 2^31, but 2^29 * 2^30 * 32 elements: numel() wrapped to 0 and a null pointer passed.
  TensorRef huge{nullptr, dt, {int64_t{1} << 29, int64_t{1} << 30, 32}};
  EXPECT_THROW(plan_all_gather_matmul(2, huge, bs, 0, outs, nullptr, o, 0), Error) << "2^64 bytes";
  EXPECT_THROW(all_gather_matmul_workspace_bytes(2, huge, 0, false), Error) << "2^64 bytes";
}

// The automatic flop thresholds (FusedOptions::min_pipelined_flops < 0) at the shapes they were measured on:
// pipelined from M = N = K = 8192 (2^40 flops) for all-gather + matmul, from 2^38 for matmul + reduce-scatter.
TEST(FusedPlans, AutomaticThresholdsFollowTheMeasuredShapes) {
  const DataType dt = DataType::kBFloat16;
  char dummy[16];
  FusedOptions o{.workspace = reinterpret_cast<FusedWorkspace*>(dummy)};
  ASSERT_LT(o.min_pipelined_flops, 0) << "the default is automatic";
  auto ag = [&](int world, int64_t m, int64_t k, int64_t n) {
    TensorRef a{dummy, dt, {m / world, k}}, b{dummy, dt, {k, n}}, out{dummy, dt, {m, n}};
    std::vector<TensorRef> bs{b}, outs{out};
    return plan_all_gather_matmul(world, a, bs, 0, outs, nullptr, o, SIZE_MAX).path;
  };
  auto rs = [&](int world, int64_t m, int64_t k, int64_t n) {
    TensorRef a{dummy, dt, {m, k}}, b{dummy, dt, {k, n}}, out{dummy, dt, {m / world, n}};
    return plan_matmul_reduce_scatter(world, a, b, ReduceOp::kSum, 0, out, o, SIZE_MAX, true).path;
  };
  for (int world : {2, 4, 8}) {
    EXPECT_EQ(ag(world, 1024, 4096, 14336), FusedPath::kUnfused) << world << " ranks, 2.4 x slower pipelined";
    EXPECT_EQ(ag(world, 4096, 4096, 14336), FusedPath::kUnfused) << world << " ranks";
    EXPECT_EQ(ag(world, 8192, 8192, 8192), FusedPath::kPipelined) << world << " ranks";
    EXPECT_EQ(ag(world, 16384, 4096, 14336), FusedPath::kPipelined) << world << " ranks";
  }
  EXPECT_EQ(rs(2, 1024, 4096, 14336), FusedPath::kUnfused) << "5% slower pipelined";
  EXPECT_EQ(rs(2, 4096, 4096, 11008), FusedPath::kPipelined);
  EXPECT_EQ(rs(2, 8192, 4096, 8192), FusedPath::kPipelined);
  EXPECT_EQ(rs(4, 8192, 4096, 8192), FusedPath::kUnfused) << "no pipelined path from three ranks";
  o.min_pipelined_flops = 0;
  EXPECT_EQ(ag(4, 1024, 4096, 14336), FusedPath::kPipelined) << "an explicit threshold wins";
  EXPECT_EQ(rs(2, 1024, 4096, 14336), FusedPath::kPipelined) << "an explicit threshold wins";
}

TEST(FusedPlans, ReduceScatterPathsAndWorkspace) {
  const DataType dt = DataType::kBFloat16;
  char dummy[16];
  TensorRef a{dummy, dt, {2, 8, 16}}, b{dummy, dt, {16, 64}}, out{dummy, dt, {2, 4, 64}};
  FusedOptions o{.workspace = reinterpret_cast<FusedWorkspace*>(dummy), .chunks = 4, .min_pipelined_flops = 0};
  const size_t need = matmul_reduce_scatter_workspace_bytes(2, a, b, 1, 4);
  // Two ranks swap partials: 4 chunks of 16 columns, one buffer each of 2 blocks × 8 local rows × 16 bf16.
  EXPECT_EQ(need, 4 * align_up(2 * 8 * 16 * 2));
  RsPlan p = plan_matmul_reduce_scatter(2, a, b, ReduceOp::kAvg, 1, out, o, need, true);
  EXPECT_EQ(p.path, FusedPath::kPipelined);
  EXPECT_EQ(p.mode, RsMode::kExchange);
  EXPECT_EQ(p.chunks.size(), 4u);
  EXPECT_EQ(p.buffers, 4);
  EXPECT_EQ(p.product_bytes, align_up(2 * 8 * 16 * 2));
  EXPECT_EQ(p.rows.outer, 2);
  EXPECT_EQ(p.rows.m, 4);
  EXPECT_FLOAT_EQ(p.scale, 0.5f);
  EXPECT_EQ(plan_matmul_reduce_scatter(2, a, b, ReduceOp::kSum, 1, out, o, need - 1, true).path, FusedPath::kUnfused);
  // Four ranks: no pipelined path; the unfused float32 path's product (4 ranks × 4 local rows × 64 floats)
  // and result (4 local rows × 64 floats).
  TensorRef out4{dummy, dt, {2, 2, 64}};
  const size_t need4 = matmul_reduce_scatter_workspace_bytes(4, a, b, 1, 4);
  EXPECT_EQ(need4, align_up(4 * 4 * 64 * 4) + align_up(4 * 64 * 4));
  p = plan_matmul_reduce_scatter(4, a, b, ReduceOp::kSum, 1, out4, o, 1 << 20, false);
  EXPECT_EQ(p.path, FusedPath::kUnfused);
  EXPECT_EQ(p.mode, RsMode::kFloat32) << "no full peer access: NCCL's ring would round every partial sum";
  EXPECT_EQ(p.product_bytes + p.result_bytes, need4);
  // With full peer access: partials in bf16 (4 ranks × 4 local rows × 64), reduced by the direct kernel.
  p = plan_matmul_reduce_scatter(4, a, b, ReduceOp::kSum, 1, out4, o, 1 << 20, true);
  EXPECT_EQ(p.path, FusedPath::kUnfused);
  EXPECT_EQ(p.mode, RsMode::kUnfused);
  EXPECT_EQ(p.product_bytes, align_up(4 * 4 * 64 * 2));
  EXPECT_EQ(p.result_bytes, 0u);
  EXPECT_LE(p.product_bytes, need4) << "the advertised workspace covers either unfused mode";
  EXPECT_EQ(rs_unfused_mode(2, false), RsMode::kUnfused) << "two partials: any reduce-scatter rounds once";
  // Unfused: one buffer of every rank's rows in the output dtype, nothing else.
  p = plan_matmul_reduce_scatter(2, a, b, ReduceOp::kSum, 1, out, o, 0, true);
  EXPECT_EQ(p.mode, RsMode::kUnfused);
  EXPECT_EQ(p.product_bytes, align_up(2 * 8 * 64 * 2));
  EXPECT_EQ(p.result_bytes, 0u);
  o.chunks = 1;
  EXPECT_EQ(plan_matmul_reduce_scatter(2, a, b, ReduceOp::kSum, 1, out, o, 1 << 20, true).path, FusedPath::kUnfused);
  EXPECT_THROW(plan_matmul_reduce_scatter(3, a, b, ReduceOp::kSum, 1, out, o, 0, true), Error) << "8 rows over 3 ranks";
  EXPECT_THROW(plan_matmul_reduce_scatter(2, a, b, ReduceOp::kProd, 1, out, o, 0, true), Error);
}

}  // namespace
}  // namespace symcomm::detail::fused
