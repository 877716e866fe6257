// CudaBackend's group execution: runs of same-(kind, dtype, op, stream) all-reduces,
// reduce-scatters and all-gathers of one group become one multi-tensor kernel launch (src/algos/cuda_multi.h).
//
// NOTE [cuda group fusion] A run is a maximal sequence of consecutive group entries with the same collective
// (all-reduce, reduce-scatter or all-gather), dtype, op (reductions), stream and contention, none of them with
// a forced algorithm or a zero count. The run's algorithm is selected again from its total payload (the pure
// select_algorithm, so every rank decides alike):
//   - NCCL: the run's collectives are issued inside one ncclGroupStart/ncclGroupEnd (NCCL fuses them);
//   - copy engine (low contention asked for): one by one, as outside a group;
//   - otherwise one symcomm kernel per kMaxMultiSegments tensors over their virtual concatenation: the
//     two-shot all-reduce (also for totals where a single tensor would use one-shot: one launch of two-shot
//     beats many one-shot launches), the reduce-scatter, the all-gather exchange. Zero-copy when every
//     tensor's remote side lies in the symmetric heap, staged otherwise.
// The segment list is a kernel parameter (NOTE [multi-tensor list]), so a captured group replays correctly.
// Results equal the separate collectives bit for bit: elements are reduced in rank order wherever they sit.

#include <nccl.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "algos/cuda_gathered_reduce_scatter.h"
#include "algos/cuda_multi.h"
#include "algos/group_plan.h"
#include "backends/cuda/cuda_backend_cuda.h"
#include "base/check.h"
#include "base/cuda_check.h"
#include "base/hash.h"

namespace symcomm::detail {
namespace {

using Ops = std::vector<std::pair<Request, Algorithm>>;

using Places = std::array<uint64_t, cuda::kMaxMultiSegments>;

// Hash of the fields every rank must agree on (the kernel's first barrier compares it); never 0. With the
// heap places of the tensors that peers reach (NOTE [heap keys] in cuda_launch_cuda.cc): the inputs when the
// kernel reads peers' inputs (zero-copy), the outputs when it writes peers' outputs (zero-copy or push).
uint64_t multi_header(const cuda::MultiParams& p, const Places& in_places, const Places& out_places) {
  constexpr uint64_t kPathMulti = 16;  // distinct from the single-collective paths of cuda_launch_cuda.cc
  std::array<uint64_t, 6 + 3 * cuda::kMaxMultiSegments> f{};
  f[0] = static_cast<uint64_t>(p.kind);
  f[1] = kPathMulti;
  f[2] = static_cast<uint64_t>(p.dtype);
  f[3] = static_cast<uint64_t>(p.op);
  f[4] = p.nseg;
  f[5] = static_cast<uint64_t>(p.zero_copy) | static_cast<uint64_t>(p.push_out) << 1;
  const bool remote_in = p.zero_copy && p.kind != Collective::kAllGather;
  const bool remote_out = (p.zero_copy || p.push_out) && p.kind != Collective::kReduceScatter;
  for (uint32_t k = 0; k < p.nseg; ++k) {
    f[6 + 3 * k] = p.seg[k].count;
    f[7 + 3 * k] = remote_in ? in_places[k] : 0;
    f[8 + 3 * k] = remote_out ? out_places[k] : 0;
  }
  Fnv1a h;
  for (size_t k = 0; k < 6 + 3 * p.nseg; ++k) h.add(f[k]);
  return h.header();
}

// NOTE [group streams] A group's collectives may name different streams, and the caller cannot order them:
// nothing is enqueued before group_end(). But two kernels of one communicator must never run at once (they
// read the same device sequence number and share its signal slots, LL areas and staging: two LL all-reduces
// of one count on two streams exchanged each other's lines, silently). So the group runs in issue order
// across its streams, like NCCL's groups: where a run's stream differs from the previous run's, it first
// waits for an event recorded after that run; at the end every stream of the group waits for the last run,
// so whatever the caller enqueues after group_end() on any of them follows the whole group. Events work
// under capture too (the other streams join the capture and are joined back by the last wait).
class StreamChain {
 public:
  // Orders `s` after everything enqueued so far in the group.
  void enter(cudaStream_t s) {
    if (!streams_.empty() && s != streams_.back()) wait_for_last(&s, 1);
    std::erase(streams_, s);
    streams_.push_back(s);  // the last one is where the group's latest run went
  }
  // Orders every stream of the group after its last run.
  void join() {
    if (streams_.size() > 1) wait_for_last(streams_.data(), streams_.size() - 1);
  }
  // The stream of the group's latest run (after a first enter()).
  cudaStream_t last() const { return streams_.back(); }

