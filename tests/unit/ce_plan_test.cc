// Copy-engine plans (src/algos/ce_plan.cc), executed for every rank of a simulated job in one process.
//
// The simulator runs each round phase by phase (pre copies, then the lanes between the arrive and depart
// barriers), the way the CUDA backend's streams would, and checks for every phase that
//   - every access stays inside the buffer it addresses, and peers' inputs/outputs are only touched when
//     they are symmetric;
//   - no two streams (a rank's caller stream, its lanes, other ranks) touch overlapping bytes in the same
//     phase when one of them writes (a race the real copy engines could lose);
// and then compares every rank's output with an independently computed reference (int32 values, exact).

#include "algos/ce_plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "algos/host_reduce.h"
#include "symcomm/error.h"

namespace symcomm::detail {
namespace {

struct Shape {
  Collective kind;
  int n;
  size_t count;
  bool in_sym, out_sym;
  enum Alias { kNone, kSame, kOwnBlock } alias;
  int root;
  size_t scratch, stage;
  int lanes;
  size_t chunk;
};

std::string describe(const Shape& s) {
  return fmt::format("{} n={} count={} in_sym={} out_sym={} alias={} root={} scratch={} stage={} lanes={} chunk={}",
                     to_string(s.kind), s.n, s.count, s.in_sym, s.out_sym, static_cast<int>(s.alias), s.root, s.scratch,
                     s.stage, s.lanes, s.chunk);
}

using Elem = int32_t;
constexpr size_t kEs = sizeof(Elem);

Elem value(int rank, size_t i) { return static_cast<Elem>(rank * 1000003 + static_cast<int64_t>(i) * 7 + 1); }

struct Rank {
  std::vector<uint8_t> mem;  // in and out live in one buffer when aliased
  size_t in_off = 0, in_bytes = 0, out_off = 0, out_bytes = 0;
  std::vector<uint8_t> scratch;
  std::vector<std::vector<uint8_t>> stage;
  CePlan plan;
};

struct Access {
  int rank, lane;  // issuer; lane -1 = caller stream
  const uint8_t* begin;
  const uint8_t* end;
  bool write;
};

class Sim {
 public:
  explicit Sim(const Shape& s) : s_(s), ranks_(s.n) {
    const int n = s.n;
    const size_t B = s.count * kEs;
    size_t in_elems = s.kind == Collective::kReduceScatter || s.kind == Collective::kAllToAll ? n * s.count : s.count;
    size_t out_elems = s.kind == Collective::kAllGather || s.kind == Collective::kAllToAll ? n * s.count : s.count;
    for (int r = 0; r < n; ++r) {
      Rank& k = ranks_[r];
      k.in_bytes = in_elems * kEs;
      k.out_bytes = out_elems * kEs;
      if (s.alias == Shape::kSame) {
        k.mem.assign(std::max(k.in_bytes, k.out_bytes), 0);
      } else if (s.alias == Shape::kOwnBlock) {
        // all_gather: in = out + r*B; reduce_scatter: out = in + r*B.
        k.mem.assign(std::max(k.in_bytes, k.out_bytes), 0);
        if (s.kind == Collective::kAllGather)
          k.in_off = r * B;
        else
          k.out_off = r * B;
      } else {
        k.mem.assign(k.in_bytes + k.out_bytes, 0);
        k.out_off = k.in_bytes;
      }
      // Poison the output, then write the input (aliased inputs overwrite their part of the poison).
      std::memset(k.mem.data() + k.out_off, 0xa5, k.out_bytes);
      for (size_t i = 0; i < in_elems; ++i) {
        Elem v = value(r, i);
        std::memcpy(k.mem.data() + k.in_off + i * kEs, &v, kEs);
      }
      k.scratch.assign(s.scratch, 0x5a);
      CePlanInput in;
      in.kind = s.kind;
      in.dtype = DataType::kInt32;
      in.op = ReduceOp::kSum;
      in.count = s.count;
      in.root = s.root;
      in.world_size = n;
      in.rank = r;
      in.in_symmetric = s.in_sym;
      in.out_symmetric = s.out_sym;
      in.in_is_out = s.alias == Shape::kSame;
      in.in_overlaps_out = s.alias != Shape::kNone;
      in.in_is_own_block = s.alias == Shape::kOwnBlock;
      in.scratch_bytes = s.scratch;
      in.stage_bytes = s.stage;
      in.lanes = s.lanes;
      in.chunk_bytes = s.chunk;
      k.plan = make_ce_plan(in);
      k.stage.assign(k.plan.lanes, std::vector<uint8_t>(k.plan.stage_bytes_per_lane, 0x3c));
    }
  }

