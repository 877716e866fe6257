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
  std::lock_guard lock(s_->mu);
  s_->capacity = capacity ? capacity : 1;
}

uint64_t OpHistory::record(OpRecord r) {
  std::lock_guard lock(s_->mu);
  r.seq = s_->next_seq++;
  if (s_->ring.size() < s_->capacity) {
    s_->ring.push_back(r);
  } else {
    s_->ring[(r.seq - 1) % s_->capacity] = r;
  }
  return r.seq;
}

void OpHistory::set_state(uint64_t seq, OpState state) {
  std::lock_guard lock(s_->mu);
  for (auto& r : s_->ring) {
    if (r.seq == seq) r.state = state;
  }
}

std::vector<OpRecord> OpHistory::snapshot() const {
  std::lock_guard lock(s_->mu);
  std::vector<OpRecord> out = s_->ring;
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
