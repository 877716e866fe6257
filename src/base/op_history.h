#pragma once
// A ring of the last N operations of a communicator (seq, kind, dtype, count, algorithm, state), reported on
// the communicator's first fatal error so that a hang report names the op where ranks diverged: a short form
// in the log and every record in a file (NOTE [op record] in src/backends/comm_context.cc).

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/p2p_dir.h"
#include "symcomm/config.h"
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
  P2pDir p2p = P2pDir::kNone;  ///< a send or receive (then `kind`, `op` and `algo` do not apply)
  int peer = -1;               ///< the rank a send goes to or a receive comes from
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
  /// The records, in seq order.
  std::vector<OpRecord> snapshot() const;

 private:
  struct State {
    std::mutex mu;
    size_t capacity = 64;
    uint64_t next_seq = 1;
    std::vector<OpRecord> ring;
  };
  std::shared_ptr<State> s_;
};

const char* op_state_name(OpState s);
/// Every field of a record on one line: "op 12 all_reduce dtype=float32 op=sum count=1024 algo=one_shot done";
/// point-to-point: "op 13 send peer=2 dtype=int8 count=7 done".
std::string format_op(const OpRecord& r);

/// The short form of a history (`ops` in seq order) logged with a fatal error, without indentation: the first
/// record not done (failed, running or issued: where the error was found), or the last one when all are done,
/// and up to `before` records before it, one line each (format_op); the records before those counted by state
/// in one line ("ops 38-97: 60 done"), those after it in another ("ops 102-103: 2 issued"). At most before + 3
/// lines; none for an empty history.
std::vector<std::string> compact_record(const std::vector<OpRecord>& ops, size_t before = 3);

/// Directory of the op record files: config.trace_dir, or where it is empty $TMPDIR, else /tmp (defined in
/// src/core/config.cc, the one place that reads the environment).
std::string trace_dir_of(const Config& config);

}  // namespace symcomm::detail