 private:
  // One event recorded after the latest run; each of the n streams waits for it.
  void wait_for_last(const cudaStream_t* waiters, size_t n) {
    cudaEvent_t ev = nullptr;
    SYMCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t err = cudaEventRecord(ev, streams_.back());
    for (size_t k = 0; k < n && err == cudaSuccess; ++k) err = cudaStreamWaitEvent(waiters[k], ev, 0);
    cudaEventDestroy(ev);  // released once the waits no longer need it
    SYMCOMM_CUDA_CHECK(err);
  }
  std::vector<cudaStream_t> streams_;  ///< the group's streams so far, the latest run's last
};

}  // namespace

void CudaBackend::run_group(const Ops& ops) {
  poll_errors();
  if (ops.empty()) return;
  DeviceScope on_device(device_);
  StreamChain chain;
  order_.enter(reinterpret_cast<cudaStream_t>(ops[0].first.options.stream));  // NOTE [one operation at a time]
  for (size_t i = 0; i < ops.size();) {
    const size_t end = group_run_end(ops, i);
    const auto s = reinterpret_cast<cudaStream_t>(ops[i].first.options.stream);
    chain.enter(s);
    if (end - i >= 2) {
      launch_fused(ops, i, end);
    } else {
      enqueue(ops[i].first, ops[i].second, s);
    }
    i = end;
  }
  chain.join();
  order_.leave(chain.last());
}

std::shared_ptr<Work> CudaBackend::run_group_async(const Ops& ops) {
  std::vector<cudaStream_t> streams;
  for (const auto& [r, algo] : ops) {
    auto s = reinterpret_cast<cudaStream_t>(r.options.stream);
    if (std::find(streams.begin(), streams.end(), s) == streams.end()) streams.push_back(s);
  }
  for (cudaStream_t s : streams) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &st) != cudaSuccess) cudaGetLastError();
    SYMCOMM_CHECK_ARG(st == cudaStreamCaptureStatusNone,
                      "group_end_async cannot be captured into a CUDA graph; use group_end (it only enqueues)");
  }
  DeviceScope on_device(device_);  // the events too
  run_group(ops);
  std::vector<std::shared_ptr<Work>> parts;
  for (cudaStream_t s : streams) parts.push_back(record_work(s));
  return parts.size() == 1 ? parts[0] : make_composite_work(std::move(parts));
}

void CudaBackend::reduce_scatter_gathered(const GatheredReduceScatter& g) {
  poll_errors();
  DeviceScope on_device(device_);
  const auto s = reinterpret_cast<cudaStream_t>(g.options.stream);
  order_.enter(s);  // NOTE [one operation at a time]
  cuda::launch_gathered_reduce_scatter(
      {.comm = comm_, .out = static_cast<char*>(g.out), .count = g.count, .dtype = g.dtype, .op = g.op}, g.segs, g.nseg,
      s);
  order_.leave(s);
}

