// Batched copy of a bucket flush (src/algos/bucket_copy.h): many inputs, `rows` rows each, into one bucket,
// in one launch per kBucketCopySegments inputs.
//
// NOTE [bucket copy list] The (pointer, offset, bytes) list travels by value as the kernel's parameters
// (16 B per input; CUDA >= 12.1 allows 32,764 bytes of parameters on Volta and newer). Nothing is uploaded:
// no host buffer has to outlive the launch, nothing is read back, and a launch captured into a CUDA graph
// keeps its own copy of the list, valid for every replay. The kernel comes in a few list capacities and a
// launch takes the smallest that holds its inputs, so a flush of 512 inputs passes 8 KB, not 24 KB (every
// parameter byte is written into the launch and fetched by the GPU). A 512-input flush (`--extra bucket`,
// 2 x H200) takes 26.6 us of host CPU and 40.5 us on the GPU from its start to its end with this list and the
// fence-free frame_end, against 24.7 us and 48.4 us with 24-byte entries in a fixed 1024-entry list and a
// frame_end with fences.
#include <algorithm>

#include "algos/bucket_copy.h"
#include "algos/cuda_common.cuh"
#include "base/cuda_check.h"
#include "symcomm/bucketer.h"

namespace symcomm::detail {
namespace cuda {
namespace {

// Tunables (not measured): a block copies chunks of kChunkBytes of one row; at most kMaxChunkBlocks blocks
// share one row (a row of 12.5 MB, the default bucket per rank at 2 ranks, gets 16 blocks).
constexpr size_t kChunkBytes = 64 << 10;
constexpr unsigned kMaxChunkBlocks = 16;

template <int kCap>
struct BucketCopyParams {
  char* dst;
  uint64_t row_stride;
  uint32_t nseg;
  BucketCopySegment seg[kCap];
};
constexpr int kCaps[] = {32, 128, 512, static_cast<int>(kBucketCopySegments)};
static_assert(sizeof(BucketCopyParams<kCaps[3]>) <= 32764, "kernel parameters are limited to 32,764 bytes");

// Block (segment x, chunk y, row z) copies chunks y, y + gridDim.y, ... of row z of segment x.
template <int kCap>
__global__ void __launch_bounds__(kThreads) bucket_copy_kernel(const __grid_constant__ BucketCopyParams<kCap> p) {
  const BucketCopySegment& s = p.seg[blockIdx.x];
  const char* src = static_cast<const char*>(s.src) + size_t{blockIdx.z} * s.bytes;
  char* dst = p.dst + blockIdx.z * p.row_stride + s.dst_offset;
  for (size_t off = blockIdx.y * kChunkBytes; off < s.bytes; off += gridDim.y * kChunkBytes) {
    block_copy(dst + off, src + off, min_sz(kChunkBytes, s.bytes - off));
  }
}

// Launches segs[0, n) (n <= kCap) with a list of capacity kCap.
template <int kCap>
void launch_copy(const BucketCopySegment* segs, size_t n, char* dst, size_t row_stride, int rows, cudaStream_t s) {
  static thread_local BucketCopyParams<kCap> p;  // up to 32 KiB: not on the stack
  p.dst = dst;
  p.row_stride = row_stride;
  p.nseg = static_cast<uint32_t>(n);
  size_t max_bytes = 0;
  for (size_t k = 0; k < n; ++k) {
    p.seg[k] = segs[k];
    max_bytes = std::max<size_t>(max_bytes, segs[k].bytes);
  }
  if (max_bytes == 0) return;
  const unsigned chunks = static_cast<unsigned>(std::min<size_t>(kMaxChunkBlocks, div_up(max_bytes, kChunkBytes)));
  SYMCOMM_CUDA_CHECK(launch_kernel(bucket_copy_kernel<kCap>, dim3(p.nseg, chunks, static_cast<unsigned>(rows)),
                                   kThreads, s, false, p));
}

}  // namespace
}  // namespace cuda

void cuda_bucket_copy(const BucketCopySegment* segs, size_t n, char* dst, size_t row_stride, int rows, int device,
                      Stream stream) {
  if (rows <= 0) return;
  DeviceScope on_device(device);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  for (size_t first = 0; first < n; first += kBucketCopySegments) {
    const size_t m = std::min(kBucketCopySegments, n - first);
    const BucketCopySegment* part = segs + first;
    if (m <= cuda::kCaps[0]) {
      cuda::launch_copy<cuda::kCaps[0]>(part, m, dst, row_stride, rows, s);
    } else if (m <= cuda::kCaps[1]) {
      cuda::launch_copy<cuda::kCaps[1]>(part, m, dst, row_stride, rows, s);
    } else if (m <= cuda::kCaps[2]) {
      cuda::launch_copy<cuda::kCaps[2]>(part, m, dst, row_stride, rows, s);
    } else {
      cuda::launch_copy<cuda::kCaps[3]>(part, m, dst, row_stride, rows, s);
    }
  }
}

}  // namespace symcomm::detail