  // Resolves a reference made by rank `me` to memory, checking bounds and symmetry rules.
  uint8_t* resolve(int me, const CeRef& ref, size_t bytes) {
    auto within = [&](size_t off, size_t size) {
      EXPECT_LE(ref.offset + bytes, size) << "out of bounds: space " << static_cast<int>(ref.space) << " rank "
                                          << ref.rank << " offset " << ref.offset << " bytes " << bytes;
      return ref.offset + bytes <= size ? off + ref.offset : SIZE_MAX;
    };
    EXPECT_TRUE(ref.rank >= 0 && ref.rank < (ref.space == CeSpace::kStage ? ranks_[me].plan.lanes : s_.n));
    Rank& k = ranks_[ref.space == CeSpace::kStage ? me : ref.rank];
    const Rank& mine = ranks_[me];
    size_t at = SIZE_MAX;
    // Like peer_ptr(): a peer's in/out is found at the offset of *this* rank's pointer in its own allocation
    // (the symmetric heap maps every rank's allocation at the same offsets); that is the peer's own pointer
    // only when every rank passes pointers at the same offsets.
    switch (ref.space) {
      case CeSpace::kIn:
        EXPECT_TRUE(ref.rank == me || s_.in_sym) << "reads a peer's non-symmetric input";
        at = within(mine.in_off, mine.in_bytes);
        return at == SIZE_MAX ? nullptr : k.mem.data() + at;
      case CeSpace::kOut:
        EXPECT_TRUE(ref.rank == me || s_.out_sym) << "touches a peer's non-symmetric output";
        at = within(mine.out_off, mine.out_bytes);
        return at == SIZE_MAX ? nullptr : k.mem.data() + at;
      case CeSpace::kScratch: at = within(0, k.scratch.size()); return at == SIZE_MAX ? nullptr : k.scratch.data() + at;
      case CeSpace::kStage:
        at = within(0, k.stage[ref.rank].size());
        return at == SIZE_MAX ? nullptr : k.stage[ref.rank].data() + at;
    }
    return nullptr;
  }

  void record(std::vector<Access>& acc, int me, int lane, const CeOp& op) {
    for (int i = 0; i < op.nsrc; ++i) {
      uint8_t* p = resolve(me, op.srcs[i], op.bytes);
      if (p) acc.push_back({me, lane, p, p + op.bytes, false});
    }
    uint8_t* d = resolve(me, op.dst, op.bytes);
    if (d) acc.push_back({me, lane, d, d + op.bytes, true});
    EXPECT_TRUE(op.dst.space != CeSpace::kScratch || op.dst.rank == me) << "writes a peer's scratch";
    EXPECT_TRUE(op.dst.space == CeSpace::kStage || op.dst.rank == me) << "writes a peer's memory";
  }

