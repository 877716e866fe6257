// Two-shot all-reduce.
//
// Zero-copy path (in and out in the symmetric heap): barrier (inputs ready, outputs free); rank r reads
// shard r of every rank's input (remote loads), reduces in rank order and stores the result into shard r
// of every rank's output (remote stores); barrier (results delivered, inputs no longer read). In place is
// safe: shard r of any rank's buffer is read and written only by rank r, element by element in one thread.
//
// Staged path (user buffers), per round of one staging half cut into 2N slots [RS 0..N-1 | AG 0..N-1]:
//   1. rank r pushes shard q of its input into RS slot r of rank q;           barrier
//   2. rank r reduces its RS slots 0..N-1 into out shard r and AG slot r of every peer;  barrier
//   3. rank r copies AG slots q != r into out shard q (local).
// Halves alternate per round (NOTE [rounds]), so no closing barrier.
//
// NOTE [two-shot push to output] (out in the symmetric heap, in anywhere), per round of one staging half cut
// into N slots:
//   1. rank r pushes shard q of its input into slot r of rank q (q != r);   barrier
//   2. rank r reduces its own input shard and slots q != r, in rank order, into shard r of every rank's
//      output (remote stores);
// and one closing barrier (results delivered) after the last round. Only remote stores cross NVLink, where
// the zero-copy path mixes remote loads and stores. In place is safe: rank q writes shard q of this rank's
// output (= input) in round j only after the round's barrier, which this rank's block of the same index
// passes after reading its slice of shard q for that round; later rounds touch other elements. The
// multi-tensor all-reduce (cuda_multi_all_reduce.cu) has the same path; a single tensor does not go through it
// because that kernel spills more registers (ptxas -v, bf16 sum at 2 ranks: 268 bytes of spill stores per
// thread against 36 here) and runs 1-3% slower at 16-256 MB (2 x H200, bf16 sum, CUDA graph).

#include "algos/cuda_all_reduce_two_shot.h"
#include "algos/cuda_common.cuh"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

// Grid: one block per Tuning::cuda_two_shot_block_bytes of payload, at most Tuning::cuda_two_shot_max_blocks.
// On H100 (NV18) a copy kernel of 32 blocks x 1024 threads reaches ~360 GB/s over NVLink, one of 8 blocks
// ~120 (pull).

template <class T, int kOp, int kR>
__device__ void zero_copy(const AllReduceTwoShotParams& p, const Frame& f) {
  const DeviceComm& c = p.comm;
  const int n_ranks = c.world_size, me = c.rank;
  const size_t unit = 16 / sizeof(T);
  const size_t shard = round_up(div_up(p.count, n_ranks), unit);
  const size_t s0 = min_sz(me * shard, p.count), len = min_sz(shard, p.count - s0);
  const Slice s = block_slice(len, len, unit);
  if (!device::block_barrier(c, f.seq0 + 1, f.deadline, p.header)) return;
  const T* srcs[device::kMaxDeviceRanks];
  T* dsts[device::kMaxDeviceRanks];
  for (int r = 0; r < n_ranks; ++r) {
    srcs[r] = reinterpret_cast<const T*>(p.peer_in[r]) + s0 + s.begin;
    dsts[r] = reinterpret_cast<T*>(p.peer_out[r]) + s0 + s.begin;
  }
  block_reduce<T, kOp, kR>(dsts, n_ranks, srcs, n_ranks, s.size(), p.op);
  device::block_barrier(c, f.seq0 + 2, f.deadline);
}

template <class T, int kOp, int kR>
__device__ void staged(const AllReduceTwoShotParams& p, const Frame& f, uint32_t rounds) {
  const DeviceComm& c = p.comm;
  const int n_ranks = c.world_size, me = c.rank;
  const size_t slot = slot_bytes(c, 2 * n_ranks);
  const size_t shard_cap = slot / sizeof(T);
  const size_t round_elems = shard_cap * n_ranks;
  const size_t unit = 16 / sizeof(T);
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * round_elems, n = min_sz(round_elems, p.count - e0);
    const size_t shard = min_sz(shard_cap, round_up(div_up(n, n_ranks), unit));
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const size_t rs = hoff, ag = hoff + n_ranks * slot;
    const Slice s = block_slice(shard, rounds == 1 ? shard : shard_cap, unit);
    // 1. scatter my shards (NOTE [push order])
    for (int k = 0; k < n_ranks; ++k) {
      const int q = push_target(me, k, n_ranks);
      const size_t q0 = min_sz(q * shard, n), qlen = min_sz(shard, n - q0);
      const size_t b = min_sz(s.begin, qlen), e = min_sz(s.end, qlen);
      block_copy(c.scratch[q] + rs + me * slot + b * sizeof(T), reinterpret_cast<const char*>(in + e0 + q0 + b),
                 (e - b) * sizeof(T));
    }
    if (!device::block_barrier(c, f.seq0 + 2 * j + 1, f.deadline, j == 0 ? p.header : 0)) return;
    // 2. reduce my shard, deliver it
    {
      const size_t m0 = min_sz(me * shard, n), mlen = min_sz(shard, n - m0);
      const size_t b = min_sz(s.begin, mlen), e = min_sz(s.end, mlen);
      const T* srcs[device::kMaxDeviceRanks];
      T* dsts[device::kMaxDeviceRanks];
      for (int r = 0; r < n_ranks; ++r) {
        srcs[r] = reinterpret_cast<const T*>(c.scratch[me] + rs + r * slot) + b;
        dsts[r] = r == me ? out + e0 + m0 + b : reinterpret_cast<T*>(c.scratch[r] + ag + me * slot) + b;
      }
      block_reduce<T, kOp, kR>(dsts, n_ranks, srcs, n_ranks, e - b, p.op);
    }
    if (!device::block_barrier(c, f.seq0 + 2 * j + 2, f.deadline)) return;
    // 3. gather the others' shards
    for (int q = 0; q < n_ranks; ++q) {
      if (q == me) continue;
      const size_t q0 = min_sz(q * shard, n), qlen = min_sz(shard, n - q0);
      const size_t b = min_sz(s.begin, qlen), e = min_sz(s.end, qlen);
      block_copy(reinterpret_cast<char*>(out + e0 + q0 + b), c.scratch[me] + ag + q * slot + b * sizeof(T),
                 (e - b) * sizeof(T));
    }
  }
}

