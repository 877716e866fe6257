#pragma once
// The batched copy of a bucket flush (ReduceScatterBucketer, src/core/bucketer.cc): many inputs, each
// `rows` rows (one per rank), copied into one bucket. Host: memcpy; CUDA: one kernel per kBucketCopySegments
// inputs (src/algos/cuda_bucket_copy.cu).

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "symcomm/communicator.h"

namespace symcomm::detail {

/// One input: row r (r < rows) is `bytes` bytes at src + r * bytes and goes to dst + r * row_stride + dst_offset.
/// 16 bytes, so that a launch's list is small (NOTE [bucket copy list]): a bucket holds at most
/// kMaxBucketBytesPerRank per rank, so offsets and sizes fit in 32 bits.
struct BucketCopySegment {
  const void* src;
  uint32_t dst_offset;
  uint32_t bytes;
};
static_assert(std::is_trivially_copyable_v<BucketCopySegment> && sizeof(BucketCopySegment) == 16);
inline constexpr size_t kMaxBucketBytesPerRank = (size_t{1} << 32) - 16;

/// A bucket flush's reduce-scatter taken straight from its inputs: segs[k]'s row r, at dst_offset, is part
/// of rank r's block of a reduce-scatter of `count` elements per rank into `out` (segments sorted by
/// dst_offset, not overlapping). CommCore::reduce_scatter_gathered, Backend::reduce_scatter_gathered.
struct GatheredReduceScatter {
  const BucketCopySegment* segs;
  size_t nseg;
  /// The bucket's input rows (world_size rows of `count` elements, symmetric heap), where a backend that
  /// publishes rows may stage the ones its peers read (the host backend; the CUDA kernel has its own staging).
  void* stage;
  void* out;
  size_t count;
  DataType dtype;
  ReduceOp op;
  CollOptions options;
};

/// Host: memcpy of every row of every segment (but row `skip_row`, if one is given).
void host_bucket_copy(const BucketCopySegment* segs, size_t n, char* dst, size_t row_stride, int rows,
                      int skip_row = -1);
/// CUDA: enqueues the copies on `stream`, one kernel launch per kBucketCopySegments segments; the list is
/// passed by value (kernel parameters), so nothing has to outlive the call (also under graph capture).
/// Launched on `device` (the communicator's), whatever device the caller has current (NOTE [caller's device]).
void cuda_bucket_copy(const BucketCopySegment* segs, size_t n, char* dst, size_t row_stride, int rows, int device,
                      Stream stream);

}  // namespace symcomm::detail
