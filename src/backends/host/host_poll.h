#pragma once
// The pacing of every host-backend wait for a peer's shared-memory word (the collectives' steps, the point-to-point
// chunks): spin briefly, then yield the core (ranks may outnumber cores), and check the abort flag, the peers
// and the deadline every few polls.

#include <sched.h>

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SYMCOMM_CPU_RELAX() _mm_pause()
#else
#define SYMCOMM_CPU_RELAX() ((void)0)
#endif

namespace symcomm::detail {

class HostPoll {
 public:
  /// One poll's pause: a spin-loop hint for the first kSpinsBeforeYield polls, then sched_yield().
  void pause() {
    if (polls_++ < kSpinsBeforeYield) {
      SYMCOMM_CPU_RELAX();
    } else {
      sched_yield();
    }
  }
  /// True once every kPollsPerCheck pauses: time to check abort, peers and deadline.
  bool check_due() const { return polls_ % kPollsPerCheck == 0; }
  /// Back to spinning (the awaited peer made progress).
  void reset() { polls_ = 0; }

 private:
  // Spin this many polls before yielding the core; measured to keep the 2-rank latency low on the 2-core CI
  // machine while letting 8 ranks share 2 cores without starving the rank that must publish.
  static constexpr uint64_t kSpinsBeforeYield = 2048;
  // Check abort / peer death / deadline once per this many polls (a steady_clock read costs ~20 ns).
  static constexpr uint64_t kPollsPerCheck = 64;
  uint64_t polls_ = 0;
};

}  // namespace symcomm::detail
