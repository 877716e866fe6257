#pragma once
// Shared pieces of symcomm's CUDA kernels: the kernel frame (sequence numbers and staging halves read at the
// start and advanced by the last block), block slicing, block-wide copies and reductions with 16-byte
// accesses and narrower fallbacks, and the one runtime-to-template dispatch of (dtype, op).
//
// NOTE [rounds] Staged collectives process their data in rounds of at most one staging half, alternating
// halves by the device counter DeviceState::half. A block covers the same byte offsets of a round in every
// round of a kernel (slices are cut from the round capacity, not the round's length), so the barrier a
// block passes in round j+1 proves that the peers' block of the same index finished reading what round j-1
// wrote there. Across kernels, stream order plus the barrier every kernel has with every peer gives the
// same guarantee. Hence one barrier per round and no barrier at the end.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "base/kernel_loading_cuda.h"
#include "symcomm/device/handle.h"
#include "symcomm/device/signal.h"
#include "symcomm/device/vector.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {
namespace {
/// This translation unit's module, loaded whole when a communicator is created (NOTE [kernel loading] in
/// src/base/kernel_loading_cuda.h): every file that includes this header registers its own.
__global__ void module_anchor_kernel() {}
[[maybe_unused]] const bool module_registered =
    register_kernel_module(reinterpret_cast<const void*>(&module_anchor_kernel));
}  // namespace

using device::DeviceComm;

/// Threads per block of every data kernel: 16 warps keep enough 16-byte accesses in flight per SM
/// (on H100, 32 blocks x 1024 threads reach ~360 GB/s over NVLink; 512 is the smaller-grid choice).
inline constexpr int kThreads = 512;
/// Independent 16-byte loads each thread issues before its stores (copies), and packs per source in flight
/// in reductions (x world size loads).
inline constexpr int kUnroll = 4;
/// Packs per source in flight in block_reduce: 4 for two sources (8 loads), 1 for up to 8 (no spills).
template <int kR>
inline constexpr int kReduceUnroll = kR <= 2 ? 4 : 1;

struct Frame {
  uint32_t seq0;
  uint32_t half0;
  uint64_t deadline;
  bool failed;  ///< the communicator already failed on this GPU: the kernel returns at once
};

/// NOTE [failed communicator] Every kernel returns right after frame_begin when the communicator's device
/// error word is already set, before it writes anything to a peer. Collectives issued asynchronously are
/// queued before the host can see a failure, and a queued kernel that still ran would send its lines, headers
/// and signals into the peers' buffers under sequence numbers that slower ranks may still be using for an
/// earlier collective. tests/gpu/mismatch_test.cc (4 ranks sharing one GPU, a skipped call) shows it without
/// this check: a rank that fails its second all-reduce on the skipping rank's header runs its third anyway and
/// overwrites what a slower rank, still in the first (matched) all-reduce, is waiting for: on the LL path that
/// rank times out with a wrong result of the matched call; on the staged path it reports a mismatch naming
/// the rank that was ahead instead of the rank that skipped. The error word is read with the counters, in the same
/// load (NOTE [state read]; as a load of its own it cost up to 1 us per kernel).

