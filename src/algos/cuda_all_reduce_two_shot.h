#pragma once
// Two-shot all-reduce (CUDA): reduce-scatter then all-gather inside one kernel. Rank r reduces shard r of
// every rank's input in rank order and sends the result to every rank.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "symcomm/device/handle.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {

struct AllReduceTwoShotParams {
  device::DeviceComm comm;
  const void* in;
  void* out;
  size_t count;
  DataType dtype;
  ReduceOp op;
  uint64_t header;
  /// Zero-copy: in and out lie in the symmetric heap; peer_in[p]/peer_out[p] are rank p's copies as mapped
  /// here. Then no staging is used (two barriers in all). nullptr entries: staged path.
  const char* peer_in[device::kMaxDeviceRanks];
  char* peer_out[device::kMaxDeviceRanks];
  bool zero_copy;
  /// Push to output: out lies in the symmetric heap (peer_out set), in may lie anywhere; shards travel
  /// through staging and results go straight into every rank's output (NOTE [two-shot push to output]).
  bool push_out = false;
  size_t max_blocks = 128;        ///< (Tuning::cuda_two_shot_max_blocks; clamped to 1..device::kMaxBlocks)
  size_t block_bytes = 64 << 10;  ///< payload bytes per block (Tuning::cuda_two_shot_block_bytes)
};

void launch_all_reduce_two_shot(const AllReduceTwoShotParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
