// The CUDA scheduled kernel's plans (src/algos/schedule_plan.h, NOTE [scheduled kernel plan]), run for every rank on
// contribution counts exactly as the kernel runs them: in each step every rank pushes into the receivers' inbox
// slots, then every rank applies its own inbox. The simulation checks what the kernel relies on: pushes go to
// neighbours over existing links, no slot is written twice in a step or read unwritten or for another chunk, every
// pushed slot is applied, neighbours are mutual, every rank cuts its inbox alike; and the results: every rank's
// every chunk of an all-reduce holds each contribution once and was computed by one rank (so the ranks' bits are
// identical), the all-gather hands every block to every rank, the reduce-scatter completes each rank's block.
// Also the agreement of the detected links (agree_topology).

#include "algos/schedule_plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "algos/topology.h"
#include "symcomm/error.h"

namespace symcomm::detail {
namespace {

/// A chunk's value in the simulation: how often each rank's contribution is in it, and which rank's reduce made
/// it (-1: still a rank's own input). An empty count vector is a chunk the rank does not hold.
struct Value {
  std::vector<int> counts;
  int made_by = -1;
  uint64_t serial = 0;  ///< distinct for every reduce anywhere: equal serials are the same computation
};

struct Slot {
  bool written = false;
  int chunk = -1;
  Value v;
};

/// Runs every rank's plan of `s` on `t`; returns "" or the first problem. `kind` picks the initial state and the
/// final check.
std::string simulate(const Schedule& s, const Topology& t, Collective kind) {
  const int n = t.world_size();
  std::vector<SchedulePlan> plans;
  for (int r = 0; r < n; ++r) plans.push_back(make_schedule_plan(s, n, r));
  for (int r = 0; r < n; ++r) {
    if (plans[r].slots != plans[0].slots)
      return fmt::format("rank {} cuts {} slots, rank 0 {}", r, plans[r].slots, plans[0].slots);
    if (static_cast<size_t>(plans[r].steps) != s.steps.size() || plans[r].chunks != s.chunks)
      return fmt::format("rank {}: shape", r);
    for (int q = 0; q < n; ++q) {
      const unsigned rq = (static_cast<unsigned>(plans[r].neighbors) >> q) & 1u;
      const unsigned qr = (static_cast<unsigned>(plans[q].neighbors) >> r) & 1u;
      if (rq != qr) return fmt::format("ranks {} and {} disagree on being neighbours", r, q);
      if (rq && !t.linked(r, q)) return fmt::format("ranks {} and {} are neighbours without a link", r, q);
    }
  }
  std::vector<std::vector<Value>> state(n, std::vector<Value>(s.chunks));
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < s.chunks; ++c) {
      if (kind == Collective::kAllGather && c != r) continue;
      state[r][c].counts.assign(n, 0);
      state[r][c].counts[r] = 1;
    }
  }
  uint64_t serial = 1;
  for (int k = 0; k < static_cast<int>(s.steps.size()); ++k) {
    std::vector<std::vector<Slot>> inbox(n, std::vector<Slot>(plans[0].slots));
    for (int r = 0; r < n; ++r) {
      const SchedulePlan& p = plans[r];
      for (int i = p.push_begin[k]; i < p.push_begin[k + 1]; ++i) {
        const PlanPush& x = p.push[i];
        if (!((p.neighbors >> x.dst) & 1))
          return fmt::format("step {}: rank {} pushes to non-neighbour {}", k, r, x.dst);
        if (x.slot >= p.slots) return fmt::format("step {}: rank {} pushes into slot {} of {}", k, r, x.slot, p.slots);
        Slot& sl = inbox[x.dst][x.slot];
        if (sl.written) return fmt::format("step {}: slot {} of rank {} written twice", k, x.slot, x.dst);
        if (state[r][x.chunk].counts.empty())
          return fmt::format("step {}: rank {} pushes chunk {} it lacks", k, r, x.chunk);
        sl = Slot{true, x.chunk, state[r][x.chunk]};  // the chunk as the step begins: nobody applied yet
      }
    }
    for (int r = 0; r < n; ++r) {
      const SchedulePlan& p = plans[r];
      for (int i = p.apply_begin[k]; i < p.apply_begin[k + 1]; ++i) {
        const PlanApply& a = p.apply[i];
        if (a.nslots < 1 || a.first_slot + a.nslots > p.slots || (a.copy && a.nslots != 1)) {
          return fmt::format("step {}: rank {}: apply of slots {}+{}", k, r, a.first_slot, a.nslots);
        }
        Value v = a.copy ? Value{} : state[r][a.chunk];
        if (!a.copy && v.counts.empty())
          return fmt::format("step {}: rank {} reduces into chunk {} it lacks", k, r, a.chunk);
        for (int q = a.first_slot; q < a.first_slot + a.nslots; ++q) {
          Slot& sl = inbox[r][q];
          if (!sl.written || sl.chunk != a.chunk) {
            return fmt::format("step {}: rank {} reads slot {} for chunk {} (holds {})", k, r, q, a.chunk, sl.chunk);
          }
          if (a.copy) {
            v = sl.v;
          } else {
            for (int x = 0; x < n; ++x) v.counts[x] += sl.v.counts[x];
          }
          sl.written = false;  // consumed
        }
        if (!a.copy) {
          v.made_by = r;
          v.serial = serial++;
        }
        state[r][a.chunk] = v;
      }
    }
    for (int r = 0; r < n; ++r) {
      for (int q = 0; q < plans[0].slots; ++q) {
        if (inbox[r][q].written) return fmt::format("step {}: slot {} of rank {} pushed, never applied", k, q, r);
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < s.chunks; ++c) {
      const Value& v = state[r][c];
      const bool needed = kind != Collective::kReduceScatter || c == r;
      if (!needed) continue;
      if (v.counts.size() != static_cast<size_t>(n)) return fmt::format("rank {} ends without chunk {}", r, c);
      for (int x = 0; x < n; ++x) {
        const int want = kind == Collective::kAllGather ? (x == c ? 1 : 0) : 1;
        if (v.counts[x] != want)
          return fmt::format("rank {} chunk {}: contribution of {} {} times", r, c, x, v.counts[x]);
      }
      if (kind == Collective::kAllReduce && v.serial != state[0][c].serial) {
        return fmt::format("chunk {}: rank {} and rank 0 hold totals of different computations", c, r);
      }
    }
  }
  return "";
}

Topology with(Topology t, int a, int b) {
  t.set(a, b, {LinkKind::kNvlink, 1});
  return t;
}

TEST(SchedulePlan, EveryRanksPlanRunsEachScheduleExactly) {
  const std::vector<std::pair<std::string, Topology>> layouts = {
      {"hybrid cube mesh", Topology::hybrid_cube_mesh()},
      {"hybrid cube mesh renamed", Topology::hybrid_cube_mesh().among({3, 6, 0, 5, 7, 1, 4, 2})},
      {"ring of 3", Topology::ring(3)},
      {"ring of 4", Topology::ring(4)},
      {"ring of 5, pcie", Topology::ring(5, LinkKind::kPcie)},
      {"ring of 8", Topology::ring(8)},
      {"ring of 6 with a chord", with(Topology::ring(6), 0, 3)},
      {"full 3", Topology::full(3)},
      {"full 8", Topology::full(8)},
  };
  for (const auto& [name, t] : layouts) {
    const auto ar = all_reduce_schedule(t);
    ASSERT_TRUE(ar.has_value()) << name;
    EXPECT_EQ(simulate(*ar, t, Collective::kAllReduce), "") << name << ": all-reduce";
    for (Collective kind : {Collective::kAllGather, Collective::kReduceScatter}) {
      const auto g = gather_schedule(t, kind);
      ASSERT_TRUE(g.has_value()) << name;
      EXPECT_EQ(simulate(*g, t, kind), "") << name << ": " << to_string(kind);
    }
  }
  // The slots the kernel cuts its inbox into: the most a rank receives in one step.
  EXPECT_EQ(make_schedule_plan(*all_reduce_schedule(Topology::hybrid_cube_mesh()), 8, 0).slots, 6);
  EXPECT_EQ(make_schedule_plan(*all_reduce_schedule(Topology::ring(8)), 8, 5).slots, 1);
  EXPECT_EQ(make_schedule_plan(*gather_schedule(Topology::full(8), Collective::kReduceScatter), 8, 2).slots, 7);
  const SchedulePlan ring = make_schedule_plan(*all_reduce_schedule(Topology::ring(8)), 8, 0);
  EXPECT_EQ(ring.neighbors, (1u << 1) | (1u << 7));
  EXPECT_EQ(ring.steps, 14);
}

// Random topologies of 3-8 ranks: every schedule that exists runs exactly from every rank's plan.
TEST(SchedulePlan, RandomTopologiesRunExactly) {
  std::mt19937 rng(20261201);
  int ran = 0;
  for (int i = 0; i < 300; ++i) {
    const int n = 3 + static_cast<int>(rng() % 6);
    Topology t(n);
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        if (rng() % 3 != 0)
          t.set(a, b, {rng() % 2 ? LinkKind::kNvlink : LinkKind::kPcie, 1 + static_cast<int>(rng() % 4)});
      }
    }
    if (const auto ar = all_reduce_schedule(t)) {
      ++ran;
      EXPECT_EQ(simulate(*ar, t, Collective::kAllReduce), "") << t.to_json();
    }
    for (Collective kind : {Collective::kAllGather, Collective::kReduceScatter}) {
      if (const auto g = gather_schedule(t, kind)) EXPECT_EQ(simulate(*g, t, kind), "") << t.to_json();
    }
  }
  EXPECT_GT(ran, 100);
}

