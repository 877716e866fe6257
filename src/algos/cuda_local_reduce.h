#pragma once
// Local reduction (CUDA): dst[i] = op over s (in order) of srcs[s][i]. The copy-engine reduce-scatter runs it
// on chunks its copies brought into local memory, with few blocks, so that it leaves the SMs to the compute
// running beside it (NOTE [copy-engine plan] in algos/ce_plan.h).

#include <cuda_runtime_api.h>

#include <cstddef>

#include "symcomm/device/handle.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {

struct LocalReduceParams {
  void* dst;
  const void* srcs[device::kMaxDeviceRanks];
  int nsrc;
  size_t count;
  DataType dtype;
  ReduceOp op;
};

/// `blocks`: the grid (each block handles one contiguous slice).
void launch_local_reduce(const LocalReduceParams& p, int blocks, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