/// NOTE [state read] Every kernel starts by reading its communicator's sequence counters and error word
/// (DeviceState, one 32-byte line in device memory). Each warp that reads them sends its own request for that
/// line, all warps at once; the cost grows with the grid, as if the line's L2 slice served the requests one
/// after another (the likely cause; not profiled). Measured on 1 x H100 (one rank, one-shot all-reduce of bf16 in a
/// CUDA graph): the error word (NOTE [failed communicator]) read as a third load per thread costs
/// 0.47 us at 256 KB, 0.77 us at 1 MB and 0.98 us at 4 MB; 2 x H200 shows a slowdown of that size at those sizes. So
/// the three words sit in the line's first 16 bytes and are read with one vector load, and in grids of more than
/// kStateReadPerThreadMaxBlocks blocks only thread 0 of each block reads them and hands them on through shared memory
/// (one request per block instead of one per warp): 2.68 / 3.42 / 4.28 us at 256 KB / 1 MB / 4 MB, against 3.22 /
/// 4.52 / 5.46 with three loads per thread and 2.65 / 4.03 / 4.44 with two (no error word). Small grids keep the
/// per-thread read: the barrier that hands the words on puts the load's latency before every thread's first input
/// load, which costs 0.07 us at 64 KB (16 blocks). The two paths together cost registers: ptxas spills 36-56 bytes per
/// thread in the 2-rank LL128 instances (64-register cap; none without the block read) and the kernels' spill stores
/// total 16,276 bytes against 13,452 without the block read, while either path alone spills nothing in the LL128 sum
/// instances. The 1 MB LL128 time does not show it (3.42 us, the same as a block-read-only build). If 2 GPUs show a
/// cost: the block read alone in every kernel spills 14,180 bytes in all (LL128: 0, avg 28) and costs 0.05 us at
/// 4-16 KB at one rank; keeping both paths in the LL kernels only does not help (the LL128 instances in the same file
/// still spill 36).
inline constexpr unsigned kStateReadPerThreadMaxBlocks = 16;

__device__ __forceinline__ uint4 load_state(const DeviceComm& c) {
  uint4 s;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(s.x), "=r"(s.y), "=r"(s.z), "=r"(s.w)
               : "l"(c.state));
  return s;
}

/// NOTE [PDL] Latency-bound kernels (the one-shot all-reduces) are launched with programmatic dependent
/// launch (launch_kernel(pdl = true)): the next kernel of the stream may be scheduled while this one still
/// runs, so its launch latency hides behind this kernel's tail. Every kernel therefore starts with
/// griddepcontrol.wait, which returns once the previous grid of the stream has completed and its memory is
/// visible (a no-op for a kernel launched without the attribute), and reads nothing before it; and every
/// kernel allows its dependents to launch as soon as it starts (they only wait on an SM slot it leaves free).
///
/// A kernel that is not failed also announces its op here (`header`; 0: none), NOTE [op announcements].
__device__ __forceinline__ Frame frame_begin(const DeviceComm& c, uint64_t header) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  uint4 s;  // {seq, half, error (low, high)}: NOTE [state read]
  if (gridDim.x <= kStateReadPerThreadMaxBlocks) {
    s = load_state(c);
  } else {
    __shared__ uint4 block_state;
    if (threadIdx.x == 0) block_state = load_state(c);
    __syncthreads();
    s = block_state;
  }
  Frame f;
  f.seq0 = s.x;
  f.half0 = s.y;
  f.deadline = device::globaltimer_ns() + c.timeout_ns;
  f.failed = (s.z | s.w) != 0;
  if (!f.failed) device::announce_op(c, f.seq0 + 1, header);
  return f;
}

/// NOTE [signal refresh], by the thread that advances the counters: on a crossing, the slots of the blocks this
/// kernel's barriers did not use (all of them for a kernel without barriers, `slots` false) get seq0.
__device__ __forceinline__ void refresh_unused_signals(const DeviceComm& c, const Frame& f, uint32_t seqs, bool slots) {
  if (device::signal_refresh_due(f.seq0, seqs)) {
    device::refresh_signals(c, slots ? static_cast<int>(gridDim.x) : 0, f.seq0);
  }
}

