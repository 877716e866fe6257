#pragma once
// All-gather and all-to-all (CUDA): the same exchange, rank r sends block src(q) of its input to rank q,
// which stores it as block r of its output. All-gather: src(q) = the whole input; all-to-all: block q.
// Byte-level (dtype-free): 16-byte accesses when aligned, narrower otherwise.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "symcomm/device/handle.h"

namespace symcomm::detail::cuda {

struct ExchangeParams {
  device::DeviceComm comm;
  const char* in;
  char* out;               ///< world_size * bytes
  size_t bytes;            ///< per peer block
  size_t in_block_stride;  ///< 0: all-gather (same input for every peer); bytes: all-to-all
  uint64_t header;
  /// Zero-copy: `out` lies in the symmetric heap and peer_out[p] is rank p's copy (push, two barriers).
  char* peer_out[device::kMaxDeviceRanks];
  bool zero_copy;
  size_t block_bytes = 64 << 10;  ///< bytes of `bytes` per GPU block (Tuning::cuda_direct_block_bytes)
  size_t max_blocks = 128;        ///< (Tuning::cuda_direct_max_blocks; clamped to 1..device::kMaxBlocks)
};

void launch_exchange(const ExchangeParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
