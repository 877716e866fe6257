// Topology descriptions (src/algos/topology.h) and the all-reduce schedules built on them (src/algos/schedule.h).
// Every schedule is run on contribution counts: rank r starts with one contribution of its own in every chunk;
// a reduce adds the sender's counts, a copy replaces them (NOTE [schedule semantics]). At the end every chunk of
// every rank must hold each rank's contribution exactly once, every transfer must use a link that exists, and no
// link direction may carry more chunks in a step than the step claims.

#include "algos/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "algos/schedule.h"
#include "symcomm/error.h"

namespace symcomm::detail {
namespace {

/// Why the schedule of collective `kind` is wrong on `t`, or empty. All-reduce and reduce-scatter: rank r starts
/// with its contribution in every chunk; all-gather: in chunk r only (NOTE [gather schedules]).
std::string run_schedule(const Schedule& s, const Topology& t, Collective kind = Collective::kAllReduce) {
  const int n = t.world_size();
  // counts[r][c][k]: how often rank k's contribution is in chunk c of rank r.
  std::vector<std::vector<std::vector<int>>> counts(n, std::vector<std::vector<int>>(s.chunks, std::vector<int>(n, 0)));
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < s.chunks; ++c) {
      if (kind != Collective::kAllGather || c == r) counts[r][c][r] = 1;
    }
  }
  for (size_t k = 0; k < s.steps.size(); ++k) {
    const ScheduleStep& st = s.steps[k];
    const auto before = counts;
    std::map<std::pair<int, int>, int> load;
    std::map<std::pair<int, int>, std::pair<int, int>> into;  // (dst, chunk) -> (reduces, copies)
    for (const Transfer& x : st.transfers) {
      const std::string where = "step " + std::to_string(k) + ", " + std::to_string(x.src) + " -> " +
                                std::to_string(x.dst) + " chunk " + std::to_string(x.chunk);
      if (x.src < 0 || x.src >= n || x.dst < 0 || x.dst >= n || x.chunk < 0 || x.chunk >= s.chunks)
        return where + ": out of range";
      if (!t.linked(x.src, x.dst)) return where + ": no link";
      ++load[{x.src, x.dst}];
      auto& [reduces, copies] = into[{x.dst, x.chunk}];
      if (x.move == Move::kReduce) {
        ++reduces;
        for (int r = 0; r < n; ++r) counts[x.dst][x.chunk][r] += before[x.src][x.chunk][r];
      } else {
        ++copies;
        counts[x.dst][x.chunk] = before[x.src][x.chunk];
      }
      if (copies > 1 || (copies == 1 && reduces > 0)) return where + ": a copy meets another transfer";
    }
    for (const auto& [dir, chunks] : load) {
      if (chunks > st.link_chunks)
        return "step " + std::to_string(k) + ": link " + std::to_string(dir.first) + " -> " +
               std::to_string(dir.second) + " carries " + std::to_string(chunks) + " chunks, the step claims " +
               std::to_string(st.link_chunks);
    }
  }
  if (kind != Collective::kAllReduce && s.chunks != n) return "a gather schedule needs one chunk per rank";
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < s.chunks; ++c) {
      if (kind == Collective::kReduceScatter && c != r) continue;  // only rank c's chunk c is its output
      for (int k = 0; k < n; ++k) {
        const int want = kind == Collective::kAllGather ? (k == c ? 1 : 0) : 1;
        if (counts[r][c][k] != want)
          return "rank " + std::to_string(r) + " chunk " + std::to_string(c) + " holds rank " + std::to_string(k) +
                 "'s contribution " + std::to_string(counts[r][c][k]) + " times";
      }
    }
  }
  return {};
}

Topology with(Topology t, int a, int b, LinkKind kind = LinkKind::kNvlink) {
  t.set(a, b, {kind, 1});
  return t;
}

Topology pairs(int n) {
  Topology t(n);
  for (int a = 0; a + 1 < n; a += 2) t.set(a, a + 1, {LinkKind::kNvlink, 2});
  return t;
}

Topology path(int n) {
  Topology t(n);
  for (int a = 0; a + 1 < n; ++a) t.set(a, a + 1, {LinkKind::kNvlink, 1});
  return t;
}

struct Row {
  std::string name;
  Topology topology;
  std::optional<ScheduleKind> want;  ///< nothing: no schedule
  size_t steps = 0;
};

