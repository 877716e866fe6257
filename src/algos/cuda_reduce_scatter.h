#pragma once
// Reduce-scatter (CUDA): out[i] = op over ranks (in rank order) of in_r[rank*count + i].

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "symcomm/device/handle.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {

struct ReduceScatterParams {
  device::DeviceComm comm;
  const void* in;  ///< world_size * count elements
  void* out;       ///< count elements
  size_t count;
  DataType dtype;
  ReduceOp op;
  uint64_t header;
  /// Zero-copy: `in` lies in the symmetric heap and peer_in[p] is rank p's copy (pull, two barriers).
  const char* peer_in[device::kMaxDeviceRanks];
  bool zero_copy;
  size_t block_bytes = 64 << 10;  ///< bytes of the output per GPU block (Tuning::cuda_direct_block_bytes)
  size_t max_blocks = 128;        ///< (Tuning::cuda_direct_max_blocks; clamped to 1..device::kMaxBlocks)
};

void launch_reduce_scatter(const ReduceScatterParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
