// Gathered reduce-scatter (cuda_gathered_reduce_scatter.h): the staged reduce-scatter of cuda_reduce_scatter.cu
// whose input is the rows of many small inputs instead of one buffer. Per round of one staging half cut into
// N slots: rank r pushes the part of its inputs' row q that falls in the round into slot r of rank q (remote
// stores, piece by piece); barrier; rank r reduces, piece by piece, its own row (read in place from the
// inputs) and the slots of the others, in rank order, into the output. Halves alternate per round (NOTE
// [rounds] in cuda_common.cuh), so one barrier per round.
//
// NOTE [gathered flush] A bucket flush is this one kernel, not a copy kernel (every row of every input into
// the bucket) followed by the zero-copy reduce-scatter of the bucket (pull): one launch instead of two, no
// local copy of the rows that stay on this rank, and pushes instead of pulls for the rest.
#include <algorithm>
#include <array>
#include <cstddef>
#include <string_view>
#include <vector>

#include "algos/cuda_common.cuh"
#include "algos/cuda_gathered_reduce_scatter.h"
#include "base/cuda_check.h"
#include "base/hash.h"

namespace symcomm::detail::cuda {
namespace {

// Tunables (not measured): 32 KiB of output per block (a 512 x 8 KiB flush at 2 ranks gets 128 blocks of four
// inputs each), at most 128 blocks (the signal pad's block slots).
constexpr size_t kBytesPerBlock = 32 << 10;
constexpr size_t kMaxBlocks = 128;

struct GatheredHead {
  DeviceComm comm;
  char* out;
  uint64_t count;
  uint64_t header;
  ReduceOp op;
  uint32_t nseg;
};
template <int kCap>
struct GatheredParams {
  GatheredHead h;
  BucketCopySegment seg[kCap];
};
constexpr int kMaxCap = static_cast<int>((32764 - sizeof(GatheredHead)) / sizeof(BucketCopySegment));
// List capacities: a launch takes the smallest that holds its inputs (fewer parameter bytes per launch).
constexpr int kCaps[] = {32, 512, kMaxCap};
static_assert(sizeof(GatheredParams<kMaxCap>) <= 32764, "kernel parameters are limited to 32,764 bytes");

/// Index of the first input whose row ends after virtual byte vb (inputs sorted by dst_offset).
template <int kCap>
__device__ __forceinline__ uint32_t first_segment(const GatheredParams<kCap>& p, uint64_t vb) {
  uint32_t lo = 0, hi = p.h.nseg;
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (uint64_t{p.seg[mid].dst_offset} + p.seg[mid].bytes <= vb) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/// Calls f(seg, local, len, rel) for every part of the virtual elements [v0, v1) that lies in an input row:
/// `local` is the part's first element within the row, `rel` its offset from v0. Padding is skipped.
template <class T, int kCap, class F>
__device__ __forceinline__ void for_each_row_piece(const GatheredParams<kCap>& p, uint64_t v0, uint64_t v1, F&& f) {
  for (uint32_t k = first_segment(p, v0 * sizeof(T)); k < p.h.nseg; ++k) {
    const BucketCopySegment& s = p.seg[k];
    const uint64_t sv = s.dst_offset / sizeof(T), sc = s.bytes / sizeof(T);
    if (sv >= v1) break;
    const uint64_t b = v0 > sv ? v0 : sv;
    const uint64_t e = min_sz(v1, sv + sc);
    if (b < e) f(s, b - sv, e - b, b - v0);
  }
}

__device__ __forceinline__ const char* row_of(const BucketCopySegment& s, int r) {
  return static_cast<const char*>(s.src) + static_cast<size_t>(r) * s.bytes;
}

template <class T, int kOp, int kR, int kCap>
__global__ void __launch_bounds__(kThreads)
    gathered_reduce_scatter_kernel(const __grid_constant__ GatheredParams<kCap> p) {
  const DeviceComm& c = p.h.comm;
  const Frame f = frame_begin(c, p.h.header);
  if (f.failed) return;  // NOTE [failed communicator]
  const int n_ranks = c.world_size, me = c.rank;
  const size_t unit = 16 / sizeof(T);
  const size_t slot = slot_bytes(c, n_ranks);
  const size_t round_elems = slot / sizeof(T);
  const uint32_t rounds = static_cast<uint32_t>(div_up(p.h.count, round_elems));
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * round_elems, n = min_sz(round_elems, p.h.count - e0);
    const size_t hoff = ((f.half0 + j) & 1) * c.scratch_half_bytes;
    const Slice s = block_slice(n, rounds == 1 ? n : round_elems, unit);
    const uint64_t v0 = e0 + s.begin, v1 = e0 + s.end;
    for (int k = 0; k + 1 < n_ranks; ++k) {  // NOTE [push order]; this rank's own row is reduced in place
      const int q = push_target(me, k, n_ranks);
      char* dst = c.scratch[q] + hoff + me * slot + s.begin * sizeof(T);
      for_each_row_piece<T>(p, v0, v1, [&](const BucketCopySegment& g, size_t local, size_t len, size_t rel) {
        block_copy(dst + rel * sizeof(T), row_of(g, q) + local * sizeof(T), len * sizeof(T));
      });
    }
    if (!device::block_barrier(c, f.seq0 + j + 1, f.deadline, j == 0 ? p.h.header : 0)) break;
    for_each_row_piece<T>(p, v0, v1, [&](const BucketCopySegment& g, size_t local, size_t len, size_t rel) {
      const T* srcs[device::kMaxDeviceRanks];
      for (int r = 0; r < n_ranks; ++r) {
        srcs[r] = r == me ? reinterpret_cast<const T*>(row_of(g, me)) + local
                          : reinterpret_cast<const T*>(c.scratch[me] + hoff + r * slot) + s.begin + rel;
      }
      T* dst = reinterpret_cast<T*>(p.h.out) + v0 + rel;
      block_reduce<T, kOp, kR>(&dst, 1, srcs, n_ranks, len, p.h.op);
    });
  }
  frame_end(c, f, rounds, rounds);
}

// Hash of what every rank must agree on (compared at the first barrier); never 0. The inputs' sizes and
// offsets are folded in with a multiply-xor per input (a 2,000-input list costs microseconds, not tens).
uint64_t gathered_header(const GatheredHead& h, DataType dtype, const BucketCopySegment* segs, size_t n) {
  constexpr uint64_t kPathGathered = 17;  // distinct from cuda_launch_cuda.cc's and cuda_group_cuda.cc's paths
  uint64_t mix = 0;
  for (size_t k = 0; k < n; ++k) {
    mix = (mix ^ (uint64_t{segs[k].dst_offset} << 32 | segs[k].bytes)) * kFnvPrime;
  }
  return Fnv1a()
      .add(static_cast<uint64_t>(Collective::kReduceScatter))
      .add(kPathGathered)
      .add(static_cast<uint64_t>(dtype))
      .add(static_cast<uint64_t>(h.op))
      .add(n)
      .add(h.count)
      .add(mix)
      .header();
}

template <int kCap>
void launch_cap(const GatheredHead& head, DataType dtype, const BucketCopySegment* segs, size_t n, cudaStream_t s) {
  static thread_local GatheredParams<kCap> p;  // up to 32 KiB: not on the stack
  p.h = head;
  p.h.nseg = static_cast<uint32_t>(n);
  std::copy(segs, segs + n, p.seg);
  p.h.header = gathered_header(p.h, dtype, segs, n);
  const size_t bytes = p.h.count * dtype_size(dtype);
  const int blocks = static_cast<int>(std::clamp<size_t>(div_up(bytes, kBytesPerBlock), 1, kMaxBlocks));
  dispatch_reduce(dtype, head.op, head.comm.world_size, [&](auto t, auto o, auto r) {
    using T = typename decltype(t)::type;
    SYMCOMM_CUDA_CHECK(launch_kernel(gathered_reduce_scatter_kernel<T, decltype(o)::value, decltype(r)::value, kCap>,
                                     blocks, kThreads, s, false, p));
  });
}

}  // namespace

void launch_gathered_reduce_scatter(const GatheredReduceScatterArgs& a, const BucketCopySegment* segs, size_t n,
                                    cudaStream_t stream) {
  const size_t es = dtype_size(a.dtype);
  std::vector<BucketCopySegment> part;
  for (size_t first = 0; first < n; first += kMaxCap) {
    const size_t m = std::min<size_t>(kMaxCap, n - first);
    // This launch covers the virtual bytes [lo, hi): from its first input to the next launch's first input.
    const size_t lo = segs[first].dst_offset;
    const size_t hi = first + m < n ? segs[first + m].dst_offset : a.count * es;
    if (hi <= lo) continue;
    const BucketCopySegment* list = segs + first;
    if (lo != 0) {
      part.assign(segs + first, segs + first + m);
      for (BucketCopySegment& g : part) g.dst_offset -= static_cast<uint32_t>(lo);
      list = part.data();
    }
    const GatheredHead head{
        .comm = a.comm, .out = a.out + lo, .count = (hi - lo) / es, .header = 0, .op = a.op, .nseg = 0};
    if (m <= kCaps[0]) {
      launch_cap<kCaps[0]>(head, a.dtype, list, m, stream);
    } else if (m <= kCaps[1]) {
      launch_cap<kCaps[1]>(head, a.dtype, list, m, stream);
    } else {
      launch_cap<kCaps[2]>(head, a.dtype, list, m, stream);
    }
  }
}

}  // namespace symcomm::detail::cuda
