#pragma once
/// \file memory.h
/// What symcomm itself holds in memory, for leak checks and capacity planning.

#include <cstddef>
#include <string>

namespace symcomm {

/// Memory that symcomm holds for one CUDA device in this process, over all its communicators and caches.
/// Exact: counted where symcomm allocates and frees, unlike cudaMemGetInfo, which sees the whole device (the
/// CUDA driver's pools, NCCL's memory and every other process's). NCCL's own memory is not included.
struct CudaMemoryUse {
  /// Physical memory on the device: symmetric-heap chunks (Communicator::alloc, signal pads, LL and staging
  /// buffers), device state, copy-engine staging, the fused operations' temporaries and cuBLASLt workspaces
  /// (a device's first few streams' own, kept until the process ends, and the reserve of the pool the other
  /// streams share).
  size_t device_bytes = 0;
  /// Peers' symmetric-heap chunks mapped by this process. While mapped they stay allocated on the peers'
  /// devices even after the peers freed them; a communicator's destruction unmaps them.
  size_t peer_mapped_bytes = 0;
  /// Page-locked host memory mapped for the device (the control words the host and the kernels share).
  size_t pinned_host_bytes = 0;
  /// Live allocations and peer mappings behind the three counts.
  size_t allocations = 0;

  friend bool operator==(const CudaMemoryUse&, const CudaMemoryUse&) = default;
};

/// symcomm's memory for CUDA device `device` (an ordinal of this process), now. Thread-safe. All zero for a
/// device symcomm has not used, and in a build without CUDA.
CudaMemoryUse cuda_memory_use(int device);

/// "D device bytes, P peer-mapped bytes, H pinned host bytes in N allocations".
std::string to_string(const CudaMemoryUse& use);

}  // namespace symcomm
