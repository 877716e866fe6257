#pragma once
// A ring of the last N operations of a communicator (seq, kind, dtype, count, algorithm, state), dumped to
// the log on error, timeout or abort so that a hang report names the op where ranks diverged.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "symcomm/types.h"

namespace symcomm::detail {

enum class OpState : uint8_t { kIssued, kRunning, kDone, kFailed };

struct OpRecord {
  uint64_t seq = 0;
  Collective kind = Collective::kBarrier;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
  Algorithm algo = Algorithm::kAuto;
  OpState state = OpState::kIssued;
};

/// Copies are handles on the same records: a Work of an asynchronous collective keeps one, so it can mark its
/// records after the communicator (and its own OpHistory) is gone.
class OpHistory {
 public:
  explicit OpHistory(size_t capacity = 64) : s_(std::make_shared<State>()) { s_->capacity = capacity ? capacity : 1; }
  void set_capacity(size_t capacity);
  /// Appends a record and returns its seq (1, 2, ...).
  uint64_t record(OpRecord r);
  void set_state(uint64_t seq, OpState state);
  std::vector<OpRecord> snapshot() const;
  std::string dump() const;

 private:
  struct State {
    std::mutex mu;
    size_t capacity = 64;
    uint64_t next_seq = 1;
    std::vector<OpRecord> ring;
  };
  std::shared_ptr<State> s_;
};

}  // namespace symcomm::detail
