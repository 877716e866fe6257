#pragma once
/// \file device/signal.h
/// Signals between ranks: explicit memory order and scope, wrap-safe compares, bounded waits.
///
/// NOTE [signal protocol] A signal is a 32-bit slot in the receiver's pad, written only by one (source
/// rank, block index) pair with increasing sequence numbers. The writer stores with release at system scope
/// after a __syncthreads(), so every store of its block before the barrier is visible to a reader that
/// acquires the value (release cumulativity, PTX memory model). The reader loads with acquire at system
/// scope and then __syncthreads(), ordering its whole block's later loads after the acquire. Slots compare
/// with (int32_t)(value - target) >= 0, so the 32-bit counters may wrap, as long as no slot falls 2^31 or more
/// behind the counter (NOTE [signal refresh]). Every wait polls the abort word,
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
/// True once `value` has reached `target` (wrap-safe while value is less than 2^31 behind target).
__host__ __device__ __forceinline__ bool seq_reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

/// NOTE [signal refresh] A slot compares right only while it is less than 2^31 behind the counter: one that
/// fell further behind reads as *ahead* of the target, the wait passes at once, and the block goes on before
/// the peer arrived (reading what it has not written yet; or, at a kernel's first barrier, comparing a stale
/// header: a false kMismatch where it differs, silence where it happens to match). A slot falls behind when
/// its block index goes unused: block b's slots are written only by kernels of more than b blocks, and the
/// counter advances with every kernel (by one per LL kernel or barrier, by one or two per round otherwise).
/// A job of small collectives (an inference server's decode steps, ~3 us each) moves the counter 2^31 in a
/// couple of hours; without a refresh the next large collective would run its upper blocks unsynchronised.
/// `GpuSequence.*` shows it with the refresh removed (sabotage case `signal-refresh`): the early rank's upper
/// blocks pass their first barrier at once and fail with a false kMismatch on the peer's never-written header
/// slots.
///
/// So whenever a kernel's advance crosses a multiple of 2^kSignalRefreshShift, the thread that advances the
/// counter (frame_end) writes the counter's value at the kernel's start (seq0) into every slot this rank owns
/// in every peer's pad that the kernel did not use: blocks [gridDim.x, kMaxBlocks) of a kernel with block
/// barriers, every block of one without (the LL kernels). No slot then lags by more than ~2^28 plus one
/// kernel's advance. Safe: seq0 is at least every value this rank wrote before (the counter only grows) and
/// below every target of this op and of later ones, so it satisfies no wait, not even a mismatched peer
/// kernel's at this point of the sequence; this rank's next kernel writes after these stores are performed
/// (NOTE [PDL]); and a peer still waiting on one of these slots for an earlier op already had that op's value,
/// written by a kernel that completed before this one began. Slots the kernel used are left alone: its
/// blocks' own stores, with their release order, are the signals there. Tested by `GpuSequence.*`
/// (tests/gpu/sequence_test.cc) with the counter started near a crossing and the slots as far behind as the rule allows
/// (Config::debug_seq_start, debug_signal_lag). Cost: at most (kMaxBlocks x peers) stores by one thread, once every
/// 2^28 advances. LL lines compare for equality (NOTE [LL lines]), so a stale line fools a wait only if it carries
/// exactly the awaited value, which takes exactly 2^32 advances without a write to it: left alone.
inline constexpr int kSignalRefreshShift = 28;
__host__ __device__ constexpr bool signal_refresh_due(uint32_t seq0, uint32_t seqs) {
  return ((seq0 + seqs) >> kSignalRefreshShift) != (seq0 >> kSignalRefreshShift);
}
static_assert(signal_refresh_due(0x0fffffffu, 1) && signal_refresh_due(0xffffffffu, 1) && !signal_refresh_due(5, 7) &&
                  !signal_refresh_due(0x10000000u, 0x0fffffffu) && signal_refresh_due(0x1fffffffu, 2),
              "a crossing of a multiple of 2^28, wrap included");

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