/// Every block calls it last. The last block to finish advances the counters by what the kernel used.
/// Blocks read the counters in frame_begin before they arrive here, so nobody reads a half-updated value.
///
/// NOTE [frame end without fences] The counter needs no fence: the last block reads nothing that other blocks
/// wrote, it only has to write after every block has read the counters, and every block's loads of them were
/// performed at the __syncthreads() (bar.sync orders the CTA's earlier accesses), before its thread 0 issues
/// the atomicAdd that the last block observes. The next kernel on the stream sees the new values at the
/// kernel boundary. A __threadfence() here would make every block wait for its remote (NVLink) stores to be
/// acknowledged before the atomic; with it, the LL all-reduce of 4 KB took 2.81 us on one block and 3.26 us
/// on two (2 x H200).
///
/// `slots`: false for kernels without block barriers (the LL kernels), whose refresh then covers every block's
/// slots (NOTE [signal refresh]).
__device__ __forceinline__ void frame_end(const DeviceComm& c, const Frame& f, uint32_t seqs, uint32_t halves,
                                          bool slots = true) {
  __syncthreads();
  if (gridDim.x == 1) {
    // One block: every thread has read the counters (frame_begin) before the barrier above.
    if (threadIdx.x == 0) {
      refresh_unused_signals(c, f, seqs, slots);
      c.state->seq = f.seq0 + seqs;
      c.state->half = f.half0 + halves;
    }
    return;
  }
  if (threadIdx.x == 0) {
    uint32_t prev = atomicAdd(&c.state->done, 1u);  // relaxed: NOTE [frame end without fences]
    if (prev == gridDim.x - 1) {
      refresh_unused_signals(c, f, seqs, slots);
      c.state->seq = f.seq0 + seqs;
      c.state->half = f.half0 + halves;
      c.state->done = 0;
    }
  }
}

/// Launches kernel<<<grid, threads, 0, stream>>>(p), with programmatic dependent launch when `pdl`
/// (NOTE [PDL]), and returns the launch's own result.
///
/// NOTE [launch result] Every symcomm launch is checked by the value its launch call returns, never by
/// cudaGetLastError(): the thread's last error also holds any earlier failure of the caller's own CUDA calls
/// (a cudaMemcpy of symmetric-heap memory made while another GPU was current fails with cudaErrorInvalidValue
/// and leaves it there; 2 x H100), which symcomm would then report as its own launch failure and make the
/// communicator's sticky error. A failed launch's error is cleared from the thread's last error once returned.
template <class P>
[[nodiscard]] cudaError_t launch_kernel(void (*kernel)(P), dim3 grid, int threads, cudaStream_t stream, bool pdl,
                                        const P& p) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, p);
  if (err != cudaSuccess) cudaGetLastError();
  return err;
}

__host__ __device__ __forceinline__ size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }
__host__ __device__ __forceinline__ size_t round_up(size_t a, size_t b) { return div_up(a, b) * b; }
__host__ __device__ __forceinline__ size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/// Grid of a kernel that adds a block per `block_bytes` (at least 16) of `bytes`: 1..max_blocks, the cap itself
/// clamped to the signal pad's block slots (device::kMaxBlocks).
inline int grid_blocks(size_t bytes, size_t block_bytes, size_t max_blocks) {
  const size_t cap = max_blocks < 1 ? 1 : (max_blocks > device::kMaxBlocks ? device::kMaxBlocks : max_blocks);
  const size_t b = div_up(bytes, block_bytes < 16 ? 16 : block_bytes);
  return static_cast<int>(b < 1 ? 1 : (b > cap ? cap : b));
}

/// Staging slot bytes when a half is cut into `slots` slots (16-byte multiple).
__host__ __device__ __forceinline__ size_t slot_bytes(const DeviceComm& c, int slots) {
  return (c.scratch_half_bytes / slots) / 16 * 16;
}

/// This block's [begin, end) of a range of `n` elements whose rounds hold at most `cap` elements; slices
/// are multiples of `unit` elements (one 16-byte pack).
struct Slice {
  size_t begin, end;
  __device__ size_t size() const { return end - begin; }
};
__device__ __forceinline__ Slice block_slice(size_t n, size_t cap, size_t unit) {
  size_t per = round_up(div_up(cap, gridDim.x), unit);
  size_t b = min_sz(per * blockIdx.x, n);
  return Slice{b, min_sz(b + per, n)};
}

