#pragma once
// CommCore: what a Communicator owns (context + backend) and the one path every collective takes.

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "algos/bucket_copy.h"
#include "algos/request.h"
#include "backends/backend.h"

namespace symcomm::detail {

class CommCore {
 public:
  CommCore(std::unique_ptr<CommContext> ctx, BackendKind kind, int device);
  ~CommCore();

  CommContext& ctx() { return *ctx_; }
  const CommContext& ctx() const { return *ctx_; }
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }

  /// Validate, select, record, run (async: return a Work). The one entry of every collective and point-to-point
  /// operation.
  std::shared_ptr<Work> enqueue(const Request& r, bool async);
  /// enqueue()'s argument checks (the request's fields, then the backend's: pointer kinds, devices,
  /// alignment). Throws kInvalidArgument.
  void check_arguments(const Request& r);
  /// A bucket flush's reduce-scatter without the copy pass (NOTE [gathered flush]): runs it and returns true
  /// where the backend has such a path and symcomm's own kernel is what select() picks for `count`;
  /// otherwise (also inside a group) returns false having done nothing. Same checks, history and error
  /// handling as enqueue().
  bool reduce_scatter_gathered(const GatheredReduceScatter& g);
  Algorithm last_algorithm() const { return last_algo_.load(std::memory_order_relaxed); }
  void abort();

  void group_start();
  /// Ends the group; the outermost end runs it (async: returns its Work; sync: returns nullptr when done).
  std::shared_ptr<Work> group_end(bool async);
  void group_cancel();
  /// True if the calling thread has a group open (then enqueue() records instead of running).
  bool in_group() const;

 private:
  Algorithm select(const Request& r) const;
  /// Marks op `seq` failed; a fatal error becomes the sticky error (logged with the op history).
  void failed(uint64_t seq, const Error& e);
  /// Debug mode: compares this op's arguments across ranks before it runs; `refused`: this rank's own checks
  /// refused the call (NOTE [refused on one rank] in comm_core.cc).
  void debug_cross_check(const Request& r, Algorithm algo, uint64_t seq, std::exception_ptr refused);

  class GroupWork;
  /// One group_start() .. group_end() level (NOTE [nested groups] in comm_core.cc).
  struct Scope {
    uint64_t id;                      ///< levels are numbered as they begin
    size_t first_op;                  ///< ops recorded before this level began
    std::shared_ptr<GroupWork> work;  ///< what *_async calls at this level return
  };
  struct Group {
    std::thread::id owner;
    std::vector<Scope> scopes;  ///< open levels, outermost first; empty: no group
    std::vector<std::pair<Request, Algorithm>> ops;
    std::vector<uint64_t> seqs;
    std::vector<Scope> ended;  ///< inner levels already ended (their works complete with the group)
    uint64_t next_id = 0;
    bool handed_out = false;  ///< an *_async call returned a GroupWork
  };
  std::unique_ptr<CommContext> ctx_;
  mutable std::mutex group_mu_;
  Group group_;
  std::unique_ptr<Backend> backend_;
  std::atomic<Algorithm> last_algo_{Algorithm::kAuto};
  /// Collectives that debug_cross_check() compared so far: the same on every rank, which the op history's seq is
  /// not once some ranks issue point-to-point operations (it names each rank's store keys).
  std::atomic<uint64_t> checked_collectives_{0};
};

}  // namespace symcomm::detail
