// Work objects shared by the backends and the communicator: composites of several Works, and the Work that
// keeps the op history of asynchronous collectives up to date.

#include <atomic>
#include <chrono>

#include "backends/backend.h"
#include "base/check.h"
#include "base/deadline.h"

namespace symcomm::detail {
namespace {

class CompositeWork final : public Work {
 public:
  explicit CompositeWork(std::vector<std::shared_ptr<Work>> parts) : parts_(std::move(parts)) {}
  bool is_completed() override {
    for (auto& p : parts_) {
      if (p && !p->is_completed()) return false;
    }
    return true;
  }
  void wait() override {
    for (auto& p : parts_) {
      if (p) p->wait();
    }
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    const auto until = time_after(timeout);
    for (auto& p : parts_) {
      if (!p) continue;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (!p->wait_for(std::max(left, std::chrono::milliseconds(0)))) return false;
    }
    return true;
  }
  std::exception_ptr exception() override {
    for (auto& p : parts_) {
      if (p && p->is_completed()) {
        if (auto e = p->exception()) return e;
      }
    }
    return nullptr;
  }

 private:
  std::vector<std::shared_ptr<Work>> parts_;
};

// The Work of asynchronous collectives as handed to the caller: once it is seen complete (is_completed,
// wait, wait_for or exception), their records in the op history become done or failed, so a dump after a
// later error does not list long-finished ops as running. It keeps a handle on the records, so that marking them
// is safe even where the Work is used after its communicator was destroyed (the host backend's Works allow
// that; a reference to the records would read freed memory then).
class TrackedWork final : public Work {
 public:
  TrackedWork(std::shared_ptr<Work> inner, OpHistory history, std::vector<uint64_t> seqs)
      : inner_(std::move(inner)), history_(history), seqs_(std::move(seqs)) {}
  bool is_completed() override {
    if (!inner_->is_completed()) return false;
    settle(inner_->exception() != nullptr);
    return true;
  }
  void wait() override {
    try {
      inner_->wait();
    } catch (...) {
      settle(true);
      throw;
    }
    settle(false);
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    bool done = false;
    try {
      done = inner_->wait_for(timeout);
    } catch (...) {
      settle(true);
      throw;
    }
    if (done) settle(inner_->exception() != nullptr);
    return done;
  }
  std::exception_ptr exception() override {
    std::exception_ptr e = inner_->exception();
    if (e) settle(true);
    return e;
  }

 private:
  void settle(bool failed) {
    if (settled_.exchange(true)) return;
    for (uint64_t seq : seqs_) history_.set_state(seq, failed ? OpState::kFailed : OpState::kDone);
  }
  std::shared_ptr<Work> inner_;
  OpHistory history_;  ///< a handle on the communicator's records, alive as long as this Work
  std::vector<uint64_t> seqs_;
  std::atomic<bool> settled_{false};
};

}  // namespace

std::shared_ptr<Work> make_composite_work(std::vector<std::shared_ptr<Work>> parts) {
  return std::make_shared<CompositeWork>(std::move(parts));
}

std::shared_ptr<Work> make_tracked_work(std::shared_ptr<Work> work, OpHistory history, std::vector<uint64_t> seqs) {
  return std::make_shared<TrackedWork>(std::move(work), history, std::move(seqs));
}

std::unique_ptr<Backend> make_backend(BackendKind kind, CommContext& ctx, int device) {
  switch (kind) {
    case BackendKind::kHost: return make_host_backend(ctx);
    case BackendKind::kCuda: return make_cuda_backend(ctx, device);
  }
  SYMCOMM_THROW(kInvalidArgument, "backend kind {} is unknown", static_cast<int>(kind));
}

void Backend::reduce_scatter_gathered(const GatheredReduceScatter& /*g*/) {
  SYMCOMM_THROW(kUnsupported, "this backend has no gathered reduce-scatter");
}

void Backend::check_p2p(const Request& r) {
  SYMCOMM_THROW(kUnsupported,
                "{}: the {} backend does not run point-to-point operations (send, recv); the host backend does",
                r.describe(), to_string(kind()));
}

std::shared_ptr<Work> Backend::run_group_async(const std::vector<std::pair<Request, Algorithm>>& ops) {
  std::vector<std::shared_ptr<Work>> parts;
  parts.reserve(ops.size());
  for (const auto& [r, algo] : ops) parts.push_back(run_async(r, algo));
  return make_composite_work(std::move(parts));
}

std::shared_ptr<Work> Backend::run_group_with_work(const std::vector<std::pair<Request, Algorithm>>& ops) {
  run_group(ops);
  return make_composite_work({});
}

}  // namespace symcomm::detail
