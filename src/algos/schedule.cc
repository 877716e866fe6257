#include "algos/schedule.h"

#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include "base/check.h"

namespace symcomm::detail {
namespace {

// The ring search gives up after this many extensions of a partial path (a node with few links answers in far
// fewer; an adversarial 64-rank graph could need exponentially many).
constexpr long kRingSearchBudget = 1'000'000;

bool clique(const Topology& t, const std::vector<int>& ranks) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (size_t j = i + 1; j < ranks.size(); ++j) {
      if (!t.linked(ranks[i], ranks[j])) return false;
    }
  }
  return true;
}

Schedule direct(int n) {
  Schedule s{.kind = ScheduleKind::kDirect, .chunks = n, .steps = {}};
  if (n == 1) return s;
  ScheduleStep rs{.transfers = {}, .link_chunks = 1}, ag{.transfers = {}, .link_chunks = 1};
  for (int c = 0; c < n; ++c) {
    for (int q = 0; q < n; ++q) {
      if (q == c) continue;
      rs.transfers.push_back({q, c, c, Move::kReduce});
      ag.transfers.push_back({c, q, c, Move::kCopy});
    }
  }
  s.steps = {std::move(rs), std::move(ag)};
  return s;
}

/// Quads a and b (position p of a linked to position p of b), if the topology is a hybrid cube mesh.
std::optional<std::pair<std::array<int, 4>, std::array<int, 4>>> cube_quads(const Topology& t) {
  if (t.world_size() != 8) return std::nullopt;
  // Quad a holds rank 0 and three of the other seven.
  for (int m = 0; m < (1 << 7); ++m) {
    if (__builtin_popcount(m) != 3) continue;
    std::vector<int> a{0}, b;
    for (int r = 1; r < 8; ++r) ((m >> (r - 1)) & 1 ? a : b).push_back(r);
    if (!clique(t, a) || !clique(t, b)) continue;
    std::array<int, 4> bp{b[0], b[1], b[2], b[3]};
    do {
      bool matched = true;
      for (int p = 0; p < 4 && matched; ++p) matched = t.linked(a[p], bp[p]);
      if (matched) return std::make_pair(std::array<int, 4>{a[0], a[1], a[2], a[3]}, bp);
    } while (std::next_permutation(bp.begin(), bp.end()));
  }
  return std::nullopt;
}

Schedule hybrid_cube_mesh(const std::array<int, 4>& a, const std::array<int, 4>& b) {
  Schedule s{.kind = ScheduleKind::kHybridCubeMesh, .chunks = 8, .steps = {}};
  ScheduleStep rs{.transfers = {}, .link_chunks = 2}, up{.transfers = {}, .link_chunks = 1},
      down{.transfers = {}, .link_chunks = 1}, ag{.transfers = {}, .link_chunks = 2};
  for (const std::array<int, 4>* quad : {&a, &b}) {
    for (int p = 0; p < 4; ++p) {
      for (int x : *quad) {
        if (x == (*quad)[p]) continue;
        for (int c : {p, p + 4}) {
          rs.transfers.push_back({x, (*quad)[p], c, Move::kReduce});
          ag.transfers.push_back({(*quad)[p], x, c, Move::kCopy});
        }
      }
    }
  }
  for (int p = 0; p < 4; ++p) {
    up.transfers.push_back({b[p], a[p], p, Move::kReduce});      // a[p]: chunk p's total
    up.transfers.push_back({a[p], b[p], p + 4, Move::kReduce});  // b[p]: chunk p + 4's total
    down.transfers.push_back({a[p], b[p], p, Move::kCopy});
    down.transfers.push_back({b[p], a[p], p + 4, Move::kCopy});
  }
  s.steps = {std::move(rs), std::move(up), std::move(down), std::move(ag)};
  return s;
}

/// A cycle through every rank over existing links, in ring order starting at rank 0 (depth-first search).
std::optional<std::vector<int>> ring_order(const Topology& t) {
  const int n = t.world_size();
  std::vector<int> path{0};
  std::vector<bool> used(static_cast<size_t>(n));
  used[0] = true;
  long budget = kRingSearchBudget;
  auto extend = [&](auto&& self) -> bool {
    if (--budget < 0) return false;
    if (static_cast<int>(path.size()) == n) return t.linked(path.back(), 0);
    for (int r = 1; r < n; ++r) {
      if (used[r] || !t.linked(path.back(), r)) continue;
      used[r] = true;
      path.push_back(r);
      if (self(self)) return true;
      path.pop_back();
      used[r] = false;
    }
    return false;
  };
  if (!extend(extend)) return std::nullopt;
  return path;
}

