#pragma once
// HostEngine: the step protocol every host collective is built from.
//
// NOTE [host step protocol]
// A collective is a sequence of steps, numbered identically on every rank (a per-communicator counter that
// only grows). In step s each rank (1) publishes: writes what it offers (a StepHeader naming where its data
// is: in its scratch or, zero-copy, in its own heap buffer) into headers[s & 1] of its own signal pad, then
// stores ready = s with release order; (2) waits until every peer's ready >= s (acquire), reads their
// headers and checks that they describe the same collective (kind, dtype, op, root, count, round) — a
// mismatch or a skipped collective is caught here instead of corrupting memory; (3) reads the peers' data
// it needs. A rank publishes s + 1 only after finishing every read of step s, and it waited for all peers
// in step s, so when a rank writes its scratch half or header slot (s + 2) & 1 again, nobody is still
// reading them: the double buffers are safe without a second barrier per step. Ranks only ever write their
// own memory (pull model). When any rank published zero-copy in an op, one more empty step ends the op so
// that no peer still reads a user buffer after its owner's call returned.
//
// Every wait spins briefly, then yields (ranks may outnumber cores), and checks the abort flag, the mesh's
// dead/left masks and the deadline; a timeout names the ranks that did not arrive.
//
// NOTE [step variant] The header's kind, dtype, op, root, count and round do not tell apart everything ranks
// can disagree on: a one-shot and a two-shot all-reduce (each rank may force its own algorithm) number their
// steps alike, and bucket flushes of one count can lay their inputs out differently. Ranks that disagree
// there would finish the op with wrong elements and no error (the two-shot reading a whole round from the
// one-shot's shorter block, past its end). So every header also carries the op's variant (begin_op()): the
// all-reduce's algorithm, a flush's layout fold (host_reduce_scatter.cc); a different variant is kMismatch.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "backends/host/host_heap.h"
#include "base/overlap.h"

namespace symcomm::detail {

/// Bytes [lo, hi) of a published block that no peer reads (HostEngine::exchange).
struct UnreadBytes {
  size_t lo = 0, hi = 0;
};

class HostEngine {
 public:
  HostEngine(CommContext& ctx, HostSegments& seg);

  int rank() const { return me_; }
  int world_size() const { return n_; }
  size_t scratch_half() const { return seg_.scratch_half(); }

  /// Starts an op: its deadline runs from now; `variant` goes into every header of the op and must be the
  /// same on every rank (NOTE [step variant]).
  void begin_op(uint32_t variant = 0) {
    deadline_at_ = Clock::now() + ctx_.config.timeout;
    op_zero_copy_ = false;
    variant_ = variant;
  }

  /// Publishes `blocks` blocks of `block_bytes`, block d at src + d * src_stride. Zero-copy (peers read the
  /// user buffer) if allowed and the span lies in the heap; else the blocks are copied contiguously into
  /// this step's scratch half, all but `unread` of a single block. Then waits for every peer's step and
  /// validates their headers.
  void exchange(const Request& r, uint64_t round, const void* src, size_t src_stride, int blocks, size_t block_bytes,
                bool allow_zero_copy, UnreadBytes unread = {});
  /// True if [p, p + bytes) lies in this rank's heap: an exchange from there is zero-copy.
  bool in_own_heap(const void* p, size_t bytes) const { return seg_.own_heap_offset(p, bytes).has_value(); }
  /// Offers this rank's output of the coming step to the peers (they may write into it; see
  /// host_two_shot.cc): recorded in the next published header if [out, out + bytes) lies in the heap.
  void offer_output(const void* out, size_t bytes);
  /// After an exchange: true if every rank offered its output in this step.
  bool all_outputs_offered() const;
  /// After an exchange in which all outputs were offered: peer p's output of this round.
  uint8_t* peer_output(int p) const { return seg_.base(p) + seen_[p].out_offset; }

  /// Publishes data already in this rank's scratch half for the *current* step (see next_scratch()).
  void exchange_scratch(const Request& r, uint64_t round);
  /// Publishes nothing (header only) and waits for every peer.
  void exchange_empty(const Request& r, uint64_t round);

  /// After an exchange: peer p's published block d (valid until the step ends).
  const uint8_t* peer_block(int p, int d) const;
  /// Where this rank may stage data to publish in the next step (its scratch half for step + 1).
  uint8_t* next_scratch() const;
  /// Ends the current step.
  void end_step() { ++step_; }
  /// Ends the op: one empty step if any rank published zero-copy during it.
  void finish_op(const Request& r);
  /// Elements per round such that `blocks` blocks of that many elements fit in a scratch half.
  size_t round_elems(size_t elem_size, int blocks) const;

 private:
  void publish(const Request& r, uint64_t round, uint64_t data_offset, uint64_t stride, uint32_t flags);
  void wait_and_validate(const Request& r, uint64_t round);
  [[noreturn]] void fail_wait(const Request& r, uint64_t step, int peer);

  CommContext& ctx_;
  HostSegments& seg_;
  int me_;
  int n_;
  uint64_t step_ = 1;
  bool op_zero_copy_ = false;
  uint32_t variant_ = 0;
  uint64_t offered_out_ = kNoData;  ///< consumed by the next publish()
  Clock::time_point deadline_at_;
  std::vector<StepHeader> seen_;  ///< peers' headers of the current step
};

}  // namespace symcomm::detail
