#pragma once
// One-shot all-reduce (CUDA): every rank pushes its input into a staging slot of every peer, one barrier,
// then every rank reduces its own input and the N - 1 slots locally in rank order. One kernel, one flag round
// trip per round.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "symcomm/device/handle.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {

struct AllReduceOneShotParams {
  device::DeviceComm comm;
  const void* in;
  void* out;
  size_t count;
  DataType dtype;
  ReduceOp op;
  uint64_t header;                ///< hash of the arguments, compared with the peers' at the first barrier
  size_t block_bytes = 16 << 10;  ///< payload bytes per block before another block is added (Tuning)
  size_t max_blocks = 32;         ///< (Tuning; clamped to 1..device::kMaxBlocks)
  bool pdl = false;               ///< programmatic dependent launch (NOTE [PDL] in cuda_common.cuh)
};

/// Bytes one round carries (larger inputs take several rounds, one barrier each).
size_t all_reduce_one_shot_round_bytes(const device::DeviceComm& c);
/// Grid size for `bytes` of payload (same on every rank for the same arguments and tuning).
void launch_all_reduce_one_shot(const AllReduceOneShotParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
