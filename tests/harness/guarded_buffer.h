#pragma once
// A test buffer with guard bytes on both sides, in plain host memory or in a communicator's symmetric
// heap, optionally misaligned by a few bytes. poison() fills the payload with a pattern that is never a
// valid test value in any dtype; guards_intact() checks nothing wrote outside the payload.

#include <cstdint>
#include <cstring>
#include <vector>

#include "symcomm/communicator.h"

namespace symcomm::testing {

class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0x5a;
  static constexpr uint8_t kPoisonByte = 0xa5;

  /// heap != nullptr: allocate from its symmetric heap (all ranks must construct in the same order).
  GuardedBuffer(Communicator* heap, size_t bytes, size_t misalign = 0)
      : heap_(heap), bytes_(bytes), misalign_(misalign) {
    size_t total = bytes + 2 * kGuard + misalign;
    if (heap_) {
      base_ = static_cast<uint8_t*>(heap_->alloc(total));
    } else {
      plain_.resize(total);
      base_ = plain_.data();
    }
    std::memset(base_, kGuardByte, total);
  }
  ~GuardedBuffer() {
    if (heap_) heap_->free(base_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  uint8_t* data() { return base_ + kGuard + misalign_; }
  size_t bytes() const { return bytes_; }
  void poison() { std::memset(data(), kPoisonByte, bytes_); }
  bool guards_intact() const {
    const uint8_t* p = base_;
    for (size_t i = 0; i < kGuard + misalign_; ++i) {
      if (p[i] != kGuardByte) return false;
    }
    const uint8_t* q = base_ + kGuard + misalign_ + bytes_;
    for (size_t i = 0; i < kGuard; ++i) {
      if (q[i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  Communicator* heap_;
  size_t bytes_;
  size_t misalign_;
  uint8_t* base_ = nullptr;
  std::vector<uint8_t> plain_;
};

}  // namespace symcomm::testing