/// NOTE [op announcements] The header checks (block_barrier's first barrier, the LL header line, the LL128
/// flags) see a peer only when both ranks run the same path: ranks whose counts put them on different paths
/// (LL, LL128, staged; an all-reduce against an all-gather on another kernel) write to places the other never
/// reads, and each would wait for the other until the deadline. So every kernel with a header, when it starts,
/// also announces {its first signal value (frame seq + 1), a 32-bit fold of its header} in one 64-bit word to
/// every peer's pad, slot [its rank] (block 0, one thread per peer, one relaxed store each, nothing waited for).
/// Its waits pass the same word as `mine` (block_barrier: the first barrier, the one with the header, is at the
/// first signal value; LL and LL128 wait at it throughout), and a wait that polls (poll_give_up) compares it
/// with the awaited peer's slot: the same signal value with another fold proves that the peer runs another op
/// at this point of the sequence, and the wait gives up with kMismatch naming it. Nothing else counts as proof:
/// 0 (nothing announced yet), another value (one rank is ahead, or the slot still holds an earlier op), the
/// same word (matched, or a fold collision: then the deadline decides). Signal values identify an
/// op: every rank's kernels advance DeviceState::seq alike as long as their ops matched, and every kernel that
/// announces advances it. Kernels of a failed communicator return before announcing (NOTE [failed
/// communicator]). `mine` is a value, not a load of a slot of one's own: the polling loops must keep no more
/// addresses live (reading this rank's own announcement from its pad made the 2-rank bf16 LL128 kernel spill
/// 88-112 bytes per thread, and a call out of line 212; tools/gpu/spills.sh).
__device__ __forceinline__ uint64_t* announcements(uint32_t* pad) {
  return reinterpret_cast<uint64_t*>(pad + kSignalSlots) + kHeaderSlots;
}
__host__ __device__ constexpr uint64_t announcement(uint32_t first_seq, uint64_t header) {
  const uint32_t fold = static_cast<uint32_t>(header) ^ static_cast<uint32_t>(header >> 32);
  return header == 0 ? 0 : (uint64_t{first_seq} << 32) | (fold != 0 ? fold : 1u);
}
/// True when the two announcements prove that two ranks run different ops (NOTE [op announcements]).
__host__ __device__ constexpr bool announced_other_op(uint64_t mine, uint64_t theirs) {
  return mine != 0 && theirs != 0 && (mine >> 32) == (theirs >> 32) && mine != theirs;
}
// The proof rule, checked at compile time: only the same signal value with another fold counts.
static_assert(announcement(5, 0) == 0, "a kernel without a header announces nothing");
static_assert(announcement(7, 0x0000000100000001ull) == ((uint64_t{7} << 32) | 1), "a zero fold still announces");
static_assert(!announced_other_op(announcement(5, 0x1234), announcement(5, 0x1234)), "matched ops");
static_assert(announced_other_op(announcement(5, 0x1234), announcement(5, 0x5678)), "another op, same point");
static_assert(!announced_other_op(announcement(5, 0x1234), announcement(6, 0x5678)), "another point of the sequence");
static_assert(!announced_other_op(announcement(5, 0x1234), 0) && !announced_other_op(0, announcement(5, 1)),
              "nothing announced yet");

/// All threads may call it: block 0's threads of the peers' ranks announce this kernel (header 0: none).
__device__ __forceinline__ void announce_op(const DeviceComm& c, uint32_t first_seq, uint64_t header) {
  const unsigned t = threadIdx.x;
  if (header == 0 || blockIdx.x != 0 || t >= static_cast<unsigned>(c.world_size) || t == c.rank) return;
  uint64_t* slot = announcements(c.signals[t]) + c.rank;
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(slot), "l"(announcement(first_seq, header)) : "memory");
}

