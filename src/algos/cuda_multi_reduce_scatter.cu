// Multi-tensor reduce-scatter: the reduce-scatter of cuda_reduce_scatter.cu over the virtual concatenation of
// a group's outputs (NOTE [multi-tensor list] in cuda_multi.h). Virtual element v of tensor k is output
// element v - voff_k; its inputs are element (rank * count_k + v - voff_k) of every rank's input k.
//
// Zero-copy (every input in the symmetric heap): barrier; each block pulls its slice, piece by piece, from
// every rank and reduces it in rank order into the output; barrier.
// Staged, per round of one staging half cut into N slots: rank r gathers virtual block q of its inputs into
// slot r of rank q (remote stores); barrier; rank r reduces its slots into its outputs, piece by piece.
#include "algos/cuda_multi.cuh"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

template <class T, int kOp, int kR>
__global__ void __launch_bounds__(kThreads) multi_reduce_scatter_kernel(const __grid_constant__ MultiParams p) {
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const int n_ranks = c.world_size, me = c.rank;
  const size_t unit = 16 / sizeof(T);
  if (p.zero_copy) {
    const Slice s = block_slice(p.total, p.total, unit);
    if (device::block_barrier(c, f.seq0 + 1, f.deadline, p.header)) {
      for_each_piece(p, s.begin, s.end, [&](const MultiSegment& g, size_t local, size_t len, size_t) {
        const T* srcs[device::kMaxDeviceRanks];
        for (int r = 0; r < n_ranks; ++r) srcs[r] = peer_of<const T>(g.in, g.in_stride, r, me) + me * g.count + local;
        T* dst = reinterpret_cast<T*>(g.out) + local;
        block_reduce<T, kOp, kR>(&dst, 1, srcs, n_ranks, len, p.op);
      });
      device::block_barrier(c, f.seq0 + 2, f.deadline);
    }
    frame_end(c, f, 2, 0);
    return;
  }
  const size_t slot = slot_bytes(c, n_ranks);
  const size_t round_elems = slot / sizeof(T);
  const uint32_t rounds = static_cast<uint32_t>(div_up(p.total, round_elems));
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * round_elems, n = min_sz(round_elems, p.total - e0);
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const Slice s = block_slice(n, rounds == 1 ? n : round_elems, unit);
    for (int k = 0; k < n_ranks; ++k) {  // NOTE [push order]
      const int q = push_target(me, k, n_ranks);
      char* dst = c.scratch[q] + hoff + me * slot + s.begin * sizeof(T);
      for_each_piece(p, e0 + s.begin, e0 + s.end, [&](const MultiSegment& g, size_t local, size_t len, size_t rel) {
        block_copy(dst + rel * sizeof(T), g.in + (q * g.count + local) * sizeof(T), len * sizeof(T));
      });
    }
    if (!device::block_barrier(c, f.seq0 + j + 1, f.deadline, j == 0 ? p.header : 0)) break;
    for_each_piece(p, e0 + s.begin, e0 + s.end, [&](const MultiSegment& g, size_t local, size_t len, size_t rel) {
      const T* srcs[device::kMaxDeviceRanks];
      for (int r = 0; r < n_ranks; ++r) {
        srcs[r] = reinterpret_cast<const T*>(c.scratch[me] + hoff + r * slot) + s.begin + rel;
      }
      T* dst = reinterpret_cast<T*>(g.out) + local;
      block_reduce<T, kOp, kR>(&dst, 1, srcs, n_ranks, len, p.op);
    });
  }
  frame_end(c, f, rounds, rounds);
}

}  // namespace

void launch_multi_reduce_scatter(const MultiParams& p, cudaStream_t stream) {
  const int blocks = multi_blocks(p.total * dtype_size(p.dtype));
  dispatch_reduce(p.dtype, p.op, p.comm.world_size, [&](auto t, auto o, auto r) {
    using T = typename decltype(t)::type;
    SYMCOMM_CUDA_CHECK(launch_kernel(multi_reduce_scatter_kernel<T, decltype(o)::value, decltype(r)::value>, blocks,
                                     kThreads, stream, false, p));
  });
}

}  // namespace symcomm::detail::cuda
