#pragma once
// Multi-tensor collectives (CUDA): a run of same-(kind, dtype, op) all-reduces, reduce-scatters or
// all-gathers of one group, executed by one kernel over the virtual concatenation of their tensors.
//
// NOTE [multi-tensor list] The segment list travels by value in the kernel's parameters (kMaxMultiSegments
// per launch, ~3.3 KB, under the classic 4 KB limit): nothing is uploaded, no host buffer must outlive the
// launch, and a launch captured into a CUDA graph holds its own copy of the list, valid for every replay
// (device sequence numbers advance on the device as for every other symcomm kernel). Longer runs are cut
// into launches of kMaxMultiSegments tensors.
//
// Virtual concatenation: segment k occupies virtual elements [voff_k, voff_k + count_k), with voff_k padded
// to a 16-byte multiple so that every piece of a block's slice starts 16-byte aligned within its tensor
// when the tensor itself is. The virtual holes (padding) are never read from or written to user memory.
// All-reduce: count = elements of the tensor. Reduce-scatter: count = output elements per rank (input is
// world_size blocks of count). All-gather: count = input BYTES per rank (the exchange is dtype-free).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "symcomm/device/handle.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {

inline constexpr int kMaxMultiSegments = 64;

struct MultiSegment {
  const char* in;  ///< this rank's input
  char* out;       ///< this rank's output
  uint64_t count;  ///< see the header comment (elements, or bytes for all-gather)
  uint64_t voff;   ///< first virtual element (multiple of 16 bytes' worth of elements)
  /// Zero-copy: rank p's copy of `in` / `out` is at in + (p - rank) * in_stride (symmetric heap stride).
  int64_t in_stride;
  int64_t out_stride;
};
static_assert(std::is_trivially_copyable_v<MultiSegment> && sizeof(MultiSegment) == 48);

struct MultiParams {
  device::DeviceComm comm;
  Collective kind;  ///< kAllReduce, kReduceScatter or kAllGather
  DataType dtype;
  ReduceOp op;
  bool zero_copy;  ///< every segment's remote side (see each kernel) lies in the symmetric heap
  /// All-reduce only: every output lies in the symmetric heap (out_stride set) and the two-shot pushes
  /// (NOTE [two-shot push to output] in cuda_all_reduce_two_shot.cu); zero_copy is then false.
  bool push_out;
  uint32_t nseg;
  uint64_t total;  ///< virtual elements: voff + count of the last segment
  uint64_t header;
  MultiSegment seg[kMaxMultiSegments];
};
static_assert(std::is_trivially_copyable_v<MultiParams> && sizeof(MultiParams) <= 4096);

/// Enqueues the kernel of p.kind (cuda_multi_all_reduce.cu, cuda_multi_reduce_scatter.cu,
/// cuda_multi_all_gather.cu).
void launch_multi(const MultiParams& p, cudaStream_t stream);
void launch_multi_all_reduce(const MultiParams& p, cudaStream_t stream);
void launch_multi_reduce_scatter(const MultiParams& p, cudaStream_t stream);
void launch_multi_all_gather(const MultiParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