/// Called every kPollInterval spins of a wait: true (after recording an error) if the wait must give up
/// because of abort(), a dead peer, the awaited peer having left, a peer proven to run another op than `mine` (this
/// kernel's announcement, 0: no check; NOTE [op announcements]), the deadline, or an error another block already
/// recorded.
__device__ inline bool poll_give_up(const DeviceComm& c, int peer, uint32_t target, uint64_t deadline_ns,
                                    uint64_t mine = 0) {
  if (comm_failed(c)) return true;
  // One report_error call site: four inlined copies of it cost registers in the polling loops.
  DeviceError code = DeviceError::kNone;
  int who = peer;
  const uint64_t dead = ld_volatile_u64(&c.control->dead_mask);
  if (ld_volatile_u32(&c.control->aborted)) {
    code = DeviceError::kAborted;
  } else if (dead || ((ld_volatile_u64(&c.control->left_mask) >> peer) & 1)) {
    code = DeviceError::kPeerDead;
    who = dead == 0 || ((dead >> peer) & 1) ? peer : __ffsll(static_cast<long long>(dead)) - 1;
  } else if (mine != 0 && announced_other_op(mine, ld_volatile_u64(announcements(c.signals[c.rank]) + peer))) {
    code = DeviceError::kMismatch;
  } else if (globaltimer_ns() > deadline_ns) {
    code = DeviceError::kTimeout;
  }
  if (code == DeviceError::kNone) return false;
  report_error(c, code, who, target);
  return true;
}

/// Waits (one thread) until *slot reaches target. Returns false after recording an error on abort, peer
/// death, deadline, or when another block already failed.
__device__ inline bool wait_signal(const DeviceComm& c, const uint32_t* slot, uint32_t target, int peer,
                                   uint64_t deadline_ns, uint64_t mine = 0) {
  uint32_t spins = 0;
  while (!seq_reached(ld_acquire_sys(slot), target)) {
    if (++spins % kPollInterval == 0 && poll_give_up(c, peer, target, deadline_ns, mine)) return false;
  }
  return true;
}

/// NOTE [signal refresh]: one thread writes `value` into this rank's slots of blocks [first_block, kMaxBlocks) in
/// every peer's pad (relaxed: nothing is published by them).
__device__ inline void refresh_signals(const DeviceComm& c, int first_block, uint32_t value) {
  for (int t = 0; t < c.world_size; ++t) {
    if (t == c.rank) continue;
    for (int b = first_block; b < kMaxBlocks; ++b) {
      *reinterpret_cast<volatile uint32_t*>(c.signals[t] + b * kMaxDeviceRanks + c.rank) = value;
    }
  }
}

/// Block-wide barrier with every peer's block of the same index: all threads call it. Orders this block's
/// earlier stores (local and remote) before the peers' later loads, and the peers' earlier stores before
/// this block's later loads. With header != 0 (a kernel's first barrier, whose `seq` is the kernel's first
/// signal value) it also sends the header and compares the peers' with it (kMismatch on a difference), and
/// its waits compare the peers' op announcements with this kernel's (NOTE [op announcements]). Returns false
/// (in every thread) if a wait or the comparison failed. `peers` (bit p: rank p) limits the barrier to the ranks
/// in it: a kernel that exchanges data with only some peers (the topology schedules, src/algos/cuda_scheduled.cu)
/// signals and waits for those; every other kernel passes all of them.
__device__ inline bool block_barrier(const DeviceComm& c, uint32_t seq, uint64_t deadline_ns, uint64_t header = 0,
                                     uint32_t peers = ~0u) {
  __syncthreads();
  bool ok = true;
  const int t = threadIdx.x;
  if (t < c.world_size && t != c.rank && ((peers >> t) & 1u) != 0) {
    const int hslot = (seq & 1) * kSignalSlots + blockIdx.x * kMaxDeviceRanks;
    if (header) reinterpret_cast<uint64_t*>(c.signals[t] + kSignalSlots)[hslot + c.rank] = header;
    st_release_sys(c.signals[t] + blockIdx.x * kMaxDeviceRanks + c.rank, seq);
    ok = wait_signal(c, c.signals[c.rank] + blockIdx.x * kMaxDeviceRanks + t, seq, t, deadline_ns,
                     announcement(seq, header));
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