TEST(Schedule, EachTopologyGetsItsScheduleAndItIsExact) {
  Topology cube_less_one_link(8);  // the hybrid cube mesh without the link 0-1: no longer two cliques
  {
    const Topology cube = Topology::hybrid_cube_mesh();
    for (int a = 0; a < 8; ++a) {
      for (int b = a + 1; b < 8; ++b) {
        if (cube.linked(a, b) && !(a == 0 && b == 1)) cube_less_one_link.set(a, b, cube.at(a, b));
      }
    }
  }
  const std::vector<Row> rows = {
      {"one rank", Topology(1), ScheduleKind::kDirect, 0},
      {"two ranks linked", Topology::full(2), ScheduleKind::kDirect, 2},
      {"four, all NVLink", Topology::full(4), ScheduleKind::kDirect, 2},
      {"eight, all PCIe", Topology::full(8, LinkKind::kPcie), ScheduleKind::kDirect, 2},
      {"hybrid cube mesh", Topology::hybrid_cube_mesh(), ScheduleKind::kHybridCubeMesh, 4},
      {"hybrid cube mesh, ranks renamed", Topology::hybrid_cube_mesh().among({3, 6, 0, 5, 7, 1, 4, 2}),
       ScheduleKind::kHybridCubeMesh, 4},
      {"hybrid cube mesh less one link", cube_less_one_link, ScheduleKind::kRing, 14},
      {"ring of three", Topology::ring(3), ScheduleKind::kDirect, 2},  // a triangle is a full mesh
      {"ring of four", Topology::ring(4), ScheduleKind::kRing, 6},
      {"ring of eight over PCIe", Topology::ring(8, LinkKind::kPcie), ScheduleKind::kRing, 14},
      {"ring of eight, ranks renamed", Topology::ring(8).among({5, 2, 7, 0, 3, 6, 1, 4}), ScheduleKind::kRing, 14},
      {"ring of four and a chord", with(Topology::ring(4), 0, 2), ScheduleKind::kRing, 6},
      {"ring of six, NVLink and PCIe", with(with(path(6), 5, 0, LinkKind::kPcie), 1, 4), ScheduleKind::kRing, 10},
      {"two ranks, no link", Topology(2), std::nullopt},
      {"four, pairs only", pairs(4), std::nullopt},
      {"eight, pairs only", pairs(8), std::nullopt},
      {"four in a line", path(4), std::nullopt},
      {"four, nothing", Topology(4), std::nullopt},
  };
  for (const Row& row : rows) {
    const std::optional<Schedule> s = all_reduce_schedule(row.topology);
    ASSERT_EQ(s.has_value(), row.want.has_value()) << row.name;
    if (!s) continue;
    EXPECT_EQ(to_string(s->kind), to_string(*row.want)) << row.name;
    EXPECT_EQ(s->steps.size(), row.steps) << row.name;
    EXPECT_EQ(run_schedule(*s, row.topology), "") << row.name;
  }
}

// Reduce-scatter and all-gather schedules: direct where every pair is linked (one step), a ring wherever a cycle
// through every rank exists (N - 1 steps), none elsewhere; each exact, over existing links only.
TEST(Schedule, GatherSchedulesAreExactOverExistingLinks) {
  struct GatherRow {
    std::string name;
    Topology topology;
    std::optional<ScheduleKind> want;
    size_t steps = 0;
  };
  const std::vector<GatherRow> rows = {
      {"one rank", Topology(1), ScheduleKind::kDirect, 0},
      {"four, all NVLink", Topology::full(4), ScheduleKind::kDirect, 1},
      {"hybrid cube mesh", Topology::hybrid_cube_mesh(), ScheduleKind::kRing, 7},
      {"hybrid cube mesh, renamed", Topology::hybrid_cube_mesh().among({3, 6, 0, 5, 7, 1, 4, 2}), ScheduleKind::kRing,
       7},
      {"ring of four", Topology::ring(4), ScheduleKind::kRing, 3},
      {"ring of eight, renamed", Topology::ring(8).among({5, 2, 7, 0, 3, 6, 1, 4}), ScheduleKind::kRing, 7},
      {"ring of six, NVLink and PCIe", with(with(path(6), 5, 0, LinkKind::kPcie), 1, 4), ScheduleKind::kRing, 5},
      {"four, pairs only", pairs(4), std::nullopt},
      {"four in a line", path(4), std::nullopt},
  };
  for (const GatherRow& row : rows) {
    for (Collective kind : {Collective::kReduceScatter, Collective::kAllGather}) {
      const std::optional<Schedule> s = gather_schedule(row.topology, kind);
      ASSERT_EQ(s.has_value(), row.want.has_value()) << row.name;
      if (!s) continue;
      EXPECT_EQ(to_string(s->kind), to_string(*row.want)) << row.name;
      EXPECT_EQ(s->steps.size(), row.steps) << row.name;
      EXPECT_EQ(run_schedule(*s, row.topology, kind), "") << row.name << ", " << to_string(kind);
    }
  }
  std::mt19937 rng(20261128);
  int checked = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const int n = 2 + static_cast<int>(rng() % 7);
    Topology t(n);
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        if (rng() % 2) t.set(a, b, {LinkKind::kNvlink, 1});
      }
    }
    for (Collective kind : {Collective::kReduceScatter, Collective::kAllGather}) {
      const std::optional<Schedule> s = gather_schedule(t, kind);
      ASSERT_EQ(s.has_value(), all_reduce_schedule(t).has_value()) << t.to_json();  // the same topologies served
      if (!s) continue;
      ++checked;
      EXPECT_EQ(run_schedule(*s, t, kind), "") << t.to_json() << ", " << to_string(kind);
    }
  }
  EXPECT_GT(checked, 100);
}

