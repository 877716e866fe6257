#include "algos/cuda_common.cuh"
#include "algos/cuda_local_reduce.h"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

template <class T, int kOp, int kR>
__global__ void __launch_bounds__(kThreads) local_reduce_kernel(LocalReduceParams p) {
  const Slice s = block_slice(p.count, p.count, 16 / sizeof(T));
  const T* srcs[device::kMaxDeviceRanks];
  for (int i = 0; i < p.nsrc; ++i) srcs[i] = static_cast<const T*>(p.srcs[i]) + s.begin;
  T* dst = static_cast<T*>(p.dst) + s.begin;
  block_reduce<T, kOp, kR>(&dst, 1, srcs, p.nsrc, s.size(), p.op);
}

}  // namespace

void launch_local_reduce(const LocalReduceParams& p, int blocks, cudaStream_t stream) {
  if (p.count == 0) return;
  dispatch_reduce(p.dtype, p.op, p.nsrc, [&](auto t, auto o, auto r) {
    using T = typename decltype(t)::type;
    SYMCOMM_CUDA_CHECK(launch_kernel(local_reduce_kernel<T, decltype(o)::value, decltype(r)::value>, blocks, kThreads,
                                     stream, false, p));
  });
}

}  // namespace symcomm::detail::cuda
