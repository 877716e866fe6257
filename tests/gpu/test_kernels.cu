// Device-side input generation for graph-replay tests: the same values as input_value() on the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu_test_util.h"

namespace symcomm::gputest {
namespace {

template <class T>
__device__ T convert(long long v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <class T>
__global__ void fill_kernel(T* dst, bool prod, bool is_unsigned, unsigned long long seed, int rank, size_t count) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    unsigned long long h = (i * 2654435761ull + seed * 40503ull + static_cast<unsigned long long>(rank) * 977ull) >> 3;
    long long b = static_cast<long long>(h % 7) + 1;
    long long v = prod ? b % 2 + 1 : (is_unsigned ? b : b - 3);
    dst[i] = convert<T>(v);
  }
}

template <class T>
void launch(void* dst, ReduceOp op, DataType dt, uint64_t seed, int rank, size_t count, cudaStream_t s) {
  if (count == 0) return;
  int blocks = static_cast<int>(std::min<size_t>((count + 255) / 256, 1024));
  fill_kernel<T>
      <<<blocks, 256, 0, s>>>(static_cast<T*>(dst), op == ReduceOp::kProd, dt == DataType::kUInt8, seed, rank, count);
}

__global__ void store_byte_kernel(char* p, size_t offset) {
  if (threadIdx.x == 0 && blockIdx.x == 0) p[offset] = 1;
}

// The other tools' probes (one block of 64 threads, one report per launch; out has 64 ints):
// synccheck: thread 0 alone reaches a block barrier, its warp-mates do not ("Divergent thread(s) in warp"), the
// shape of a wait that gives up in one lane while the others go on to __syncthreads. Completes without the tool.
__global__ void lone_barrier_kernel(int* out) {
  if (threadIdx.x == 0) __syncthreads();
  out[threadIdx.x] = 1;
}
// racecheck: threads of two warps store to one shared word with no barrier between, then one reads it.
__global__ void shared_race_kernel(int* out) {
  __shared__ int cell;
  if (threadIdx.x == 0 || threadIdx.x == 32) cell = static_cast<int>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = cell;
}
// initcheck: thread 0 reads a word nothing has written (out[1], freshly allocated) into out[0].
__global__ void uninit_read_kernel(int* out) {
  if (threadIdx.x == 0) out[0] = out[1];
}

}  // namespace

void store_byte_async(void* p, size_t offset, cudaStream_t s) {
  store_byte_kernel<<<1, 32, 0, s>>>(static_cast<char*>(p), offset);
}

void sanitizer_probe_async(SanitizerProbe probe, int* out, cudaStream_t s) {
  switch (probe) {
    case SanitizerProbe::kLoneBarrier: return lone_barrier_kernel<<<1, 64, 0, s>>>(out);
    case SanitizerProbe::kSharedRace: return shared_race_kernel<<<1, 64, 0, s>>>(out);
    case SanitizerProbe::kUninitializedRead: return uninit_read_kernel<<<1, 64, 0, s>>>(out);
  }
}

void fill_input_async(void* dst, DataType dt, ReduceOp op, uint64_t seed, int rank, size_t count, cudaStream_t s) {
  switch (dt) {
    case DataType::kFloat32: return launch<float>(dst, op, dt, seed, rank, count, s);
    case DataType::kFloat64: return launch<double>(dst, op, dt, seed, rank, count, s);
    case DataType::kFloat16: return launch<__half>(dst, op, dt, seed, rank, count, s);
    case DataType::kBFloat16: return launch<__nv_bfloat16>(dst, op, dt, seed, rank, count, s);
    case DataType::kInt8: return launch<int8_t>(dst, op, dt, seed, rank, count, s);
    case DataType::kUInt8: return launch<uint8_t>(dst, op, dt, seed, rank, count, s);
    case DataType::kInt32: return launch<int32_t>(dst, op, dt, seed, rank, count, s);
    case DataType::kInt64: return launch<int64_t>(dst, op, dt, seed, rank, count, s);
  }
}

}  // namespace symcomm::gputest
