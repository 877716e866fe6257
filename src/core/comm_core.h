#pragma once
// CommCore: what a Communicator owns (context + backend) and the one path every collective takes.

#include <atomic>
#include <memory>

#include "core/backend.h"
#include "core/request.h"

namespace symcomm::detail {

class CommCore {
 public:
  CommCore(std::unique_ptr<CommContext> ctx, BackendKind kind, int device);
  ~CommCore();

  CommContext& ctx() { return *ctx_; }
  const CommContext& ctx() const { return *ctx_; }
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }

  /// Validate, select, record, run (async: return a Work). The one entry of every collective.
  std::shared_ptr<Work> enqueue(const Request& r, bool async);
  Algorithm last_algorithm() const { return last_algo_.load(std::memory_order_relaxed); }
  void abort();

 private:
  Algorithm select(const Request& r) const;
  void debug_cross_check(const Request& r, Algorithm algo, uint64_t seq);

  std::unique_ptr<CommContext> ctx_;
  std::unique_ptr<Backend> backend_;
  std::atomic<Algorithm> last_algo_{Algorithm::kAuto};
};

/// Errors that leave the communicator unusable (recorded as sticky).
bool is_fatal(ErrorCode code);

}  // namespace symcomm::detail
