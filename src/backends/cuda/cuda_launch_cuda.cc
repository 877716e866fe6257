// CudaBackend's launch paths: the symcomm kernels (one per collective and path) and the NCCL fallback.
#include <nccl.h>

#include <algorithm>
#include <iterator>

#include "algos/cuda_all_gather.h"
#include "algos/cuda_all_reduce_ll.h"
#include "algos/cuda_all_reduce_one_shot.h"
#include "algos/cuda_all_reduce_two_shot.h"
#include "algos/cuda_barrier.h"
#include "algos/cuda_broadcast.h"
#include "algos/cuda_reduce_scatter.h"
#include "algos/cuda_scheduled.h"
#include "backends/cuda/cuda_backend_cuda.h"
#include "base/check.h"
#include "base/cuda_check.h"
#include "base/hash.h"
#include "base/nccl_map.h"

namespace symcomm::detail {
namespace {

// NOTE [heap keys] A zero-copy path reaches a peer's copy of this rank's buffer: the same allocation at the same
// offset, where the peer is expected to have passed its own. A peer that passed another heap buffer (or another
// offset) has its data elsewhere, and the kernels would read and write the wrong place with matching headers
// (Cases/GpuHeapBuffers.*: without the check every zero-copy path returns wrong elements without an error).
// So every path folds the heap places (CudaHeap::find's `place`) of the buffers its peers reach into the op header
// the ranks compare: different places are kMismatch on every rank. Only buffers reached remotely count: a
// path that touches a peer's output only may be given different inputs, as NCCL allows.
//
// FNV-1a over the fields every rank must agree on; never 0 (0 means "no header"). `in_place` / `out_place`: the
// heap places of the input / output where peers reach them, else 0.
uint64_t op_header(const Request& r, int path, bool zero_copy, uint64_t in_place = 0, uint64_t out_place = 0) {
  return Fnv1a()
      .add(static_cast<uint64_t>(r.kind))
      .add(static_cast<uint64_t>(path))
      .add(static_cast<uint64_t>(r.dtype))
      .add(r.has_reduction() ? static_cast<uint64_t>(r.op) : 0)
      .add(r.count)
      .add(r.kind == Collective::kBroadcast ? static_cast<uint64_t>(r.root) : 0)
      .add(zero_copy)
      .add(in_place)
      .add(out_place)
      .header();
}

/// The LL and LL128 kernels' name for a collective (LLKind).
cuda::LLKind ll_kind_of(Collective c) {
  switch (c) {
    case Collective::kReduceScatter: return cuda::LLKind::kReduceScatter;
    case Collective::kAllGather: return cuda::LLKind::kAllGather;
    case Collective::kAllToAll: return cuda::LLKind::kAllToAll;
    case Collective::kBroadcast: return cuda::LLKind::kBroadcast;
    default: return cuda::LLKind::kAllReduce;
  }
}

}  // namespace

void CudaBackend::launch_nccl(const Request& r, cudaStream_t s) {
  ensure_nccl(s);
  note_path(KernelPath::kNccl);
  SYMCOMM_CHECK(nccl_, kUnsupported, "NCCL is not available on this communicator");
  const auto dt = to_nccl(r.dtype);
  const int n = ctx_.ranks.world_size;
  switch (r.kind) {
    case Collective::kAllReduce:
      SYMCOMM_NCCL_RUN(ncclAllReduce(r.in, r.out, r.count, dt, to_nccl(r.op), nccl_, s));
      break;
    case Collective::kAllGather: SYMCOMM_NCCL_RUN(ncclAllGather(r.in, r.out, r.count, dt, nccl_, s)); break;
    case Collective::kReduceScatter:
      SYMCOMM_NCCL_RUN(ncclReduceScatter(r.in, r.out, r.count, dt, to_nccl(r.op), nccl_, s));
      break;
    case Collective::kBroadcast: SYMCOMM_NCCL_RUN(ncclBroadcast(r.in, r.out, r.count, dt, r.root, nccl_, s)); break;
    case Collective::kAllToAll: {
      const size_t es = r.elem_size(), bytes = r.count * es;
      if (r.in != r.out) {
        SYMCOMM_NCCL_RUN(ncclGroupStart());
        for (int p = 0; p < n; ++p) {
          SYMCOMM_NCCL_RUN(ncclSend(static_cast<const char*>(r.in) + p * bytes, r.count, dt, p, nccl_, s));
          SYMCOMM_NCCL_RUN(ncclRecv(static_cast<char*>(r.out) + p * bytes, r.count, dt, p, nccl_, s));
        }
        SYMCOMM_NCCL_RUN(ncclGroupEnd());
        break;
      }
      // In place, grouped send/recv would overwrite blocks not yet sent: send each chunk of every block from
      // a copy in a buffer of this op's own, allocated and freed in stream order (memory nodes in a graph).
      // Not the staging buffer: the peers' staged kernels push into it before their first barrier (NOTE
      // [rounds]), and an NCCL op has no barrier with them, so a peer done with its part of this op could
      // overwrite a chunk here before NCCL sent it (3+ ranks).
      const size_t chunk = std::max<size_t>(1, 2 * comm_.scratch_half_bytes / (n * es));
      char* stage = nullptr;
      SYMCOMM_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&stage), std::min(chunk, r.count) * n * es, s));
      struct FreeStage {
        char* p;
        cudaStream_t s;
        ~FreeStage() { cudaFreeAsync(p, s); }
      } free_stage{stage, s};
      char* buf = static_cast<char*>(r.out);
      for (size_t j = 0; j < r.count; j += chunk) {
        const size_t m = std::min(chunk, r.count - j);
        SYMCOMM_CUDA_CHECK(
            cudaMemcpy2DAsync(stage, m * es, buf + j * es, bytes, m * es, n, cudaMemcpyDeviceToDevice, s));
        SYMCOMM_NCCL_RUN(ncclGroupStart());
        for (int p = 0; p < n; ++p) {
          SYMCOMM_NCCL_RUN(ncclSend(stage + p * m * es, m, dt, p, nccl_, s));
          SYMCOMM_NCCL_RUN(ncclRecv(buf + p * bytes + j * es, m, dt, p, nccl_, s));
        }
        SYMCOMM_NCCL_RUN(ncclGroupEnd());
      }
      break;
    }
    case Collective::kBarrier:
      // With P2P the symcomm kernel (a barrier has no payload for NCCL). Without it (a PCIe-only node, where
      // select() routes the barrier here) a one-byte NCCL all-reduce, on the staging buffer's first byte:
      // without P2P no peer writes that buffer, and its contents do not matter. This path is not tested: no
      // PCIe-only node is available to the tests.
      if (caps_.full_nvlink) {
        launch(r, Algorithm::kDirect, s);
      } else {
        SYMCOMM_NCCL_RUN(ncclAllReduce(scratch_, scratch_, 1, ncclUint8, ncclSum, nccl_, s));
      }
      break;
  }
}

