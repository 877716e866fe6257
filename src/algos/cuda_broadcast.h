#pragma once
// Broadcast (CUDA): out = in of the root on every rank. Byte-level (dtype-free).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "symcomm/device/handle.h"

namespace symcomm::detail::cuda {

struct BroadcastParams {
  device::DeviceComm comm;
  const char* in;  ///< read on the root only
  char* out;
  size_t bytes;
  int root;
  uint64_t header;
  /// Zero-copy: `out` lies in the symmetric heap and peer_out[p] is rank p's copy (root pushes directly).
  char* peer_out[device::kMaxDeviceRanks];
  bool zero_copy;
};

void launch_broadcast(const BroadcastParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
