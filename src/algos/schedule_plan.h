#pragma once
// One rank's part of a topology schedule (src/algos/schedule.h) as the CUDA scheduled kernel runs it
// (src/algos/cuda_scheduled.cu): a plain table that travels in the kernel's parameters. Pure; tested as a table in
// tests/unit/schedule_plan_test.cc, which runs every rank's plan on contribution counts.
//
// NOTE [scheduled kernel plan] Each rank owns an inbox in the symmetric heap: two halves, each cut into `slots`
// equal slots. In a step every rank first pushes each chunk a transfer takes from it into the inbox slot the plan
// gives at the transfer's receiver (the chunk as it is when the step begins: nobody changes its own chunks before
// the step's barrier), then passes a barrier with its neighbours (the ranks it exchanges chunks with in any step),
// then applies what its own inbox holds: a copy replaces its chunk, reduces combine it with the slots in the order
// the schedule lists the transfers. The slots a receiver gets in one step are numbered from 0 in that order,
// those of one chunk consecutive, so a chunk's reduce reads one run of slots. Steps alternate the inbox halves;
// a sender writes a half again two steps later, after the barrier of the step between, which its receiver passes
// only once it has applied what the half held. `slots` is the most any rank receives in one step, the same on
// every rank, so every rank cuts its inbox alike.

#include <cstdint>

#include "algos/schedule.h"

namespace symcomm::detail {

/// Bounds of a plan: a ring of 8 ranks has 2 (8 - 1) steps; no schedule of 8 ranks gives one rank more than 14
/// pushes or applies.
inline constexpr int kMaxPlanRanks = 8;  ///< device::kMaxDeviceRanks (a bit per rank in SchedulePlan::neighbors)
inline constexpr int kMaxPlanSteps = 16;
inline constexpr int kMaxPlanMoves = 64;

/// Push this rank's chunk `chunk` into slot `slot` of rank `dst`'s inbox.
struct PlanPush {
  uint8_t dst, chunk, slot;
};
/// This rank's chunk `chunk` becomes inbox slot `first_slot` (copy), or itself combined with slots
/// [first_slot, first_slot + nslots) in that order (reduce).
struct PlanApply {
  uint8_t chunk, first_slot, nslots, copy;
};

struct SchedulePlan {
  uint8_t steps = 0;
  uint8_t chunks = 1;
  uint8_t slots = 1;      ///< inbox slots per half (at least 1)
  uint8_t neighbors = 0;  ///< bit p: rank p exchanges chunks with this rank in some step
  /// Step s's pushes are push[push_begin[s] .. push_begin[s + 1]), its applies likewise.
  uint8_t push_begin[kMaxPlanSteps + 1] = {};
  uint8_t apply_begin[kMaxPlanSteps + 1] = {};
  PlanPush push[kMaxPlanMoves] = {};
  PlanApply apply[kMaxPlanMoves] = {};
};

/// Rank `rank`'s plan of schedule `s` (NOTE [scheduled kernel plan]) for `world_size` ranks (at most kMaxPlanRanks).
/// Throws Error(kInternal) for a schedule the kernel cannot run: a transfer outside the world or to itself, a chunk
/// that gets a copy and something else in one step, a reduce of more than kMaxPlanRanks - 1 slots, a bound above
/// exceeded.
SchedulePlan make_schedule_plan(const Schedule& s, int world_size, int rank);

}  // namespace symcomm::detail
