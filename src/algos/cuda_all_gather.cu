// All-gather / all-to-all exchange.
//
// Zero-copy (output in the symmetric heap): barrier (outputs free); rank r stores its block for q straight
// into block r of rank q's output (remote stores); barrier (delivered).
// Staged, per round of one staging half cut into N slots: rank r pushes its block for q into slot r of
// rank q and copies its own block locally; barrier; rank r copies slots q != r into output block q (local).
// Halves alternate per round (NOTE [rounds] in cuda_common.cuh).
#include "algos/cuda_all_gather.h"
#include "algos/cuda_common.cuh"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

// Grid: Tuning::cuda_direct_block_bytes / cuda_direct_max_blocks. 128 blocks x 512 threads with the
// load-once/store-to-all copy reach 357 GB/s bus bandwidth at 256 MB (1.45x NCCL's best); 64 blocks with one
// copy pass per destination give 298 (measured on 2 x H200 (nvidia-h200-x2), `tools/gpu/check.sh` (bf16 sum,
// symcomm-bench)).

__global__ void __launch_bounds__(kThreads) exchange_kernel(ExchangeParams p) {
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const int n_ranks = c.world_size, me = c.rank;
  if (p.zero_copy) {
    const Slice s = block_slice(p.bytes, p.bytes, 16);
    if (device::block_barrier(c, f.seq0 + 1, f.deadline, p.header)) {
      if (p.in_block_stride == 0) {
        // All-gather: one source for every destination; load once, store to all (local and remote stores
        // overlap instead of running as separate passes).
        char* dsts[device::kMaxDeviceRanks];
        int nd = 0;
        for (int k = 0; k < n_ranks; ++k) {
          const int q = (me + 1 + k) % n_ranks;
          char* dst = p.peer_out[q] + me * p.bytes + s.begin;
          if (dst != p.in + s.begin) dsts[nd++] = dst;  // in place: own block already there
        }
        block_copy_multi(dsts, nd, p.in + s.begin, s.size());
      } else {
        for (int k = 0; k < n_ranks; ++k) {
          const int q = (me + 1 + k) % n_ranks;  // remote blocks first, different peers on different ranks
          const char* src = p.in + q * p.in_block_stride + s.begin;
          char* dst = p.peer_out[q] + me * p.bytes + s.begin;
          if (q == me && dst == src) continue;  // in place
          block_copy(dst, src, s.size());
        }
      }
      device::block_barrier(c, f.seq0 + 2, f.deadline);
    }
    frame_end(c, f, 2, 0);
    return;
  }
  const size_t slot = slot_bytes(c, n_ranks);
  const uint32_t rounds = static_cast<uint32_t>(div_up(p.bytes, slot));
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * slot, n = min_sz(slot, p.bytes - e0);
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const Slice s = block_slice(n, rounds == 1 ? n : slot, 16);
    if (p.in_block_stride == 0) {
      char* dsts[device::kMaxDeviceRanks];
      int nd = 0;
      const char* src = p.in + e0 + s.begin;
      for (int q = 0; q < n_ranks; ++q) {
        char* dst = q == me ? p.out + me * p.bytes + e0 + s.begin : c.scratch[q] + hoff + me * slot + s.begin;
        if (dst != src) dsts[nd++] = dst;
      }
      block_copy_multi(dsts, nd, src, s.size());
    } else {
      for (int k = 0; k < n_ranks; ++k) {  // NOTE [push order]
        const int q = push_target(me, k, n_ranks);
        const char* src = p.in + q * p.in_block_stride + e0 + s.begin;
        char* dst = q == me ? p.out + me * p.bytes + e0 + s.begin : c.scratch[q] + hoff + me * slot + s.begin;
        if (dst != src) block_copy(dst, src, s.size());
      }
    }
    if (!device::block_barrier(c, f.seq0 + j + 1, f.deadline, j == 0 ? p.header : 0)) break;
    for (int q = 0; q < n_ranks; ++q) {
      if (q != me) block_copy(p.out + q * p.bytes + e0 + s.begin, c.scratch[me] + hoff + q * slot + s.begin, s.size());
    }
  }
  frame_end(c, f, rounds, rounds);
}

}  // namespace

void launch_exchange(const ExchangeParams& p, cudaStream_t stream) {
  SYMCOMM_CUDA_CHECK(
      launch_kernel(exchange_kernel, grid_blocks(p.bytes, p.block_bytes, p.max_blocks), kThreads, stream, false, p));
}

}  // namespace symcomm::detail::cuda
