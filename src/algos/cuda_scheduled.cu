// Topology schedules on the GPU (NOTE [scheduled kernel plan] in src/algos/schedule_plan.h).
//
// Per round, each chunk of this rank's working copy (all-reduce: the output, a copy of the input; all-gather: the
// output, with this rank's input in its block; reduce-scatter: a copy of the round's part of every block in the
// work area) is cut into the same per-block slices on every rank, and block b touches only slice b of every chunk,
// in every phase of every step: push into the receivers' inboxes (remote stores), barrier with the neighbours
// (block b's signals only), apply from its own inbox (local loads). So the per-block barrier orders everything a
// block reads after what the peers' blocks of the same index wrote. Slices are cut from the round capacity when
// there is more than one round (NOTE [rounds] in cuda_common.cuh). Reduces run in Elem<T>::Acc over this rank's
// chunk and the slots in the schedule's order; avg sums in the steps and divides by the world size at the end; every
// chunk's total is computed by one rank and copied to the others, so every rank holds the same bits.
//
// NOTE [scheduled kernel halves] The inbox halves alternate with every step, continued across kernels by a parity
// counter that only these kernels advance. A sender's push into a half happens after the barrier of the step
// before it (in this kernel, or the last step of the previous scheduled kernel, which completed before this one
// started), and its receiver passes that barrier only after applying what the half held two steps earlier. The
// staging halves' counter (DeviceState::half) would not do: other kernels advance it by their rounds, so two
// scheduled kernels could use the same half back to back, and a kernel without barriers between them (an LL
// broadcast's root waits for nobody) would let a sender overwrite a half its receiver is still applying.
#include "algos/cuda_common.cuh"
#include "algos/cuda_scheduled.h"
#include "base/cuda_check.h"