void CudaBackend::launch(const Request& r, Algorithm algo, cudaStream_t s) {
  const int n = ctx_.ranks.world_size;
  const size_t es = r.elem_size(), bytes = r.count * es;
  const Tuning& t = ctx_.config.tuning;
  // Where the buffers lie, with their heap places (NOTE [heap keys]).
  uint64_t in_place = 0, out_place = 0;
  const PathFacts facts{
      .in_symmetric = r.in_count(n) > 0 && symmetric(r.in, r.in_count(n) * es, &in_place),
      .out_symmetric = r.out_count(n) > 0 && symmetric(r.out, r.out_count(n) * es, &out_place),
      .in_place = r.in == r.out,
      .ll_capacity_bytes = cuda::all_reduce_ll_max_bytes(comm_),
      .ll128_capacity_bytes = kLL128PayloadBytes,
      .ll128_two_shot_min_bytes = cuda::all_reduce_ll128_two_shot_min_bytes(n),
      .ll128_two_shot_capacity_bytes = cuda::all_reduce_ll128_two_shot_max_bytes(n, ll128_slot_bytes_),
      .scheduled = caps_.restricted_links && ((caps_.schedules >> static_cast<int>(r.kind)) & 1u) != 0};
  const KernelPath path = select_cuda_path(r.kind, bytes, algo, facts, t);
  note_path(path);
  const bool zc = path == KernelPath::kTwoShotZeroCopy || path == KernelPath::kDirectZeroCopy;
  switch (path) {
    case KernelPath::kNone:
    case KernelPath::kHost:
    case KernelPath::kHostScheduled:
    case KernelPath::kNccl:
    case KernelPath::kMultiStaged:
    case KernelPath::kMultiZeroCopy:
    case KernelPath::kMultiPush:
      SYMCOMM_THROW(kInternal, "no single-collective kernel for path {} of {}", to_string(path), r.describe());
    case KernelPath::kCopyEngine:
      SYMCOMM_CHECK(ce_, kUnsupported, "copy-engine collectives are not available on this communicator");
      ce_->run(r, s);
      return;
    case KernelPath::kBarrier: cuda::launch_barrier({.comm = comm_, .header = op_header(r, 0, false)}, s); return;
    case KernelPath::kLL:
      if (r.kind == Collective::kAllReduce) {
        cuda::launch_all_reduce_ll({.comm = comm_,
                                    .in = r.in,
                                    .out = r.out,
                                    .count = r.count,
                                    .dtype = r.dtype,
                                    .op = r.op,
                                    .header = op_header(r, 8, false),
                                    .chunks_per_thread = t.cuda_ll_chunks_per_thread,
                                    .max_blocks = t.cuda_ll_max_blocks,
                                    .block_threads = t.cuda_ll_block_threads,
                                    .pdl = t.cuda_pdl != 0},
                                   s);
      } else {
        launch_ll_gather(r, s);
      }
      return;
    case KernelPath::kLL128:
    case KernelPath::kLL128TwoShot: {
      const bool two = path == KernelPath::kLL128TwoShot;
      cuda::launch_all_reduce_ll128({.comm = comm_,
                                     .in = r.in,
                                     .out = r.out,
                                     .count = r.count,
                                     .dtype = r.dtype,
                                     .op = r.op,
                                     .header = static_cast<uint32_t>(op_header(r, two ? 14 : 7, false)),
                                     .offset = ll128_offset_,
                                     .slot_bytes = ll128_slot_bytes_,
                                     .lines_per_group = t.cuda_ll128_lines_per_group,
                                     .max_blocks = t.cuda_ll128_max_blocks,
                                     .pdl = t.cuda_pdl != 0,
                                     .two_shot = two,
                                     .kind = ll_kind_of(r.kind)},
                                    s);
      return;
    }
    case KernelPath::kOneShotStaged:
      cuda::launch_all_reduce_one_shot({.comm = comm_,
                                        .in = r.in,
                                        .out = r.out,
                                        .count = r.count,
                                        .dtype = r.dtype,
                                        .op = r.op,
                                        .header = op_header(r, 1, false),
                                        .block_bytes = t.cuda_one_shot_block_bytes,
                                        .max_blocks = t.cuda_one_shot_max_blocks,
                                        .pdl = t.cuda_pdl != 0},
                                       s);
      return;
    case KernelPath::kTwoShotStaged:
    case KernelPath::kTwoShotZeroCopy:
    case KernelPath::kTwoShotPush: {
      const bool push = path == KernelPath::kTwoShotPush;
      cuda::AllReduceTwoShotParams p{
          .comm = comm_,
          .in = r.in,
          .out = r.out,
          .count = r.count,
          .dtype = r.dtype,
          .op = r.op,
          .header =
              push ? op_header(r, 6, true, 0, out_place) : op_header(r, 2, zc, zc ? in_place : 0, zc ? out_place : 0),
          .peer_in = {},
          .peer_out = {},
          .zero_copy = zc,
          .push_out = push,
          .max_blocks = t.cuda_two_shot_max_blocks != 0 ? t.cuda_two_shot_max_blocks : static_cast<size_t>(fewest_sms_),
          .block_bytes = t.cuda_two_shot_block_bytes};
      for (int q = 0; (zc || push) && q < n; ++q) {
        if (zc) p.peer_in[q] = static_cast<const char*>(heap_->peer_ptr(r.in, q));
        p.peer_out[q] = static_cast<char*>(heap_->peer_ptr(r.out, q));
      }
      cuda::launch_all_reduce_two_shot(p, s);
      return;
    }
    case KernelPath::kDirectStaged:
    case KernelPath::kDirectZeroCopy: launch_direct(r, zc, in_place, out_place, s); return;
    case KernelPath::kScheduled: launch_scheduled(r, s); return;
  }
}

