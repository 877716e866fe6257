#pragma once
// MultiNodeCommunicator's state (symcomm/multinode.h). multinode_mpi.cc runs each collective (node stages on
// symcomm, inter-node stages on MPI); multinode_queue.cc orders the calls: asynchronous calls on a progress thread,
// groups recorded and run together (NOTE [multi-node queue]).

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "algos/node_plan.h"
#include "algos/request.h"
#include "base/deadline.h"
#include "multinode/node_common.h"
#include "symcomm/multinode.h"

namespace symcomm {

namespace detail {

/// The Work of an asynchronous multi-node call (or of a group): completed once by whoever ran it.
class NodeWork final : public Work {
 public:
  bool is_completed() override;
  void wait() override;
  bool wait_for(std::chrono::milliseconds timeout) override;
  std::exception_ptr exception() override;
  /// Marks it done, with `error` (null: success); later calls do nothing.
  void complete(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

/// One call as it was issued: its request, its path, and its Work (null for a synchronous call run in place).
struct NodeCall {
  Request request;
  Hierarchy hierarchy = Hierarchy::kAuto;
  std::shared_ptr<NodeWork> work;
};

/// The messages of `calls` from `rank` to itself: the k-th send paired with the k-th receive. Throws
/// Error(kInvalidArgument) unless they pair up one by one with equal count and dtype.
std::vector<std::pair<const Request*, const Request*>> self_messages(std::span<const NodeCall> calls, int rank);

/// What the progress thread runs at once: one call, or a whole group; `done` completes with the first error.
struct NodeBatch {
  std::vector<NodeCall> calls;
  std::vector<std::shared_ptr<NodeWork>> done;
};

}  // namespace detail

class MultiNodeCommunicator::Impl {
 public:
  Impl(MPI_Comm comm, const MultiNodeOptions& options);
  ~Impl();

  // The collectives, run here and now (multinode_mpi.cc).
  void all_reduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, Hierarchy h);
  void all_gather(const void* in, void* out, size_t count, DataType dtype, Hierarchy h);
  void reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, Hierarchy h);
  void broadcast(const void* in, void* out, size_t count, DataType dtype, int root, Hierarchy h);
  void all_to_all(const void* in, void* out, size_t count, DataType dtype, Hierarchy h);
  void barrier(Hierarchy h);
  /// The sends and receives of one batch (a group's, or one call), all posted before any is waited for (messages
  /// to this rank itself are copied, the k-th send to the k-th receive).
  void exchange(std::span<const detail::NodeCall> calls);

  // Ordering (multinode_queue.cc, NOTE [multi-node queue]).
  /// Every call of the public API: checks it at once, then records it in the open group, runs it here, or hands it
  /// to the progress thread; returns the Work of an asynchronous call.
  std::shared_ptr<Work> issue(const detail::Request& r, Hierarchy h, bool async);
  void group_start();
  std::shared_ptr<Work> group_end(bool async);
  void group_cancel();

  void abort();
  void check() const;

  int rank_ = 0, node_ = 0, local_ = 0;
  detail::NodeLayout layout_;
  std::unique_ptr<Communicator> node_comm_;
  MPI_Comm world_ = MPI_COMM_NULL, node_mpi_ = MPI_COMM_NULL, inter_ = MPI_COMM_NULL;
  std::atomic<NodePath> last_{NodePath::kNone};
  detail::StickyFault fault_;  ///< the sticky error and the abort flag

 private:
  // Runs `body` (one collective); a fatal error becomes the sticky error, and the node communicator is aborted so
  // that nothing more waits on it.
  template <class F>
  void guarded(const detail::Request& r, F&& body);
  /// The path of a call (Error(kInvalidArgument) where it has none); plan() also records it as last_.
  NodePath path_of(const detail::Request& r, Hierarchy h) const;
  NodePath plan(const detail::Request& r, Hierarchy h);
  // Waits for an MPI request or a node Work, watching the abort flag, the deadline and the host's ranks.
  void wait(MPI_Request& req, const char* what);
  void wait(const std::shared_ptr<Work>& work, const char* what);
  /// Issues a node collective and waits for it; errors name world ranks, also those the node communicator
  /// raises when the call is issued (a peer it has already seen die).
  template <class Issue>
  void run_node(Issue&& issue, const char* what);
  void watch(const char* what, detail::Clock::time_point start, detail::Clock::time_point* last_look);
  [[noreturn]] void rethrow_node_error(const Error& e, const char* what);

  void mpi_all_reduce(void* buf, size_t count, DataType dtype, ReduceOp op, MPI_Comm comm, const char* what);
  void node_all_reduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op);
  void* scratch(int which, size_t bytes);

  // multinode_queue.cc
  void precheck(const detail::Request& r, Hierarchy h, bool in_group) const;
  void execute(const detail::Request& r, Hierarchy h);  ///< one collective
  /// Runs a batch's calls and completes their Works and the batch's; returns its first error.
  std::exception_ptr run_batch(detail::NodeBatch& batch);
  void packed_all_reduce(std::span<const detail::NodeCall> run);
  /// Runs `batch` here when no progress thread exists and `async` is false, else hands it to the thread (started
  /// here); waits for it unless `async`. The caller holds issue_mu_ (`lock`).
  void dispatch(detail::NodeBatch batch, bool async, std::unique_lock<std::mutex>& lock);
  void progress_loop();
  void stop_progress();

  std::chrono::milliseconds timeout_;
  detail::NodeThresholds thresholds_;
  std::vector<int> pids_;
  std::vector<int> host_peers_;  ///< ranks on this host (their pids can be watched), this rank excluded
  std::vector<uint8_t> scratch_[3];

  std::mutex issue_mu_;  ///< the group state and the order of issue
  int group_depth_ = 0;
  std::vector<size_t> level_starts_;                           ///< recorded_.size() at each open group_start()
  std::vector<detail::NodeCall> recorded_;                     ///< the open group's calls
  std::vector<std::shared_ptr<detail::NodeWork>> inner_ends_;  ///< Works of inner group_end_async() calls
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<detail::NodeBatch> queue_;
  bool stopping_ = false;
  std::thread progress_;
  std::vector<uint8_t> pack_;  ///< packed all-reduces of a group (progress thread or the issuing thread)
};

}  // namespace symcomm
