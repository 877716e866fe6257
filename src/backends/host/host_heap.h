#pragma once
// Host symmetric memory: each rank creates one memfd segment (nothing in /dev/shm, gone when the last
// mapping goes, even after a crash), passes its descriptor to every peer over the mesh, and maps every
// peer's segment. Segment layout, identical on all ranks:
//
//   [ signal pad (kPadBytes) | scratch: 2 halves of scratch_bytes/2 | heap: heap_bytes ]
//
// A dead peer's segment stays mapped and valid here (the mapping holds the memory), so survivors never
// fault on it.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backends/backend.h"

namespace symcomm::detail {

/// What a rank publishes for one step of a host collective (see backends/host/host_engine.h).
struct StepHeader {
  uint64_t step;
  uint32_t kind, dtype, op, root;
  uint64_t count;
  uint64_t round;
  uint64_t data_offset;  ///< offset of the published data in the publisher's segment; kNoData if none
  uint64_t stride;       ///< bytes between per-destination blocks of the published data
  uint32_t flags;        ///< kStepZeroCopy: data lives in the publisher's user buffer
  uint32_t variant;      ///< NOTE [step variant] in src/backends/host/host_engine.h
  uint64_t out_offset;   ///< the publisher's output (of this round) in its segment, if offered; else kNoData
};
inline constexpr uint64_t kNoData = ~uint64_t{0};
inline constexpr uint32_t kStepZeroCopy = 1;

/// The signal pad at the start of each segment. `ready` holds the last step this rank published; it only
/// grows (64-bit: no wrap in practice; compares are wrap-safe anyway). Headers are double-buffered by step
/// parity because a reader may still be reading step s while the writer publishes s+1.
struct HostPad {
  alignas(64) std::atomic<uint64_t> ready;
  alignas(64) StepHeader headers[2];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "cross-process atomics must be lock-free");

class HostSegments {
 public:
  static constexpr size_t kPadBytes = 64 << 10;
  /// Collective: create, exchange and map. Throws on failure (nothing leaks).
  HostSegments(CommContext& ctx);
  ~HostSegments();
  HostSegments(const HostSegments&) = delete;
  HostSegments& operator=(const HostSegments&) = delete;

  uint8_t* base(int rank) const { return bases_[rank]; }
  HostPad* pad(int rank) const { return reinterpret_cast<HostPad*>(bases_[rank]); }
  size_t scratch_half() const { return scratch_half_; }
  size_t scratch_offset(int parity) const { return kPadBytes + static_cast<size_t>(parity) * scratch_half_; }
  size_t heap_offset() const { return kPadBytes + 2 * scratch_half_; }
  size_t heap_bytes() const { return heap_bytes_; }
  uint8_t* heap(int rank) const { return bases_[rank] + heap_offset(); }
  /// Offset in this rank's segment if [p, p + bytes) lies inside its heap.
  std::optional<size_t> own_heap_offset(const void* p, size_t bytes) const;

 private:
  int me_;
  size_t scratch_half_;
  size_t heap_bytes_;
  size_t total_;
  std::vector<uint8_t*> bases_;
};

}  // namespace symcomm::detail
