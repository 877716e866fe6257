#include "backends/host/host_p2p.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "backends/host/host_poll.h"
#include "base/check.h"

namespace symcomm::detail {

// NOTE [point-to-point]
// Sends and receives (Communicator::send / recv) concern their two ranks only, and run on state of their own.
// - Mailboxes. Besides the collectives' HostPad, each rank's signal pad holds a P2pPad (host_heap.h): out[p],
//   read by rank p, counts the chunks posted to p and holds the header of each staging slot; in[p], read by rank
//   p, counts the chunks consumed from p and records a refused message. Each ordered pair A -> B so has a chunk
//   sequence of its own, A's out[B].posted and B's in[A].consumed, counters that only grow (64-bit). Nothing of
//   the collectives moves: not HostPad::ready, its headers or the engine's step counter (NOTE [host step
//   protocol]), nor the op numbers of debug checks (CommCore counts the collectives it checks on its own). A rank
//   that issues no point-to-point operation numbers its collectives as the ranks that do.
// - Staging. A's messages to B go through kP2pSlots (2) chunks of p2p_chunk_bytes in A's segment: as in the
//   collectives, every rank writes only its own memory. To post chunk c, A waits until B consumed chunk c - 2
//   (acquire), copies the payload into slot (c - 1) % 2, writes the slot's header (message number, count, dtype)
//   and stores posted = c (release). B waits until posted >= c (acquire), checks the header, copies the payload
//   out and stores consumed = c (release), which frees the slot. A message of b bytes takes max(1, ceil(b /
//   chunk)) chunks (an empty message is a header alone). A send so returns without its receiver when its chunks
//   fit in the pair's free slots (the buffering Communicator::send documents); a larger message goes in rounds,
//   the receiver copying out one chunk while the sender fills the other.
// - Matching. The k-th message A sends to B is the k-th that B receives from A: both count messages per pair
//   (Pair), and every header carries the message's number, which the receiver checks (a different one is a bug:
//   kInternal). A receive whose count or dtype differs from the header's refuses the message: it records the
//   message's number with its own count and dtype in in[A] (release on `refused`) and throws kMismatch naming both
//   ranks. A learns of it wherever it waits or starts next: its send waiting for a slot, its next point-to-point
//   run, a collective's wait (HostEngine), Communicator::check() (Backend::poll_errors). Its error names both ranks
//   and both sides' counts: A's own is the header of the refused message's first chunk, which B never consumed.
// - Runs. A submission (one call, or a group) runs its collectives first, in issue order and packed as ever, so
//   the same on every rank whatever point-to-point operations a rank mixed in; then all its sends and receives
//   together (P2pPlan). A pass of the progress loop moves at most one chunk per lane (one direction with one
//   peer; a lane's messages move in issue order): a group that sends to B and receives from B never deadlocks,
//   whatever the sizes, as no transfer waits for another of its run to finish. Messages to itself are matched
//   within the submission and copied before the loop.
// - Waits. Without progress a run spins, then yields (HostPoll), and every few polls checks abort (kAborted), a
//   dead peer or a waited-for peer that left (kPeerDead naming it), refusals of this rank's messages (kMismatch),
//   and its deadline, Config::timeout after the last chunk moved (kTimeout naming the peers it waits for). All are
//   fatal and sticky, like the collectives' errors.

namespace {

size_t chunks_of(size_t bytes, size_t chunk) { return bytes == 0 ? 1 : (bytes + chunk - 1) / chunk; }

int slot_of(uint64_t chunk) { return static_cast<int>((chunk - 1) % kP2pSlots); }

std::string dtype_name(uint32_t dtype) {
  const auto d = static_cast<DataType>(dtype);
  return is_valid(d) ? std::string(to_string(d)) : fmt::format("dtype {}", dtype);
}

// The kMismatch of message `message` from `sender` to `receiver`, as rank `me` reports it.
Error mismatch_error(int me, int sender, int receiver, uint64_t message, const P2pChunkHeader& sent, uint64_t count,
                     uint32_t dtype) {
  return Error(ErrorCode::kMismatch,
               fmt::format("rank {}: message {} from rank {} to rank {}: the send has count {} of {}, the receive "
                           "count {} of {} (the k-th send from a rank to a peer matches the peer's k-th receive from "
                           "it)",
                           me, message, sender, receiver, sent.count, dtype_name(sent.dtype), count, dtype_name(dtype)),
               __FILE__, __LINE__, {sender, receiver});
}

}  // namespace

bool p2p_refused(const HostSegments& seg, int me, int n) {
  for (int p = 0; p < n; ++p) {
    if (p != me && seg.p2p_pad(p)->in[me].refused.load(std::memory_order_acquire) != 0) return true;
  }
  return false;
}

std::optional<Error> p2p_refusal(const HostSegments& seg, int me, int n) {
  for (int p = 0; p < n; ++p) {
    const P2pInbox& in = seg.p2p_pad(p)->in[me];
    const uint64_t message = p == me ? 0 : in.refused.load(std::memory_order_acquire);
    if (message == 0) continue;
    // The refused message's first chunk is the one after the last that p consumed; its slot still holds it.
    const uint64_t first = in.consumed.load(std::memory_order_acquire) + 1;
    const P2pChunkHeader sent = seg.p2p_pad(me)->out[p].chunks[slot_of(first)];
    return mismatch_error(me, me, p, message, sent, in.refused_count, in.refused_dtype);
  }
  return std::nullopt;
}

HostP2p::HostP2p(CommContext& ctx, HostSegments& seg)
    : ctx_(ctx), seg_(seg), me_(ctx.ranks.rank), n_(ctx.ranks.world_size), pairs_(ctx.ranks.world_size) {}

void HostP2p::run(const Ops& ops, const P2pPlan& plan) {
  ctx_.throw_if_failed();
  if (std::optional<Error> refusal = p2p_refusal(seg_, me_, n_)) throw *refusal;
  for (const auto& [s, r] : plan.self) {
    const Request& send = ops[s].first;
    if (send.count > 0) std::memmove(ops[r].first.out, send.in, send.count * send.elem_size());
  }
  Batch b = make_batch(ops, plan);
  progress(b);
}

HostP2p::Batch HostP2p::make_batch(const Ops& ops, const P2pPlan& plan) {
  Batch b{.sends = std::vector<Lane>(n_), .recvs = std::vector<Lane>(n_)};
  for (size_t i : plan.transfers) {
    const Request& r = ops[i].first;
    const bool send = r.p2p == P2pDir::kSend;
    Pair& pair = pairs_[r.peer];
    const uint64_t message = send ? ++pair.sent_messages : ++pair.received_messages;
    const size_t bytes = r.count * r.elem_size();
    (send ? b.sends : b.recvs)[r.peer].items.push_back(
        Transfer{.r = &r, .message = message, .bytes = bytes, .chunks = chunks_of(bytes, seg_.p2p_chunk())});
    ++b.pending;
  }
  return b;
}

void HostP2p::progress(Batch& b) {
  HostPoll poll;
  Clock::time_point deadline = Clock::now() + ctx_.config.timeout;
  bool moved = false;  // since the deadline was last set
  while (b.pending > 0) {
    if (advance(b)) {
      moved = true;
      poll.reset();
      continue;
    }
    poll.pause();
    if (!poll.check_due()) continue;
    if (moved) deadline = Clock::now() + ctx_.config.timeout;
    moved = false;
    // What stops the run may have come just after a chunk that the last pass missed: one more pass first.
    if (must_stop(b, deadline) && !advance(b)) fail(b);
  }
}

bool HostP2p::advance(Batch& b) {
  bool moved = false;
  for (int p = 0; p < n_; ++p) {
    moved |= advance_lane(b, b.sends[p], p, &HostP2p::post_chunk);
    moved |= advance_lane(b, b.recvs[p], p, &HostP2p::take_chunk);
  }
  return moved;
}

bool HostP2p::advance_lane(Batch& b, Lane& lane, int peer, Step step) {
  if (lane.done()) return false;
  Transfer& t = lane.items[lane.head];
  if (!(this->*step)(t, peer)) return false;
  if (++t.next == t.chunks) {
    ++lane.head;
    --b.pending;
  }
  return true;
}

bool HostP2p::post_chunk(Transfer& t, int peer) {
  Pair& pair = pairs_[peer];
  const uint64_t c = pair.sent_chunks + 1;
  if (c > kP2pSlots && seg_.p2p_pad(peer)->in[me_].consumed.load(std::memory_order_acquire) < c - kP2pSlots) {
    return false;  // both slots hold chunks the peer has not copied out
  }
  const size_t offset = t.next * seg_.p2p_chunk(), len = std::min(seg_.p2p_chunk(), t.bytes - offset);
  if (len > 0) std::memcpy(seg_.p2p_slot(me_, peer, slot_of(c)), static_cast<const uint8_t*>(t.r->in) + offset, len);
  P2pOutbox& box = seg_.p2p_pad(me_)->out[peer];
  box.chunks[slot_of(c)] = P2pChunkHeader{
      .message = t.message, .count = t.r->count, .dtype = static_cast<uint32_t>(t.r->dtype), .reserved = 0};
  box.posted.store(c, std::memory_order_release);  // payload and header are visible before the count says so
  pair.sent_chunks = c;
  return true;
}

bool HostP2p::take_chunk(Transfer& t, int peer) {
  Pair& pair = pairs_[peer];
  const uint64_t c = pair.received_chunks + 1;
  const P2pOutbox& box = seg_.p2p_pad(peer)->out[me_];
  if (box.posted.load(std::memory_order_acquire) < c) return false;
  check_chunk(t, peer, box.chunks[slot_of(c)]);
  const size_t offset = t.next * seg_.p2p_chunk(), len = std::min(seg_.p2p_chunk(), t.bytes - offset);
  if (len > 0) std::memcpy(static_cast<uint8_t*>(t.r->out) + offset, seg_.p2p_slot(peer, me_, slot_of(c)), len);
  seg_.p2p_pad(me_)->in[peer].consumed.store(c, std::memory_order_release);  // the slot is the sender's again
  pair.received_chunks = c;
  return true;
}

void HostP2p::check_chunk(const Transfer& t, int peer, const P2pChunkHeader& h) {
  SYMCOMM_CHECK(h.message == t.message, kInternal,
                "rank {}: a chunk of message {} from rank {} came where message {} "
                "was due",
                me_, h.message, peer, t.message);
  if (h.count != t.r->count || h.dtype != static_cast<uint32_t>(t.r->dtype)) refuse(t, peer, h);
}

void HostP2p::refuse(const Transfer& t, int peer, const P2pChunkHeader& h) {
  P2pInbox& in = seg_.p2p_pad(me_)->in[peer];
  in.refused_count = t.r->count;
  in.refused_dtype = static_cast<uint32_t>(t.r->dtype);
  in.refused.store(t.message, std::memory_order_release);  // count and dtype are visible before the number
  throw mismatch_error(me_, peer, me_, t.message, h, t.r->count, static_cast<uint32_t>(t.r->dtype));
}

uint64_t HostP2p::waiting_mask(const Batch& b) const {
  uint64_t mask = 0;
  for (int p = 0; p < n_; ++p) {
    if (!b.sends[p].done() || !b.recvs[p].done()) mask |= uint64_t{1} << p;
  }
  return mask;
}

bool HostP2p::must_stop(const Batch& b, Clock::time_point deadline) const {
  return ctx_.aborted.load(std::memory_order_relaxed) || ctx_.mesh->dead_mask() ||
         (ctx_.mesh->left_mask() & waiting_mask(b)) || p2p_refused(seg_, me_, n_) || Clock::now() >= deadline;
}

void HostP2p::fail(const Batch& b) const {
  if (ctx_.aborted.load()) SYMCOMM_THROW(kAborted, "rank {}: {} aborted", me_, pending_text(b));
  // A peer that refused this rank's message failed for that reason, whether or not it left since.
  if (std::optional<Error> refusal = p2p_refusal(seg_, me_, n_)) throw *refusal;
  const uint64_t waiting = waiting_mask(b);
  const uint64_t dead = ctx_.mesh->dead_mask(), left = ctx_.mesh->left_mask() & waiting;
  if (dead | left) throw ctx_.peer_lost_error(dead, left, __FILE__, __LINE__);
  std::vector<int> peers;  // what is left: the deadline passed
  for (int p = 0; p < n_; ++p) {
    if (waiting & (uint64_t{1} << p)) peers.push_back(p);
  }
  throw Error(ErrorCode::kTimeout,
              fmt::format("rank {}: {} timed out: no chunk moved for {} ms waiting for rank(s) {} (they did not send "
                          "or receive the matching messages, or are still in an earlier operation)",
                          me_, pending_text(b), ctx_.config.timeout.count(), fmt::join(peers, ", ")),
              __FILE__, __LINE__, peers);
}

std::string HostP2p::pending_text(const Batch& b) const {
  for (const std::vector<Lane>* lanes : {&b.sends, &b.recvs}) {
    for (const Lane& lane : *lanes) {
      if (lane.done()) continue;
      const Transfer& t = lane.items[lane.head];
      return fmt::format("{} (message {} on its pair, chunk {} of {})", t.r->describe(), t.message, t.next + 1,
                         t.chunks);
    }
  }
  return "point-to-point run";
}

}  // namespace symcomm::detail
