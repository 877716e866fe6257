// One-shot all-reduce. NOTE [one-shot push]: pushing the input into the peers' staging (remote stores, then
// one release flag) costs one NVLink latency per round; the reduction then reads only local memory. Pulling
// would add a remote read latency after the flag. Staging halves alternate (NOTE [rounds]), so no closing
// barrier is needed: a rank can only overwrite a half after passing a later barrier, which every peer
// signals only after finishing the kernel that read that half.

#include "algos/cuda_all_reduce_one_shot.h"
#include "algos/cuda_common.cuh"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

// The grid (payload bytes per block, block cap) is Tuning::cuda_one_shot_block_bytes / _max_blocks. Small
// payloads run the LL kernel instead (NOTE [LL threshold] in cuda_backend_cuda.h); this staged kernel took
// 5.5-6.9 us from 4 KB to 256 KB and 23 us at 4 MB in a graph (measured on 2 x H200
// (nvidia-h200-x2), `tools/gpu/check.sh` (bf16 sum, symcomm-bench), run 1, 16 KB per block, 32 blocks).

template <class T, int kOp, int kR>
__global__ void __launch_bounds__(kThreads) all_reduce_one_shot_kernel(AllReduceOneShotParams p) {
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const int n_ranks = c.world_size, me = c.rank;
  const size_t slot = slot_bytes(c, n_ranks);
  const size_t round_elems = slot / sizeof(T);
  const uint32_t rounds = static_cast<uint32_t>(div_up(p.count, round_elems));
  const size_t unit = 16 / sizeof(T);
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * round_elems, n = min_sz(round_elems, p.count - e0);
    const size_t half = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const Slice s = block_slice(n, rounds == 1 ? n : round_elems, unit);
    // Peers only: this rank's own input is reduced in place (in == out is safe: each element is read and
    // then written by the same thread).
    char* dsts[device::kMaxDeviceRanks];
    int ndst = 0;
    for (int r = 0; r < n_ranks; ++r) {
      if (r != me) dsts[ndst++] = c.scratch[r] + half + me * slot + s.begin * sizeof(T);
    }
    block_copy_multi(dsts, ndst, reinterpret_cast<const char*>(in + e0 + s.begin), s.size() * sizeof(T));
    if (!device::block_barrier(c, f.seq0 + j + 1, f.deadline, j == 0 ? p.header : 0)) break;
    const T* srcs[device::kMaxDeviceRanks];
    for (int r = 0; r < n_ranks; ++r) {
      srcs[r] = r == me ? in + e0 + s.begin : reinterpret_cast<const T*>(c.scratch[me] + half + r * slot) + s.begin;
    }
    T* dst = out + e0 + s.begin;
    block_reduce<T, kOp, kR>(&dst, 1, srcs, n_ranks, s.size(), p.op);
  }
  frame_end(c, f, rounds, rounds);
}

}  // namespace

size_t all_reduce_one_shot_round_bytes(const device::DeviceComm& c) { return slot_bytes(c, c.world_size); }

void launch_all_reduce_one_shot(const AllReduceOneShotParams& p, cudaStream_t stream) {
  const int blocks = grid_blocks(p.count * dtype_size(p.dtype), p.block_bytes, p.max_blocks);
  dispatch_reduce(p.dtype, p.op, p.comm.world_size, [&](auto t, auto o, auto r) {
    using T = typename decltype(t)::type;
    SYMCOMM_CUDA_CHECK(launch_kernel(all_reduce_one_shot_kernel<T, decltype(o)::value, decltype(r)::value>, blocks,
                                     kThreads, stream, p.pdl, p));
  });
}

}  // namespace symcomm::detail::cuda
