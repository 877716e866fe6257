// The kernel of the functional P2P check (cuda_topology_cuda.cc): SM stores into every peer's memory, the
// access pattern every symcomm kernel relies on.
#include "backends/cuda/cuda_topology_cuda.h"
#include "base/cuda_check.h"
#include "symcomm/device/handle.h"

namespace symcomm::detail {
namespace {

struct ProbeArgs {
  char* dsts[device::kMaxDeviceRanks];
};

__global__ void probe_write_kernel(ProbeArgs a, int world_size, int rank, uint64_t salt) {
  int p = threadIdx.x;
  if (p < world_size) {
    reinterpret_cast<volatile uint64_t*>(a.dsts[p])[rank] = salt ^ (uint64_t{static_cast<uint32_t>(rank)} << 32) ^ p;
  }
  __threadfence_system();
}

}  // namespace

void launch_probe_write(char* const* dsts, int world_size, int rank, uint64_t salt) {
  ProbeArgs a{};
  for (int p = 0; p < world_size && p < device::kMaxDeviceRanks; ++p) a.dsts[p] = dsts[p];
  cudaLaunchConfig_t cfg{};  // the launch's own result: NOTE [launch result] in src/algos/cuda_common.cuh
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  SYMCOMM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, probe_write_kernel, a, world_size, rank, salt));
  SYMCOMM_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace symcomm::detail
