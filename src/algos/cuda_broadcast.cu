// Broadcast. Zero-copy: barrier (outputs free); the root stores into every rank's output; barrier
// (delivered). Staged, per round of one staging half: the root pushes the round into every peer's half and
// copies locally; barrier; the others copy their half into the output (NOTE [rounds] in cuda_common.cuh).
#include "algos/cuda_broadcast.h"
#include "algos/cuda_common.cuh"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

// Tunables (chosen, not yet tuned): as the exchange kernel (cuda_all_gather.cu).
constexpr size_t kBytesPerBlock = 64 << 10;
constexpr int kMaxBlocks = 64;

__global__ void __launch_bounds__(kThreads) broadcast_kernel(BroadcastParams p) {
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const int n_ranks = c.world_size, me = c.rank;
  const bool root = me == p.root;
  if (p.zero_copy) {
    const Slice s = block_slice(p.bytes, p.bytes, 16);
    if (device::block_barrier(c, f.seq0 + 1, f.deadline, p.header)) {
      if (root) {
        char* dsts[device::kMaxDeviceRanks];
        int nd = 0;
        for (int q = 0; q < n_ranks; ++q) {
          if (q != me || p.out != p.in) dsts[nd++] = p.peer_out[q] + s.begin;
        }
        block_copy_multi(dsts, nd, p.in + s.begin, s.size());
      }
      device::block_barrier(c, f.seq0 + 2, f.deadline);
    }
    frame_end(c, f, 2, 0);
    return;
  }
  const size_t slot = slot_bytes(c, 1);
  const uint32_t rounds = static_cast<uint32_t>(div_up(p.bytes, slot));
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * slot, n = min_sz(slot, p.bytes - e0);
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const Slice s = block_slice(n, rounds == 1 ? n : slot, 16);
    if (root) {
      char* dsts[device::kMaxDeviceRanks];
      int nd = 0;
      for (int q = 0; q < n_ranks; ++q) {
        if (q != me) {
          dsts[nd++] = c.scratch[q] + hoff + s.begin;
        } else if (p.out != p.in) {
          dsts[nd++] = p.out + e0 + s.begin;
        }
      }
      block_copy_multi(dsts, nd, p.in + e0 + s.begin, s.size());
    }
    if (!device::block_barrier(c, f.seq0 + j + 1, f.deadline, j == 0 ? p.header : 0)) break;
    if (!root) block_copy(p.out + e0 + s.begin, c.scratch[me] + hoff + s.begin, s.size());
  }
  frame_end(c, f, rounds, rounds);
}

}  // namespace

void launch_broadcast(const BroadcastParams& p, cudaStream_t stream) {
  size_t b = div_up(p.bytes, kBytesPerBlock);
  const int blocks = static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
  SYMCOMM_CUDA_CHECK(launch_kernel(broadcast_kernel, blocks, kThreads, stream, false, p));
}

}  // namespace symcomm::detail::cuda
