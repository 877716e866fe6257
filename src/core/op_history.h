#pragma once
// A ring of the last N operations of a communicator (seq, kind, dtype, count, algorithm, state), dumped to
// the log on error, timeout or abort so that a hang report names the op where ranks diverged.

#include <cstdint>
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

class OpHistory {
 public:
  explicit OpHistory(size_t capacity = 64) : capacity_(capacity ? capacity : 1) {}
  void set_capacity(size_t capacity);
  /// Appends a record and returns its seq (1, 2, ...).
  uint64_t record(OpRecord r);
  void set_state(uint64_t seq, OpState state);
  std::vector<OpRecord> snapshot() const;
  std::string dump() const;

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  uint64_t next_seq_ = 1;
  std::vector<OpRecord> ring_;
};

}  // namespace symcomm::detail
