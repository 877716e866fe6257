// Multi-tensor all-gather: the exchange of cuda_all_gather.cu over the virtual concatenation of a group's
// inputs, in bytes (NOTE [multi-tensor list] in cuda_multi.h). Virtual byte v of tensor k is input byte
// v - voff_k; rank r stores it as byte (r * count_k + v - voff_k) of every rank's output k.
//
// Zero-copy (every output in the symmetric heap): barrier; each block loads its slice once and stores it
// into every rank's output (remote stores); barrier.
// Staged, per round of one staging half cut into N slots: rank r stores its slice into slot r of every peer
// and into its own output; barrier; rank r copies slots q != r into block q of its outputs.
#include "algos/cuda_multi.cuh"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

__global__ void __launch_bounds__(kThreads) multi_all_gather_kernel(const __grid_constant__ MultiParams p) {
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const int n_ranks = c.world_size, me = c.rank;
  if (p.zero_copy) {
    const Slice s = block_slice(p.total, p.total, 16);
    if (device::block_barrier(c, f.seq0 + 1, f.deadline, p.header)) {
      for_each_piece(p, s.begin, s.end, [&](const MultiSegment& g, size_t local, size_t len, size_t) {
        char* dsts[device::kMaxDeviceRanks];
        int nd = 0;
        for (int k = 0; k < n_ranks; ++k) {
          const int q = (me + 1 + k) % n_ranks;
          char* dst = peer_of<char>(g.out, g.out_stride, q, me) + me * g.count + local;
          if (dst != g.in + local) dsts[nd++] = dst;  // in place: own block already there
        }
        block_copy_multi(dsts, nd, g.in + local, len);
      });
      device::block_barrier(c, f.seq0 + 2, f.deadline);
    }
    frame_end(c, f, 2, 0);
    return;
  }
  const size_t slot = slot_bytes(c, n_ranks);
  const uint32_t rounds = static_cast<uint32_t>(div_up(p.total, slot));
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * slot, n = min_sz(slot, p.total - e0);
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const Slice s = block_slice(n, rounds == 1 ? n : slot, 16);
    for_each_piece(p, e0 + s.begin, e0 + s.end, [&](const MultiSegment& g, size_t local, size_t len, size_t rel) {
      char* dsts[device::kMaxDeviceRanks];
      int nd = 0;
      const char* src = g.in + local;
      for (int q = 0; q < n_ranks; ++q) {
        char* dst = q == me ? g.out + me * g.count + local : c.scratch[q] + hoff + me * slot + s.begin + rel;
        if (dst != src) dsts[nd++] = dst;
      }
      block_copy_multi(dsts, nd, src, len);
    });
    if (!device::block_barrier(c, f.seq0 + j + 1, f.deadline, j == 0 ? p.header : 0)) break;
    for (int q = 0; q < n_ranks; ++q) {
      if (q == me) continue;
      const char* src = c.scratch[me] + hoff + q * slot + s.begin;
      for_each_piece(p, e0 + s.begin, e0 + s.end, [&](const MultiSegment& g, size_t local, size_t len, size_t rel) {
        block_copy(g.out + q * g.count + local, src + rel, len);
      });
    }
  }
  frame_end(c, f, rounds, rounds);
}

}  // namespace

void launch_multi_all_gather(const MultiParams& p, cudaStream_t stream) {
  SYMCOMM_CUDA_CHECK(launch_kernel(multi_all_gather_kernel, multi_blocks(p.total), kThreads, stream, false, p));
}

}  // namespace symcomm::detail::cuda
