#pragma once
// A point in time after which a wait gives up, and the pause between two polls of a host-side wait.

#include <algorithm>
#include <chrono>
#include <thread>

namespace symcomm::detail {

using Clock = std::chrono::steady_clock;

/// now + budget, saturated at the clock's end: unsaturated, Work::wait_for(milliseconds::max()) would overflow
/// into the past and return false at once.
inline Clock::time_point time_after(std::chrono::milliseconds budget) {
  const Clock::time_point now = Clock::now();
  if (budget <= std::chrono::milliseconds::zero()) return now;
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  return budget >= room ? Clock::time_point::max() : now + budget;
}

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

/// NOTE [polling pauses] The pause between two polls of something the host waits for (an NCCL call settling,
/// a collective's event): a yield for the first `spin` after construction, so that what ends within
/// microseconds is seen within microseconds, then sleeps from `first_sleep` doubling to `max_sleep`, so that a
/// long wait does not hold a core. A sleep of 20 us lasts ~70 us (the kernel's timer slack): sleeping from
/// the first poll made every eager collective that symcomm sent to its nonblocking NCCL communicator ~110 us
/// slower (NOTE [settling NCCL calls] in src/backends/cuda/cuda_backend_cuda.cc).
class PollPause {
 public:
  explicit PollPause(std::chrono::microseconds spin = std::chrono::milliseconds(2),
                     std::chrono::microseconds first_sleep = std::chrono::microseconds(20),
                     std::chrono::microseconds max_sleep = std::chrono::milliseconds(1))
      : spin_until_(Clock::now() + spin), sleep_(first_sleep), max_sleep_(max_sleep) {}
  void operator()() {
    if (Clock::now() < spin_until_) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(2 * sleep_, max_sleep_);
  }

 private:
  Clock::time_point spin_until_;
  std::chrono::microseconds sleep_;
  std::chrono::microseconds max_sleep_;
};

}  // namespace symcomm::detail
