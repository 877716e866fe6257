#include "base/op_history.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace symcomm::detail {

const char* op_state_name(OpState s) {
  switch (s) {
    case OpState::kIssued: return "issued";
    case OpState::kRunning: return "running";
    case OpState::kDone: return "done";
    case OpState::kFailed: return "failed";
  }
  return "?";
}

std::string format_op(const OpRecord& r) {
  if (r.p2p != P2pDir::kNone) {
    return fmt::format("op {} {} peer={} dtype={} count={} {}", r.seq, p2p_dir_name(r.p2p), r.peer, to_string(r.dtype),
                       r.count, op_state_name(r.state));
  }
  return fmt::format("op {} {} dtype={} op={} count={} algo={} {}", r.seq, to_string(r.kind), to_string(r.dtype),
                     to_string(r.op), r.count, to_string(r.algo), op_state_name(r.state));
}

namespace {
// "ops 38-97: 58 done, 2 failed" for ops[begin, end) (non-empty), states in the order of OpState.
std::string count_by_state(const std::vector<OpRecord>& ops, size_t begin, size_t end) {
  constexpr OpState kStates[] = {OpState::kIssued, OpState::kRunning, OpState::kDone, OpState::kFailed};
  size_t counts[std::size(kStates)] = {};
  for (size_t i = begin; i < end; ++i) {
    for (size_t s = 0; s < std::size(kStates); ++s) counts[s] += ops[i].state == kStates[s];
  }
  std::string out = end - begin == 1 ? fmt::format("op {}:", ops[begin].seq)
                                     : fmt::format("ops {}-{}:", ops[begin].seq, ops[end - 1].seq);
  const char* sep = " ";
  for (size_t s = 0; s < std::size(kStates); ++s) {
    if (counts[s] == 0) continue;
    out += fmt::format("{}{} {}", sep, counts[s], op_state_name(kStates[s]));
    sep = ", ";
  }
  return out;
}
}  // namespace

std::vector<std::string> compact_record(const std::vector<OpRecord>& ops, size_t before) {
  std::vector<std::string> lines;
  if (ops.empty()) return lines;
  const auto not_done =
      std::find_if(ops.begin(), ops.end(), [](const OpRecord& r) { return r.state != OpState::kDone; });
  const size_t focus = not_done == ops.end() ? ops.size() - 1 : static_cast<size_t>(not_done - ops.begin());
  const size_t first = focus > before ? focus - before : 0;
  if (first > 0) lines.push_back(count_by_state(ops, 0, first));
  for (size_t i = first; i <= focus; ++i) lines.push_back(format_op(ops[i]));
  if (focus + 1 < ops.size()) lines.push_back(count_by_state(ops, focus + 1, ops.size()));
  return lines;
}

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

}  // namespace symcomm::detail
