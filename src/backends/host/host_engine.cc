#include "backends/host/host_engine.h"

#include <fmt/format.h>

#include <cstring>

#include "backends/host/host_p2p.h"
#include "backends/host/host_poll.h"
#include "base/check.h"

namespace symcomm::detail {
namespace {

bool reached(uint64_t ready, uint64_t step) { return static_cast<int64_t>(ready - step) >= 0; }

}  // namespace

HostEngine::HostEngine(CommContext& ctx, HostSegments& seg)
    : ctx_(ctx), seg_(seg), me_(ctx.ranks.rank), n_(ctx.ranks.world_size), seen_(ctx.ranks.world_size) {}

size_t HostEngine::round_elems(size_t elem_size, int blocks) const {
  size_t per = seg_.scratch_half() / (elem_size * static_cast<size_t>(blocks));
  size_t align = 64 / elem_size;  // keep rounds on cache-line boundaries
  per = per / align * align;
  SYMCOMM_CHECK(per > 0, kInvalidArgument, "SYMCOMM_SCRATCH_BYTES is too small for {} blocks", blocks);
  return per;
}

void HostEngine::publish(const Request& r, uint64_t round, uint64_t data_offset, uint64_t stride, uint32_t flags) {
  StepHeader& h = seg_.pad(me_)->headers[step_ & 1];
  h.step = step_;
  h.kind = static_cast<uint32_t>(r.kind);
  h.dtype = static_cast<uint32_t>(r.dtype);
  h.op = static_cast<uint32_t>(r.has_reduction() ? r.op : ReduceOp::kSum);
  h.root = static_cast<uint32_t>(r.kind == Collective::kBroadcast ? r.root : 0);
  h.count = r.count;
  h.round = round;
  h.data_offset = data_offset;
  h.stride = stride;
  h.flags = flags;
  h.variant = variant_;
  h.out_offset = offered_out_;
  offered_out_ = kNoData;
  // Release: the header and the published data are visible before `ready` says so.
  seg_.pad(me_)->ready.store(step_, std::memory_order_release);
}

void HostEngine::exchange(const Request& r, uint64_t round, const void* src, size_t src_stride, int blocks,
                          size_t block_bytes, bool allow_zero_copy, UnreadBytes unread) {
  size_t span = blocks > 0 ? (blocks - 1) * src_stride + block_bytes : 0;
  std::optional<size_t> zc = allow_zero_copy ? seg_.own_heap_offset(src, span) : std::nullopt;
  if (n_ == 1) {
    publish(r, round, kNoData, 0, 0);  // nobody reads: the algorithms use their own buffers directly
  } else if (zc) {
    publish(r, round, *zc, src_stride, kStepZeroCopy);
  } else {
    uint8_t* dst = seg_.base(me_) + seg_.scratch_offset(step_ & 1);
    SYMCOMM_CHECK(static_cast<size_t>(blocks) * block_bytes <= seg_.scratch_half(), kInternal,
                  "round of {} bytes exceeds the scratch half", blocks * block_bytes);
    const auto* from = static_cast<const uint8_t*>(src);
    if (blocks == 1 && unread.lo < unread.hi && unread.hi <= block_bytes) {
      std::memcpy(dst, from, unread.lo);
      std::memcpy(dst + unread.hi, from + unread.hi, block_bytes - unread.hi);
    } else {
      for (int d = 0; d < blocks; ++d) std::memcpy(dst + d * block_bytes, from + d * src_stride, block_bytes);
    }
    publish(r, round, seg_.scratch_offset(step_ & 1), block_bytes, 0);
  }
  wait_and_validate(r, round);
}

void HostEngine::offer_output(const void* out, size_t bytes) {
  std::optional<size_t> off = seg_.own_heap_offset(out, bytes);
  offered_out_ = off ? *off : kNoData;
}

bool HostEngine::all_outputs_offered() const {
  if (seg_.pad(me_)->headers[step_ & 1].out_offset == kNoData) return false;
  for (int p = 0; p < n_; ++p) {
    if (p != me_ && seen_[p].out_offset == kNoData) return false;
  }
  return true;
}

void HostEngine::exchange_scratch(const Request& r, uint64_t round) {
  publish(r, round, seg_.scratch_offset(step_ & 1), 0, 0);
  wait_and_validate(r, round);
}

void HostEngine::exchange_empty(const Request& r, uint64_t round) {
  publish(r, round, kNoData, 0, 0);
  wait_and_validate(r, round);
}

uint8_t* HostEngine::next_scratch() const { return seg_.base(me_) + seg_.scratch_offset((step_ + 1) & 1); }

const uint8_t* HostEngine::peer_block(int p, int d) const {
  const StepHeader& h = seen_[p];
  return seg_.base(p) + h.data_offset + static_cast<size_t>(d) * h.stride;
}

void HostEngine::finish_op(const Request& r) {
  if (op_zero_copy_) {
    exchange_empty(r, ~uint64_t{0});
    end_step();
  }
  op_zero_copy_ = false;
}

void HostEngine::wait_and_validate(const Request& r, uint64_t round) {
  const uint64_t s = step_;
  for (int p = 0; p < n_; ++p) {
    if (p == me_) continue;
    const std::atomic<uint64_t>& ready = seg_.pad(p)->ready;
    for (HostPoll poll; !reached(ready.load(std::memory_order_acquire), s);) {
      poll.pause();
      if (poll.check_due()) {
        // Any dead peer breaks the communicator; a peer that left cleanly matters only if we wait for it. A peer
        // that refused one of this rank's messages (NOTE [point-to-point]) failed and will not arrive.
        if (ctx_.aborted.load(std::memory_order_relaxed) || ctx_.mesh->dead_mask() ||
            (ctx_.mesh->left_mask() & (uint64_t{1} << p)) || Clock::now() >= deadline_at_ ||
            p2p_refused(seg_, me_, n_)) {
          if (reached(ready.load(std::memory_order_acquire), s)) break;
          fail_wait(r, s, p);
        }
      }
    }
    StepHeader h = seg_.pad(p)->headers[s & 1];
    auto mismatch = [&](const char* field, const std::string& mine, const std::string& theirs) {
      throw Error(ErrorCode::kMismatch,
                  fmt::format("rank {} and rank {} disagree on the {} of step {}: {} here, {} there; this rank "
                              "runs {} (a different collective, count, dtype, op or root, or a skipped call)",
                              me_, p, field, s, mine, theirs, r.describe()),
                  __FILE__, __LINE__, {me_, p});
    };
    auto num = [](uint64_t v) { return std::to_string(v); };
    auto name = [](auto e) { return std::string(to_string(e)); };
    if (h.step != s) mismatch("step", num(s), num(h.step));
    if (h.kind != static_cast<uint32_t>(r.kind))
      mismatch("collective", name(r.kind), name(static_cast<Collective>(h.kind)));
    if (h.dtype != static_cast<uint32_t>(r.dtype))
      mismatch("dtype", name(r.dtype), name(static_cast<DataType>(h.dtype)));
    if (r.has_reduction() && h.op != static_cast<uint32_t>(r.op))
      mismatch("op", name(r.op), name(static_cast<ReduceOp>(h.op)));
    if (r.kind == Collective::kBroadcast && h.root != static_cast<uint32_t>(r.root))
      mismatch("root", num(r.root), num(h.root));
    if (h.count != r.count) mismatch("count", num(r.count), num(h.count));
    if (h.round != round) mismatch("round", num(round), num(h.round));
    if (h.variant != variant_) {  // NOTE [step variant]
      auto variant = [&](uint32_t v) {
        return r.kind == Collective::kAllReduce ? std::string(v == 2 ? "two-shot" : "one-shot")
                                                : fmt::format("bucket layout {:#x}", v);
      };
      mismatch(r.kind == Collective::kAllReduce ? "algorithm" : "input layout", variant(variant_), variant(h.variant));
    }
    if (h.flags & kStepZeroCopy) op_zero_copy_ = true;
    seen_[p] = h;
  }
  if (seg_.pad(me_)->headers[s & 1].flags & kStepZeroCopy) op_zero_copy_ = true;
}

void HostEngine::fail_wait(const Request& r, uint64_t s, int peer) {
  if (ctx_.aborted.load()) SYMCOMM_THROW(kAborted, "rank {}: {} aborted at step {}", me_, r.describe(), s);
  // A peer that refused this rank's message (NOTE [point-to-point]) failed for that reason, even if it left since.
  if (std::optional<Error> refusal = p2p_refusal(seg_, me_, n_)) throw *refusal;
  uint64_t dead = ctx_.mesh->dead_mask(), left = ctx_.mesh->left_mask() & (uint64_t{1} << peer);
  if (dead | left) throw ctx_.peer_lost_error(dead, left, __FILE__, __LINE__);
  std::vector<int> missing;
  for (int p = 0; p < n_; ++p) {
    if (p != me_ && !reached(seg_.pad(p)->ready.load(std::memory_order_acquire), s)) missing.push_back(p);
  }
  throw Error(ErrorCode::kTimeout,
              fmt::format("rank {}: {} timed out after {} ms at step {} waiting for rank(s) {} (they did not "
                          "arrive: still in an earlier collective, or never called this one)",
                          me_, r.describe(), ctx_.config.timeout.count(), s, fmt::join(missing, ", ")),
              __FILE__, __LINE__, missing);
}

}  // namespace symcomm::detail
