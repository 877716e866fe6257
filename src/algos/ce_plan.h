#pragma once
// Copy-engine (low-contention) collectives as a pure plan.
//
// NOTE [copy-engine plan] A copy-engine collective is a list of rounds. Each round is
//   pre   — local copies on the caller's stream (stage this rank's data where peers will read it);
//   arrive barrier — every rank's sources for this round are ready (and its op header matches);
//   lanes — per internal stream ("lane"), an ordered list of copies that pull peers' data and of small
//           local reduce kernels; lanes run in parallel with each other;
//   depart barrier — every rank is done reading its peers' sources (they may be overwritten).
// Everything is a pull: a rank only ever writes its own memory (and peers' signal words), so a slow or
// different peer can never make another rank write out of bounds. Sources are the peers' own buffers when
// they are in the symmetric heap (zero-copy), otherwise this rank's staging buffer ("scratch", symmetric,
// split into slots) in rounds. Reductions (reduce-scatter) copy a chunk of each peer's data into a local,
// non-symmetric buffer ("stage", one area per lane) and reduce it with a small kernel, alternating lanes so
// that the copy of one chunk overlaps the reduction of the previous one.
//
// The plan is built from values every rank passes identically (plus whether this rank's buffers are
// symmetric, which the op header makes every rank agree on), so all ranks run the same number of barriers.
// tests/unit/ce_plan_test.cc executes plans for several simulated ranks in one process and checks both the
// results and that no two lanes/ranks touch the same bytes in one phase with a write.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "symcomm/types.h"

namespace symcomm::detail {

/// The most ranks a copy-engine plan serves (= device::kMaxDeviceRanks, checked where both are visible).
inline constexpr int kCeMaxRanks = 8;

/// Which buffer of which rank a plan step addresses.
enum class CeSpace : uint8_t {
  kIn,       ///< the collective's input (of `rank`; a peer's only when it is symmetric)
  kOut,      ///< the collective's output (of `rank`; a peer's only when it is symmetric)
  kScratch,  ///< the communicator's symmetric staging buffer of `rank`
  kStage,    ///< this rank's local staging area of lane `rank` (never a peer's)
};

struct CeRef {
  CeSpace space = CeSpace::kIn;
  int rank = 0;  ///< owner (kStage: the lane)
  size_t offset = 0;
};

struct CeOp {
  enum Kind : uint8_t { kCopy, kReduce } kind = kCopy;
  CeRef dst;
  /// kCopy: srcs[0]. kReduce: nsrc sources combined in this order (rank order).
  CeRef srcs[kCeMaxRanks];
  int nsrc = 1;
  size_t bytes = 0;  ///< kCopy: bytes; kReduce: bytes of the destination (count * element size)
};

struct CeRound {
  std::vector<CeOp> pre;
  std::vector<std::vector<CeOp>> lanes;  ///< lanes.size() == CePlan::lanes
};

struct CePlan {
  std::vector<CeRound> rounds;
  int lanes = 1;
  size_t stage_bytes_per_lane = 0;  ///< local stage each lane needs
  uint32_t header = 2;              ///< 2..2^31-1; equal on every rank running the same collective
};

struct CePlanInput {
  Collective kind = Collective::kAllGather;
  DataType dtype = DataType::kBFloat16;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;  ///< as in Request
  int root = 0;
  int world_size = 1;
  int rank = 0;
  bool in_symmetric = false;   ///< this rank's input lies in the symmetric heap
  bool out_symmetric = false;  ///< this rank's output lies in the symmetric heap
  bool in_is_out = false;      ///< in == out
  bool in_overlaps_out = false;
  /// all_gather: in == out + rank * block bytes; reduce_scatter: out == in + rank * block bytes.
  bool in_is_own_block = false;
  size_t scratch_bytes = 0;      ///< symmetric staging bytes per rank usable by the plan
  size_t stage_bytes = 0;        ///< local stage bytes in total (split between lanes)
  int lanes = 2;                 ///< internal copy streams
  size_t chunk_bytes = 8 << 20;  ///< reduce-scatter: bytes per copy+reduce step
  /// Which eager copy-engine op of the communicator this is (1, 2, ...), 0 inside a stream capture: part of the
  /// header (NOTE [copy-engine op instance] in ce_plan.cc).
  uint64_t instance = 0;
  /// The heap places of the input and output (CudaHeap::find's `place`; 0 when not in the heap). Those that the plan
  /// reads from peers go into the header (NOTE [heap keys] in src/backends/cuda/cuda_launch_cuda.cc).
  uint64_t in_place = 0, out_place = 0;
};

/// Builds the plan. Throws Error(kInvalidArgument) for a collective without a copy-engine form (all_reduce,
/// barrier) or when the staging areas are too small to make progress.
CePlan make_ce_plan(const CePlanInput& in);

/// Why a copy-engine op is stuck, from this rank's barrier slots (NOTE [copy-engine sync]): arrive[p] and
/// depart[p] are what peer p last wrote there (0 after this rank consumed it), gave_up[p] the header of the op
/// on which peer p's watchdog first gave up (0: none), `header` is the stuck op's.
struct CeStall {
  enum Kind : uint8_t {
    kMismatch,   ///< `peer`'s slot holds another op's header: it runs something else
    kMissing,    ///< `peer` has written neither slot: it has not arrived
    kUnknown,    ///< every peer arrived (e.g. stuck in a later barrier); no one to name
    kAbandoned,  ///< `peer` gave up on this very op, and every other peer is in it: it can never complete
  } kind = kUnknown;
  int peer = -1;
};
/// In this order (NOTE [copy-engine stall] in ce_plan.cc): a peer that has written nothing and not given up
/// (kMissing); one in another op that has not given up (kMismatch); one that gave up on another op (kMismatch);
/// a fellow waiter of this op that gave up and went on (kMismatch) or left no trace (kMissing).
CeStall classify_ce_stall(const uint32_t* arrive, const uint32_t* depart, const uint32_t* gave_up, int world_size,
                          int rank, uint32_t header);
/// Before the deadline (NOTE [copy-engine early mismatch] in ce_plan.cc): a peer whose slots prove that it runs
/// another op, so that this one can never complete (kMismatch), or kUnknown. Read while the op is in flight.
CeStall definite_ce_mismatch(const uint32_t* arrive, const uint32_t* depart, const uint32_t* gave_up, int world_size,
                             int rank, uint32_t header);
/// Before the deadline (NOTE [copy-engine late peer] in ce_plan.cc): the first peer that gave up on this very op
/// (kAbandoned) when no peer is missing from it, else kUnknown. Read while the op is in flight, after
/// definite_ce_mismatch found nothing.
CeStall abandoned_ce_op(const uint32_t* arrive, const uint32_t* depart, const uint32_t* gave_up, int world_size,
                        int rank, uint32_t header);

}  // namespace symcomm::detail