Schedule ring(const std::vector<int>& o) {
  const int n = static_cast<int>(o.size());
  Schedule s{.kind = ScheduleKind::kRing, .chunks = n, .steps = {}};
  auto mod = [n](int v) { return ((v % n) + n) % n; };
  // Reduce-scatter: in step k position i sends chunk i - k to position i + 1; afterwards position i holds the
  // total of chunk i + 1. All-gather: in step k position i passes chunk i + 1 - k on.
  for (int k = 0; k < n - 1; ++k) {
    ScheduleStep st{.transfers = {}, .link_chunks = 1};
    for (int i = 0; i < n; ++i) st.transfers.push_back({o[i], o[mod(i + 1)], mod(i - k), Move::kReduce});
    s.steps.push_back(std::move(st));
  }
  for (int k = 0; k < n - 1; ++k) {
    ScheduleStep st{.transfers = {}, .link_chunks = 1};
    for (int i = 0; i < n; ++i) st.transfers.push_back({o[i], o[mod(i + 1)], mod(i + 1 - k), Move::kCopy});
    s.steps.push_back(std::move(st));
  }
  return s;
}

/// NOTE [gather schedules]: one step where every pair is linked.
Schedule direct_gather(int n, Collective kind) {
  Schedule s{.kind = ScheduleKind::kDirect, .chunks = n, .steps = {}};
  if (n == 1) return s;
  ScheduleStep st{.transfers = {}, .link_chunks = 1};
  for (int c = 0; c < n; ++c) {
    for (int q = 0; q < n; ++q) {
      if (q == c) continue;
      st.transfers.push_back(kind == Collective::kReduceScatter ? Transfer{q, c, c, Move::kReduce}
                                                                : Transfer{c, q, c, Move::kCopy});
    }
  }
  s.steps.push_back(std::move(st));
  return s;
}

/// NOTE [gather schedules]: N - 1 steps around the ring o.
Schedule ring_gather(const std::vector<int>& o, Collective kind) {
  const int n = static_cast<int>(o.size());
  Schedule s{.kind = ScheduleKind::kRing, .chunks = n, .steps = {}};
  auto mod = [n](int v) { return ((v % n) + n) % n; };
  const bool rs = kind == Collective::kReduceScatter;
  for (int k = 0; k < n - 1; ++k) {
    ScheduleStep st{.transfers = {}, .link_chunks = 1};
    for (int i = 0; i < n; ++i) {
      st.transfers.push_back({o[i], o[mod(i + 1)], o[mod(rs ? i - 1 - k : i - k)], rs ? Move::kReduce : Move::kCopy});
    }
    s.steps.push_back(std::move(st));
  }
  return s;
}

}  // namespace

std::optional<Schedule> gather_schedule(const Topology& t, Collective kind) {
  if (t.full_mesh()) return direct_gather(t.world_size(), kind);
  if (const auto o = ring_order(t)) return ring_gather(*o, kind);
  return std::nullopt;
}

std::string_view to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kDirect: return "direct";
    case ScheduleKind::kHybridCubeMesh: return "hybrid_cube_mesh";
    case ScheduleKind::kRing: return "ring";
  }
  return "invalid";
}

std::optional<Schedule> all_reduce_schedule(const Topology& t) {
  if (t.full_mesh()) return direct(t.world_size());
  if (const auto q = cube_quads(t)) return hybrid_cube_mesh(q->first, q->second);
  if (const auto o = ring_order(t)) return ring(*o);
  return std::nullopt;
}

int schedule_index(Collective kind) {
  switch (kind) {
    case Collective::kAllReduce: return 0;
    case Collective::kAllGather: return 1;
    case Collective::kReduceScatter: return 2;
    default: return -1;
  }
}

const Schedule* TopologySchedules::find(Collective kind) {
  const int k = schedule_index(kind);
  if (k < 0 || !restricted()) return nullptr;
  std::call_once(once_[k],
                 [&] { schedules_[k] = k == 0 ? all_reduce_schedule(*topology_) : gather_schedule(*topology_, kind); });
  return schedules_[k] ? &*schedules_[k] : nullptr;
}

const Schedule* TopologySchedules::require(Collective kind, int rank) {
  const Schedule* s = find(kind);
  static constexpr const char* kNames[] = {"all-reduce", "all-gather", "reduce-scatter"};
  SYMCOMM_CHECK(s || schedule_index(kind) < 0 || !restricted(), kUnsupported,
                "rank {}: no {} schedule uses only the links of the topology {} (a cycle through every rank, a "
                "hybrid cube mesh or every pair linked; docs/design/topology.md)",
                rank, kNames[schedule_index(kind)], topology_->to_json());
  return s;
}

double predicted_us(const Schedule& s, const Topology& t, size_t bytes, const CostModel& m) {
  const double chunk_bytes = static_cast<double>(bytes) / s.chunks;
  double total = 0;
  for (const ScheduleStep& st : s.steps) {
    std::map<std::pair<int, int>, int> load;  // chunks per link direction
    for (const Transfer& x : st.transfers) ++load[{x.src, x.dst}];
    double slowest = 0;
    for (const auto& [dir, chunks] : load) {
      const Link& l = t.at(dir.first, dir.second);
      const LinkCost& c = l.kind == LinkKind::kNvlink ? m.nvlink : m.pcie;
      const double gbps = c.gb_per_s * (l.kind == LinkKind::kNvlink ? l.count : 1);
      slowest = std::max(slowest, c.latency_us + chunks * chunk_bytes / (gbps * 1e3));
    }
    total += m.step_us + slowest;
  }
  return total;
}

}  // namespace symcomm::detail