template <int W>
struct Word;
template <>
struct Word<16> {
  using type = uint4;
};
template <>
struct Word<8> {
  using type = uint2;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<2> {
  using type = uint16_t;
};
template <>
struct Word<1> {
  using type = uint8_t;
};

template <int W>
__device__ __forceinline__ void copy_words(char* const* dsts, int ndst, const char* src, size_t nwords) {
  using V = typename Word<W>::type;
  const size_t stride = blockDim.x;
  for (size_t base = threadIdx.x; base < nwords; base += stride * kUnroll) {
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      size_t i = base + u * stride;
      if (i < nwords) v[u] = reinterpret_cast<const V*>(src)[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      size_t i = base + u * stride;
      if (i < nwords) {
        for (int d = 0; d < ndst; ++d) reinterpret_cast<V*>(dsts[d])[i] = v[u];
      }
    }
  }
}

/// NOTE [push order] Where each block pushes one piece to every rank in turn, rank `me`'s k-th target is
/// push_target(me, k, n): me + 1, me + 2, ..., itself last. In rank order every rank writes into rank 0's GPU
/// first, then into rank 1's: one GPU's inbound links saturated while the others' idle. Measured on 4 x H100
/// (symcomm-bench --algo two_shot, 4 ranks, bf16 sum, CUDA graph, us at 16 / 64 / 256 MB): the two-shot pushing
/// into symmetric outputs took 106.7 / 424.8 / 1389 in rank order and 84.3 / 296.0 / 1178.7 in push order (NCCL
/// 100.6 / 330.6 / 1182.8 in the same run); the staged two-shot on cudaMalloc buffers 89.1 / 305.2 / 1171.0.
__device__ __forceinline__ int push_target(int me, int k, int n) { return (me + 1 + k) % n; }

/// The block copies n bytes from src to each of dsts[0..ndst) (ndst <= kMaxDeviceRanks), with the widest
/// access every address and n allow (16 bytes when all are 16-byte aligned).
__device__ inline void block_copy_multi(char* const* dsts, int ndst, const char* src, size_t n) {
  if (n == 0) return;
  uintptr_t a = reinterpret_cast<uintptr_t>(src);
  for (int d = 0; d < ndst; ++d) a |= reinterpret_cast<uintptr_t>(dsts[d]);
  if ((a & 15) == 0) {
    size_t nv = n / 16;
    copy_words<16>(dsts, ndst, src, nv);
    size_t done = nv * 16;
    if (done < n) {
      char* tail[device::kMaxDeviceRanks];
      for (int d = 0; d < ndst; ++d) tail[d] = dsts[d] + done;
      copy_words<1>(tail, ndst, src + done, n - done);
    }
  } else if (((a | n) & 7) == 0) {
    copy_words<8>(dsts, ndst, src, n / 8);
  } else if (((a | n) & 3) == 0) {
    copy_words<4>(dsts, ndst, src, n / 4);
  } else if (((a | n) & 1) == 0) {
    copy_words<2>(dsts, ndst, src, n / 2);
  } else {
    copy_words<1>(dsts, ndst, src, n);
  }
}
__device__ __forceinline__ void block_copy(char* dst, const char* src, size_t n) {
  char* d[1] = {dst};
  block_copy_multi(d, 1, src, n);
}

// ---- reductions --------------------------------------------------------------------------------------

/// kOp template values: the ReduceOp value, or kOpRuntime (the generic path switches on the runtime op).
inline constexpr int kOpRuntime = -1;

template <class T>
struct Elem {  // integers and float/double: arithmetic in T
  using Acc = T;
  __device__ static Acc load(T v) { return v; }
  __device__ static T store(Acc v) { return v; }
};
template <>
struct Elem<__half> {
  using Acc = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Elem<__nv_bfloat16> {
  using Acc = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

// Integer sum and product wrap modulo 2^bits, as in host_reduce (src/algos/host_reduce.h).
template <class A>
__device__ __forceinline__ A op_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class A>
__device__ __forceinline__ A op_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::conditional_t<(sizeof(A) < 4), uint32_t, std::make_unsigned_t<A>>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}
template <int kOp, class A>
__device__ __forceinline__ A combine(A a, A b, ReduceOp rt) {
  const int op = kOp == kOpRuntime ? static_cast<int>(rt) : kOp;
  switch (op) {
    case static_cast<int>(ReduceOp::kProd): return op_mul(a, b);
    case static_cast<int>(ReduceOp::kMin): return b < a ? b : a;
    case static_cast<int>(ReduceOp::kMax): return a < b ? b : a;
    default: return op_add(a, b);  // kSum, kAvg
  }
}
template <int kOp, class A>
__device__ __forceinline__ A finish(A a, int nsrc, ReduceOp rt) {
  const int op = kOp == kOpRuntime ? static_cast<int>(rt) : kOp;
  if (op == static_cast<int>(ReduceOp::kAvg)) return a / static_cast<A>(nsrc);
  return a;
}

/// The block writes dst[i] = src[i] / by (in Elem<T>::Acc; integers truncate) for i < n; dst may be src.
template <class T>
__device__ void block_divide(T* dst, const T* src, size_t n, int by) {
  using E = Elem<T>;
  using A = typename E::Acc;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = E::store(E::load(src[i]) / static_cast<A>(by));
}

/// One 16-byte pack of T.
template <class T>
union Pack {
  static constexpr int kN = 16 / sizeof(T);
  uint4 v;
  T e[kN];
};

/// The block reduces n elements: dsts[d][i] = op over s in 0..nsrc-1 (in that order) of srcs[s][i], with
/// accumulation in Elem<T>::Acc. 16-byte packs when every pointer is 16-byte aligned, else element-wise.
/// kR >= nsrc bounds the unrolled source loop (the register footprint).
template <class T, int kOp, int kR>
__device__ void block_reduce(T* const* dsts, int ndst, const T* const* srcs, int nsrc, size_t n, ReduceOp rt) {
  using E = Elem<T>;
  using A = typename E::Acc;
  constexpr int kN = Pack<T>::kN;
  uintptr_t a = 0;
  for (int d = 0; d < ndst; ++d) a |= reinterpret_cast<uintptr_t>(dsts[d]);
  for (int s = 0; s < nsrc; ++s) a |= reinterpret_cast<uintptr_t>(srcs[s]);
  size_t npack = (a & 15) == 0 ? n / kN : 0;
  const size_t stride = blockDim.x;
  for (size_t base = threadIdx.x; base < npack; base += stride * kReduceUnroll<kR>) {
    // Issue every load of kReduceUnroll packs x nsrc sources before the first use.
    Pack<T> in[kReduceUnroll<kR>][kR];
#pragma unroll
    for (int u = 0; u < kReduceUnroll<kR>; ++u) {
      size_t i = base + u * stride;
#pragma unroll
      for (int s = 0; s < kR; ++s) {
        if (s < nsrc && i < npack) in[u][s].v = device::ld_vec(srcs[s] + i * kN);
      }
    }
#pragma unroll
    for (int u = 0; u < kReduceUnroll<kR>; ++u) {
      size_t i = base + u * stride;
      if (i >= npack) break;
      Pack<T> out;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        A acc = E::load(in[u][0].e[k]);
#pragma unroll
        for (int s = 1; s < kR; ++s) {
          if (s < nsrc) acc = combine<kOp>(acc, E::load(in[u][s].e[k]), rt);
        }
        out.e[k] = E::store(finish<kOp>(acc, nsrc, rt));
      }
      for (int d = 0; d < ndst; ++d) device::st_vec(dsts[d] + i * kN, out.v);
    }
  }
  for (size_t i = npack * kN + threadIdx.x; i < n; i += blockDim.x) {
    A acc = E::load(srcs[0][i]);
    for (int s = 1; s < nsrc; ++s) acc = combine<kOp>(acc, E::load(srcs[s][i]), rt);
    T r = E::store(finish<kOp>(acc, nsrc, rt));
    for (int d = 0; d < ndst; ++d) dsts[d][i] = r;
  }
}

// ---- dispatch ------------------------------------------------------------------------------------------

template <class T>
struct TypeTag {
  using type = T;
};
template <int K>
struct OpTag {
  static constexpr int value = K;
};
template <int K>
struct RankTag {
  static constexpr int value = K;
};

template <class T, class F>
void dispatch_fast_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kSum: return f(TypeTag<T>{}, OpTag<static_cast<int>(ReduceOp::kSum)>{});
    case ReduceOp::kProd: return f(TypeTag<T>{}, OpTag<static_cast<int>(ReduceOp::kProd)>{});
    case ReduceOp::kMin: return f(TypeTag<T>{}, OpTag<static_cast<int>(ReduceOp::kMin)>{});
    case ReduceOp::kMax: return f(TypeTag<T>{}, OpTag<static_cast<int>(ReduceOp::kMax)>{});
    case ReduceOp::kAvg: return f(TypeTag<T>{}, OpTag<static_cast<int>(ReduceOp::kAvg)>{});
  }
}

