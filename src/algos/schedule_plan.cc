#include "algos/schedule_plan.h"

#include <algorithm>
#include <vector>

#include "base/check.h"

namespace symcomm::detail {
namespace {

/// The inbox slot of each of step `st`'s transfers (NOTE [scheduled kernel plan]): numbered from 0 per receiver
/// in the order the step lists them, the slots of one (receiver, chunk) consecutive. slots[i] is transfer i's.
std::vector<int> step_slots(const ScheduleStep& st, int world_size) {
  std::vector<int> slots(st.transfers.size(), -1);
  std::vector<int> next(world_size, 0);
  for (size_t i = 0; i < st.transfers.size(); ++i) {
    if (slots[i] >= 0) continue;
    const Transfer& x = st.transfers[i];
    int copies = 0, reduces = 0;
    for (size_t j = i; j < st.transfers.size(); ++j) {
      const Transfer& y = st.transfers[j];
      if (y.dst != x.dst || y.chunk != x.chunk) continue;
      slots[j] = next[x.dst]++;
      ++(y.move == Move::kCopy ? copies : reduces);
    }
    SYMCOMM_CHECK(copies == 0 || (copies == 1 && reduces == 0), kInternal,
                  "schedule: chunk {} of rank {} gets {} copies and {} reduces in one step", x.chunk, x.dst, copies,
                  reduces);
  }
  return slots;
}

}  // namespace

SchedulePlan make_schedule_plan(const Schedule& s, int world_size, int rank) {
  SYMCOMM_CHECK(world_size >= 1 && world_size <= kMaxPlanRanks && rank >= 0 && rank < world_size, kInternal,
                "schedule plan: rank {} of {} ranks (at most {})", rank, world_size, kMaxPlanRanks);
  SYMCOMM_CHECK(s.chunks >= 1 && s.chunks <= 255 && static_cast<int>(s.steps.size()) <= kMaxPlanSteps, kInternal,
                "schedule plan: {} chunks and {} steps (at most 255 and {})", s.chunks, s.steps.size(), kMaxPlanSteps);
  SchedulePlan p;
  p.steps = static_cast<uint8_t>(s.steps.size());
  p.chunks = static_cast<uint8_t>(s.chunks);
  int pushes = 0, applies = 0, most_slots = 1;
  for (size_t k = 0; k < s.steps.size(); ++k) {
    const ScheduleStep& st = s.steps[k];
    for (const Transfer& x : st.transfers) {
      SYMCOMM_CHECK(x.src >= 0 && x.src < world_size && x.dst >= 0 && x.dst < world_size && x.src != x.dst &&
                        x.chunk >= 0 && x.chunk < s.chunks,
                    kInternal, "schedule: transfer {} -> {} of chunk {} in step {}", x.src, x.dst, x.chunk, k);
    }
    const std::vector<int> slots = step_slots(st, world_size);
    std::vector<int> received(world_size, 0);
    p.push_begin[k] = static_cast<uint8_t>(pushes);
    p.apply_begin[k] = static_cast<uint8_t>(applies);
    for (size_t i = 0; i < st.transfers.size(); ++i) {
      const Transfer& x = st.transfers[i];
      ++received[x.dst];
      if (x.src == rank || x.dst == rank) p.neighbors |= static_cast<uint8_t>(1u << (x.src == rank ? x.dst : x.src));
      if (x.src == rank) {
        SYMCOMM_CHECK(pushes < kMaxPlanMoves, kInternal, "schedule plan: more than {} pushes", kMaxPlanMoves);
        p.push[pushes++] =
            PlanPush{static_cast<uint8_t>(x.dst), static_cast<uint8_t>(x.chunk), static_cast<uint8_t>(slots[i])};
      }
      // The first transfer of each of this rank's (chunk) runs becomes one apply over the run's slots.
      if (x.dst != rank) continue;
      bool first = true;
      for (size_t j = 0; j < i; ++j)
        first = first && !(st.transfers[j].dst == rank && st.transfers[j].chunk == x.chunk);
      if (!first) continue;
      int n = 0;
      for (const Transfer& y : st.transfers) n += y.dst == rank && y.chunk == x.chunk;
      SYMCOMM_CHECK(applies < kMaxPlanMoves && n < kMaxPlanRanks, kInternal,
                    "schedule plan: more than {} applies, or a reduce of {} slots", kMaxPlanMoves, n);
      p.apply[applies++] = PlanApply{static_cast<uint8_t>(x.chunk), static_cast<uint8_t>(slots[i]),
                                     static_cast<uint8_t>(n), static_cast<uint8_t>(x.move == Move::kCopy)};
    }
    for (int r = 0; r < world_size; ++r) most_slots = std::max(most_slots, received[r]);
  }
  p.push_begin[s.steps.size()] = static_cast<uint8_t>(pushes);
  p.apply_begin[s.steps.size()] = static_cast<uint8_t>(applies);
  SYMCOMM_CHECK(most_slots <= 255, kInternal, "schedule plan: {} inbox slots", most_slots);
  p.slots = static_cast<uint8_t>(most_slots);
  return p;
}

}  // namespace symcomm::detail