template <class T, int kOp, int kR>
__device__ void push_out(const AllReduceTwoShotParams& p, const Frame& f, uint32_t rounds) {
  const DeviceComm& c = p.comm;
  const int n_ranks = c.world_size, me = c.rank;
  const size_t slot = slot_bytes(c, n_ranks);
  const size_t shard_cap = slot / sizeof(T);
  const size_t round_elems = shard_cap * n_ranks;
  const size_t unit = 16 / sizeof(T);
  const T* in = static_cast<const T*>(p.in);
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * round_elems, n = min_sz(round_elems, p.count - e0);
    const size_t shard = min_sz(shard_cap, round_up(div_up(n, n_ranks), unit));
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const Slice s = block_slice(shard, rounds == 1 ? shard : shard_cap, unit);
    for (int k = 0; k + 1 < n_ranks; ++k) {  // NOTE [push order]
      const int q = push_target(me, k, n_ranks);
      const size_t q0 = min_sz(q * shard, n), qlen = min_sz(shard, n - q0);
      const size_t b = min_sz(s.begin, qlen), e = min_sz(s.end, qlen);
      block_copy(c.scratch[q] + hoff + me * slot + b * sizeof(T), reinterpret_cast<const char*>(in + e0 + q0 + b),
                 (e - b) * sizeof(T));
    }
    if (!device::block_barrier(c, f.seq0 + j + 1, f.deadline, j == 0 ? p.header : 0)) return;
    const size_t m0 = min_sz(me * shard, n), mlen = min_sz(shard, n - m0);
    const size_t b = min_sz(s.begin, mlen), e = min_sz(s.end, mlen);
    const T* srcs[device::kMaxDeviceRanks];
    T* dsts[device::kMaxDeviceRanks];
    for (int r = 0; r < n_ranks; ++r) {
      srcs[r] = r == me ? in + e0 + m0 + b : reinterpret_cast<const T*>(c.scratch[me] + hoff + r * slot) + b;
      dsts[r] = reinterpret_cast<T*>(p.peer_out[r]) + e0 + m0 + b;
    }
    block_reduce<T, kOp, kR>(dsts, n_ranks, srcs, n_ranks, e - b, p.op);
  }
  device::block_barrier(c, f.seq0 + rounds + 1, f.deadline);
}

// Rounds of the staged and push-to-output paths: how many staging halves the input needs.
__device__ __forceinline__ uint32_t staged_rounds(const AllReduceTwoShotParams& p, int slots_per_rank, size_t es) {
  const size_t round_elems = slot_bytes(p.comm, slots_per_rank * p.comm.world_size) / es * p.comm.world_size;
  return static_cast<uint32_t>(div_up(p.count, round_elems));
}

// One kernel instance per path: in one kernel the three paths' register footprints add up (the 8-rank bf16
// instance spilled 136 bytes per thread, each path alone 0-16; the 2-rank one 44, each path alone 0-36).
enum class Path { kPush, kZeroCopy, kStaged };

template <class T, int kOp, int kR, Path kPath>
__global__ void __launch_bounds__(kThreads) all_reduce_two_shot_kernel(AllReduceTwoShotParams p) {
  const Frame f = frame_begin(p.comm, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  if constexpr (kPath == Path::kPush) {
    const uint32_t rounds = staged_rounds(p, 1, sizeof(T));
    push_out<T, kOp, kR>(p, f, rounds);
    frame_end(p.comm, f, rounds + 1, rounds);
  } else if constexpr (kPath == Path::kZeroCopy) {
    zero_copy<T, kOp, kR>(p, f);
    frame_end(p.comm, f, 2, 0);
  } else {
    const uint32_t rounds = staged_rounds(p, 2, sizeof(T));
    staged<T, kOp, kR>(p, f, rounds);
    frame_end(p.comm, f, 2 * rounds, rounds);
  }
}

}  // namespace

void launch_all_reduce_two_shot(const AllReduceTwoShotParams& p, cudaStream_t stream) {
  const int blocks = grid_blocks(p.count * dtype_size(p.dtype), p.block_bytes, p.max_blocks);
  dispatch_reduce(p.dtype, p.op, p.comm.world_size, [&](auto t, auto o, auto r) {
    using T = typename decltype(t)::type;
    constexpr int kO = decltype(o)::value, kR = decltype(r)::value;
    if (p.push_out) {
      SYMCOMM_CUDA_CHECK(
          launch_kernel(all_reduce_two_shot_kernel<T, kO, kR, Path::kPush>, blocks, kThreads, stream, false, p));
    } else if (p.zero_copy) {
      SYMCOMM_CUDA_CHECK(
          launch_kernel(all_reduce_two_shot_kernel<T, kO, kR, Path::kZeroCopy>, blocks, kThreads, stream, false, p));
    } else {
      SYMCOMM_CUDA_CHECK(
          launch_kernel(all_reduce_two_shot_kernel<T, kO, kR, Path::kStaged>, blocks, kThreads, stream, false, p));
    }
  });
}

}  // namespace symcomm::detail::cuda