// The topology's schedule (NOTE [scheduled kernel plan] in src/algos/schedule_plan.h): only this rank's plan,
// its neighbours' inboxes and its own buffers; nothing in the heap is read in place, so no heap places.
void CudaBackend::launch_scheduled(const Request& r, cudaStream_t s) {
  const Tuning& t = ctx_.config.tuning;
  cuda::ScheduledParams p{.comm = comm_,
                          .kind = r.kind,
                          .in = r.in,
                          .out = r.out,
                          .count = r.count,
                          .dtype = r.dtype,
                          .op = r.has_reduction() ? r.op : ReduceOp::kSum,
                          .header = op_header(r, 15, false),
                          .inbox = {},
                          .inbox_half_bytes = inbox_half_bytes_,
                          .work = sched_state_ + 256,
                          .work_bytes = sched_state_bytes_ - 256,
                          .parity = reinterpret_cast<uint32_t*>(sched_state_),
                          .block_bytes = t.cuda_direct_block_bytes,
                          .max_blocks = t.cuda_direct_max_blocks,
                          .plan = plans_[schedule_index(r.kind)]};
  std::copy(std::begin(inbox_peers_), std::end(inbox_peers_), std::begin(p.inbox));
  cuda::launch_scheduled(p, s);
}

// NOTE [LL all-gather and reduce-scatter] and [LL broadcast] in src/algos/cuda_all_reduce_ll.cu: all-gather,
// reduce-scatter and all-to-all blocks, and broadcast payloads, on the LL lines (KernelPath::kLL).
void CudaBackend::launch_ll_gather(const Request& r, cudaStream_t s) {
  const Tuning& t = ctx_.config.tuning;
  const bool reduce = r.kind == Collective::kReduceScatter;
  const cuda::LLKind kind = ll_kind_of(r.kind);
  cuda::launch_all_reduce_ll({.comm = comm_,
                              .in = r.in,
                              .out = r.out,
                              .count = r.count,
                              .dtype = r.dtype,
                              .op = reduce ? r.op : ReduceOp::kSum,
                              .kind = kind,
                              .root = r.root,
                              .header = op_header(r, 9 + static_cast<int>(kind), false),
                              .chunks_per_thread = t.cuda_ll_chunks_per_thread,
                              .max_blocks = t.cuda_ll_max_blocks,
                              .block_threads = t.cuda_ll_block_threads,
                              .pdl = t.cuda_pdl != 0},
                             s);
}

