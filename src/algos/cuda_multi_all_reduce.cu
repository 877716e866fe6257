// Multi-tensor all-reduce: the two-shot all-reduce (cuda_all_reduce_two_shot.cu) over the virtual
// concatenation of a group's tensors (NOTE [multi-tensor list] in cuda_multi.h). Rank r reduces shard r of
// the virtual buffer, so one launch moves the same bytes as one all-reduce of the flattened tensors.
//
// Zero-copy (every in and out in the symmetric heap): barrier; for each piece of my slice of shard r, pull
// every rank's input, reduce in rank order, push into every rank's output; barrier.
// Staged: per round of one staging half cut into 2N slots [RS 0..N-1 | AG 0..N-1], as the single-tensor
// staged path, with the user-side reads and writes split at tensor boundaries.
// Push to output (every out in the symmetric heap, totals from Tuning::cuda_two_shot_push_min_bytes):
// NOTE [two-shot push to output] in cuda_all_reduce_two_shot.cu, over the virtual buffer, piece by piece.
#include "algos/cuda_multi.cuh"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

// This block's slice of shard q of the round's virtual range [e0, e0 + n) of my inputs, for every rank q (but
// me with skip_me), into slot `me` of rank q's staging at byte offset `off`.
template <class T>
__device__ void scatter_shards(const MultiParams& p, size_t e0, size_t n, size_t shard, const Slice& s, size_t off,
                               size_t slot, bool skip_me) {
  const DeviceComm& c = p.comm;
  for (int k = 0; k < c.world_size; ++k) {  // NOTE [push order]
    const int q = push_target(c.rank, k, c.world_size);
    if (skip_me && q == c.rank) continue;
    const size_t q0 = min_sz(q * shard, n), qlen = min_sz(shard, n - q0);
    const size_t b = min_sz(s.begin, qlen), e = min_sz(s.end, qlen);
    char* dst = c.scratch[q] + off + c.rank * slot + b * sizeof(T);
    for_each_piece(p, e0 + q0 + b, e0 + q0 + e, [&](const MultiSegment& g, size_t local, size_t len, size_t rel) {
      block_copy(dst + rel * sizeof(T), g.in + local * sizeof(T), len * sizeof(T));
    });
  }
}

template <class T, int kOp, int kR>
__device__ void zero_copy(const MultiParams& p, const Frame& f) {
  const DeviceComm& c = p.comm;
  const int n_ranks = c.world_size, me = c.rank;
  const size_t unit = 16 / sizeof(T);
  const size_t shard = round_up(div_up(p.total, n_ranks), unit);
  const size_t s0 = min_sz(me * shard, p.total), len = min_sz(shard, p.total - s0);
  const Slice s = block_slice(len, len, unit);
  if (!device::block_barrier(c, f.seq0 + 1, f.deadline, p.header)) return;
  for_each_piece(p, s0 + s.begin, s0 + s.end, [&](const MultiSegment& g, size_t local, size_t n, size_t) {
    const T* srcs[device::kMaxDeviceRanks];
    T* dsts[device::kMaxDeviceRanks];
    for (int r = 0; r < n_ranks; ++r) {
      srcs[r] = peer_of<const T>(g.in, g.in_stride, r, me) + local;
      dsts[r] = peer_of<T>(g.out, g.out_stride, r, me) + local;
    }
    block_reduce<T, kOp, kR>(dsts, n_ranks, srcs, n_ranks, n, p.op);
  });
  device::block_barrier(c, f.seq0 + 2, f.deadline);
}

template <class T, int kOp, int kR>
__device__ void staged(const MultiParams& p, const Frame& f, uint32_t rounds) {
  const DeviceComm& c = p.comm;
  const int n_ranks = c.world_size, me = c.rank;
  const size_t slot = slot_bytes(c, 2 * n_ranks);
  const size_t shard_cap = slot / sizeof(T);
  const size_t round_elems = shard_cap * n_ranks;
  const size_t unit = 16 / sizeof(T);
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * round_elems, n = min_sz(round_elems, p.total - e0);
    const size_t shard = min_sz(shard_cap, round_up(div_up(n, n_ranks), unit));
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const size_t rs = hoff, ag = hoff + n_ranks * slot;
    const Slice s = block_slice(shard, rounds == 1 ? shard : shard_cap, unit);
    // 1. scatter my shards
    scatter_shards<T>(p, e0, n, shard, s, rs, slot, false);
    if (!device::block_barrier(c, f.seq0 + 2 * j + 1, f.deadline, j == 0 ? p.header : 0)) return;
    // 2. reduce my shard into my output and every peer's AG slot
    {
      const size_t m0 = min_sz(me * shard, n), mlen = min_sz(shard, n - m0);
      const size_t b = min_sz(s.begin, mlen), e = min_sz(s.end, mlen);
      for_each_piece(p, e0 + m0 + b, e0 + m0 + e, [&](const MultiSegment& g, size_t local, size_t len, size_t rel) {
        const T* srcs[device::kMaxDeviceRanks];
        T* dsts[device::kMaxDeviceRanks];
        for (int r = 0; r < n_ranks; ++r) {
          srcs[r] = reinterpret_cast<const T*>(c.scratch[me] + rs + r * slot) + b + rel;
          dsts[r] = r == me ? reinterpret_cast<T*>(g.out) + local
                            : reinterpret_cast<T*>(c.scratch[r] + ag + me * slot) + b + rel;
        }
        block_reduce<T, kOp, kR>(dsts, n_ranks, srcs, n_ranks, len, p.op);
      });
    }
    if (!device::block_barrier(c, f.seq0 + 2 * j + 2, f.deadline)) return;
    // 3. gather the others' shards into my outputs
    for (int q = 0; q < n_ranks; ++q) {
      if (q == me) continue;
      const size_t q0 = min_sz(q * shard, n), qlen = min_sz(shard, n - q0);
      const size_t b = min_sz(s.begin, qlen), e = min_sz(s.end, qlen);
      const char* src = c.scratch[me] + ag + q * slot + b * sizeof(T);
      for_each_piece(p, e0 + q0 + b, e0 + q0 + e, [&](const MultiSegment& g, size_t local, size_t len, size_t rel) {
        block_copy(g.out + local * sizeof(T), src + rel * sizeof(T), len * sizeof(T));
      });
    }
  }
}

