// Barrier: one block, one signal to and one wait on every peer (release/acquire at system scope), so work
// before it on every rank's stream happens before work after it on any rank's stream.
#include "algos/cuda_barrier.h"
#include "algos/cuda_common.cuh"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

// A warp is enough: threads 0..N-1 signal and wait (N <= kMaxDeviceRanks <= 32).
constexpr int kBarrierThreads = 32;

__global__ void __launch_bounds__(kBarrierThreads) barrier_kernel(BarrierParams p) {
  const Frame f = frame_begin(p.comm, p.header);
  if (f.failed) return;  // NOTE [failed communicator]
  device::block_barrier(p.comm, f.seq0 + 1, f.deadline, p.header);
  frame_end(p.comm, f, 1, 0);
}

}  // namespace

void launch_barrier(const BarrierParams& p, cudaStream_t stream) {
  SYMCOMM_CUDA_CHECK(launch_kernel(barrier_kernel, 1, kBarrierThreads, stream, false, p));
}

}  // namespace symcomm::detail::cuda
