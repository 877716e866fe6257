#include "algos/ce_plan.h"

#include <algorithm>
#include <string_view>

#include "base/check.h"
#include "base/hash.h"

namespace symcomm::detail {
namespace {

// A pull is never cut into pieces on several lanes: one cudaMemcpyAsync from a peer already runs at the
// NVLink limit (2 x H200: 356 GB/s at 32 MB, 370 GB/s at 128 MB, the `peer_memcpy` probe of the
// contention benchmark), while pieces on three lanes made the in-place all-gather slower (261 GB/s bus
// bandwidth at 64 MB) and cost a fork and a join. Pulls from different peers go round-robin to the lanes.
constexpr size_t kAlign = 16;

size_t align_down(size_t v, size_t a) { return v / a * a; }

class Builder {
 public:
  Builder(const CePlanInput& in) : in_(in), me_(in.rank), n_(in.world_size) { plan_.lanes = std::max(1, in.lanes); }

  CeRound& round() {
    CeRound r;
    r.lanes.resize(plan_.lanes);
    plan_.rounds.push_back(std::move(r));
    next_lane_ = 0;
    return plan_.rounds.back();
  }

  static CeOp copy(CeRef dst, CeRef src, size_t bytes) {
    CeOp op;
    op.kind = CeOp::kCopy;
    op.dst = dst;
    op.srcs[0] = src;
    op.bytes = bytes;
    return op;
  }

  /// Adds a pull to the next of lanes [lo, hi) (default: all), round-robin.
  void pull(CeRound& r, CeRef dst, CeRef src, size_t bytes, int lo = 0, int hi = -1) {
    if (bytes == 0) return;
    if (hi < 0) hi = plan_.lanes;
    const int width = hi - lo;
    r.lanes[lo + next_lane_ % width].push_back(copy(dst, src, bytes));
    next_lane_ = (next_lane_ + 1) % width;
  }

  void local(CeRound& r, CeRef dst, CeRef src, size_t bytes) {
    if (bytes > 0) r.pre.push_back(copy(dst, src, bytes));
  }

  // NOTE [copy-engine op instance] Eager ops put their instance number (the communicator's count of eager
  // copy-engine ops, the same on every rank issuing the same calls) into the header, so two eager ops never
  // share one even with equal arguments. The barriers can then pair only the same instance: a rank whose
  // watchdog released a failed op runs the ops queued behind it (NOTE [copy-engine stall]), and without the
  // instance its next op could meet a slower peer's equal-looking op, the one that peer issued in place of
  // a call it skipped, and complete there silently instead of failing. Captured ops keep instance 0: their
  // headers are fixed at capture, and ranks need not capture graphs in the same order.
  // `peers_read_in` / `peers_read_out`: whether on this path some rank reads its peers' inputs / outputs (the
  // same on every rank running it, unlike what this rank's own plan reads: a broadcast's root reads nothing).
  // Their heap places then go into the header (NOTE [heap keys] in src/backends/cuda/cuda_launch_cuda.cc).
  CePlan finish(uint32_t path, bool peers_read_in, bool peers_read_out) {
    Fnv1a fnv(fnv1a("symcomm-ce"));
    for (uint64_t v :
         {static_cast<uint64_t>(in_.kind), static_cast<uint64_t>(in_.dtype),
          static_cast<uint64_t>(in_.kind == Collective::kReduceScatter ? in_.op : ReduceOp::kSum),
          static_cast<uint64_t>(in_.count), static_cast<uint64_t>(in_.kind == Collective::kBroadcast ? in_.root : 0),
          static_cast<uint64_t>(path), static_cast<uint64_t>(n_), in_.instance, peers_read_in ? in_.in_place : 0,
          peers_read_out ? in_.out_place : 0}) {
      fnv.add(v);
    }
    const uint64_t h = fnv.value();
    // 31 bits, never 0 or 1 (the copy engine's in-flight word keeps the top bit and the values 0 and 1).
    plan_.header = static_cast<uint32_t>(h ^ (h >> 32)) & 0x7fffffffu;
    if (plan_.header < 2) plan_.header += 2;
    return std::move(plan_);
  }