// The checker itself: a reduce-scatter step removed, or an all-gather transfer reading a chunk its sender does not
// hold yet, is reported.
TEST(Schedule, TheCheckerCatchesBrokenGatherSchedules) {
  const Topology ring = Topology::ring(4);
  Schedule rs = *gather_schedule(ring, Collective::kReduceScatter);
  rs.steps.pop_back();
  EXPECT_NE(run_schedule(rs, ring, Collective::kReduceScatter), "");
  Schedule ag = *gather_schedule(ring, Collective::kAllGather);
  std::swap(ag.steps.front(), ag.steps.back());
  EXPECT_NE(run_schedule(ag, ring, Collective::kAllGather), "");
}

// Random layouts: a node whose links contain a cycle through every rank gets an exact schedule; one without such a
// cycle gets none.
TEST(Schedule, RandomTopologiesGetAnExactScheduleOrNone) {
  std::mt19937 rng(20261127);
  int with_schedule = 0, without = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const int n = 2 + static_cast<int>(rng() % 7);
    Topology t(n);
    const double p = 0.2 + 0.6 * (rng() % 100) / 100.0;
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        if ((rng() % 1000) < p * 1000)
          t.set(a, b, {rng() % 2 ? LinkKind::kNvlink : LinkKind::kPcie, 1 + static_cast<int>(rng() % 4)});
      }
    }
    const std::optional<Schedule> s = all_reduce_schedule(t);
    if (s) {
      ++with_schedule;
      EXPECT_EQ(run_schedule(*s, t), "") << t.to_json();
    } else {
      ++without;
      // No schedule: there is no cycle through every rank. Checked independently by trying every ring order.
      std::vector<int> o(n);
      std::iota(o.begin(), o.end(), 0);
      bool cycle = false;
      do {
        bool ok = true;
        for (int i = 0; i < n && ok; ++i) ok = t.linked(o[i], o[(i + 1) % n]);
        cycle = cycle || ok;
      } while (!cycle && std::next_permutation(o.begin() + 1, o.end()));
      EXPECT_FALSE(cycle) << "a ring exists but no schedule was built: " << t.to_json();
    }
  }
  EXPECT_GT(with_schedule, 50);
  EXPECT_GT(without, 20);
}

TEST(Schedule, CostModelAddsStepsAndTheSlowestLink) {
  const CostModel m{
      .nvlink = {.latency_us = 1, .gb_per_s = 100}, .pcie = {.latency_us = 2, .gb_per_s = 20}, .step_us = 0.5};
  // Direct on four NVLink ranks, 4 MB: two steps of one 1 MB chunk per link direction, 10 us each at 100 GB/s.
  const Topology four = Topology::full(4);
  EXPECT_DOUBLE_EQ(predicted_us(*all_reduce_schedule(four), four, 4'000'000, m), 2 * (0.5 + 1 + 10));
  // Two NVLink links per pair carry twice as fast.
  Topology doubled(4);
  for (int a = 0; a < 4; ++a) {
    for (int b = a + 1; b < 4; ++b) doubled.set(a, b, {LinkKind::kNvlink, 2});
  }
  EXPECT_DOUBLE_EQ(predicted_us(*all_reduce_schedule(doubled), doubled, 4'000'000, m), 2 * (0.5 + 1 + 5));
  // The hybrid cube mesh, 8 MB: chunks of 1 MB; two per intra-quad link direction in the first and last steps.
  const Topology cube = Topology::hybrid_cube_mesh();
  EXPECT_DOUBLE_EQ(predicted_us(*all_reduce_schedule(cube), cube, 8'000'000, m),
                   2 * (0.5 + 1 + 20) + 2 * (0.5 + 1 + 10));
  // A ring of four with one PCIe link: every step waits for that link.
  const Topology mixed = with(path(4), 3, 0, LinkKind::kPcie);
  EXPECT_DOUBLE_EQ(predicted_us(*all_reduce_schedule(mixed), mixed, 4'000'000, m), 6 * (0.5 + 2 + 50));
  // Its all-gather of 4 MB (every rank's 1 MB block): three steps of one block per link direction.
  EXPECT_DOUBLE_EQ(predicted_us(*gather_schedule(mixed, Collective::kAllGather), mixed, 4'000'000, m),
                   3 * (0.5 + 2 + 50));
  // The direct reduce-scatter on four NVLink ranks: one step.
  EXPECT_DOUBLE_EQ(predicted_us(*gather_schedule(four, Collective::kReduceScatter), four, 4'000'000, m), 0.5 + 1 + 10);
}