// Reduce-scatter, all-gather, all-to-all and broadcast on their staged or zero-copy kernels (kDirectStaged,
// kDirectZeroCopy); `in_place` / `out_place` are the heap places of the buffers (NOTE [heap keys]).
void CudaBackend::launch_direct(const Request& r, bool zc, uint64_t in_place, uint64_t out_place, cudaStream_t s) {
  const int n = ctx_.ranks.world_size;
  const size_t bytes = r.count * r.elem_size();
  const Tuning& t = ctx_.config.tuning;
  switch (r.kind) {
    case Collective::kReduceScatter: {
      cuda::ReduceScatterParams p{.comm = comm_,
                                  .in = r.in,
                                  .out = r.out,
                                  .count = r.count,
                                  .dtype = r.dtype,
                                  .op = r.op,
                                  .header = op_header(r, 3, zc, in_place),
                                  .peer_in = {},
                                  .zero_copy = zc,
                                  .block_bytes = t.cuda_direct_block_bytes,
                                  .max_blocks = t.cuda_direct_max_blocks};
      for (int q = 0; zc && q < n; ++q) p.peer_in[q] = static_cast<const char*>(heap_->peer_ptr(r.in, q));
      cuda::launch_reduce_scatter(p, s);
      return;
    }
    case Collective::kAllGather:
    case Collective::kAllToAll: {
      const bool a2a = r.kind == Collective::kAllToAll;
      cuda::ExchangeParams p{.comm = comm_,
                             .in = static_cast<const char*>(r.in),
                             .out = static_cast<char*>(r.out),
                             .bytes = bytes,
                             .in_block_stride = a2a ? bytes : 0,
                             .header = op_header(r, 4, zc, 0, zc ? out_place : 0),
                             .peer_out = {},
                             .zero_copy = zc,
                             .block_bytes = t.cuda_direct_block_bytes,
                             .max_blocks = t.cuda_direct_max_blocks};
      for (int q = 0; zc && q < n; ++q) p.peer_out[q] = static_cast<char*>(heap_->peer_ptr(r.out, q));
      cuda::launch_exchange(p, s);
      return;
    }
    case Collective::kBroadcast: {
      cuda::BroadcastParams p{.comm = comm_,
                              .in = static_cast<const char*>(r.in),
                              .out = static_cast<char*>(r.out),
                              .bytes = bytes,
                              .root = r.root,
                              .header = op_header(r, 5, zc, 0, out_place),
                              .peer_out = {},
                              .zero_copy = zc};
      for (int q = 0; zc && q < n; ++q) p.peer_out[q] = static_cast<char*>(heap_->peer_ptr(r.out, q));
      cuda::launch_broadcast(p, s);
      return;
    }
    case Collective::kAllReduce:
    case Collective::kBarrier: break;
  }
  SYMCOMM_THROW(kInternal, "no direct kernel for {}", r.describe());
}

}  // namespace symcomm::detail