// The simulation fails a plan that breaks the kernel's rules: the checks can fail.
TEST(SchedulePlan, TheSimulationCatchesBrokenSchedules) {
  const Topology t = Topology::ring(4);
  Schedule s = *all_reduce_schedule(t);
  std::swap(s.steps[0], s.steps[1]);  // reduces out of order: a chunk gets a contribution twice
  EXPECT_NE(simulate(s, t, Collective::kAllReduce), "");
  Schedule last = *all_reduce_schedule(t);
  last.steps.pop_back();  // a rank misses one chunk's total
  EXPECT_NE(simulate(last, t, Collective::kAllReduce), "");
  Schedule chord = *gather_schedule(t, Collective::kAllGather);
  chord.steps[0].transfers.push_back({0, 2, 0, Move::kCopy});  // over a link the ring lacks
  EXPECT_NE(simulate(chord, t, Collective::kAllGather), "");
}

TEST(SchedulePlan, SchedulesTheKernelCannotRunAreRefused) {
  auto code = [](const Schedule& s, int n) -> std::optional<ErrorCode> {
    try {
      (void)make_schedule_plan(s, n, 0);
    } catch (const Error& e) {
      return e.code();
    }
    return std::nullopt;
  };
  Schedule both{.kind = ScheduleKind::kDirect, .chunks = 2, .steps = {}};
  both.steps.push_back({.transfers = {{1, 0, 0, Move::kCopy}, {2, 0, 0, Move::kReduce}}, .link_chunks = 1});
  EXPECT_EQ(code(both, 3), ErrorCode::kInternal);
  Schedule self{.kind = ScheduleKind::kDirect, .chunks = 2, .steps = {}};
  self.steps.push_back({.transfers = {{1, 1, 0, Move::kCopy}}, .link_chunks = 1});
  EXPECT_EQ(code(self, 3), ErrorCode::kInternal);
  Schedule outside{.kind = ScheduleKind::kDirect, .chunks = 2, .steps = {}};
  outside.steps.push_back({.transfers = {{1, 0, 2, Move::kCopy}}, .link_chunks = 1});
  EXPECT_EQ(code(outside, 3), ErrorCode::kInternal);
  Schedule long_one = *all_reduce_schedule(Topology::ring(8));
  long_one.steps.insert(long_one.steps.end(), long_one.steps.begin(), long_one.steps.begin() + 3);
  EXPECT_EQ(code(long_one, 8), ErrorCode::kInternal);
  EXPECT_EQ(code(*all_reduce_schedule(Topology::ring(4)), 9), ErrorCode::kInternal);
}