template <class F>
void dispatch_type_op(DataType dtype, ReduceOp op, F&& f) {
  constexpr int R = kOpRuntime;
  switch (dtype) {
    case DataType::kFloat32: return dispatch_fast_op<float>(op, f);
    case DataType::kFloat16: return dispatch_fast_op<__half>(op, f);
    case DataType::kBFloat16: return dispatch_fast_op<__nv_bfloat16>(op, f);
    case DataType::kFloat64: return f(TypeTag<double>{}, OpTag<R>{});
    case DataType::kInt8: return f(TypeTag<int8_t>{}, OpTag<R>{});
    case DataType::kUInt8: return f(TypeTag<uint8_t>{}, OpTag<R>{});
    case DataType::kInt32: return f(TypeTag<int32_t>{}, OpTag<R>{});
    case DataType::kInt64: return f(TypeTag<int64_t>{}, OpTag<R>{});
  }
}

/// World size as a template argument: 1 and 2 (the common NVLink pair) get an instance with a 2-source
/// register footprint; every other size runs the kMaxDeviceRanks instance. f(RankTag<kR>). Kernels that keep
/// kR sources in flight per thread must size their unrolling so that the kR = 8 instance does not spill
/// (tools/gpu/spills.sh; kLLBatch in cuda_all_reduce_ll.cu).
template <class F>
void dispatch_ranks(int world_size, F&& f) {
  if (world_size <= 2) {
    f(RankTag<2>{});
  } else {
    f(RankTag<device::kMaxDeviceRanks>{});
  }
}