  static void check_races(std::vector<Access> acc, const char* phase, size_t round) {
    // Sorted by start address, each access only needs comparing with those starting before it ends.
    std::sort(acc.begin(), acc.end(), [](const Access& a, const Access& b) { return a.begin < b.begin; });
    for (size_t i = 0; i < acc.size(); ++i) {
      for (size_t j = i + 1; j < acc.size() && acc[j].begin < acc[i].end; ++j) {
        const Access &a = acc[i], &b = acc[j];
        if (a.rank == b.rank && a.lane == b.lane) continue;  // same stream: ordered
        if (!a.write && !b.write) continue;
        bool overlap = a.begin < b.end && b.begin < a.end;
        EXPECT_FALSE(overlap) << "race in " << phase << " of round " << round << ": rank " << a.rank << " lane "
                              << a.lane << (a.write ? " writes" : " reads") << " bytes that rank " << b.rank << " lane "
                              << b.lane << (b.write ? " writes" : " reads");
      }
    }
  }

  void exec(int me, const CeOp& op) {
    uint8_t* d = resolve(me, op.dst, op.bytes);
    if (!d) return;
    if (op.kind == CeOp::kCopy) {
      const uint8_t* src = resolve(me, op.srcs[0], op.bytes);
      if (src) std::memmove(d, src, op.bytes);
      return;
    }
    std::vector<const void*> srcs;
    for (int i = 0; i < op.nsrc; ++i) srcs.push_back(resolve(me, op.srcs[i], op.bytes));
    host_reduce(DataType::kInt32, ReduceOp::kSum, d, srcs.data(), op.nsrc, op.bytes / kEs);
  }

  void run() {
    const size_t rounds = ranks_[0].plan.rounds.size();
    for (int r = 0; r < s_.n; ++r) {
      ASSERT_EQ(ranks_[r].plan.rounds.size(), rounds) << "ranks run different numbers of barriers";
      ASSERT_EQ(ranks_[r].plan.header, ranks_[0].plan.header) << "headers differ for identical collectives";
    }
    for (size_t k = 0; k < rounds; ++k) {
      std::vector<Access> acc;
      for (int r = 0; r < s_.n; ++r) {
        for (const CeOp& op : ranks_[r].plan.rounds[k].pre) record(acc, r, -1, op);
      }
      check_races(acc, "pre", k);
      for (int r = 0; r < s_.n; ++r) {
        for (const CeOp& op : ranks_[r].plan.rounds[k].pre) exec(r, op);
      }
      acc.clear();
      for (int r = 0; r < s_.n; ++r) {
        const CeRound& rd = ranks_[r].plan.rounds[k];
        for (size_t l = 0; l < rd.lanes.size(); ++l) {
          for (const CeOp& op : rd.lanes[l]) record(acc, r, static_cast<int>(l), op);
        }
      }
      check_races(acc, "lanes", k);
      for (int r = 0; r < s_.n; ++r) {
        for (const auto& lane : ranks_[r].plan.rounds[k].lanes) {
          for (const CeOp& op : lane) exec(r, op);
        }
      }
    }
  }

  Elem expected(int r, size_t i) const {
    const size_t c = s_.count;
    switch (s_.kind) {
      case Collective::kAllGather: return value(static_cast<int>(i / c), i % c);
      case Collective::kAllToAll: return value(static_cast<int>(i / c), r * c + i % c);
      case Collective::kBroadcast: return value(s_.root, i);
      case Collective::kReduceScatter: {
        uint32_t sum = 0;  // wraps like the int32 reduction
        for (int q = 0; q < s_.n; ++q) sum += static_cast<uint32_t>(value(q, r * c + i));
        return static_cast<Elem>(sum);
      }
      default: return 0;
    }
  }

  void verify() {
    for (int r = 0; r < s_.n; ++r) {
      const Rank& k = ranks_[r];
      size_t wrong = 0;
      for (size_t i = 0; i < k.out_bytes / kEs; ++i) {
        Elem got;
        std::memcpy(&got, k.mem.data() + k.out_off + i * kEs, kEs);
        if (got != expected(r, i) && wrong++ < 3) {
          ADD_FAILURE() << "rank " << r << " element " << i << ": got " << got << ", want " << expected(r, i);
        }
      }
      EXPECT_EQ(wrong, 0u) << "rank " << r;
    }
  }

