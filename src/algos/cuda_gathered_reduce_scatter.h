#pragma once
// Gathered reduce-scatter (CUDA): the reduce-scatter of a bucket flush (ReduceScatterBucketer) read straight
// from its inputs, without first copying them into the bucket. Input k (a BucketCopySegment) has one row of
// `bytes` per rank at src + r * bytes; row r of every input, placed at its dst_offset, forms rank r's block of
// a virtual reduce-scatter input of `count` elements per rank. Output element v = op over ranks (in rank
// order) of that virtual block; padding between inputs is neither read nor written.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "algos/bucket_copy.h"
#include "symcomm/device/handle.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {

struct GatheredReduceScatterArgs {
  device::DeviceComm comm;
  char* out;       ///< count elements
  uint64_t count;  ///< elements per rank, padding included
  DataType dtype;
  ReduceOp op;
};

/// Enqueues the reduce-scatter on `stream`: one launch per as many inputs as fit in CUDA's 32,764 bytes of
/// kernel parameters, each over the virtual range its inputs cover. `segs` must be sorted by dst_offset, not
/// overlap, and lie within count elements; the list travels in the kernel parameters (NOTE [bucket copy
/// list]), so nothing outlives the call.
void launch_gathered_reduce_scatter(const GatheredReduceScatterArgs& a, const BucketCopySegment* segs, size_t n,
                                    cudaStream_t stream);

}  // namespace symcomm::detail::cuda
