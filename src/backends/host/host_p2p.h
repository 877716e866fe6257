#pragma once
// HostP2p: the host backend's point-to-point sends and receives, over per-pair mailboxes in the signal pads and
// staging chunks in the senders' segments (NOTE [point-to-point] in host_p2p.cc).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "algos/p2p_plan.h"
#include "backends/backend.h"
#include "backends/host/host_heap.h"

namespace symcomm::detail {

class HostP2p {
 public:
  using Ops = std::vector<std::pair<Request, Algorithm>>;

  HostP2p(CommContext& ctx, HostSegments& seg);

  /// Runs the sends and receives of `ops` that `plan` lists (its transfers and its messages to this rank itself)
  /// together; returns once every receive has its data and every send is staged. Throws kAborted, kPeerDead,
  /// kMismatch or kTimeout (NOTE [point-to-point]).
  void run(const Ops& ops, const P2pPlan& plan);

 private:
  /// One message of a run: its request, its number on its ordered pair, its size in bytes and in chunks, and
  /// the chunks moved so far.
  struct Transfer {
    const Request* r;
    uint64_t message;
    size_t bytes;
    size_t chunks;
    size_t next = 0;
  };
  /// The transfers of one direction with one peer, in issue order; only the first unfinished one moves.
  struct Lane {
    std::vector<Transfer> items;
    size_t head = 0;
    bool done() const { return head == items.size(); }
  };
  struct Batch {
    std::vector<Lane> sends, recvs;  ///< by peer
    size_t pending = 0;              ///< transfers not finished
  };
  /// What this rank has done on each ordered pair with a peer, in chunks and messages.
  struct Pair {
    uint64_t sent_chunks = 0, sent_messages = 0;
    uint64_t received_chunks = 0, received_messages = 0;
  };
  using Step = bool (HostP2p::*)(Transfer&, int);

  Batch make_batch(const Ops& ops, const P2pPlan& plan);
  void progress(Batch& b);
  /// One pass: at most one chunk per lane. True if any chunk moved.
  bool advance(Batch& b);
  bool advance_lane(Batch& b, Lane& lane, int peer, Step step);
  /// Stages the next chunk of `t` for `peer` if a slot is free.
  bool post_chunk(Transfer& t, int peer);
  /// Copies out the next chunk of `t` from `peer` if it is posted.
  bool take_chunk(Transfer& t, int peer);
  void check_chunk(const Transfer& t, int peer, const P2pChunkHeader& h);
  [[noreturn]] void refuse(const Transfer& t, int peer, const P2pChunkHeader& h);
  /// Bits of the peers that an unfinished lane of `b` waits for.
  uint64_t waiting_mask(const Batch& b) const;
  /// Abort, a lost peer, a refusal of this rank's messages or the deadline.
  bool must_stop(const Batch& b, Clock::time_point deadline) const;
  /// Throws the error that stopped the run (must_stop()).
  [[noreturn]] void fail(const Batch& b) const;
  /// The first unfinished transfer of `b`, for error messages.
  std::string pending_text(const Batch& b) const;

  CommContext& ctx_;
  HostSegments& seg_;
  int me_;
  int n_;
  std::vector<Pair> pairs_;
};

/// True if a peer refused a message of rank `me` (P2pInbox::refused) among `n` ranks.
bool p2p_refused(const HostSegments& seg, int me, int n);
/// The Error(kMismatch) of the first such refusal, naming both ranks; nullopt where there is none.
std::optional<Error> p2p_refusal(const HostSegments& seg, int me, int n);

}  // namespace symcomm::detail