  const Rank& rank(int r) const { return ranks_[r]; }

 private:
  Shape s_;
  std::vector<Rank> ranks_;
};

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  const Collective kinds[] = {Collective::kAllGather, Collective::kAllToAll, Collective::kBroadcast,
                              Collective::kReduceScatter};
  for (Collective kind : kinds) {
    for (int n : {1, 2, 3, 4, 8}) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{333}, size_t{4099}}) {
        for (int sym = 0; sym < 4; ++sym) {
          for (int alias = 0; alias < 3; ++alias) {
            if (alias == Shape::kOwnBlock && kind != Collective::kAllGather && kind != Collective::kReduceScatter) {
              continue;
            }
            if (alias == Shape::kSame && kind != Collective::kAllToAll && kind != Collective::kBroadcast) continue;
            for (int lanes : {1, 2, 3}) {
              // Aliased buffers are symmetric together or not at all.
              const bool in_sym = sym & 1, out_sym = alias != Shape::kNone ? in_sym : (sym & 2) != 0;
              // A small scratch and stage force many rounds and chunks.
              out.push_back(Shape{kind, n, count, in_sym, out_sym, static_cast<Shape::Alias>(alias),
                                  static_cast<int>(count % n), 64 * 8, 32 * 7 * 3, lanes, 32});
            }
          }
        }
      }
    }
  }
  return out;
}

TEST(CePlan, EveryShapeIsRaceFreeInBoundsAndCorrect) {
  size_t tested = 0;
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(describe(s));
    Sim sim(s);
    sim.run();
    sim.verify();
    ++tested;
    if (::testing::Test::HasFailure()) break;  // one clear failure beats thousands
  }
  EXPECT_GT(tested, 1000u);
}

TEST(CePlan, ZeroCopyPathsUseOneRoundAndStagedPathsRounds) {
  Shape s{Collective::kAllGather, 2, 4096, true, true, Shape::kNone, 0, 1024, 4096, 2, 512};
  EXPECT_EQ(Sim(s).rank(0).plan.rounds.size(), 1u);
  s.in_sym = s.out_sym = false;
  EXPECT_EQ(Sim(s).rank(0).plan.rounds.size(), 4096 * kEs / 1024);
  // Reduce-scatter alternates its lanes chunk by chunk, each chunk a copy per peer then one reduction.
  Shape rs{Collective::kReduceScatter, 2, 1024, true, false, Shape::kNone, 0, 1024, 4096, 2, 1024};
  Sim sim(rs);
  const CePlan& p = sim.rank(1).plan;
  ASSERT_EQ(p.rounds.size(), 1u);
  ASSERT_EQ(p.rounds[0].lanes.size(), 2u);
  EXPECT_EQ(p.rounds[0].lanes[0].size(), 4u);  // chunks 0 and 2: copy + reduce each
  EXPECT_EQ(p.rounds[0].lanes[1].size(), 4u);
  EXPECT_EQ(p.rounds[0].lanes[1][1].kind, CeOp::kReduce);
}

/// A staged all-gather of 100 elements at 2 ranks with 1 MiB of scratch and stage: the header tests' base case.
CePlanInput small_gather() {
  CePlanInput a;
  a.kind = Collective::kAllGather;
  a.count = 100;
  a.world_size = 2;
  a.scratch_bytes = 1 << 20;
  a.stage_bytes = 1 << 20;
  return a;
}