TEST(Topology, JsonRoundTripsAndFingerprintsTell) {
  const Topology cube = Topology::hybrid_cube_mesh();
  const Topology again = parse_topology(cube.to_json());
  EXPECT_EQ(again.fingerprint(), cube.fingerprint());
  EXPECT_EQ(again.to_json(), cube.to_json());
  EXPECT_NE(with(cube, 0, 5).fingerprint(), cube.fingerprint());
  Topology more = cube;
  more.set(0, 4, {LinkKind::kNvlink, 2});
  EXPECT_NE(more.fingerprint(), cube.fingerprint());
  EXPECT_NE(Topology::full(4, LinkKind::kPcie).fingerprint(), Topology::full(4).fingerprint());
  // Sub-topologies, renumbered in the order given.
  EXPECT_EQ(cube.among({2, 0, 3, 1}).fingerprint(), Topology::full(4).fingerprint());
  EXPECT_EQ(cube.among({5, 1}).fingerprint(), Topology::full(2).fingerprint());
  EXPECT_EQ(cube.among({0, 5}).fingerprint(), Topology(2).fingerprint());
  EXPECT_EQ(Topology::ring(6).among({0, 1, 2}).fingerprint(), path(3).fingerprint());
  EXPECT_THROW(cube.among({0, 0}), Error);
  EXPECT_THROW(cube.among({8}), Error);
  const Topology t = parse_topology(
      R"({"world_size": 3, "links": [{"ranks": [2, 0], "kind": "nvlink", "count": 4}, {"ranks": [1, 2], "kind": "pcie"},
          {"ranks": [0, 1], "kind": "none"}]})");
  EXPECT_EQ(t.at(0, 2).kind, LinkKind::kNvlink);
  EXPECT_EQ(t.at(0, 2).count, 4);
  EXPECT_EQ(t.at(2, 1).kind, LinkKind::kPcie);
  EXPECT_FALSE(t.linked(0, 1));
  EXPECT_FALSE(t.full_mesh());
}

TEST(Topology, BadDescriptionsAreRefusedSayingWhy) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{", "not JSON"},
      {"[]", "expected an object"},
      {R"({"links": []})", "world_size"},
      {R"({"world_size": 0, "links": []})", "world size 0"},
      {R"({"world_size": 65, "links": []})", "world size 65"},
      {R"({"world_size": 2})", "links"},
      {R"({"world_size": 2, "links": [{"ranks": [0], "kind": "nvlink"}]})", "ranks"},
      {R"({"world_size": 2, "links": [{"ranks": [0, 1]}]})", "no kind"},
      {R"({"world_size": 2, "links": [{"ranks": [0, 2], "kind": "nvlink"}]})", "two different ranks"},
      {R"({"world_size": 2, "links": [{"ranks": [1, 1], "kind": "nvlink"}]})", "two different ranks"},
      {R"({"world_size": 2, "links": [{"ranks": [0, 1], "kind": "infiniband"}]})", "unknown link kind"},
      {R"({"world_size": 2, "links": [{"ranks": [0, 1], "kind": "nvlink", "count": 0}]})", "count 0"},
      {R"({"world_size": 2, "links": [{"ranks": [0, 1], "kind": "nvlink", "count": "2"}]})", "not an integer"},
      {R"({"world_size": 3, "links": [{"ranks": [0, 1], "kind": "pcie"}, {"ranks": [1, 0], "kind": "nvlink"}]})",
       "listed twice"},
  };
  for (const auto& [text, why] : bad) {
    try {
      parse_topology(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << text;
      EXPECT_NE(e.message().find(why), std::string::npos) << text << ": " << e.message();
    }
  }
}

}  // namespace
}  // namespace symcomm::detail
