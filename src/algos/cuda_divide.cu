// Element-wise division by an integer (src/algos/cuda_divide.h).

#include <algorithm>

#include "algos/cuda_common.cuh"
#include "algos/cuda_divide.h"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

constexpr int kDivideThreads = 512;
constexpr size_t kDivideMaxBlocks = 1024;

// Block b divides its contiguous slice of the array.
template <class T>
__global__ void divide_kernel(T* data, size_t count, int divisor) {
  const size_t per = (count + gridDim.x - 1) / gridDim.x;
  const size_t begin = per * blockIdx.x;
  if (begin >= count) return;
  const size_t n = begin + per < count ? per : count - begin;
  block_divide(data + begin, data + begin, n, divisor);
}

}  // namespace

void launch_divide(void* data, size_t count, DataType dtype, int divisor, cudaStream_t stream) {
  if (count == 0) return;
  const size_t blocks = std::min(kDivideMaxBlocks, (count + kDivideThreads - 1) / kDivideThreads);
  dispatch_type_op(dtype, ReduceOp::kSum, [&](auto t, auto) {
    using T = typename decltype(t)::type;
    divide_kernel<T>
        <<<static_cast<unsigned>(blocks), kDivideThreads, 0, stream>>>(static_cast<T*>(data), count, divisor);
  });
  SYMCOMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace symcomm::detail::cuda