TEST(CePlan, HeaderDependsOnTheArguments) {
  CePlanInput a = small_gather();
  CePlanInput b = a;
  b.count = 101;
  CePlanInput c = a;
  c.out_symmetric = true;  // zero-copy vs staged: different protocols must not meet
  EXPECT_NE(make_ce_plan(a).header, make_ce_plan(b).header);
  EXPECT_NE(make_ce_plan(a).header, make_ce_plan(c).header);
  EXPECT_NE(make_ce_plan(a).header, 0u);
  // Eager instances of equal calls differ from each other and from a captured one (NOTE [copy-engine op
  // instance]); equal instances agree.
  CePlanInput e1 = a, e2 = a;
  e1.instance = 1;
  e2.instance = 2;
  EXPECT_NE(make_ce_plan(e1).header, make_ce_plan(e2).header);
  EXPECT_NE(make_ce_plan(e1).header, make_ce_plan(a).header);
  EXPECT_EQ(make_ce_plan(e1).header, make_ce_plan(CePlanInput(e1)).header);
}

// The heap places of the buffers the plan reaches on peers are in the header, the others are not (NOTE [heap
// keys]): ranks that pass different heap buffers where peers read them must not meet; where peers never read
// a buffer, its place may differ.
TEST(CePlan, HeaderHoldsThePlacesPeersReach) {
  CePlanInput a = small_gather();
  a.out_symmetric = true;  // zero-copy all-gather: pulls from the peers' outputs
  a.in_is_own_block = true;
  a.in_symmetric = true;
  a.in_place = 11;
  a.out_place = 21;
  CePlanInput other_out = a, other_in = a;
  other_out.out_place = 22;
  other_in.in_place = 12;
  EXPECT_NE(make_ce_plan(a).header, make_ce_plan(other_out).header);
  EXPECT_EQ(make_ce_plan(a).header, make_ce_plan(other_in).header);  // the own block is read from the outputs
  // Reduce-scatter with a symmetric input pulls chunks of the peers' inputs; its output is only written locally.
  CePlanInput rs = a;
  rs.kind = Collective::kReduceScatter;
  rs.in_is_own_block = false;
  rs.out_symmetric = false;
  rs.out_place = 0;
  CePlanInput rs_in = rs, rs_out = rs;
  rs_in.in_place = 13;
  rs_out.out_symmetric = true;
  rs_out.out_place = 23;
  EXPECT_NE(make_ce_plan(rs).header, make_ce_plan(rs_in).header);
  const CePlan with_out = make_ce_plan(rs_out);
  CePlanInput rs_out2 = rs_out;
  rs_out2.out_place = 24;
  EXPECT_EQ(with_out.header, make_ce_plan(rs_out2).header);
  // A zero-copy broadcast: the root reads nothing of its peers, they read its output; root and non-root
  // still agree on the header, and a different output place on either side changes it.
  CePlanInput root = a, leaf = a;
  root.kind = leaf.kind = Collective::kBroadcast;
  root.in_is_own_block = leaf.in_is_own_block = false;
  root.root = leaf.root = 0;
  root.rank = 0;
  leaf.rank = 1;
  leaf.in_symmetric = false;  // a non-root's input is not read
  leaf.in_place = 0;
  EXPECT_EQ(make_ce_plan(root).header, make_ce_plan(leaf).header);
  CePlanInput leaf_elsewhere = leaf;
  leaf_elsewhere.out_place = 99;
  EXPECT_NE(make_ce_plan(root).header, make_ce_plan(leaf_elsewhere).header);
}

