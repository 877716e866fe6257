#pragma once
// Host symmetric memory: each rank creates one memfd segment (nothing in /dev/shm, gone when the last
// mapping goes, even after a crash), passes its descriptor to every peer over the mesh, and maps every
// peer's segment. Segment layout, identical on all ranks:
//
//   [ signal pad (kPadBytes) | scratch: 2 halves of scratch_bytes/2 | point-to-point staging | heap: heap_bytes ]
//
// The signal pad holds the collectives' HostPad at its start and the point-to-point mailboxes (P2pPad) at
// kP2pPadOffset. The point-to-point staging holds kP2pSlots chunks of p2p_chunk_bytes per receiver (NOTE
// [point-to-point] in host_p2p.cc).
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

/// Staging chunks per ordered pair of ranks (NOTE [point-to-point] in host_p2p.cc).
inline constexpr int kP2pSlots = 2;

/// The header of the chunk in one point-to-point staging slot, written by the sender before it posts the chunk.
struct P2pChunkHeader {
  uint64_t message;  ///< the message's number on its ordered pair (1, 2, ...)
  uint64_t count;    ///< elements of the whole message
  uint32_t dtype;
  uint32_t reserved;
};

/// Written by a sender, read by one receiver: `posted` counts the chunks posted to it (only grows; chunk c lies in
/// slot (c - 1) % kP2pSlots).
struct P2pOutbox {
  alignas(64) std::atomic<uint64_t> posted;
  P2pChunkHeader chunks[kP2pSlots];
};

/// Written by a receiver, read by one sender: `consumed` counts the chunks copied out (only grows); `refused` is
/// the number of the first message whose count or dtype this rank's receive did not accept (0: none), with that
/// receive's count and dtype.
struct P2pInbox {
  alignas(64) std::atomic<uint64_t> consumed;
  alignas(64) std::atomic<uint64_t> refused;
  uint64_t refused_count;
  uint32_t refused_dtype;
};

/// A rank's point-to-point mailboxes: out[p] for its messages to rank p, in[p] for those from rank p.
struct P2pPad {
  P2pOutbox out[kMaxRanks];
  P2pInbox in[kMaxRanks];
};

class HostSegments {
 public:
  static constexpr size_t kPadBytes = 64 << 10;
  static constexpr size_t kP2pPadOffset = 4 << 10;
  /// Collective: create, exchange and map. Throws on failure (nothing leaks).
  HostSegments(CommContext& ctx);
  ~HostSegments();
  HostSegments(const HostSegments&) = delete;
  HostSegments& operator=(const HostSegments&) = delete;

  uint8_t* base(int rank) const { return bases_[rank]; }
  HostPad* pad(int rank) const { return reinterpret_cast<HostPad*>(bases_[rank]); }
  P2pPad* p2p_pad(int rank) const { return reinterpret_cast<P2pPad*>(bases_[rank] + kP2pPadOffset); }
  size_t scratch_half() const { return scratch_half_; }
  size_t scratch_offset(int parity) const { return kPadBytes + static_cast<size_t>(parity) * scratch_half_; }
  size_t p2p_chunk() const { return p2p_chunk_; }
  /// Staging slot `slot` of rank `owner` for its messages to rank `to`.
  uint8_t* p2p_slot(int owner, int to, int slot) const {
    return bases_[owner] + kPadBytes + 2 * scratch_half_ + (static_cast<size_t>(to) * kP2pSlots + slot) * p2p_chunk_;
  }
  size_t heap_offset() const { return kPadBytes + 2 * scratch_half_ + p2p_bytes_; }
  size_t heap_bytes() const { return heap_bytes_; }
  uint8_t* heap(int rank) const { return bases_[rank] + heap_offset(); }
  /// Offset in this rank's segment if [p, p + bytes) lies inside its heap.
  std::optional<size_t> own_heap_offset(const void* p, size_t bytes) const;

 private:
  int me_;
  size_t scratch_half_;
  size_t p2p_chunk_;
  size_t p2p_bytes_;
  size_t heap_bytes_;
  size_t total_;
  std::vector<uint8_t*> bases_;
};

}  // namespace symcomm::detail
