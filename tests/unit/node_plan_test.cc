// Planning of communicators that span nodes (algos/node_plan.h): node layouts from keys, fake nodes, the block
// order of the hierarchical stages, the threshold text, path selection at and around every threshold, and the
// alpha-beta cost model against values worked out by hand.
#include "algos/node_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "harness/expect_error.h"

namespace symcomm::detail {
namespace {

using symcomm::testing::expect_error;

TEST(NodeLayout, NodesAreNumberedByTheirLowestRankAndRanksByRankWithinANode) {
  const NodeLayout l = make_node_layout({70, 30, 70, 30, 70, 30});
  EXPECT_EQ(l.world_size, 6);
  ASSERT_EQ(l.num_nodes(), 2);
  EXPECT_EQ(l.node_of, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(l.local_of, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(l.members[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(l.members[1], (std::vector<int>{1, 3, 5}));
  EXPECT_TRUE(l.uniform());
  EXPECT_EQ(l.node_size(), 3);
  EXPECT_FALSE(l.blocked());
}

TEST(NodeLayout, ConsecutiveNodesAreBlocked) {
  const NodeLayout l = make_node_layout({4, 4, 9, 9, 1, 1});
  EXPECT_EQ(l.num_nodes(), 3);
  EXPECT_TRUE(l.uniform());
  EXPECT_EQ(l.node_size(), 2);
  EXPECT_TRUE(l.blocked());
}

TEST(NodeLayout, NodesOfDifferentSizesAreNotUniform) {
  const NodeLayout l = make_node_layout({0, 0, 0, 1});
  EXPECT_EQ(l.num_nodes(), 2);
  EXPECT_FALSE(l.uniform());
  EXPECT_EQ(l.node_size(), 0);
  EXPECT_FALSE(l.blocked());
  const NodeLayout one = make_node_layout({5, 5, 5});
  EXPECT_EQ(one.num_nodes(), 1);
  EXPECT_TRUE(one.blocked());
}

TEST(FakeNodes, ConsecutiveAndRoundRobinKeys) {
  EXPECT_EQ(fake_node_keys(6, 2), (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(fake_node_keys(6, 2, true), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(fake_node_keys(5, 2), (std::vector<int64_t>{0, 0, 1, 1, 2}));
  EXPECT_EQ(fake_node_keys(4, 8), (std::vector<int64_t>{0, 0, 0, 0}));
  expect_error(ErrorCode::kInvalidArgument, [] { fake_node_keys(4, 0); });
}

// Block i of the hierarchical buffers belongs to the rank with local index i / N on node i % N, for every layout
// the fake nodes can make; every rank owns exactly one block.
TEST(LocalMajorRank, IsAPermutationInLocalIndexMajorOrder) {
  for (int world : {2, 4, 6, 8, 12}) {
    for (int size : {1, 2, 3, 4}) {
      if (world % size != 0) continue;
      for (bool rr : {false, true}) {
        const NodeLayout l = make_node_layout(fake_node_keys(world, size, rr));
        ASSERT_TRUE(l.uniform());
        std::set<int> seen;
        for (int i = 0; i < world; ++i) {
          const int r = local_major_rank(l, i);
          ASSERT_GE(r, 0);
          ASSERT_LT(r, world);
          EXPECT_EQ(l.node_of[r], i % l.num_nodes()) << world << " " << size << " " << rr << " " << i;
          EXPECT_EQ(l.local_of[r], i / l.num_nodes()) << world << " " << size << " " << rr << " " << i;
          seen.insert(r);
        }
        EXPECT_EQ(static_cast<int>(seen.size()), world);
      }
    }
  }
  const NodeLayout l = make_node_layout(fake_node_keys(4, 2));
  EXPECT_EQ(local_major_rank(l, 0), 0);
  EXPECT_EQ(local_major_rank(l, 1), 2);
  EXPECT_EQ(local_major_rank(l, 2), 1);
  EXPECT_EQ(local_major_rank(l, 3), 3);
}

// Applies `copies` between host buffers, row by row (independently of the library's copy_blocks()).
std::vector<uint8_t> applied(const std::vector<BlockCopy>& copies, const std::vector<uint8_t>& src) {
  std::vector<uint8_t> dst(src.size(), 0xEE);
  for (const BlockCopy& c : copies) {
    for (size_t k = 0; k < c.rows; ++k) {
      for (size_t b = 0; b < c.width; ++b)
        dst.at(c.dst_offset + k * c.dst_pitch + b) = src.at(c.src_offset + k * c.src_pitch + b);
    }
  }
  return dst;
}

TEST(BlockOrderCopies, MoveEveryBlockBetweenLocalIndexAndRankOrder) {
  for (int world : {2, 4, 6, 8, 12}) {
    for (int size : {1, 2, 3, 4}) {
      if (world % size != 0) continue;
      for (bool rr : {false, true}) {
        const NodeLayout l = make_node_layout(fake_node_keys(world, size, rr));
        for (size_t block : {size_t{1}, size_t{3}, size_t{8}}) {
          std::vector<uint8_t> src(world * block);
          for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
          const std::vector<uint8_t> ranked = applied(block_order_copies(l, block, true), src);
          const std::vector<uint8_t> back = applied(block_order_copies(l, block, false), ranked);
          for (int b = 0; b < world; ++b) {
            const size_t r = local_major_rank(l, b);
            for (size_t k = 0; k < block; ++k) {
              ASSERT_EQ(ranked[r * block + k], src[b * block + k])
                  << world << " ranks, nodes of " << size << (rr ? " round-robin" : "") << ", block " << b;
            }
          }
          EXPECT_EQ(back, src) << world << " " << size << " " << rr << " " << block;
          // Blocked layouts: one strided copy per local index; others: one copy per block.
          EXPECT_EQ(block_order_copies(l, block, true).size(),
                    static_cast<size_t>(l.blocked() ? l.node_size() : world));
        }
      }
    }
  }
}

TEST(BlockOrderCopies, PitchesAboveTheLimitTakeOneCopyPerBlock) {
  const NodeLayout l = make_node_layout(fake_node_keys(4, 2));
  const size_t big = kMaxCopyPitch / 2 + 1;  // L * block passes the limit
  const std::vector<BlockCopy> copies = block_order_copies(l, big, true);
  ASSERT_EQ(copies.size(), 4u);
  for (const BlockCopy& c : copies) EXPECT_EQ(c.rows, 1u);
  EXPECT_EQ(block_order_copies(l, kMaxCopyPitch / 2, true).size(), 2u);
  EXPECT_TRUE(block_order_copies(l, 0, true).empty());
}

TEST(NodeThresholds, ParseSetsOnlyTheNamedCollectives) {
  NodeThresholds base;
  base.all_reduce = 1;
  base.all_gather = 2;
  base.reduce_scatter = 3;
  base.broadcast = 4;
  base.barrier = 5;
  const NodeThresholds t = parse_node_thresholds("all_reduce=64K,,broadcast=max,reduce-scatter=2M,barrier=0", base);
  EXPECT_EQ(t.all_reduce, 64u << 10);
  EXPECT_EQ(t.all_gather, 2u);
  EXPECT_EQ(t.reduce_scatter, 2u << 20);
  EXPECT_EQ(t.broadcast, SIZE_MAX);
  EXPECT_EQ(t.barrier, 0u);
  EXPECT_EQ(parse_node_thresholds("allgather=1G", base).all_gather, size_t{1} << 30);
  EXPECT_EQ(parse_node_thresholds("", base).to_string(), base.to_string());
}

TEST(NodeThresholds, TextRoundTrips) {
  NodeThresholds t = default_node_thresholds(8);
  t.all_gather = 12345;
  const NodeThresholds back = parse_node_thresholds(t.to_string(), NodeThresholds{});
  EXPECT_EQ(back.to_string(), t.to_string());
  EXPECT_EQ(back.barrier, SIZE_MAX);
  EXPECT_NE(t.to_string().find("barrier=max"), std::string::npos) << t.to_string();
}

TEST(NodeThresholds, BadTextIsAnInvalidArgument) {
  for (const char* bad : {"all_reduce", "all_reduce=", "all_reduce=x", "all_reduce=3X", "all_to_all=5", "bogus=1",
                          "all_reduce=-1", "all_reduce=99999999999999999999", "all_reduce=17179869184G"}) {
    SCOPED_TRACE(bad);
    expect_error(ErrorCode::kInvalidArgument, [&] { parse_node_thresholds(bad, NodeThresholds{}); });
  }
}

TEST(NodeThresholds, AllToAllHasNoThreshold) {
  NodeThresholds t;
  t.set(Collective::kAllToAll, 5);
  EXPECT_EQ(t.of(Collective::kAllToAll), SIZE_MAX);
  EXPECT_EQ(t.to_string(), NodeThresholds{}.to_string());
}

TEST(NodeThresholds, SetWritesTheFieldOfEachCollective) {
  NodeThresholds t;
  const Collective all[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                            Collective::kBroadcast, Collective::kBarrier};
  for (size_t i = 0; i < std::size(all); ++i) t.set(all[i], 100 + i);
  EXPECT_EQ(t.all_reduce, 100u);
  EXPECT_EQ(t.all_gather, 101u);
  EXPECT_EQ(t.reduce_scatter, 102u);
  EXPECT_EQ(t.broadcast, 103u);
  EXPECT_EQ(t.barrier, 104u);
  for (size_t i = 0; i < std::size(all); ++i) EXPECT_EQ(t.of(all[i]), 100 + i);
  EXPECT_EQ(threshold_text(SIZE_MAX), "max");
  EXPECT_EQ(threshold_text(0), "0");
  EXPECT_EQ(threshold_text(65536), "65536");
}

TEST(NodeThresholds, CudaDefaultsAreFlatUntilSizesAreGiven) {
  const NodeLayout l = make_node_layout(fake_node_keys(8, 4));
  const NodeThresholds t = cuda_node_thresholds();
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kBroadcast, Collective::kBarrier}) {
    EXPECT_EQ(choose_node_path(l, c, size_t{1} << 40, Hierarchy::kAuto, t), NodePath::kFlat) << to_string(c);
  }
  const NodeThresholds given = parse_node_thresholds("all_reduce=64K", t);
  EXPECT_EQ(choose_node_path(l, Collective::kAllReduce, 64 << 10, Hierarchy::kAuto, given), NodePath::kHierarchical);
  EXPECT_EQ(choose_node_path(l, Collective::kAllGather, 64 << 10, Hierarchy::kAuto, given), NodePath::kFlat);
}

TEST(PathBytes, EachCollectiveCountsItsLargerBuffer) {
  EXPECT_EQ(path_bytes(Collective::kAllReduce, 10, DataType::kFloat32, 4), 40u);
  EXPECT_EQ(path_bytes(Collective::kBroadcast, 10, DataType::kFloat16, 4), 20u);
  EXPECT_EQ(path_bytes(Collective::kAllGather, 10, DataType::kFloat32, 4), 160u);
  EXPECT_EQ(path_bytes(Collective::kReduceScatter, 10, DataType::kFloat64, 3), 240u);
  EXPECT_EQ(path_bytes(Collective::kBarrier, 10, DataType::kFloat32, 4), 0u);
}

TEST(ChooseNodePath, ThresholdIsTheFirstHierarchicalSize) {
  const NodeLayout l = make_node_layout(fake_node_keys(4, 2));
  NodeThresholds t;
  t.all_reduce = 1000;
  t.all_gather = 2000;
  t.reduce_scatter = 3000;
  t.broadcast = 4000;
  t.barrier = SIZE_MAX;
  for (Collective c :
       {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter, Collective::kBroadcast}) {
    const size_t at = t.of(c);
    EXPECT_EQ(choose_node_path(l, c, at - 1, Hierarchy::kAuto, t), NodePath::kFlat) << to_string(c);
    EXPECT_EQ(choose_node_path(l, c, at, Hierarchy::kAuto, t), NodePath::kHierarchical) << to_string(c);
    EXPECT_EQ(choose_node_path(l, c, 0, Hierarchy::kHierarchical, t), NodePath::kHierarchical) << to_string(c);
    EXPECT_EQ(choose_node_path(l, c, SIZE_MAX, Hierarchy::kFlat, t), NodePath::kFlat) << to_string(c);
  }
  EXPECT_EQ(choose_node_path(l, Collective::kBarrier, 0, Hierarchy::kAuto, t), NodePath::kFlat);
  t.barrier = 0;
  EXPECT_EQ(choose_node_path(l, Collective::kBarrier, 0, Hierarchy::kAuto, t), NodePath::kHierarchical);
}

TEST(ChooseNodePath, OneNodeRunsOnSymcommUnlessFlatIsAsked) {
  const NodeLayout l = make_node_layout({3, 3, 3, 3});
  const NodeThresholds t = default_node_thresholds(4);
  for (Hierarchy h : {Hierarchy::kAuto, Hierarchy::kHierarchical}) {
    EXPECT_EQ(choose_node_path(l, Collective::kAllReduce, 8, h, t), NodePath::kNode);
    EXPECT_EQ(choose_node_path(l, Collective::kAllToAll, 8, h, t), NodePath::kNode);
  }
  EXPECT_EQ(choose_node_path(l, Collective::kAllReduce, 8, Hierarchy::kFlat, t), NodePath::kFlat);
}

TEST(ChooseNodePath, LayoutsWithoutAHierarchicalPathRunFlatOrRefuseIt) {
  NodeThresholds zero;  // every threshold 0: kAuto would take any hierarchical path there is
  const NodeLayout ragged = make_node_layout({0, 0, 0, 1});
  const NodeLayout singles = make_node_layout({0, 1, 2, 3});
  const NodeLayout even = make_node_layout(fake_node_keys(4, 2));
  for (const NodeLayout* l : {&ragged, &singles}) {
    EXPECT_EQ(choose_node_path(*l, Collective::kAllReduce, 1 << 20, Hierarchy::kAuto, zero), NodePath::kFlat);
    expect_error(ErrorCode::kInvalidArgument,
                 [&] { choose_node_path(*l, Collective::kAllReduce, 1 << 20, Hierarchy::kHierarchical, zero); });
  }
  EXPECT_EQ(choose_node_path(even, Collective::kAllToAll, 1 << 20, Hierarchy::kAuto, zero), NodePath::kFlat);
  expect_error(ErrorCode::kInvalidArgument,
               [&] { choose_node_path(even, Collective::kAllToAll, 8, Hierarchy::kHierarchical, zero); });
}

TEST(ChooseNodePath, DefaultThresholdsKeepBarrierFlat) {
  for (int nodes : {2, 3, 8}) {
    for (int size : {2, 4, 8}) {
      const NodeThresholds t = default_node_thresholds(size);
      EXPECT_EQ(t.barrier, SIZE_MAX);
      const NodeLayout l = make_node_layout(fake_node_keys(nodes * size, size));
      EXPECT_EQ(choose_node_path(l, Collective::kBarrier, 0, Hierarchy::kAuto, t), NodePath::kFlat);
      EXPECT_EQ(choose_node_path(l, Collective::kAllReduce, 64 << 20, Hierarchy::kAuto, t), NodePath::kHierarchical);
    }
  }
}

// 2 nodes x 8 ranks; intra 1 µs and 100 GB/s per rank, inter 5 µs and 10 GB/s per rank's share.
NodeModel model() {
  NodeModel m;
  m.num_nodes = 2;
  m.node_size = 8;
  m.intra = {.latency_us = 1, .bandwidth_GBps = 100};
  m.inter = {.latency_us = 5, .bandwidth_GBps = 10};
  return m;
}

TEST(NodeCostModel, ZeroBytesCostOnlyLatency) {
  // flat: 2(W-1) = 30 steps of 5 µs; hierarchical: two node stages of 7 steps of 1 µs, 2(N-1) = 2 steps of 5 µs.
  EXPECT_DOUBLE_EQ(model_flat_all_reduce_us(model(), 0), 150);
  EXPECT_DOUBLE_EQ(model_hierarchical_all_reduce_us(model(), 0), 24);
}

TEST(NodeCostModel, EightMegabytesByHand) {
  const double b = 8e6;
  // flat: 2*15/16*8e6 = 15e6 bytes per rank; intra 15e6 / 100e3 = 150 µs, inter (15e6/8) / 10e3 = 187.5 µs.
  EXPECT_NEAR(model_flat_all_reduce_us(model(), b), 150 + 187.5, 1e-9);
  // hierarchical: node stage 7 + (7/8*8e6)/100e3 = 77 µs, twice; inter 10 + (2*1/2*8e6/8)/10e3 = 110 µs.
  EXPECT_NEAR(model_hierarchical_all_reduce_us(model(), b), 2 * 77 + 110, 1e-9);
}

TEST(NodeCostModel, HierarchicalCostGrowsWithSizeAndFlatLatencyWithNodes) {
  NodeModel m = model();
  double last = 0;
  for (double b = 1 << 10; b <= (1 << 30); b *= 4) {
    const double t = model_hierarchical_all_reduce_us(m, b);
    EXPECT_GT(t, last);
    last = t;
  }
  const double two = model_flat_all_reduce_us(m, 0);
  m.num_nodes = 4;
  EXPECT_DOUBLE_EQ(model_flat_all_reduce_us(m, 0), 2 * two + 2 * 5 * 1);  // 2(32-1) steps against 2(16-1)
}

}  // namespace
}  // namespace symcomm::detail