namespace symcomm::detail::cuda {
namespace {

constexpr int kSources = device::kMaxDeviceRanks;  // this rank's chunk and at most 7 slots per reduce
static_assert(kMaxPlanRanks == device::kMaxDeviceRanks, "a plan's neighbour bits cover the kernel's ranks");

/// NOTE [signal refresh] for a kernel whose barriers reach only `peers`: the slots of blocks the kernel did not
/// use, which for the other peers are all of them.
__device__ void refresh_unused(const DeviceComm& c, uint32_t peers, uint32_t value) {
  for (int t = 0; t < c.world_size; ++t) {
    if (t == c.rank) continue;
    const int first = (peers >> t) & 1u ? static_cast<int>(gridDim.x) : 0;
    for (int b = first; b < device::kMaxBlocks; ++b) {
      *reinterpret_cast<volatile uint32_t*>(c.signals[t] + b * device::kMaxDeviceRanks + c.rank) = value;
    }
  }
}

/// frame_end() for this kernel: the last block advances the signal counter by `seqs` and the parity counter by
/// `steps` (NOTE [frame end without fences]; every block read both before it arrives here).
__device__ void scheduled_frame_end(const ScheduledParams& p, const Frame& f, uint32_t seqs, uint32_t parity0,
                                    uint32_t steps) {
  const DeviceComm& c = p.comm;
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (gridDim.x > 1 && atomicAdd(&c.state->done, 1u) != gridDim.x - 1) return;
  if (device::signal_refresh_due(f.seq0, seqs)) refresh_unused(c, p.plan.neighbors, f.seq0);
  c.state->seq = f.seq0 + seqs;
  *p.parity = parity0 + steps;
  if (gridDim.x > 1) c.state->done = 0;
}

template <class T, int kOp>
__global__ void __launch_bounds__(kThreads) scheduled_kernel(const __grid_constant__ ScheduledParams p) {
  const DeviceComm& c = p.comm;
  const Frame f = frame_begin(c, 0);  // announced below, to the neighbours only
  if (f.failed) return;               // NOTE [failed communicator]
  const SchedulePlan& pl = p.plan;
  const int n = c.world_size, me = c.rank;
  const unsigned t = threadIdx.x;
  if (blockIdx.x == 0 && t < static_cast<unsigned>(n) && t != static_cast<unsigned>(me) && ((pl.neighbors >> t) & 1u)) {
    uint64_t* slot = device::announcements(c.signals[t]) + me;  // NOTE [op announcements]
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(slot), "l"(device::announcement(f.seq0 + 1, p.header))
                 : "memory");
  }
  const uint32_t parity0 = device::ld_volatile_u32(p.parity);
  constexpr size_t unit = 16 / sizeof(T);
  constexpr int kStepOp = kOp == static_cast<int>(ReduceOp::kAvg) ? static_cast<int>(ReduceOp::kSum) : kOp;
  const ReduceOp step_rt = p.op == ReduceOp::kAvg ? ReduceOp::kSum : p.op;
  const bool avg = p.kind != Collective::kAllGather && p.op == ReduceOp::kAvg;
  const bool all_reduce = p.kind == Collective::kAllReduce, gather = p.kind == Collective::kAllGather;
  const size_t slot = scheduled_slot_bytes(p.inbox_half_bytes, pl.slots);
  size_t cap = slot / sizeof(T);  // elements of one chunk per round
  if (p.kind == Collective::kReduceScatter) cap = min_sz(cap, p.work_bytes / (n * sizeof(T)) / unit * unit);
  const size_t per_round = all_reduce ? cap * pl.chunks : cap;
  const uint32_t rounds = static_cast<uint32_t>(div_up(p.count, per_round));
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  T* work = reinterpret_cast<T*>(p.work);
  uint32_t g = 0;  // steps run so far
  for (uint32_t j = 0; j < rounds; ++j) {
    const size_t e0 = j * per_round, len = min_sz(per_round, p.count - e0);
    const size_t chunk = all_reduce ? min_sz(cap, round_up(div_up(len, pl.chunks), unit)) : len;
    const size_t per = round_up(div_up(rounds == 1 ? chunk : cap, gridDim.x), unit), b0 = per * blockIdx.x;
    // Chunk ch of the working copy; [b, e) is this block's slice of it.
    const auto base = [&](int ch) -> T* {
      if (all_reduce) return out + e0 + ch * chunk;
      return gather ? out + ch * p.count + e0 : work + ch * cap;
    };
    const auto slice = [&](int ch, size_t& b, size_t& e) {
      const size_t l = all_reduce ? min_sz(chunk, len - min_sz(len, ch * chunk)) : len;
      b = min_sz(b0, l);
      e = min_sz(b0 + per, l);
    };
    size_t b = 0, e = 0;
    for (int ch = 0; ch < (gather ? 1 : pl.chunks); ++ch) {
      const int k = gather ? me : ch;
      const T* src = all_reduce ? in + e0 + k * chunk : gather ? in + e0 : in + k * p.count + e0;
      slice(k, b, e);
      if (src != base(k))
        block_copy(reinterpret_cast<char*>(base(k) + b), reinterpret_cast<const char*>(src + b), (e - b) * sizeof(T));
    }
    for (int s = 0; s < pl.steps; ++s, ++g) {
      const size_t half = ((parity0 + g) & 1u) * p.inbox_half_bytes;
      __syncthreads();  // the block's writes into its chunks before they are pushed
      for (int k = pl.push_begin[s]; k < pl.push_begin[s + 1]; ++k) {
        const PlanPush x = pl.push[k];
        slice(x.chunk, b, e);
        block_copy(p.inbox[x.dst] + half + x.slot * slot + b * sizeof(T),
                   reinterpret_cast<const char*>(base(x.chunk) + b), (e - b) * sizeof(T));
      }
      if (!device::block_barrier(c, f.seq0 + g + 1, f.deadline, g == 0 ? p.header : 0, pl.neighbors)) return;
      const char* inbox = p.inbox[me] + half;
      for (int k = pl.apply_begin[s]; k < pl.apply_begin[s + 1]; ++k) {
        const PlanApply a = pl.apply[k];
        slice(a.chunk, b, e);
        T* mine = base(a.chunk) + b;
        const char* from = inbox + a.first_slot * slot + b * sizeof(T);
        if (a.copy) {
          block_copy(reinterpret_cast<char*>(mine), from, (e - b) * sizeof(T));
          continue;
        }
        const T* srcs[kSources];
        srcs[0] = mine;
        for (int q = 0; q < a.nslots; ++q) srcs[1 + q] = reinterpret_cast<const T*>(from + q * slot);
        block_reduce<T, kStepOp, kSources>(&mine, 1, srcs, 1 + a.nslots, e - b, step_rt);
      }
    }
    __syncthreads();
    if (all_reduce && avg) {
      for (int ch = 0; ch < pl.chunks; ++ch) {
        slice(ch, b, e);
        block_divide(base(ch) + b, base(ch) + b, e - b, n);
      }
    } else if (p.kind == Collective::kReduceScatter) {
      slice(me, b, e);
      if (avg) {
        block_divide(out + e0 + b, base(me) + b, e - b, n);
      } else {
        block_copy(reinterpret_cast<char*>(out + e0 + b), reinterpret_cast<const char*>(base(me) + b),
                   (e - b) * sizeof(T));
      }
    }
    __syncthreads();  // the next round's copies overwrite what this round's last phase read
  }
  scheduled_frame_end(p, f, g, parity0, g);
}

}  // namespace

void launch_scheduled(const ScheduledParams& p, cudaStream_t stream) {
  const size_t es = dtype_size(p.dtype);
  const size_t chunk_bytes = p.kind == Collective::kAllReduce ? p.count * es / p.plan.chunks : p.count * es;
  const size_t slot = scheduled_slot_bytes(p.inbox_half_bytes, p.plan.slots);
  const int blocks = grid_blocks(min_sz(chunk_bytes, slot), p.block_bytes, p.max_blocks);
  const ReduceOp op = p.kind == Collective::kAllGather ? ReduceOp::kSum : p.op;
  dispatch_type_op(p.dtype, op, [&](auto t, auto o) {
    using T = typename decltype(t)::type;
    SYMCOMM_CUDA_CHECK(launch_kernel(scheduled_kernel<T, decltype(o)::value>, blocks, kThreads, stream, false, p));
  });
}

}  // namespace symcomm::detail::cuda
