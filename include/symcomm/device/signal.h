#pragma once
/// \file device/signal.h
/// Signals between ranks: explicit memory order and scope, wrap-safe compares, bounded waits.
///
/// NOTE [signal protocol] A signal is a 32-bit slot in the receiver's pad, written only by one (source
/// rank, block index) pair with increasing sequence numbers. The writer stores with release at system scope
/// after a __syncthreads(), so every store of its block before the barrier is visible to a reader that
/// acquires the value (release cumulativity, PTX memory model). The reader loads with acquire at system
/// scope and then __syncthreads(), ordering its whole block's later loads after the acquire. Slots compare
/// with (int32_t)(value - target) >= 0, so the 32-bit counters may wrap. Every wait polls the abort word,
/// the dead-peer mask, the communicator's error word and a globaltimer deadline every kPollInterval spins
/// and returns false instead of trapping, so the CUDA context stays usable.

#include <cstdint>

#include "symcomm/device/handle.h"

namespace symcomm::device {

/// Spins between two polls of the host-mapped words and the clock (~1024 local loads, well under 1 ms).
inline constexpr uint32_t kPollInterval = 1024;

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_volatile_u64(const uint64_t* p) {
  return *reinterpret_cast<const volatile uint64_t*>(p);
}
__device__ __forceinline__ uint32_t ld_volatile_u32(const uint32_t* p) {
  return *reinterpret_cast<const volatile uint32_t*>(p);
}
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
/// True once `value` has reached `target` (wrap-safe).
__host__ __device__ __forceinline__ bool seq_reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

/// Records the communicator's first device error (device-scope CAS, then a copy to host-mapped memory).
__device__ __forceinline__ void report_error(const DeviceComm& c, DeviceError code, int peer, uint32_t seq) {
  uint64_t e = pack_error(code, peer, seq);
  if (atomicCAS(reinterpret_cast<unsigned long long*>(&c.state->error), 0ull, e) == 0ull) {
    *reinterpret_cast<volatile uint64_t*>(&c.control->error) = e;
    __threadfence_system();
  }
}

/// True if some block already failed (other blocks stop waiting).
__device__ __forceinline__ bool comm_failed(const DeviceComm& c) { return ld_volatile_u64(&c.state->error) != 0; }

/// Called every kPollInterval spins of a wait: true (after recording an error) if the wait must give up
/// because of abort(), a dead peer, the deadline, or an error another block already recorded.
__device__ inline bool poll_give_up(const DeviceComm& c, int peer, uint32_t target, uint64_t deadline_ns) {
  if (comm_failed(c)) return true;
  if (ld_volatile_u32(&c.control->aborted)) {
    report_error(c, DeviceError::kAborted, peer, target);
    return true;
  }
  uint64_t dead = ld_volatile_u64(&c.control->dead_mask);
  if (dead) {
    int who = (dead >> peer) & 1 ? peer : __ffsll(static_cast<long long>(dead)) - 1;
    report_error(c, DeviceError::kPeerDead, who, target);
    return true;
  }
  if (globaltimer_ns() > deadline_ns) {
    report_error(c, DeviceError::kTimeout, peer, target);
    return true;
  }
  return false;
}

/// Waits (one thread) until *slot reaches target. Returns false after recording an error on abort, peer
/// death, deadline, or when another block already failed.
__device__ inline bool wait_signal(const DeviceComm& c, const uint32_t* slot, uint32_t target, int peer,
                                   uint64_t deadline_ns) {
  uint32_t spins = 0;
  while (!seq_reached(ld_acquire_sys(slot), target)) {
    if (++spins % kPollInterval == 0 && poll_give_up(c, peer, target, deadline_ns)) return false;
  }
  return true;
}

/// Block-wide barrier with every peer's block of the same index: all threads call it. Orders this block's
/// earlier stores (local and remote) before the peers' later loads, and the peers' earlier stores before
/// this block's later loads. With header != 0 (a kernel's first barrier) it also sends the header and
/// compares the peers' with it (kMismatch on a difference). Returns false (in every thread) if a wait or
/// the comparison failed.
__device__ inline bool block_barrier(const DeviceComm& c, uint32_t seq, uint64_t deadline_ns, uint64_t header = 0) {
  __syncthreads();
  bool ok = true;
  const int t = threadIdx.x;
  if (t < c.world_size && t != c.rank) {
    const int hslot = (seq & 1) * kSignalSlots + blockIdx.x * kMaxDeviceRanks;
    if (header) reinterpret_cast<uint64_t*>(c.signals[t] + kSignalSlots)[hslot + c.rank] = header;
    st_release_sys(c.signals[t] + blockIdx.x * kMaxDeviceRanks + c.rank, seq);
    ok = wait_signal(c, c.signals[c.rank] + blockIdx.x * kMaxDeviceRanks + t, seq, t, deadline_ns);
    if (ok && header) {
      uint64_t theirs =
          ld_volatile_u64(reinterpret_cast<const uint64_t*>(c.signals[c.rank] + kSignalSlots) + hslot + t);
      if (theirs != header) {
        report_error(c, DeviceError::kMismatch, t, seq);
        ok = false;
      }
    }
  }
  return __syncthreads_and(ok) != 0;
}

}  // namespace symcomm::device
