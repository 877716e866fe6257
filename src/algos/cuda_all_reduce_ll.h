#pragma once
// Low-latency (LL) one-shot all-reduce (CUDA): every 8 bytes of payload travel in a 16-byte line together
// with two copies of the op's sequence number, so the arrival of the data is its own signal: no fence, no
// separate flag, no barrier. For small payloads, where one NVLink latency is most of the cost.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "symcomm/device/handle.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {

struct AllReduceLLParams {
  device::DeviceComm comm;
  const void* in;
  void* out;
  size_t count;
  DataType dtype;
  ReduceOp op;
  size_t chunks_per_thread = 1;  ///< 8-byte chunks per thread before another block is added (Tuning; 1-64)
  size_t max_blocks = 128;       ///< (Tuning; 1-1024)
  size_t block_threads = 512;    ///< threads per block (Tuning; rounded down to a multiple of 32, 32-512)
};

/// Largest payload (bytes) the LL buffers hold.
size_t all_reduce_ll_max_bytes(const device::DeviceComm& c);
void launch_all_reduce_ll(const AllReduceLLParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
