#pragma once
// A point in time after which a wait gives up.

#include <chrono>

namespace symcomm::detail {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds budget) : at_(Clock::now() + budget) {}
  static Deadline never() { return Deadline(std::chrono::hours(24 * 365)); }
  bool expired() const { return Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }
  /// Milliseconds left, at least 0.
  long long remaining_ms() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return left > 0 ? left : 0;
  }

 private:
  Clock::time_point at_;
};

}  // namespace symcomm::detail
