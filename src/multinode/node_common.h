#pragma once
// What both communicators that span nodes do alike (symcomm/multinode.h over MPI, symcomm/multinode_cuda.h over
// NCCL): the path of a call, the naming of a node communicator's errors and of dead ranks on this host, and the
// reduction the stages run (base/overlap.h: the aliasing test of their buffers). In libsymcomm, beside the CUDA one.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "algos/node_plan.h"
#include "algos/request.h"
#include "base/overlap.h"
#include "symcomm/error.h"

namespace symcomm::detail {

/// The path of call `r` asked with `h` (Error(kInvalidArgument) for an invalid hierarchy, or one the call or layout
/// has no path for).
NodePath call_path(const NodeLayout& layout, const NodeThresholds& thresholds, const Request& r, Hierarchy h);

/// Error `e` of the node communicator of `node` (its ranks are local indices there) as rank `rank` of the job
/// reports it: the ranks named are the job's, and the message says which local rank each is.
Error node_error(const NodeLayout& layout, int rank, int node, const Error& e, const char* what);

/// Throws Error(kMismatch) naming the ranks whose options (`all`, by rank) differ from this rank's (`mine`).
void check_same_options(int rank, const std::string& mine, const std::vector<std::string>& all);

/// Error(kPeerDead) naming every rank of `host_peers` whose process (pids[rank]) has ended, if any.
std::optional<Error> dead_host_peers(int rank, const std::vector<int>& host_peers, const std::vector<int>& pids,
                                     const char* what);

/// Where NCCL sees a rank: its host (`nccl_hostid`, the rank's NCCL_HOSTID, where set; else `identity`, the host's
/// boot id and pid namespace) and its GPU's PCI bus id. One line of text.
std::string nccl_place(const std::string& nccl_hostid, const std::string& identity, const std::string& bus_id);

/// Whether NCCL takes ranks at `places` (nccl_place() of each) in one communicator: NCCL refuses two ranks on one GPU
/// of one host, so every place must differ.
bool nccl_takes_ranks(const std::vector<std::string>& places);

/// Runs `copies` (block_order_copies()) between host buffers.
void copy_blocks(uint8_t* dst, const uint8_t* src, const std::vector<BlockCopy>& copies);

/// The fault state of a communicator that spans nodes: its first fatal error (the sticky error, which every later
/// call fails with) and whether it was aborted. Safe to use from any thread.
class StickyFault {
 public:
  /// Records `e` unless an error is recorded already (the first one wins).
  void record(const Error& e);
  void set_aborted() { aborted_.store(true); }
  bool aborted() const { return aborted_.load(); }
  bool has_error() const;
  /// An error is recorded, or the communicator was aborted.
  bool failed() const { return has_error() || aborted(); }
  /// Throws the sticky error, else Error(kAborted) once aborted (naming `rank`, this rank of the job).
  void check(int rank) const;

 private:
  mutable std::mutex mu_;
  std::optional<Error> error_;
  std::atomic<bool> aborted_{false};
};

/// Runs every one of `calls` at once, the first on the caller's thread and each other on a thread of its own, and
/// returns when all have returned (NOTE [NCCL aborts together]). A call must not throw.
void run_together(const std::vector<std::function<void()>>& calls);

/// The reduction the stages run: avg is a sum until the last stage divides by the world size.
inline ReduceOp stage_op(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

}  // namespace symcomm::detail
