// Batched copy of a bucket flush (src/core/bucket_copy.h): many inputs, `rows` rows each, into one bucket,
// in one launch per kBucketCopySegments inputs.
//
// NOTE [bucket copy list] The (pointer, offset, bytes) list travels by value as the kernel's parameters
// (24 B per input, 24 KiB for 1024; CUDA >= 12.1 allows 32,764 bytes of parameters on Volta and newer).
// Nothing is uploaded: no host buffer has to outlive the launch, nothing is read back, and a launch captured
// into a CUDA graph keeps its own copy of the list, valid for every replay.
#include "algos/cuda_common.cuh"
#include "core/bucket_copy.h"
#include "core/cuda_check.h"
#include "symcomm/bucketer.h"

namespace symcomm::detail {
namespace cuda {
namespace {

// Tunables (not measured): a block copies chunks of kChunkBytes of one row; at most kMaxChunkBlocks blocks
// share one row (a row of 12.5 MB, the default bucket per rank at 2 ranks, gets 16 blocks).
constexpr size_t kChunkBytes = 64 << 10;
constexpr unsigned kMaxChunkBlocks = 16;

struct BucketCopyParams {
  char* dst;
  uint64_t row_stride;
  uint32_t nseg;
  BucketCopySegment seg[kBucketCopySegments];
};
static_assert(sizeof(BucketCopyParams) <= 32764, "kernel parameters are limited to 32,764 bytes");

// Block (segment x, chunk y, row z) copies chunks y, y + gridDim.y, ... of row z of segment x.
__global__ void __launch_bounds__(kThreads) bucket_copy_kernel(const __grid_constant__ BucketCopyParams p) {
  const BucketCopySegment& s = p.seg[blockIdx.x];
  const char* src = static_cast<const char*>(s.src) + blockIdx.z * s.bytes;
  char* dst = p.dst + blockIdx.z * p.row_stride + s.dst_offset;
  for (size_t off = blockIdx.y * kChunkBytes; off < s.bytes; off += gridDim.y * kChunkBytes) {
    block_copy(dst + off, src + off, min_sz(kChunkBytes, s.bytes - off));
  }
}

}  // namespace
}  // namespace cuda

void cuda_bucket_copy(const BucketCopySegment* segs, size_t n, char* dst, size_t row_stride, int rows, Stream stream) {
  if (rows <= 0) return;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  static thread_local cuda::BucketCopyParams p;  // 24 KiB: not on the stack
  for (size_t first = 0; first < n; first += kBucketCopySegments) {
    p.dst = dst;
    p.row_stride = row_stride;
    p.nseg = static_cast<uint32_t>(std::min(kBucketCopySegments, n - first));
    size_t max_bytes = 0;
    for (uint32_t k = 0; k < p.nseg; ++k) {
      p.seg[k] = segs[first + k];
      max_bytes = std::max<size_t>(max_bytes, segs[first + k].bytes);
    }
    if (max_bytes == 0) continue;
    const unsigned chunks =
        static_cast<unsigned>(std::min<size_t>(cuda::kMaxChunkBlocks, cuda::div_up(max_bytes, cuda::kChunkBytes)));
    cuda::bucket_copy_kernel<<<dim3(p.nseg, chunks, static_cast<unsigned>(rows)), cuda::kThreads, 0, s>>>(p);
    SYMCOMM_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace symcomm::detail
