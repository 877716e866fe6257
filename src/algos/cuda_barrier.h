#pragma once
// Barrier (CUDA): completes on the stream once every rank's stream has reached it.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "symcomm/device/handle.h"

namespace symcomm::detail::cuda {

struct BarrierParams {
  device::DeviceComm comm;
  uint64_t header;
};

void launch_barrier(const BarrierParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
