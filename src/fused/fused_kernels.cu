// Small kernels of the fused operations: the float32 result of a reduce-scatter chunk, scaled and rounded
// once into the output dtype at its columns of the output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "algos/cuda_common.cuh"
#include "base/cuda_check.h"
#include "fused/fused_kernels.h"

namespace symcomm::detail::fused {
namespace {

// Tunables: 256 threads, at most 4096 blocks of a grid-stride loop (a chunk is at most a few tens of MB).
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

template <class T>
__device__ T from_float(float v);
template <>
__device__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

template <class T>
__global__ void store_rows_kernel(StoreRowsParams p) {
  const int64_t total = p.rows * p.cols;
  T* dst = static_cast<T*>(p.dst);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / p.cols, c = i - r * p.cols;
    dst[r * p.ld_dst + c] = from_float<T>(p.scale * p.src[i]);
  }
}

}  // namespace

void launch_store_rows(const StoreRowsParams& p, cudaStream_t stream) {
  const int64_t total = p.rows * p.cols;
  if (total == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, kMaxBlocks));
  switch (p.dtype) {
    case DataType::kBFloat16:
      SYMCOMM_CUDA_CHECK(cuda::launch_kernel(store_rows_kernel<__nv_bfloat16>, blocks, kThreads, stream, false, p));
      break;
    case DataType::kFloat16:
      SYMCOMM_CUDA_CHECK(cuda::launch_kernel(store_rows_kernel<__half>, blocks, kThreads, stream, false, p));
      break;
    default:
      SYMCOMM_CUDA_CHECK(cuda::launch_kernel(store_rows_kernel<float>, blocks, kThreads, stream, false, p));
      break;
  }
}

}  // namespace symcomm::detail::fused