void CudaBackend::launch_fused(const Ops& ops, size_t begin, size_t end) {
  const Request& a = ops[begin].first;
  const size_t es = a.elem_size();
  const int n = ctx_.ranks.world_size;
  size_t bytes = 0;  // what select() sees: all_reduce total, the others per rank
  for (size_t k = begin; k < end; ++k) bytes += ops[k].first.count * es;
  const Algorithm algo = select_algorithm(SelectRequest{.kind = a.kind,
                                                        .dtype = a.dtype,
                                                        .op = a.op,
                                                        .bytes = bytes,
                                                        .forced = Algorithm::kAuto,
                                                        .contention = a.options.contention},
                                          caps_, ctx_.config.tuning);
  DeviceScope on_device(device_);
  auto s = reinterpret_cast<cudaStream_t>(a.options.stream);
  if (algo == Algorithm::kNccl) {
    ensure_nccl(s);  // before the group: NCCL defers a communicator created inside one to its end
    SYMCOMM_NCCL_CHECK(ncclGroupStart());
    try {
      for (size_t k = begin; k < end; ++k) launch_nccl(ops[k].first, s);
    } catch (...) {
      ncclGroupEnd();
      throw;
    }
    SYMCOMM_NCCL_RUN(ncclGroupEnd());
    return;
  }
  // One by one also where a topology restricts the links: each runs its schedule (the multi-tensor kernels reach
  // every peer).
  if (algo == Algorithm::kCopyEngine || !caps_.full_nvlink || caps_.restricted_links) {
    for (size_t k = begin; k < end; ++k) enqueue(ops[k].first, ops[k].second, s);
    return;
  }
  const bool gather = a.kind == Collective::kAllGather;
  const size_t unit = gather ? 16 : std::max<size_t>(1, 16 / es);  // virtual offsets: 16-byte multiples
  cuda::MultiParams p{};
  p.comm = comm_;
  p.kind = a.kind;
  p.dtype = a.dtype;
  p.op = a.has_reduction() ? a.op : ReduceOp::kSum;
  for (size_t first = begin; first < end; first += cuda::kMaxMultiSegments) {
    const size_t last = std::min(end, first + cuda::kMaxMultiSegments);
    p.nseg = static_cast<uint32_t>(last - first);
    std::array<uint64_t, cuda::kMaxMultiSegments> counts{}, voff{};
    for (size_t k = first; k < last; ++k) counts[k - first] = gather ? ops[k].first.count * es : ops[k].first.count;
    p.total = virtual_offsets(counts.data(), p.nseg, unit, voff.data());
    bool ins_symmetric = true, outs_symmetric = true;  // of the sides the kernel reaches at the peers
    Places in_places{}, out_places{};
    for (size_t k = first; k < last; ++k) {
      const Request& r = ops[k].first;
      cuda::MultiSegment& g = p.seg[k - first];
      g = cuda::MultiSegment{.in = static_cast<const char*>(r.in),
                             .out = static_cast<char*>(r.out),
                             .count = counts[k - first],
                             .voff = voff[k - first],
                             .in_stride = 0,
                             .out_stride = 0};
      // The remote side each kernel touches: all-reduce reads peers' inputs and writes their outputs;
      // reduce-scatter reads their inputs; all-gather writes their outputs.
      char* base = nullptr;
      size_t stride = 0;
      const size_t tb = r.count * es;
      if (a.kind != Collective::kAllGather) {
        const size_t in_bytes = a.kind == Collective::kReduceScatter ? tb * n : tb;
        ins_symmetric = ins_symmetric && heap_->find(r.in, in_bytes, &base, &stride, &in_places[k - first]);
        g.in_stride = static_cast<int64_t>(stride);
      }
      if (a.kind != Collective::kReduceScatter) {
        const size_t out_bytes = gather ? tb * n : tb;
        stride = 0;
        outs_symmetric = outs_symmetric && heap_->find(r.out, out_bytes, &base, &stride, &out_places[k - first]);
        g.out_stride = static_cast<int64_t>(stride);
      }
    }
    const KernelPath path = select_cuda_multi_path(
        a.kind, p.total * es, PathFacts{.in_symmetric = ins_symmetric, .out_symmetric = outs_symmetric},
        ctx_.config.tuning);
    note_path(path);
    p.push_out = path == KernelPath::kMultiPush;
    p.zero_copy = path == KernelPath::kMultiZeroCopy;
    p.header = multi_header(p, in_places, out_places);
    cuda::launch_multi(p, s);
  }
}

}  // namespace symcomm::detail