  const CePlanInput& in_;
  const int me_, n_;
  CePlan plan_;
  int next_lane_ = 0;
};

CeRef ref(CeSpace s, int rank, size_t offset) { return CeRef{s, rank, offset}; }

size_t usable(size_t bytes, size_t parts) {
  SYMCOMM_CHECK_ARG(parts > 0, "no parts");
  size_t v = align_down(bytes / parts, kAlign);
  SYMCOMM_CHECK_ARG(v > 0, "copy-engine staging of {} bytes is too small for {} slots", bytes, parts);
  return v;
}

CePlan all_gather(Builder& b, const CePlanInput& in, size_t B) {
  const int me = in.rank, n = in.world_size;
  if (in.out_symmetric || in.in_symmetric) {
    // Peers pull each rank's block from its input, or from its output after the rank copied its input there.
    // From the input, that own-block copy runs on a lane beside the pulls instead of before the barrier.
    // With several lanes, the own-block copy gets the last lane to itself and the pulls share the others.
    // A peer's input is found at this rank's input offset, so in place (input = own block of the output, at a
    // different offset on every rank) the blocks are pulled from the output.
    const bool from_out = !in.in_symmetric || in.in_is_own_block;
    const int lanes = b.plan_.lanes, peer_lanes = lanes > 1 && !from_out ? lanes - 1 : lanes;
    CeRound& r = b.round();
    if (!in.in_is_own_block && from_out) b.local(r, ref(CeSpace::kOut, me, me * B), ref(CeSpace::kIn, me, 0), B);
    for (int k = 1; k < n; ++k) {
      const int p = (me + k) % n;
      b.pull(r, ref(CeSpace::kOut, me, p * B), from_out ? ref(CeSpace::kOut, p, p * B) : ref(CeSpace::kIn, p, 0), B, 0,
             peer_lanes);
    }
    if (!in.in_is_own_block && !from_out) {
      b.pull(r, ref(CeSpace::kOut, me, me * B), ref(CeSpace::kIn, me, 0), B, lanes - 1, lanes);
    }
    return b.finish(from_out ? 1 : 2, !from_out, from_out);
  }
  const size_t c = usable(in.scratch_bytes, 1);
  for (size_t off = 0; off < B; off += c) {
    const size_t len = std::min(c, B - off);
    CeRound& r = b.round();
    b.local(r, ref(CeSpace::kScratch, me, 0), ref(CeSpace::kIn, me, off), len);
    if (!in.in_is_own_block) b.local(r, ref(CeSpace::kOut, me, me * B + off), ref(CeSpace::kIn, me, off), len);
    for (int k = 1; k < n; ++k) {
      const int p = (me + k) % n;
      b.pull(r, ref(CeSpace::kOut, me, p * B + off), ref(CeSpace::kScratch, p, 0), len);
    }
  }
  return b.finish(3, false, false);
}

CePlan all_to_all(Builder& b, const CePlanInput& in, size_t B) {
  const int me = in.rank, n = in.world_size;
  if (in.in_symmetric && !in.in_overlaps_out) {
    CeRound& r = b.round();
    b.local(r, ref(CeSpace::kOut, me, me * B), ref(CeSpace::kIn, me, me * B), B);
    for (int k = 1; k < n; ++k) {
      const int p = (me + k) % n;
      b.pull(r, ref(CeSpace::kOut, me, p * B), ref(CeSpace::kIn, p, me * B), B);
    }
    return b.finish(1, true, false);
  }
  // Staged (also in place): every block of this round's window goes to a scratch slot first, so the pulls
  // that overwrite the output (= input when in place) never touch bytes a peer still has to read.
  const size_t c = usable(in.scratch_bytes, n);
  for (size_t off = 0; off < B; off += c) {
    const size_t len = std::min(c, B - off);
    CeRound& r = b.round();
    for (int q = 0; q < n; ++q) b.local(r, ref(CeSpace::kScratch, me, q * c), ref(CeSpace::kIn, me, q * B + off), len);
    for (int k = 0; k < n; ++k) {
      const int p = (me + k) % n;
      b.pull(r, ref(CeSpace::kOut, me, p * B + off), ref(CeSpace::kScratch, p, me * c), len);
    }
  }
  return b.finish(2, false, false);
}

CePlan broadcast(Builder& b, const CePlanInput& in, size_t B) {
  const int me = in.rank, root = in.root;
  if (in.out_symmetric) {
    CeRound& r = b.round();
    if (me == root && !in.in_is_out) b.local(r, ref(CeSpace::kOut, me, 0), ref(CeSpace::kIn, me, 0), B);
    if (me != root) b.pull(r, ref(CeSpace::kOut, me, 0), ref(CeSpace::kOut, root, 0), B);
    return b.finish(1, false, true);
  }
  const size_t c = usable(in.scratch_bytes, 1);
  for (size_t off = 0; off < B; off += c) {
    const size_t len = std::min(c, B - off);
    CeRound& r = b.round();
    if (me == root) {
      b.local(r, ref(CeSpace::kScratch, me, 0), ref(CeSpace::kIn, me, off), len);
      if (!in.in_is_out) b.local(r, ref(CeSpace::kOut, me, off), ref(CeSpace::kIn, me, off), len);
    } else {
      b.pull(r, ref(CeSpace::kOut, me, off), ref(CeSpace::kScratch, root, 0), len);
    }
  }
  return b.finish(2, false, false);
}

CePlan reduce_scatter(Builder& b, const CePlanInput& in, size_t B, size_t es) {
  const int me = in.rank, n = in.world_size, lanes = b.plan_.lanes;
  // Per lane: one stage slot of `sc` bytes per peer.
  const size_t per_lane = in.stage_bytes / lanes;
  size_t sc = n > 1 ? std::min(in.chunk_bytes, per_lane / (n - 1)) : in.chunk_bytes;
  sc = align_down(sc, kAlign);
  SYMCOMM_CHECK_ARG(sc > 0 && es <= kAlign, "copy-engine stage of {} bytes is too small", in.stage_bytes);
  b.plan_.stage_bytes_per_lane = n > 1 ? sc * (n - 1) : 0;
  auto slot = [&](int p) { return static_cast<size_t>(p < me ? p : p - 1) * sc; };

  const bool zero_copy = in.in_symmetric;
  const size_t window = zero_copy ? B : usable(in.scratch_bytes, n);
  int lane = 0;
  for (size_t off = 0; off < B; off += window) {
    const size_t len = std::min(window, B - off);
    CeRound& r = b.round();
    if (!zero_copy) {
      for (int q = 0; q < n; ++q) {
        if (q != me) b.local(r, ref(CeSpace::kScratch, me, q * window), ref(CeSpace::kIn, me, q * B + off), len);
      }
    }
    for (size_t x = 0; x < len; x += sc, lane = (lane + 1) % lanes) {
      const size_t m = std::min(sc, len - x);
      auto& ops = r.lanes[lane];
      CeOp red;
      red.kind = CeOp::kReduce;
      red.dst = ref(CeSpace::kOut, me, off + x);
      red.nsrc = n;
      red.bytes = m;
      for (int p = 0; p < n; ++p) {
        if (p == me) {
          red.srcs[p] = ref(CeSpace::kIn, me, me * B + off + x);
          continue;
        }
        const CeRef src =
            zero_copy ? ref(CeSpace::kIn, p, me * B + off + x) : ref(CeSpace::kScratch, p, me * window + x);
        ops.push_back(Builder::copy(ref(CeSpace::kStage, lane, slot(p)), src, m));
        red.srcs[p] = ref(CeSpace::kStage, lane, slot(p));
      }
      ops.push_back(red);
    }
  }
  return b.finish(zero_copy ? 1 : 2, zero_copy, false);
}

}  // namespace

CePlan make_ce_plan(const CePlanInput& in) {
  SYMCOMM_CHECK_ARG(in.world_size >= 1 && in.world_size <= kCeMaxRanks && in.rank >= 0 && in.rank < in.world_size,
                    "copy-engine plan for rank {} of {}", in.rank, in.world_size);
  const size_t es = dtype_size(in.dtype), B = in.count * es;
  Builder b(in);
  switch (in.kind) {
    case Collective::kAllGather:
      SYMCOMM_CHECK_ARG(!in.in_overlaps_out || in.in_is_own_block,
                        "all_gather: the input may overlap the output only as this rank's own block");
      return all_gather(b, in, B);
    case Collective::kAllToAll:
      SYMCOMM_CHECK_ARG(!in.in_overlaps_out || in.in_is_out, "all_to_all: in and out overlap partially");
      return all_to_all(b, in, B);
    case Collective::kBroadcast:
      SYMCOMM_CHECK_ARG(in.rank != in.root || !in.in_overlaps_out || in.in_is_out,
                        "broadcast: in and out overlap partially");
      return broadcast(b, in, B);
    case Collective::kReduceScatter:
      SYMCOMM_CHECK_ARG(!in.in_overlaps_out || in.in_is_own_block,
                        "reduce_scatter: the output may overlap the input only as this rank's own block");
      return reduce_scatter(b, in, B, es);
    case Collective::kAllReduce:
    case Collective::kBarrier: break;
  }
  SYMCOMM_THROW(kInvalidArgument, "{} has no copy-engine algorithm", to_string(in.kind));
}

// NOTE [copy-engine stall] A stream memory operation cannot test the communicator's error word, so a rank
// whose watchdog released a failed copy-engine op runs the ops queued behind it, and their barriers write
// arrivals into the peers' pads (NOTE [copy-engine watchdog]). When rank m never comes (or runs another op),
// the ranks that reach their deadline first go on, and their next ops' headers land in the slots of peers
// still waiting in the op they gave up on. Naming the first non-matching header would then blame a fellow
// waiter that went on, not m. So the first time a rank gives up, its watchdog writes the header of the op it
// gave up on into its gave-up word in every peer's pad before it releases its own waits, and the reading
// names, in this order:
//   1. a peer that has written nothing and has not given up (kMissing);
//   2. a peer in another op that has not given up (kMismatch);
//   3. a peer that gave up on another op (kMismatch: it was not in this one);
//   4. a fellow waiter of this op that gave up and went on to another (kMismatch), then one that gave up
//      without a trace in the slots (kMissing): only when no one else explains the stall.
// A peer whose depart slot holds this op's header while its arrive slot holds another one is a fellow waiter
// that went on even if its gave-up word has not landed yet (it passed this op's last barrier without this rank).
CeStall classify_ce_stall(const uint32_t* arrive, const uint32_t* depart, const uint32_t* gave_up, int world_size,
                          int rank, uint32_t header) {
  auto other = [&](int p) {
    return (arrive[p] != 0 && arrive[p] != header) || (depart[p] != 0 && depart[p] != header);
  };
  auto left = [&](int p) { return depart[p] == header && arrive[p] != 0 && arrive[p] != header; };
  CeStall elsewhere, went_on, gone;
  for (int p = 0; p < world_size; ++p) {
    if (p != rank && arrive[p] == 0 && depart[p] == 0 && gave_up[p] == 0) return {CeStall::kMissing, p};
  }
  for (int p = 0; p < world_size; ++p) {
    if (p == rank) continue;
    if (gave_up[p] != 0 && gave_up[p] != header) {
      if (elsewhere.peer < 0) elsewhere = {CeStall::kMismatch, p};
    } else if (gave_up[p] == header || left(p)) {
      if (other(p) && went_on.peer < 0) went_on = {CeStall::kMismatch, p};
      if (!other(p) && gave_up[p] != 0 && gone.peer < 0) gone = {CeStall::kMissing, p};
    } else if (other(p)) {
      return {CeStall::kMismatch, p};
    }
  }
  for (const CeStall& s : {elsewhere, went_on, gone}) {
    if (s.peer >= 0) return s;
  }
  return {};
}

// NOTE [copy-engine early mismatch] A barrier's wait completes only when every peer's slot holds this op's
// header, so a peer whose slot holds another header blocks it for good: the op is bound to fail, and waiting
// for the deadline (minutes by default) only delays the report. While an op is in flight, this rank's slots
// can legitimately hold, for peer p: 0 (not arrived yet, or consumed), this op's header (arrived, or departed
// its last barrier), and in p's arrive slot the header of p's next op once p has left this one, while p's
// depart slot still holds this op's header (this rank resets its depart slots only after its last wait,
// NOTE [copy-engine sync]). p cannot be in an earlier op (this rank consumed all of p's writes of it) nor in a
// later one without having departed this one. So p runs another op when neither of its slots holds this
// header and either
//   - p has not given up, and one of its slots holds something (another op's header), or
//   - p gave up on another op (it was not in this one, and its queued ops never are either: a failed
//     communicator issues nothing more).
// A peer that gave up on this very op is a fellow waiter (its next op's header is no evidence) and is left to
// the deadline's reading. Two things could fake the evidence, and the watchdog rules both out
// (cuda_copy_engine_cuda.cc): the last barrier's reset of the depart slots, after which p's next op shows in
// its arrive slot alone (so the last batch clears HostControl::ce_active *before* the reset, and a reading
// counts only if ce_active still shows the op afterwards), and a reading that caught p's next op's arrival but
// not yet p's gave-up word (a reading counts only if a second one, a few milliseconds later, names the same
// peer).
CeStall definite_ce_mismatch(const uint32_t* arrive, const uint32_t* depart, const uint32_t* gave_up, int world_size,
                             int rank, uint32_t header) {
  for (int p = 0; p < world_size; ++p) {
    if (p == rank || arrive[p] == header || depart[p] == header) continue;
    const bool elsewhere = gave_up[p] == 0 ? arrive[p] != 0 || depart[p] != 0 : gave_up[p] != header;
    if (elsewhere) return {CeStall::kMismatch, p};
  }
  return {};
}

// NOTE [copy-engine late peer] The watchdog releases a failed op by writing every wait's value into this rank's
// own slots (NOTE [copy-engine watchdog]); its stream then runs the op's remaining barriers, whose writes land in
// the peers' slots as if this rank had taken part. A peer that arrives only after that (later than this rank's
// whole deadline, or while this rank is aborted mid-op) would find every barrier passed, read buffers this rank
// has since moved on from, and complete with wrong data and no error. So the first time a rank gives up, its
// watchdog also writes the top bit into its abandon word in every peer's pad (with the gave-up word, before it
// releases anything: the fences order them), and the last batch of every op waits, after its slot waits, until
// the abandon word of every peer has the top bit clear (a GEQ-0 wait: one stream memory op per peer, no SM). An
// op that a peer abandoned therefore never completes; the stuck rank's watchdog reports it, and its release
// clears this rank's abandon words so that the stream drains (the communicator has failed by then). A peer
// that gave up on this very op is not evidence of a mismatch (NOTE [copy-engine early mismatch]), but once
// every other peer is in the op (none has written nothing), nothing else can explain the stall and nothing can
// end it: the early reading then names the peer that gave up (kAbandoned, reported as kTimeout) instead of
// waiting for this rank's deadline. While some peer is missing, the fellow waiters of a peer that gave up wait
// for their own deadline and name the missing one.
CeStall abandoned_ce_op(const uint32_t* arrive, const uint32_t* depart, const uint32_t* gave_up, int world_size,
                        int rank, uint32_t header) {
  int quitter = -1;
  for (int p = 0; p < world_size; ++p) {
    if (p == rank) continue;
    if (arrive[p] == 0 && depart[p] == 0 && gave_up[p] == 0) return {};
    if (gave_up[p] == header && quitter < 0) quitter = p;
  }
  return quitter < 0 ? CeStall{} : CeStall{CeStall::kAbandoned, quitter};
}

}  // namespace symcomm::detail