// The watchdog's reading of a stuck op's barrier slots (rank 0 of 4, op header 77; NOTE [copy-engine stall]).
TEST(CePlan, StallClassificationNamesThePeer) {
  constexpr uint32_t h = 77;
  struct Row {
    const char* what;
    uint32_t arrive[4], depart[4], gave_up[4];
    CeStall::Kind kind;
    int peer;
  };
  // gave_up[p]: the header of the op on which peer p gave up (77: this one; a fellow waiter).
  const Row rows[] = {
      {"peer 2 never arrived", {0, h, 0, h}, {}, {}, CeStall::kMissing, 2},
      {"peer 3 runs another op", {0, h, h, 91}, {}, {}, CeStall::kMismatch, 3},
      {"another op's header in a depart slot", {0, h, 0, h}, {0, 0, 91, 0}, {}, CeStall::kMismatch, 2},
      {"a missing peer wins over a fellow that went on",
       {0, 0, h, 91},
       {0, 0, 0, 91},
       {0, 0, 0, h},
       CeStall::kMissing,
       1},
      {"a missing peer wins over another op's header", {0, 0, 0, 91}, {}, {}, CeStall::kMissing, 1},
      {"a peer in another op wins over a fellow that went on",
       {0, 91, 92, h},
       {0, 91, 0, 0},
       {0, h, 0, 0},
       CeStall::kMismatch,
       2},
      {"one that gave up on another op wins over a fellow that went on",
       {0, 91, 92, h},
       {0, 91, 92, 0},
       {0, h, 92, 0},
       CeStall::kMismatch,
       2},
      {"a fellow that went on is named when no one else is",
       {0, 91, h, h},
       {0, 91, 0, 0},
       {0, h, 0, 0},
       CeStall::kMismatch,
       1},
      {"a fellow that gave up without a trace is missing", {0, 0, h, h}, {}, {0, h, 0, 0}, CeStall::kMissing, 1},
      {"one that left this op (depart slot 77) is a fellow before its gave-up word lands",
       {0, 91, 92, h},
       {0, h, 0, 0},
       {},
       CeStall::kMismatch,
       2},
      {"stuck in the depart barrier, peer 2 went on", {0, 0, 91, 0}, {0, h, h, 0}, {0, 0, h, 0}, CeStall::kMissing, 3},
      {"everyone arrived", {0, h, h, h}, {}, {}, CeStall::kUnknown, -1},
      {"this rank's own slots are ignored", {91, h, h, h}, {91, 0, 0, 0}, {h, 0, 0, 0}, CeStall::kUnknown, -1},
      {"stuck in the depart barrier, peer 1 gone", {0, 0, 0, 0}, {0, 0, h, h}, {}, CeStall::kMissing, 1},
  };
  for (const Row& r : rows) {
    const CeStall s = classify_ce_stall(r.arrive, r.depart, r.gave_up, 4, 0, h);
    EXPECT_EQ(s.kind, r.kind) << r.what;
    EXPECT_EQ(s.peer, r.peer) << r.what;
  }
}

// NOTE [copy-engine early mismatch]: only slots that prove a peer runs another op name it before the deadline;
// every state a matched peer can leave while the op is in flight names no one.
TEST(CePlan, EarlyMismatchOnlyOnProof) {
  constexpr uint32_t h = 77;
  struct Row {
    const char* what;
    uint32_t arrive[4], depart[4], gave_up[4];
    int peer;  ///< -1: no one
  };
  const Row rows[] = {
      // What matched peers leave while this op is in flight.
      {"no one has arrived", {}, {}, {}, -1},
      {"everyone arrived", {0, h, h, h}, {}, {}, -1},
      {"peers departed, this rank still waits for one", {0, 0, 0, 0}, {0, h, h, 0}, {}, -1},
      {"a peer left this op and arrived in its next", {0, 91, 0, 0}, {0, h, 0, 0}, {}, -1},
      {"a fellow waiter gave up on this op and went on", {0, 91, 0, 0}, {}, {0, h, 0, 0}, -1},
      {"a fellow waiter gave up on this op without a trace", {}, {}, {0, h, 0, 0}, -1},
      {"this rank's own slots are ignored", {91, 0, 0, 0}, {92, 0, 0, 0}, {93, 0, 0, 0}, -1},
      // Proof.
      {"peer 2 arrived in another op", {0, h, 91, 0}, {}, {}, 2},
      {"peer 3 departed another op", {0, 0, 0, 0}, {0, 0, 0, 91}, {}, 3},
      {"peer 1 gave up on another op and left no trace", {}, {}, {0, 91, 0, 0}, 1},
      {"peer 1 gave up on another op and went on", {0, 92, 0, 0}, {}, {0, 91, 0, 0}, 1},
      {"the first proven peer is named", {0, 0, 91, 92}, {}, {}, 2},
      {"a missing peer does not hide a proven one", {0, 0, h, 91}, {}, {}, 3},
      // Not proof: this op's header in either slot.
      {"another header in the depart slot after arriving here", {0, h, 0, 0}, {0, 91, 0, 0}, {}, -1},
  };
  for (const Row& r : rows) {
    const CeStall s = definite_ce_mismatch(r.arrive, r.depart, r.gave_up, 4, 0, h);
    EXPECT_EQ(s.peer, r.peer) << r.what;
    EXPECT_EQ(s.kind, r.peer >= 0 ? CeStall::kMismatch : CeStall::kUnknown) << r.what;
  }
}

