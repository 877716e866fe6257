#pragma once
/// \file device/handle.h
/// Plain, trivially copyable handles that symcomm's CUDA kernels (and user kernels) receive by value.
/// Host objects own the memory; these structs only point into it.

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace symcomm::device {

/// The most ranks a symcomm kernel handles (one NVLink node). Larger communicators use NCCL.
inline constexpr int kMaxDeviceRanks = 8;
/// Signal slots per (rank, source rank): one per block index, so a block only ever waits on its own slots.
/// 256: room for one block per SM of a 132-SM H100/H200 and more (Tuning::cuda_two_shot_max_blocks).
inline constexpr int kMaxBlocks = 256;
/// uint32 slots in one rank's signal pad: [block][source rank].
inline constexpr int kSignalSlots = kMaxBlocks * kMaxDeviceRanks;
/// After the signals, each pad holds 64-bit op headers [parity][block][source rank]: a kernel's first
/// barrier carries a hash of its arguments so that ranks running different collectives, counts or paths
/// fail with kMismatch instead of exchanging garbage.
inline constexpr int kHeaderSlots = 2 * kSignalSlots;
/// After the headers, 64-bit op announcements [source rank] (NOTE [op announcements] in device/signal.h).
inline constexpr int kAnnounceSlots = kMaxDeviceRanks;
/// Bytes of one rank's signal pad.
inline constexpr size_t kPadBytes =
    kSignalSlots * sizeof(uint32_t) + (kHeaderSlots + kAnnounceSlots) * sizeof(uint64_t);

/// Why a kernel gave up (written to DeviceState::error and HostControl::error).
/// kAbandoned: a copy-engine op that a peer gave up on before this rank completed it (NOTE [copy-engine late
/// peer] in src/algos/ce_plan.cc); reported as ErrorCode::kTimeout naming that peer.
enum class DeviceError : uint32_t {
  kNone = 0,
  kTimeout = 1,
  kAborted = 2,
  kPeerDead = 3,
  kMismatch = 4,
  kAbandoned = 5
};

/// Packs an error: code in bits 56..63, peer rank in 48..55 (0xff: none), sequence number in 0..31.
__host__ __device__ constexpr uint64_t pack_error(DeviceError code, int peer, uint32_t seq) {
  return (uint64_t{static_cast<uint32_t>(code)} << 56) |
         (uint64_t{static_cast<uint8_t>(peer < 0 ? 0xff : peer)} << 48) | seq;
}
__host__ __device__ constexpr DeviceError error_code(uint64_t e) { return static_cast<DeviceError>(e >> 56); }
__host__ __device__ constexpr int error_peer(uint64_t e) {
  return ((e >> 48) & 0xff) == 0xff ? -1 : static_cast<int>((e >> 48) & 0xff);
}
__host__ __device__ constexpr uint32_t error_seq(uint64_t e) { return static_cast<uint32_t>(e); }

/// Per-communicator sequencing state in this rank's device memory. Zeroed once at creation, then advanced
/// only by kernels (never by the host, never baked into a CUDA graph).
/// The first 16 bytes are what every kernel reads when it starts, in one vector load (NOTE [state read]).
struct alignas(16) DeviceState {
  uint32_t seq;    ///< last signal value used by every block (advanced per barrier phase)
  uint32_t half;   ///< staging double-buffer counter (advanced per round)
  uint64_t error;  ///< first device error (pack_error), 0 if none; device-scope atomics only
  uint32_t done;   ///< blocks of the running kernel that finished (last one advances seq/half)
  uint32_t reserved;
};
static_assert(offsetof(DeviceState, seq) == 0 && offsetof(DeviceState, half) == 4 && offsetof(DeviceState, error) == 8,
              "frame_begin reads seq, half and error as one 16-byte vector");

/// Host-mapped page-locked words shared by the host and the kernels.
struct HostControl {
  uint32_t aborted;  ///< host sets 1 on abort(): every wait gives up with kAborted
  /// Copy-engine collective in flight: its stream writes the op's header (top bit set) when it starts and 0
  /// when it ends; the host watchdog overwrites a header with 1 to notice an op that stops progressing.
  uint32_t ce_active;
  uint64_t dead_mask;  ///< host sets bit r when rank r died (peer-mesh watchdog): every wait gives up
  uint64_t error;      ///< copy of DeviceState::error written by the failing block, read by the host
  /// Host sets bit r when rank r left cleanly (destroyed its communicator): only the waits for rank r give up,
  /// as on the host. A rank that ended its last collective and left owes its peers nothing more; one of them may
  /// still be waiting for a third rank (a topology schedule's neighbour, one step behind).
  uint64_t left_mask;
};

/// What every symcomm kernel gets: this rank's view of the communicator's symmetric memory.
struct DeviceComm {
  uint32_t* signals[kMaxDeviceRanks];  ///< rank p's signal pad, as mapped in this process
  char* scratch[kMaxDeviceRanks];      ///< rank p's staging buffer: two halves of scratch_half_bytes
  char* ll[kMaxDeviceRanks];           ///< rank p's low-latency (LL) buffer: [parity][source rank] lines
  DeviceState* state;                  ///< this rank's sequencing state (device memory)
  HostControl* control;                ///< device pointer of the host-mapped control words
  uint64_t scratch_half_bytes;
  uint64_t ll_slot_bytes;  ///< bytes of LL lines per (parity, source rank); payload is half
  uint64_t timeout_ns;     ///< deadline of every wait, from the kernel's start
  int rank;
  int world_size;
};
static_assert(std::is_trivially_copyable_v<DeviceComm>);
static_assert(sizeof(DeviceComm) == 24 * kMaxDeviceRanks + 48);

}  // namespace symcomm::device