template <class T, int kOp, int kR>
__device__ void push_out(const MultiParams& p, const Frame& f, uint32_t rounds) {
  const DeviceComm& c = p.comm;
  const int n_ranks = c.world_size, me = c.rank;
  const size_t slot = slot_bytes(c, n_ranks);
  const size_t shard_cap = slot / sizeof(T);
  const size_t round_elems = shard_cap * n_ranks;
  const size_t unit = 16 / sizeof(T);
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * round_elems, n = min_sz(round_elems, p.total - e0);
    const size_t shard = min_sz(shard_cap, round_up(div_up(n, n_ranks), unit));
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const Slice s = block_slice(shard, rounds == 1 ? shard : shard_cap, unit);
    // 1. push the peers' shards of my inputs into their slot `me`
    scatter_shards<T>(p, e0, n, shard, s, hoff, slot, true);
    if (!device::block_barrier(c, f.seq0 + j + 1, f.deadline, j == 0 ? p.header : 0)) return;
    // 2. reduce my shard (my inputs in place, the peers' from my slots) into every rank's outputs
    const size_t m0 = min_sz(me * shard, n), mlen = min_sz(shard, n - m0);
    const size_t b = min_sz(s.begin, mlen), e = min_sz(s.end, mlen);
    for_each_piece(p, e0 + m0 + b, e0 + m0 + e, [&](const MultiSegment& g, size_t local, size_t len, size_t rel) {
      const T* srcs[device::kMaxDeviceRanks];
      T* dsts[device::kMaxDeviceRanks];
      for (int r = 0; r < n_ranks; ++r) {
        srcs[r] = r == me ? reinterpret_cast<const T*>(g.in) + local
                          : reinterpret_cast<const T*>(c.scratch[me] + hoff + r * slot) + b + rel;
        dsts[r] = peer_of<T>(g.out, g.out_stride, r, me) + local;
      }
      block_reduce<T, kOp, kR>(dsts, n_ranks, srcs, n_ranks, len, p.op);
    });
  }
  device::block_barrier(c, f.seq0 + rounds + 1, f.deadline);
}

template <class T, int kOp, int kR>
__global__ void __launch_bounds__(kThreads) multi_all_reduce_kernel(const __grid_constant__ MultiParams p) {
  const Frame f = frame_begin(p.comm, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  if (p.push_out) {
    const size_t round_elems = slot_bytes(p.comm, p.comm.world_size) / sizeof(T) * p.comm.world_size;
    const uint32_t rounds = static_cast<uint32_t>(div_up(p.total, round_elems));
    push_out<T, kOp, kR>(p, f, rounds);
    frame_end(p.comm, f, rounds + 1, rounds);
  } else if (p.zero_copy) {
    zero_copy<T, kOp, kR>(p, f);
    frame_end(p.comm, f, 2, 0);
  } else {
    const size_t round_elems = slot_bytes(p.comm, 2 * p.comm.world_size) / sizeof(T) * p.comm.world_size;
    const uint32_t rounds = static_cast<uint32_t>(div_up(p.total, round_elems));
    staged<T, kOp, kR>(p, f, rounds);
    frame_end(p.comm, f, 2 * rounds, rounds);
  }
}

}  // namespace

void launch_multi_all_reduce(const MultiParams& p, cudaStream_t stream) {
  const int blocks = multi_blocks(p.total * dtype_size(p.dtype));
  dispatch_reduce(p.dtype, p.op, p.comm.world_size, [&](auto t, auto o, auto r) {
    using T = typename decltype(t)::type;
    SYMCOMM_CUDA_CHECK(launch_kernel(multi_all_reduce_kernel<T, decltype(o)::value, decltype(r)::value>, blocks,
                                     kThreads, stream, false, p));
  });
}

void launch_multi(const MultiParams& p, cudaStream_t stream) {
  switch (p.kind) {
    case Collective::kAllReduce: return launch_multi_all_reduce(p, stream);
    case Collective::kReduceScatter: return launch_multi_reduce_scatter(p, stream);
    default: return launch_multi_all_gather(p, stream);
  }
}

}  // namespace symcomm::detail::cuda
