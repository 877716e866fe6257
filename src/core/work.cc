// Work objects shared by the backends: composites of several Works, and the Work handed to *_async calls
// made inside a collective group.

#include <chrono>

#include "core/backend.h"
#include "core/check.h"

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
    auto until = std::chrono::steady_clock::now() + timeout;
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

}  // namespace

std::shared_ptr<Work> make_composite_work(std::vector<std::shared_ptr<Work>> parts) {
  return std::make_shared<CompositeWork>(std::move(parts));
}

std::shared_ptr<Work> Backend::run_group_async(const std::vector<std::pair<Request, Algorithm>>& ops) {
  std::vector<std::shared_ptr<Work>> parts;
  parts.reserve(ops.size());
  for (const auto& [r, algo] : ops) parts.push_back(run_async(r, algo));
  return make_composite_work(std::move(parts));
}

}  // namespace symcomm::detail