/// dispatch_ranks() with a third instance, kR = 4, for 3 and 4 ranks: for kernels that keep kR lines per chunk
/// in registers and poll them together (the LL and LL128 kernels, NOTE [LL concurrent polling] in
/// cuda_all_reduce_ll.cu), whose 8-rank instance spills at sm_90 (tools/gpu/spills.sh) where 4 ranks need half its
/// lines. f(RankTag<kR>).
template <class F>
void dispatch_ranks_to_four(int world_size, F&& f) {
  if (world_size <= 2) {
    f(RankTag<2>{});
  } else if (world_size <= 4) {
    f(RankTag<4>{});
  } else {
    f(RankTag<device::kMaxDeviceRanks>{});
  }
}

/// The one place where (dtype, op, world size) become template arguments: float32/float16/bfloat16 get one
/// instance per op; the other dtypes share one instance per type with the op switched at run time; the world
/// size as dispatch_ranks() makes it. f(TypeTag<T>, OpTag<op>, RankTag<kR>).
template <class F>
void dispatch_reduce(DataType dtype, ReduceOp op, int world_size, F&& f) {
  dispatch_type_op(dtype, op, [&](auto t, auto o) { dispatch_ranks(world_size, [&](auto r) { f(t, o, r); }); });
}
/// dispatch_reduce() with the world size as dispatch_ranks_to_four() makes it.
template <class F>
void dispatch_reduce_to_four(DataType dtype, ReduceOp op, int world_size, F&& f) {
  dispatch_type_op(dtype, op, [&](auto t, auto o) { dispatch_ranks_to_four(world_size, [&](auto r) { f(t, o, r); }); });
}

}  // namespace symcomm::detail::cuda
