#include "core/op_history.h"

#include <fmt/format.h>

#include <algorithm>

namespace symcomm::detail {

namespace {
const char* state_name(OpState s) {
  switch (s) {
    case OpState::kIssued: return "issued";
    case OpState::kRunning: return "running";
    case OpState::kDone: return "done";
    case OpState::kFailed: return "failed";
  }
  return "?";
}
}  // namespace

void OpHistory::set_capacity(size_t capacity) {
  std::lock_guard lock(mu_);
  capacity_ = capacity ? capacity : 1;
}

uint64_t OpHistory::record(OpRecord r) {
  std::lock_guard lock(mu_);
  r.seq = next_seq_++;
  if (ring_.size() < capacity_) {
    ring_.push_back(r);
  } else {
    ring_[(r.seq - 1) % capacity_] = r;
  }
  return r.seq;
}

void OpHistory::set_state(uint64_t seq, OpState state) {
  std::lock_guard lock(mu_);
  for (auto& r : ring_) {
    if (r.seq == seq) r.state = state;
  }
}

std::vector<OpRecord> OpHistory::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<OpRecord> out = ring_;
  std::sort(out.begin(), out.end(), [](const OpRecord& a, const OpRecord& b) { return a.seq < b.seq; });
  return out;
}

std::string OpHistory::dump() const {
  std::string out;
  for (const OpRecord& r : snapshot()) {
    out += fmt::format("  op {} {} dtype={} op={} count={} algo={} {}\n", r.seq, to_string(r.kind), to_string(r.dtype),
                       to_string(r.op), r.count, to_string(r.algo), state_name(r.state));
  }
  return out;
}

}  // namespace symcomm::detail
