#pragma once
// All-reduce, all-gather and reduce-scatter over the links of a topology (CUDA): one rank's plan of a topology
// schedule (src/algos/schedule_plan.h, NOTE [scheduled kernel plan]) run by one kernel that reaches only the
// peers the plan names: it pushes into their inboxes and passes barriers with them alone.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "algos/schedule_plan.h"
#include "symcomm/device/handle.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {

struct ScheduledParams {
  device::DeviceComm comm;
  Collective kind;  ///< kAllReduce, kAllGather or kReduceScatter
  const void* in;
  void* out;
  size_t count;  ///< all-reduce: elements; all-gather and reduce-scatter: elements of one rank's block
  DataType dtype;
  ReduceOp op;  ///< unused by the all-gather
  uint64_t header;
  /// Rank p's inbox as mapped here (symmetric heap): two halves of inbox_half_bytes. Only neighbours' are used.
  char* inbox[device::kMaxDeviceRanks];
  size_t inbox_half_bytes;
  /// Reduce-scatter: this rank's own work area (device memory of work_bytes), one round of every block.
  char* work;
  size_t work_bytes;
  /// The parity of the inbox half the next step uses: this rank's, in device memory, advanced by the kernel's
  /// last block by the steps it ran (a counter of its own: NOTE [scheduled kernel halves] in cuda_scheduled.cu).
  uint32_t* parity;
  size_t block_bytes;  ///< bytes of one chunk per GPU block (Tuning::cuda_direct_block_bytes)
  size_t max_blocks;   ///< (clamped to 1..device::kMaxBlocks)
  SchedulePlan plan;
};

/// Bytes of one inbox slot (16-byte multiple) when a half of `half_bytes` is cut into `slots`.
__host__ __device__ inline size_t scheduled_slot_bytes(size_t half_bytes, int slots) {
  return half_bytes / slots / 16 * 16;
}

void launch_scheduled(const ScheduledParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
