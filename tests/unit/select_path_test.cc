// Table-driven tests of the pure kernel-path functions select_cuda_path() and select_cuda_multi_path()
// (src/algos/select.cc): each row is one (collective, size, algorithm, buffer facts) and the exact path. The
// Tuning of the table has small, distinct thresholds so that each row sits next to one of them; the LL and LL128
// capacities are set below some of them, so that rows show which of the two limits a path stops at.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algos/select.h"

namespace symcomm::detail {
namespace {

constexpr size_t kLLMax = 1024;          // Tuning::cuda_ll_max_bytes
constexpr size_t kLL128Max = 8192;       // Tuning::cuda_ll128_max_bytes
constexpr size_t kGatherMax = 2048;      // Tuning::cuda_ll_gather_max_bytes
constexpr size_t kGather128Max = 12288;  // Tuning::cuda_ll128_gather_max_bytes
constexpr size_t kRs128Max = 14336;      // Tuning::cuda_ll128_reduce_scatter_max_bytes
constexpr size_t kPushMin = 65536;       // Tuning::cuda_two_shot_push_min_bytes
constexpr size_t kLLCapacity = 4096;     // PathFacts::ll_capacity_bytes
constexpr size_t kLL128Capacity = 16384;
constexpr size_t kTwoShotLLMax = 32768;       // Tuning::cuda_ll128_two_shot_max_bytes
constexpr size_t kTwoShotLLMin = 361;         // PathFacts::ll128_two_shot_min_bytes
constexpr size_t kTwoShotLLCapacity = 24576;  // PathFacts::ll128_two_shot_capacity_bytes

Tuning table_tuning() {
  Tuning t;
  t.cuda_ll_max_bytes = kLLMax;
  t.cuda_ll128_max_bytes = kLL128Max;
  t.cuda_ll_gather_max_bytes = kGatherMax;
  t.cuda_ll128_gather_max_bytes = kGather128Max;
  t.cuda_ll128_reduce_scatter_max_bytes = kRs128Max;
  t.cuda_two_shot_push_min_bytes = kPushMin;
  t.cuda_ll128_two_shot_max_bytes = kTwoShotLLMax;
  return t;
}

// Buffer facts of a row: which side lies in the heap, and whether the call is in place.
enum Sides { kNeither, kIn, kOut, kBoth, kBothInPlace };

PathFacts facts(Sides sides) {
  return PathFacts{.in_symmetric = sides == kIn || sides == kBoth || sides == kBothInPlace,
                   .out_symmetric = sides == kOut || sides == kBoth || sides == kBothInPlace,
                   .in_place = sides == kBothInPlace,
                   .ll_capacity_bytes = kLLCapacity,
                   .ll128_capacity_bytes = kLL128Capacity,
                   .ll128_two_shot_min_bytes = kTwoShotLLMin,
                   .ll128_two_shot_capacity_bytes = kTwoShotLLCapacity};
}

struct Row {
  Collective kind;
  size_t bytes;
  Algorithm algo;
  Sides sides;
  KernelPath want;
  // Tuning changes of the row: -1 keeps the table's value.
  long long ll_max = -1, ll128_max = -1, gather_max = -1, two_shot_ll_max = -1, gather128_max = -1;
};

std::string describe(const Row& r) {
  return std::string(to_string(r.kind)) + " " + std::to_string(r.bytes) + " B, " + std::string(to_string(r.algo)) +
         ", sides " + std::to_string(static_cast<int>(r.sides));
}

TEST(Select, CudaPathTable) {
  using C = Collective;
  using A = Algorithm;
  using P = KernelPath;
  const std::vector<Row> rows = {
      // NCCL and the copy engine are paths of their own, whatever the collective and the buffers.
      {C::kAllReduce, 64, A::kNccl, kBoth, P::kNccl},
      {C::kAllGather, 1 << 20, A::kNccl, kNeither, P::kNccl},
      {C::kBarrier, 0, A::kNccl, kNeither, P::kNccl},
      {C::kAllReduce, 64, A::kCopyEngine, kBoth, P::kCopyEngine},
      {C::kReduceScatter, 1 << 20, A::kCopyEngine, kNeither, P::kCopyEngine},
      {C::kAllToAll, 4096, A::kCopyEngine, kBothInPlace, P::kCopyEngine},
      // The barrier has one kernel.
      {C::kBarrier, 0, A::kDirect, kNeither, P::kBarrier},
      // One-shot all-reduce: LL up to the smaller of its limit and the LL buffer, then LL128, then staged.
      {C::kAllReduce, 0, A::kOneShot, kNeither, P::kLL},
      {C::kAllReduce, kLLMax, A::kOneShot, kNeither, P::kLL},
      {C::kAllReduce, kLLMax, A::kOneShot, kBoth, P::kLL},
      {C::kAllReduce, kLLMax + 1, A::kOneShot, kNeither, P::kLL128},
      {C::kAllReduce, kLLCapacity, A::kOneShot, kNeither, P::kLL, 8192},
      {C::kAllReduce, kLLCapacity + 1, A::kOneShot, kNeither, P::kLL128, 8192},
      {C::kAllReduce, kLL128Max, A::kOneShot, kBoth, P::kLL128},
      {C::kAllReduce, kLL128Max + 1, A::kOneShot, kNeither, P::kOneShotStaged},
      {C::kAllReduce, kLL128Max + 1, A::kOneShot, kBoth, P::kOneShotStaged},
      {C::kAllReduce, kLL128Capacity, A::kOneShot, kNeither, P::kLL128, -1, 1 << 20},
      {C::kAllReduce, kLL128Capacity + 1, A::kOneShot, kNeither, P::kOneShotStaged, -1, 1 << 20},
      {C::kAllReduce, 64, A::kOneShot, kNeither, P::kLL128, 0},
      {C::kAllReduce, 64, A::kOneShot, kNeither, P::kOneShotStaged, 0, 0},
      // Two-shot all-reduce: push from the push threshold on when the output is in the heap, zero-copy below it
      // when both are, else staged.
      {C::kAllReduce, kPushMin, A::kTwoShot, kOut, P::kTwoShotPush},
      {C::kAllReduce, kPushMin, A::kTwoShot, kBoth, P::kTwoShotPush},
      {C::kAllReduce, kPushMin, A::kTwoShot, kIn, P::kTwoShotStaged},
      {C::kAllReduce, kPushMin, A::kTwoShot, kNeither, P::kTwoShotStaged},
      {C::kAllReduce, kPushMin - 1, A::kTwoShot, kBoth, P::kTwoShotZeroCopy},
      {C::kAllReduce, kPushMin - 1, A::kTwoShot, kBothInPlace, P::kTwoShotZeroCopy},
      {C::kAllReduce, kPushMin - 1, A::kTwoShot, kOut, P::kTwoShotStaged},
      {C::kAllReduce, kPushMin - 1, A::kTwoShot, kIn, P::kTwoShotStaged},
      {C::kAllReduce, 64, A::kTwoShot, kNeither, P::kTwoShotStaged},
      // The LL128 two-shot first, from one line per shard up to the smaller of its limit and its lines' capacity,
      // wherever the buffers lie.
      {C::kAllReduce, kTwoShotLLMin, A::kTwoShot, kNeither, P::kLL128TwoShot},
      {C::kAllReduce, kTwoShotLLMin - 1, A::kTwoShot, kNeither, P::kTwoShotStaged},
      {C::kAllReduce, kTwoShotLLMin - 1, A::kTwoShot, kBoth, P::kTwoShotZeroCopy},
      {C::kAllReduce, kTwoShotLLCapacity, A::kTwoShot, kBoth, P::kLL128TwoShot},
      {C::kAllReduce, kTwoShotLLCapacity, A::kTwoShot, kBothInPlace, P::kLL128TwoShot},
      {C::kAllReduce, kTwoShotLLCapacity + 1, A::kTwoShot, kBoth, P::kTwoShotZeroCopy},
      {C::kAllReduce, 4096, A::kTwoShot, kOut, P::kLL128TwoShot},
      {C::kAllReduce, 4096, A::kTwoShot, kOut, P::kTwoShotStaged, -1, -1, -1, 4095},
      {C::kAllReduce, 4096, A::kTwoShot, kOut, P::kLL128TwoShot, -1, -1, -1, 4096},
      {C::kAllReduce, 4096, A::kTwoShot, kIn, P::kTwoShotStaged, -1, -1, -1, 0},
      {C::kAllReduce, 4096, A::kOneShot, kNeither, P::kLL128},
      // Direct collectives: LL up to the smaller of the gather limit and the LL buffer (never for 0 bytes), then
      // zero-copy where the side the peers reach is in the heap.
      {C::kReduceScatter, kGatherMax, A::kDirect, kNeither, P::kLL},
      {C::kAllGather, kGatherMax, A::kDirect, kBoth, P::kLL},
      {C::kAllToAll, kGatherMax, A::kDirect, kBothInPlace, P::kLL},
      {C::kBroadcast, 1, A::kDirect, kOut, P::kLL},
      {C::kAllGather, 0, A::kDirect, kNeither, P::kDirectStaged},
      {C::kAllGather, 0, A::kDirect, kOut, P::kDirectZeroCopy},
      {C::kAllGather, kLLCapacity, A::kDirect, kNeither, P::kLL, -1, -1, 8192},
      {C::kAllGather, kLLCapacity + 1, A::kDirect, kNeither, P::kLL128, -1, -1, 8192},
      {C::kAllGather, kLLCapacity + 1, A::kDirect, kNeither, P::kDirectStaged, -1, -1, 8192, -1, 0},
      // Then LL128 (not for a broadcast) up to the smaller of its gather limit and the LL128 buffer, whichever
      // side lies in the heap; then the direct kernels, zero-copy where the side the peers reach is in the heap.
      {C::kReduceScatter, kGatherMax + 1, A::kDirect, kIn, P::kLL128},
      {C::kAllGather, kGather128Max, A::kDirect, kBoth, P::kLL128},
      {C::kAllToAll, kGather128Max, A::kDirect, kBothInPlace, P::kLL128},
      {C::kAllGather, kLL128Capacity, A::kDirect, kNeither, P::kLL128, -1, -1, -1, -1, 1 << 20},
      {C::kAllGather, kLL128Capacity + 1, A::kDirect, kNeither, P::kDirectStaged, -1, -1, -1, -1, 1 << 20},
      {C::kBroadcast, kGatherMax + 1, A::kDirect, kNeither, P::kDirectStaged},
      // Reduce-scatter has a bound of its own.
      {C::kReduceScatter, kGather128Max + 1, A::kDirect, kIn, P::kLL128},
      {C::kReduceScatter, kRs128Max, A::kDirect, kOut, P::kLL128},
      {C::kAllToAll, kRs128Max, A::kDirect, kBoth, P::kDirectZeroCopy},
      {C::kReduceScatter, kRs128Max + 1, A::kDirect, kIn, P::kDirectZeroCopy},
      {C::kReduceScatter, kRs128Max + 1, A::kDirect, kOut, P::kDirectStaged},
      {C::kReduceScatter, kRs128Max + 1, A::kDirect, kBothInPlace, P::kDirectZeroCopy},
      {C::kAllGather, kGather128Max + 1, A::kDirect, kOut, P::kDirectZeroCopy},
      {C::kAllGather, kGather128Max + 1, A::kDirect, kIn, P::kDirectStaged},
      {C::kAllToAll, kGather128Max + 1, A::kDirect, kBoth, P::kDirectZeroCopy},
      {C::kAllToAll, kGather128Max + 1, A::kDirect, kBothInPlace, P::kDirectStaged},
      {C::kAllToAll, kGather128Max + 1, A::kDirect, kIn, P::kDirectStaged},
      {C::kBroadcast, kGatherMax + 1, A::kDirect, kOut, P::kDirectZeroCopy},
      {C::kBroadcast, kGatherMax + 1, A::kDirect, kBothInPlace, P::kDirectZeroCopy},
      {C::kBroadcast, kGatherMax + 1, A::kDirect, kIn, P::kDirectStaged},
      // LL is a path of the direct algorithm only.
      {C::kAllGather, 64, A::kOneShot, kNeither, P::kDirectStaged},
      {C::kReduceScatter, 64, A::kTwoShot, kIn, P::kDirectZeroCopy},
  };
  for (const Row& row : rows) {
    Tuning t = table_tuning();
    if (row.ll_max >= 0) t.cuda_ll_max_bytes = static_cast<size_t>(row.ll_max);
    if (row.ll128_max >= 0) t.cuda_ll128_max_bytes = static_cast<size_t>(row.ll128_max);
    if (row.gather_max >= 0) t.cuda_ll_gather_max_bytes = static_cast<size_t>(row.gather_max);
    if (row.two_shot_ll_max >= 0) t.cuda_ll128_two_shot_max_bytes = static_cast<size_t>(row.two_shot_ll_max);
    if (row.gather128_max >= 0) t.cuda_ll128_gather_max_bytes = static_cast<size_t>(row.gather128_max);
    const KernelPath got = select_cuda_path(row.kind, row.bytes, row.algo, facts(row.sides), t);
    EXPECT_EQ(to_string(got), to_string(row.want)) << describe(row);
  }
}

// NOTE [measured CUDA thresholds]: from 3 ranks on the gathers' blocks go LL up to 181 KB, LL128 up to 724 KB
// (reduce-scatter 4 MB, the LL128 buffer), then the direct kernels; at 2 ranks the defaults (LL up to 512 KB, no LL128)
// stay.
TEST(Select, CudaGatherPathsFollowTheWorldSize) {
  using C = Collective;
  using P = KernelPath;
  PathFacts f = facts(kNeither);
  f.ll_capacity_bytes = (size_t{1} << 20) - 8;
  f.ll128_capacity_bytes = size_t{4} << 20;
  const Tuning t4 = measured_cuda_tuning(Tuning{}, 4), t2 = measured_cuda_tuning(Tuning{}, 2);
  const auto path = [&](C kind, size_t bytes, const Tuning& t) {
    return std::string(to_string(select_cuda_path(kind, bytes, Algorithm::kDirect, f, t)));
  };
  EXPECT_EQ(path(C::kAllGather, size_t{181} << 10, t4), to_string(P::kLL));
  EXPECT_EQ(path(C::kAllGather, (size_t{181} << 10) + 1, t4), to_string(P::kLL128));
  EXPECT_EQ(path(C::kAllGather, size_t{724} << 10, t4), to_string(P::kLL128));
  EXPECT_EQ(path(C::kAllGather, (size_t{724} << 10) + 1, t4), to_string(P::kDirectStaged));
  EXPECT_EQ(path(C::kReduceScatter, size_t{4} << 20, t4), to_string(P::kLL128));
  EXPECT_EQ(path(C::kReduceScatter, (size_t{4} << 20) + 16, t4), to_string(P::kDirectStaged));
  EXPECT_EQ(path(C::kBroadcast, (size_t{181} << 10) + 1, t4), to_string(P::kDirectStaged));
  EXPECT_EQ(path(C::kAllGather, size_t{512} << 10, t2), to_string(P::kLL));
  EXPECT_EQ(path(C::kAllGather, (size_t{512} << 10) + 1, t2), to_string(P::kDirectStaged));
}

TEST(Select, CudaMultiPathTable) {
  using C = Collective;
  using P = KernelPath;
  struct MultiRow {
    Collective kind;
    size_t bytes;
    Sides sides;
    KernelPath want;
  };
  const std::vector<MultiRow> rows = {
      // All-reduce: push from the push threshold on with the outputs in the heap; zero-copy needs both sides.
      {C::kAllReduce, kPushMin, kOut, P::kMultiPush},
      {C::kAllReduce, kPushMin, kBoth, P::kMultiPush},
      {C::kAllReduce, kPushMin, kIn, P::kMultiStaged},
      {C::kAllReduce, kPushMin - 1, kBoth, P::kMultiZeroCopy},
      {C::kAllReduce, kPushMin - 1, kOut, P::kMultiStaged},
      {C::kAllReduce, kPushMin - 1, kNeither, P::kMultiStaged},
      // Reduce-scatter reads the peers' inputs, all-gather writes their outputs; neither pushes.
      {C::kReduceScatter, kPushMin, kIn, P::kMultiZeroCopy},
      {C::kReduceScatter, 64, kOut, P::kMultiStaged},
      {C::kReduceScatter, 64, kNeither, P::kMultiStaged},
      {C::kAllGather, kPushMin, kOut, P::kMultiZeroCopy},
      {C::kAllGather, 64, kIn, P::kMultiStaged},
      {C::kAllGather, 64, kBoth, P::kMultiZeroCopy},
  };
  for (const MultiRow& row : rows) {
    const KernelPath got = select_cuda_multi_path(row.kind, row.bytes, facts(row.sides), table_tuning());
    EXPECT_EQ(to_string(got), to_string(row.want))
        << to_string(row.kind) << " " << row.bytes << " B, sides " << static_cast<int>(row.sides);
  }
}

// Every (collective, algorithm, facts, size) gives a path of a single collective, named, and LL only within
// both of its limits.
TEST(Select, CudaPathsOfEveryInputAreSingleCollectivePaths) {
  const Collective kinds[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kBroadcast, Collective::kAllToAll,  Collective::kBarrier};
  const Algorithm algos[] = {Algorithm::kOneShot, Algorithm::kTwoShot, Algorithm::kDirect, Algorithm::kCopyEngine,
                             Algorithm::kNccl};
  const size_t sizes[] = {0,
                          1,
                          kLLMax,
                          kLLMax + 1,
                          kGatherMax + 1,
                          kLLCapacity + 1,
                          kGather128Max + 1,
                          kRs128Max + 1,
                          kLL128Capacity + 1,
                          kLL128Max + 1,
                          kTwoShotLLMin - 1,
                          kTwoShotLLMin,
                          kPushMin,
                          size_t{1} << 40};
  for (Collective kind : kinds) {
    for (Algorithm algo : algos) {
      for (int sides = kNeither; sides <= kBothInPlace; ++sides) {
        for (size_t bytes : sizes) {
          const KernelPath p = select_cuda_path(kind, bytes, algo, facts(static_cast<Sides>(sides)), table_tuning());
          const std::string where =
              std::string(to_string(kind)) + " " + std::string(to_string(algo)) + " " + std::to_string(bytes) + " B";
          EXPECT_NE(to_string(p), "invalid") << where;
          EXPECT_TRUE(p != KernelPath::kNone && p != KernelPath::kHost && p != KernelPath::kHostScheduled &&
                      p != KernelPath::kScheduled && p != KernelPath::kMultiStaged && p != KernelPath::kMultiZeroCopy &&
                      p != KernelPath::kMultiPush)
              << where << ": " << to_string(p);
          if (p == KernelPath::kLL128TwoShot) {
            EXPECT_EQ(kind, Collective::kAllReduce) << where;
            EXPECT_NE(algo, Algorithm::kOneShot) << where;
            EXPECT_GE(bytes, kTwoShotLLMin) << where;
            EXPECT_LE(bytes, kTwoShotLLCapacity) << where;
          }
          if (p == KernelPath::kLL128 && kind != Collective::kAllReduce) {
            EXPECT_NE(kind, Collective::kBroadcast) << where;
            EXPECT_LE(bytes, kLL128Capacity) << where;
            EXPECT_LE(bytes, kind == Collective::kReduceScatter ? kRs128Max : kGather128Max) << where;
          }
          if (p == KernelPath::kLL) {
            EXPECT_LE(bytes, kLLCapacity) << where;
            EXPECT_LE(bytes, kind == Collective::kAllReduce ? kLLMax : kGatherMax) << where;
          }
        }
      }
    }
  }
}

// Where the communicator's topology restricts the links (PathFacts::scheduled), all-reduce, all-gather and
// reduce-scatter run their schedule whatever the algorithm, size and buffers, except on NCCL; the other collectives
// keep their paths.
TEST(Select, CudaScheduledPathTable) {
  using C = Collective;
  using A = Algorithm;
  using P = KernelPath;
  struct ScheduledRow {
    C kind;
    size_t bytes;
    A algo;
    Sides sides;
    P want;
  };
  const ScheduledRow rows[] = {
      {C::kAllReduce, 64, A::kOneShot, kNeither, P::kScheduled},
      {C::kAllReduce, kTwoShotLLMin, A::kTwoShot, kBoth, P::kScheduled},
      {C::kAllReduce, size_t{1} << 40, A::kTwoShot, kOut, P::kScheduled},
      {C::kAllGather, 16, A::kDirect, kNeither, P::kScheduled},
      {C::kAllGather, 1 << 20, A::kCopyEngine, kOut, P::kScheduled},
      {C::kReduceScatter, kRs128Max, A::kDirect, kIn, P::kScheduled},
      {C::kReduceScatter, 4096, A::kCopyEngine, kBoth, P::kScheduled},
      {C::kAllReduce, 64, A::kNccl, kBoth, P::kNccl},
      {C::kAllGather, 1 << 20, A::kNccl, kNeither, P::kNccl},
      {C::kBroadcast, 64, A::kDirect, kNeither, P::kLL},
      {C::kBroadcast, 1 << 20, A::kDirect, kOut, P::kDirectZeroCopy},
      {C::kAllToAll, 4096, A::kCopyEngine, kNeither, P::kCopyEngine},
      {C::kBarrier, 0, A::kDirect, kNeither, P::kBarrier},
  };
  for (const ScheduledRow& r : rows) {
    PathFacts f = facts(r.sides);
    f.scheduled = true;
    EXPECT_EQ(to_string(select_cuda_path(r.kind, r.bytes, r.algo, f, table_tuning())), to_string(r.want))
        << to_string(r.kind) << " " << r.bytes << " B " << to_string(r.algo);
    EXPECT_NE(select_cuda_path(r.kind, r.bytes, r.algo, facts(r.sides), table_tuning()), P::kScheduled)
        << "without a schedule: " << to_string(r.kind);
  }
}

TEST(Select, EveryKernelPathHasADistinctName) {
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(KernelPath::kScheduled); ++i) {
    const std::string name(to_string(static_cast<KernelPath>(i)));
    EXPECT_NE(name, "invalid") << i;
    for (const std::string& other : names) EXPECT_NE(name, other) << i;
    names.push_back(name);
  }
  EXPECT_EQ(to_string(static_cast<KernelPath>(static_cast<int>(KernelPath::kScheduled) + 1)), "invalid");
}

}  // namespace
}  // namespace symcomm::detail