// NOTE [copy-engine late peer]: a peer that gave up on this very op is named before the deadline only when no
// peer is missing from the op; otherwise the fellow waiters wait for their deadline and name the missing one.
TEST(CePlan, AbandonedOpNamesThePeerThatGaveUpOnlyWhenNoOneIsMissing) {
  constexpr uint32_t h = 77;
  struct Row {
    const char* what;
    uint32_t arrive[4], depart[4], gave_up[4];
    int peer;  ///< -1: no one
  };
  const Row rows[] = {
      {"no one gave up", {0, h, h, h}, {}, {}, -1},
      {"a late rank: every peer departed, peer 2 gave up on this op", {0, 0, 0, 0}, {0, h, h, h}, {0, 0, h, 0}, 2},
      {"a late rank whose peer 1 gave up and went on", {0, 91, 0, 0}, {0, h, h, h}, {0, h, 0, 0}, 1},
      {"peer 3 arrived, peer 1 gave up with no trace", {0, 0, h, h}, {}, {0, h, 0, 0}, 1},
      {"the first peer that gave up is named", {0, h, h, h}, {}, {0, 0, h, h}, 2},
      {"a missing peer leaves it to the deadline", {0, h, 0, h}, {}, {0, h, 0, 0}, -1},
      {"a fellow waiter gave up on this op, peers 2 and 3 missing", {0, 91, 0, 0}, {}, {0, h, 0, 0}, -1},
      {"a peer that gave up on another op is not this op's quitter", {0, h, h, h}, {}, {0, 91, 0, 0}, -1},
      {"this rank's own words are ignored", {91, h, h, h}, {0, 0, 0, 0}, {h, 0, 0, 0}, -1},
  };
  for (const Row& r : rows) {
    const CeStall s = abandoned_ce_op(r.arrive, r.depart, r.gave_up, 4, 0, h);
    EXPECT_EQ(s.peer, r.peer) << r.what;
    EXPECT_EQ(s.kind, r.peer >= 0 ? CeStall::kAbandoned : CeStall::kUnknown) << r.what;
  }
}

TEST(CePlan, RejectsWhatItCannotRun) {
  CePlanInput in;
  in.world_size = 2;
  in.count = 10;
  in.scratch_bytes = 1 << 20;
  in.stage_bytes = 1 << 20;
  in.kind = Collective::kAllReduce;
  EXPECT_THROW(make_ce_plan(in), Error);
  in.kind = Collective::kAllToAll;
  in.in_overlaps_out = true;  // partial overlap
  EXPECT_THROW(make_ce_plan(in), Error);
  in.in_overlaps_out = false;
  in.scratch_bytes = 8;  // cannot hold a 16-byte slot per rank
  EXPECT_THROW(make_ce_plan(in), Error);
  in.kind = Collective::kReduceScatter;
  in.scratch_bytes = 1 << 20;
  in.stage_bytes = 0;
  EXPECT_THROW(make_ce_plan(in), Error);
  in.rank = 2;
  EXPECT_THROW(make_ce_plan(in), Error);
}

}  // namespace
}  // namespace symcomm::detail