// NOTE: agree_topology() in src/algos/topology.h.
TEST(AgreeTopology, BothEndsDecideEachPair) {
  using P2p = LinkSighting::P2p;
  const LinkSighting nv4{.nvlinks = 4, .p2p = P2p::kYes}, nv2_hidden{.nvlinks = 2, .p2p = P2p::kUnknown},
      none{.nvlinks = 0, .p2p = P2p::kYes}, hidden{.nvlinks = 0, .p2p = P2p::kUnknown},
      refused{.nvlinks = 0, .p2p = P2p::kNo}, nv_refused{.nvlinks = 18, .p2p = P2p::kNo};
  // rows[r][p]: rank r's sighting of rank p (diagonal ignored).
  const std::vector<std::vector<LinkSighting>> rows = {
      {hidden, nv4, nv4, refused, hidden}, {nv2_hidden, hidden, none, hidden, nv_refused},
      {nv4, none, hidden, hidden, hidden}, {nv4, hidden, hidden, hidden, nv4},
      {hidden, nv4, hidden, nv4, hidden},
  };
  const Topology t = agree_topology(rows, true);
  EXPECT_EQ(t.at(0, 1).kind, LinkKind::kNvlink);
  EXPECT_EQ(t.at(0, 1).count, 2);  // the smaller end
  EXPECT_EQ(t.at(0, 2).kind, LinkKind::kNvlink);
  EXPECT_EQ(t.at(0, 2).count, 4);
  EXPECT_EQ(t.at(0, 3).kind, LinkKind::kNone);  // rank 0 sees P2P refused
  EXPECT_EQ(t.at(0, 4).kind, LinkKind::kPcie);  // neither sees the other's GPU; reachable
  EXPECT_EQ(t.at(1, 2).kind, LinkKind::kPcie);
  EXPECT_EQ(t.at(1, 4).kind, LinkKind::kNone);  // NVLink on one end, refused P2P on it
  EXPECT_EQ(t.at(3, 4).kind, LinkKind::kNvlink);
  EXPECT_EQ(t.at(2, 3).kind, LinkKind::kPcie);
  EXPECT_FALSE(t.full_mesh());
  EXPECT_FALSE(t.full_mesh(LinkKind::kNvlink));
  EXPECT_EQ(agree_topology(rows, true).fingerprint(), t.fingerprint());  // pure
  const Topology unreachable = agree_topology(rows, false);
  for (int a = 0; a < 5; ++a) {
    for (int b = 0; b < 5; ++b) EXPECT_FALSE(unreachable.linked(a, b)) << a << "-" << b;
  }
  const std::vector<std::vector<LinkSighting>> nvl(4, std::vector<LinkSighting>(4, nv4));
  EXPECT_TRUE(agree_topology(nvl, true).full_mesh(LinkKind::kNvlink));
  EXPECT_TRUE(agree_topology({{hidden}}, false).full_mesh(LinkKind::kNvlink));  // one rank: nothing to link
  try {
    (void)agree_topology({{hidden, nv4}, {nv4}}, true);
    ADD_FAILURE() << "a short row was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
  }
}

}  // namespace
}  // namespace symcomm::detail
