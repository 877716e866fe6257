// Reduce-scatter.
//
// Zero-copy (input in the symmetric heap): barrier (inputs ready); rank r pulls block r of every rank's
// input and reduces it in rank order into its output; barrier (inputs no longer read).
// Staged, per round of one staging half cut into N slots: rank r pushes block q of its input into slot r of
// rank q (remote stores); barrier; rank r reduces its slots 0..N-1 locally into its output. Halves
// alternate per round (NOTE [rounds] in cuda_common.cuh), so one barrier per round.
#include "algos/cuda_common.cuh"
#include "algos/cuda_reduce_scatter.h"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

// Grid: Tuning::cuda_direct_block_bytes / cuda_direct_max_blocks (of the output's bytes); 128 blocks give
// 328 GB/s bus bandwidth at 256 MB, 1.41x NCCL's best (measured on 2 x H200 (nvidia-h200-x2),
// `tools/gpu/check.sh` (bf16 sum, symcomm-bench)).

template <class T, int kOp, int kR>
__global__ void __launch_bounds__(kThreads) reduce_scatter_kernel(ReduceScatterParams p) {
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const int n_ranks = c.world_size, me = c.rank;
  const size_t unit = 16 / sizeof(T);
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  if (p.zero_copy) {
    const Slice s = block_slice(p.count, p.count, unit);
    if (device::block_barrier(c, f.seq0 + 1, f.deadline, p.header)) {
      const T* srcs[device::kMaxDeviceRanks];
      for (int r = 0; r < n_ranks; ++r) srcs[r] = reinterpret_cast<const T*>(p.peer_in[r]) + me * p.count + s.begin;
      T* dst = out + s.begin;
      block_reduce<T, kOp, kR>(&dst, 1, srcs, n_ranks, s.size(), p.op);
      device::block_barrier(c, f.seq0 + 2, f.deadline);
    }
    frame_end(c, f, 2, 0);
    return;
  }
  const size_t slot = slot_bytes(c, n_ranks);
  const size_t round_elems = slot / sizeof(T);
  const uint32_t rounds = static_cast<uint32_t>(div_up(p.count, round_elems));
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * round_elems, n = min_sz(round_elems, p.count - e0);
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const Slice s = block_slice(n, rounds == 1 ? n : round_elems, unit);
    for (int k = 0; k < n_ranks; ++k) {  // NOTE [push order]
      const int q = push_target(me, k, n_ranks);
      block_copy(c.scratch[q] + hoff + me * slot + s.begin * sizeof(T),
                 reinterpret_cast<const char*>(in + q * p.count + e0 + s.begin), s.size() * sizeof(T));
    }
    if (!device::block_barrier(c, f.seq0 + j + 1, f.deadline, j == 0 ? p.header : 0)) break;
    const T* srcs[device::kMaxDeviceRanks];
    for (int r = 0; r < n_ranks; ++r) srcs[r] = reinterpret_cast<const T*>(c.scratch[me] + hoff + r * slot) + s.begin;
    T* dst = out + e0 + s.begin;
    block_reduce<T, kOp, kR>(&dst, 1, srcs, n_ranks, s.size(), p.op);
  }
  frame_end(c, f, rounds, rounds);
}

}  // namespace

void launch_reduce_scatter(const ReduceScatterParams& p, cudaStream_t stream) {
  const int blocks = grid_blocks(p.count * dtype_size(p.dtype), p.block_bytes, p.max_blocks);
  dispatch_reduce(p.dtype, p.op, p.comm.world_size, [&](auto t, auto o, auto r) {
    using T = typename decltype(t)::type;
    SYMCOMM_CUDA_CHECK(launch_kernel(reduce_scatter_kernel<T, decltype(o)::value, decltype(r)::value>, blocks, kThreads,
                                     stream, false, p));
  });
}

}  // namespace symcomm::detail::cuda
