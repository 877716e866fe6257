#pragma once
// All-reduce schedules that use only the links of a Topology (src/algos/topology.h). Pure: no ranks, no memory;
// tested as a table in tests/unit/topology_test.cc, which runs every schedule on contribution counts.
//
// NOTE [schedule semantics] The payload is cut into `chunks` equal chunks, and every rank holds all of them.
// A schedule is a sequence of steps; in a step, each transfer reads chunk `chunk` of rank `src` as it was when
// the step began and applies it to the same chunk of rank `dst`: kReduce combines it into dst's chunk, kCopy
// replaces dst's chunk. A (dst, chunk) receives either any number of reduces or one copy in a step. Every
// transfer's ranks are linked. After the last step every rank's every chunk holds each rank's contribution
// exactly once, computed by one rank and copied to the others (so the ranks' results are identical).
//
// The schedules, best first, and where they apply:
//   - direct: every pair linked. A reduce-scatter (rank c gets chunk c from every peer) and an all-gather
//     (rank c sends chunk c to every peer): two steps, one chunk per link direction in each.
//   - hybrid cube mesh: 8 ranks that split into two fully linked quads with a link from each member of one to
//     a member of the other (the DGX-1 layout). Chunks p and p + 4 belong to quad position p: reduce-scatter
//     inside each quad (two chunks per link direction), reduce across the cross link (p one way, p + 4 the
//     other), copy the totals back across it, all-gather inside each quad: four steps.
//   - ring: a cycle through every rank over existing links (found by search). The ring reduce-scatter and
//     all-gather: 2 (N - 1) steps of one chunk per link direction.
// None applies (a node whose links form no cycle through every rank, pairs only, or no links at all): the
// collective goes elsewhere (NCCL, or the host path).

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "algos/topology.h"
#include "symcomm/types.h"

namespace symcomm::detail {

enum class Move : uint8_t { kReduce, kCopy };

struct Transfer {
  int src;
  int dst;
  int chunk;
  Move move;
};

struct ScheduleStep {
  std::vector<Transfer> transfers;
  int link_chunks = 0;  ///< the most chunks any one direction of one link carries in this step
};

enum class ScheduleKind : uint8_t { kDirect, kHybridCubeMesh, kRing };
std::string_view to_string(ScheduleKind k);

struct Schedule {
  ScheduleKind kind = ScheduleKind::kDirect;
  int chunks = 1;
  std::vector<ScheduleStep> steps;
};

/// The best schedule the topology's links allow (NOTE [schedule semantics]), or nothing.
std::optional<Schedule> all_reduce_schedule(const Topology& t);

// NOTE [gather schedules] Reduce-scatter and all-gather over a topology's links, in the terms of NOTE [schedule
// semantics] with one chunk per rank: chunk c is rank c's block. Reduce-scatter: every rank starts with its
// contribution in every chunk, and after the last step rank c's chunk c holds every rank's contribution exactly
// once (its other chunks hold partial sums). All-gather: rank c starts with chunk c only, and after the last step
// every rank holds every chunk (copies only, each read from a rank that already holds it).
//   - direct (every pair linked): one step; each rank sends (reduce-scatter: reduces) chunk c to rank c, or
//     (all-gather) copies its own chunk to every peer.
//   - ring (a cycle through every rank, the hybrid cube mesh's included): N - 1 steps of one chunk per link
//     direction. Reduce-scatter: in step k position i adds chunk o[i - 1 - k] into position i + 1, so chunk o[j]
//     completes at position j; all-gather: in step k position i passes chunk o[i - k] to position i + 1.

/// The reduce-scatter (kind kReduceScatter) or all-gather (kAllGather) schedule of the topology, or nothing.
std::optional<Schedule> gather_schedule(const Topology& t, Collective kind);

/// 0, 1 and 2 for all-reduce, all-gather and reduce-scatter (the collectives with schedules), -1 for the others.
int schedule_index(Collective kind);

/// The all-reduce, all-gather and reduce-scatter schedules of a communicator's topology (Config::topology_file),
/// each built at its first use. Thread-safe.
class TopologySchedules {
 public:
  /// `topology`: the communicator's links; none means every pair is linked.
  explicit TopologySchedules(std::optional<Topology> topology) : topology_(std::move(topology)) {}
  /// Whether the topology leaves some pair unlinked: its all-reduces, all-gathers and reduce-scatters must run
  /// a schedule.
  bool restricted() const { return topology_ && !topology_->full_mesh(); }
  /// The schedule of `kind` where restricted(); nullptr for the other collectives, where every pair is linked,
  /// and where no schedule serves the topology.
  const Schedule* find(Collective kind);
  /// find(), but where restricted() and no schedule serves a collective that needs one, throws
  /// Error(kUnsupported) naming `rank` and the topology.
  const Schedule* require(Collective kind, int rank);

 private:
  std::optional<Topology> topology_;
  std::once_flag once_[3];
  std::optional<Schedule> schedules_[3];  ///< all-reduce, all-gather, reduce-scatter
};

/// A link's cost: a fixed latency per step in which it carries data, and its bandwidth per direction (NVLink:
/// per link; a pair's bandwidth is count times it).
struct LinkCost {
  double latency_us = 0;
  double gb_per_s = 0;
};

struct CostModel {
  LinkCost nvlink;
  LinkCost pcie;
  double step_us = 0;  ///< fixed cost of each step (its synchronisation)
};

/// Predicted time (us) of the schedule for a payload of `bytes`: per step, its fixed cost plus the slowest
/// link direction's latency and the time to carry its chunks; steps follow each other. Links are assumed
/// independent (no shared switch, no per-GPU injection limit).
double predicted_us(const Schedule& s, const Topology& t, size_t bytes, const CostModel& m);

}  // namespace symcomm::detail
