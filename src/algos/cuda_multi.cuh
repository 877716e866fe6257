#pragma once
// Device helpers of the multi-tensor kernels (cuda_multi.h): walking a virtual range of the concatenated
// tensors piece by piece, and the zero-copy peer addresses of a segment.

#include "algos/cuda_common.cuh"
#include "algos/cuda_multi.h"

namespace symcomm::detail::cuda {

/// Blocks of a multi-tensor launch moving `bytes` in all: the tunables of the single-tensor kernels
/// (cuda_all_reduce_two_shot.cu, cuda_reduce_scatter.cu, cuda_all_gather.cu: 64 KiB per block, at most 128).
inline int multi_blocks(size_t bytes) {
  constexpr size_t kBytesPerBlock = 64 << 10;
  constexpr size_t kMaxBlocks = 128;
  const size_t b = div_up(bytes, kBytesPerBlock);
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

/// Calls f(seg, local, len, rel) for every part of the virtual range [v0, v1) that lies in a tensor: `local`
/// is the part's first element within the tensor, `len` its length, `rel` its offset from v0. Holes
/// (padding between tensors) are skipped. Segments are sorted by voff; at most kMaxMultiSegments of them.
template <class F>
__device__ __forceinline__ void for_each_piece(const MultiParams& p, uint64_t v0, uint64_t v1, F&& f) {
  for (uint32_t k = 0; k < p.nseg; ++k) {
    const MultiSegment& s = p.seg[k];
    if (s.voff >= v1) break;
    const uint64_t b = v0 > s.voff ? v0 : s.voff;
    const uint64_t e = min_sz(v1, s.voff + s.count);
    if (b < e) f(s, b - s.voff, e - b, b - v0);
  }
}

/// Rank q's copy of a symmetric pointer p of this rank `me`, given the allocation's peer stride.
template <class T, class P>
__device__ __forceinline__ T* peer_of(P* p, int64_t stride, int q, int me) {
  return reinterpret_cast<T*>(const_cast<char*>(reinterpret_cast<const char*>(p)) +
                              static_cast<int64_t>(q - me) * stride);
}

}  // namespace symcomm::detail::cuda
