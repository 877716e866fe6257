// symcomm-tune on the CUDA backend. Every path of the selector's chains (tune/derive.h) is run by forcing it:
// the algorithm through CollOptions::algorithm, and the kernel within it (LL, LL128 or staged one-shot; pull or
// push two-shot; LL or direct gathers) through the Tuning of a communicator made for that purpose:
//   a: LL as far as its buffer goes, two-shot pulling, LL gathers, NCCL (as SYMCOMM_NCCL allows; eager)
//   b: LL128 one-shot, two-shot pushing into the outputs, direct gathers (no NCCL)
//   c: staged one-shot, LL128 two-shot (no NCCL)
// Each communicator times on buffers of its own symmetric heap (the zero-copy paths, as with alloc()). Each
// path and size: one checked call (bench's verify_collective, in the mode it is timed in), then the timing
// (bench's time_cuda_graph / time_cuda_eager: events on rank 0's stream, median over batches).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "algos/cuda_all_reduce_ll.h"
#include "core/tuning_file.h"
#include "cuda_util.h"
#include "tune/tune.h"

namespace symcomm::tune {
namespace {

using bench::CollectiveOp;
using bench::symcomm_collective;
using bench::time_cuda_eager;
using bench::time_cuda_graph;
using bench::verify_collective;

struct Variant {
  std::unique_ptr<Communicator> comm;
  void* in = nullptr;
  void* out = nullptr;
};

/// A path of a collective: which variant runs it, what is forced, and up to which size it can run.
struct PathSpec {
  const char* path;
  int variant;
  Algorithm forced;
  size_t max_bytes;
};

void set(Config& c, size_t Tuning::*field, const char* name, size_t value) {
  c.tuning.*field = value;
  c.tuning_explicit.insert(name);  // NOTE [tuning precedence]: never replaced by compiled-in values
}

bool gather_family(Collective c) { return c != Collective::kAllReduce && c != Collective::kBarrier; }

}  // namespace

std::string cuda_device_name_of(int device) {
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

std::vector<Sample> tune_cuda(const TuneContext& ctx, const TuneOptions& o, std::string* device_name) {
  const int n = ctx.ranks.world_size, me = ctx.ranks.rank;
  const size_t es = dtype_size(o.dtype);
  const size_t top = o.sizes.empty() ? es : o.sizes.back();
  size_t in_max = top, out_max = top;  // AR, broadcast: the payload; the others' inputs or outputs: n blocks
  for (Collective c : o.collectives) {
    if (c == Collective::kBarrier) throw Error(ErrorCode::kInvalidArgument, "a barrier has no sizes to tune");
    if (c == Collective::kReduceScatter || c == Collective::kAllToAll) in_max = top * n;
    if (c == Collective::kAllGather || c == Collective::kAllToAll) out_max = top * n;
  }
  // The LL kernels' buffers bound their payload: LL 1 MiB less an 8-byte header line (all_reduce_ll_max_bytes),
  // LL128 4 MiB; the Tuning fields' ranges are those buffers.
  const size_t ll_cap = detail::find_tuning_field("cuda_ll_max_bytes")->max - 8;
  const size_t ll128_cap = detail::find_tuning_field("cuda_ll128_max_bytes")->max;
  // The LL128 two-shot's lines hold world_size / 2 x what the one-shot's do (NOTE [LL128 two-shot]).
  const size_t ll128_two_cap = std::min<size_t>(
      detail::cuda::all_reduce_ll128_two_shot_max_bytes(n, detail::cuda::all_reduce_ll128_slot_bytes(ll128_cap)),
      detail::find_tuning_field("cuda_ll128_two_shot_max_bytes")->max);

  Config base = ctx.base;
  base.heap_bytes = std::max(base.heap_bytes, in_max + out_max + (size_t{64} << 20));
  Config a = base, b = base, c = base;
  set(a, &Tuning::cuda_ll_max_bytes, "cuda_ll_max_bytes", ll_cap + 8);
  set(a, &Tuning::cuda_ll_gather_max_bytes, "cuda_ll_gather_max_bytes", ll_cap + 8);
  set(a, &Tuning::cuda_two_shot_push_min_bytes, "cuda_two_shot_push_min_bytes", SIZE_MAX);
  set(a, &Tuning::cuda_ll128_two_shot_max_bytes, "cuda_ll128_two_shot_max_bytes", 0);
  set(a, &Tuning::cuda_ll128_gather_max_bytes, "cuda_ll128_gather_max_bytes", 0);
  set(a, &Tuning::cuda_ll128_reduce_scatter_max_bytes, "cuda_ll128_reduce_scatter_max_bytes", 0);
  a.nccl = base.nccl == NcclInit::kOff ? NcclInit::kOff : NcclInit::kEager;
  set(b, &Tuning::cuda_ll_max_bytes, "cuda_ll_max_bytes", 0);
  set(b, &Tuning::cuda_ll128_max_bytes, "cuda_ll128_max_bytes", ll128_cap);
  set(b, &Tuning::cuda_ll_gather_max_bytes, "cuda_ll_gather_max_bytes", 0);
  set(b, &Tuning::cuda_two_shot_push_min_bytes, "cuda_two_shot_push_min_bytes", 0);
  set(b, &Tuning::cuda_ll128_two_shot_max_bytes, "cuda_ll128_two_shot_max_bytes", 0);
  set(b, &Tuning::cuda_ll128_gather_max_bytes, "cuda_ll128_gather_max_bytes", 0);
  set(b, &Tuning::cuda_ll128_reduce_scatter_max_bytes, "cuda_ll128_reduce_scatter_max_bytes", 0);
  b.nccl = NcclInit::kOff;
  set(c, &Tuning::cuda_ll_max_bytes, "cuda_ll_max_bytes", 0);
  set(c, &Tuning::cuda_ll128_max_bytes, "cuda_ll128_max_bytes", 0);
  set(c, &Tuning::cuda_ll128_two_shot_max_bytes, "cuda_ll128_two_shot_max_bytes", ll128_two_cap);
  // The gathers' LL128 path; a broadcast, which has none, runs its direct kernel there (as select() sends it).
  set(c, &Tuning::cuda_ll_gather_max_bytes, "cuda_ll_gather_max_bytes", 0);
  set(c, &Tuning::cuda_ll128_gather_max_bytes, "cuda_ll128_gather_max_bytes", ll128_cap);
  set(c, &Tuning::cuda_ll128_reduce_scatter_max_bytes, "cuda_ll128_reduce_scatter_max_bytes", ll128_cap);
  c.nccl = NcclInit::kOff;
  std::vector<Variant> variants(3);
  variants[0].comm = ctx.make_comm("tune/cuda/a", a, BackendKind::kCuda);
  variants[1].comm = ctx.make_comm("tune/cuda/b", b, BackendKind::kCuda);
  variants[2].comm = ctx.make_comm("tune/cuda/c", c, BackendKind::kCuda);
  for (Variant& v : variants) {
    if (!v.comm) continue;
    v.in = v.comm->alloc(in_max);
    v.out = v.comm->alloc(out_max);
  }
  const int device = variants[0].comm->device();
  *device_name = cuda_device_name_of(device);
  BENCH_CUDA(cudaSetDevice(device));
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  const std::vector<PathSpec> ar_paths = {
      {kPathLL, 0, Algorithm::kOneShot, ll_cap},        {kPathLL128, 1, Algorithm::kOneShot, ll128_cap},
      {kPathOneShot, 2, Algorithm::kOneShot, SIZE_MAX}, {kPathLL128TwoShot, 2, Algorithm::kTwoShot, ll128_two_cap},
      {kPathTwoShot, 0, Algorithm::kTwoShot, SIZE_MAX}, {kPathTwoShotPush, 1, Algorithm::kTwoShot, SIZE_MAX},
      {kPathNccl, 0, Algorithm::kNccl, SIZE_MAX}};
  const std::vector<PathSpec> gather_paths = {{kPathLL, 0, Algorithm::kDirect, ll_cap},
                                              {kPathLL128, 2, Algorithm::kDirect, ll128_cap},
                                              {kPathDirect, 1, Algorithm::kDirect, SIZE_MAX},
                                              {kPathNccl, 0, Algorithm::kNccl, SIZE_MAX}};
  struct Item {
    Collective c;
    PathSpec spec;
    size_t bytes;
  };
  std::vector<Item> items;
  std::vector<PlanItem> plan;
  for (Collective coll : o.collectives) {
    for (size_t bytes : o.sizes) {
      for (const PathSpec& p : gather_family(coll) ? gather_paths : ar_paths) {
        if (bytes > p.max_bytes) continue;
        items.push_back({coll, p, bytes});
        // ~10 us per call and ~150 GB/s for the larger of input and output; the check reads the output on the
        // host (~4 ns per element, ~10 GB/s to copy it back); ~5 ms to capture and instantiate a graph.
        const double moved =
            static_cast<double>(bytes) * (gather_family(coll) && coll != Collective::kBroadcast ? n : 1);
        const double per_call = 10e-6 + moved / 150e9;
        const int calls = (o.graph ? 2 + o.batches : o.batches) * iters_for(o, bytes) + o.warmup + 1;
        plan.push_back({coll, p.path, bytes, 5e-3 + calls * per_call + moved / es * 4e-9 + moved / 10e9});
      }
    }
  }
  Progress progress(me == 0, plan);
  std::map<std::pair<int, std::pair<Collective, Algorithm>>, bool> available;  // probed once per variant
  std::vector<Sample> samples;
  for (size_t k = 0; k < items.size(); ++k) {
    const Item& it = items[k];
    Variant& v = variants[static_cast<size_t>(it.spec.variant)];
    Communicator& comm = *v.comm;
    const size_t count = it.bytes / es;
    const CollectiveOp op = [&comm, &v, &it, &o](Collective coll, size_t cnt, cudaStream_t st) {
      symcomm_collective(comm, coll, v.in, v.out, cnt, o.dtype, ReduceOp::kSum,
                         {.stream = st, .algorithm = it.spec.forced});
    };
    // A path the communicator refuses (NCCL unavailable: ranks sharing a GPU, SYMCOMM_NCCL=off) is refused
    // alike on every rank, before anything runs; it is probed eagerly, outside any capture.
    const auto key = std::make_pair(it.spec.variant, std::make_pair(it.c, it.spec.forced));
    if (!available.contains(key)) {
      try {
        op(it.c, count, s);
        BENCH_CUDA(cudaStreamSynchronize(s));
        available[key] = true;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kUnsupported && e.code() != ErrorCode::kInvalidArgument) throw;
        if (me == 0)
          std::fprintf(stderr, "symcomm-tune: %s %s not measured: %s\n", std::string(to_string(it.c)).c_str(),
                       it.spec.path, e.message().c_str());
        available[key] = false;
      }
    }
    Sample sample;
    sample.collective = std::string(to_string(it.c));
    sample.path = it.spec.path;
    sample.bytes = it.bytes;
    if (available[key]) {
      const long long wrong =
          verify_collective(op, it.c, count, v.in, v.out, o.dtype, ReduceOp::kSum, me, n, s, o.graph);
      sample.wrong = ctx.sum_wrong("tune/cuda/wrong/" + std::to_string(k), wrong);
      comm.barrier({.stream = s});
      BENCH_CUDA(cudaStreamSynchronize(s));
      const int iters = iters_for(o, it.bytes);
      double cpu_us = 0;
      sample.time_us = o.graph ? time_cuda_graph(op, it.c, count, s, iters, o.batches)
                               : time_cuda_eager(op, it.c, count, s, o.warmup, iters, o.batches, &cpu_us);
    }
    progress.done(k, sample);
    samples.push_back(sample);
  }
  // No rank frees its buffers while a peer may still read them.
  BENCH_CUDA(cudaStreamSynchronize(s));
  ctx.store_barrier("tune/cuda/end");
  for (Variant& v : variants) {
    if (!v.comm) continue;
    v.comm->free(v.out);
    v.comm->free(v.in);
  }
  BENCH_CUDA(cudaStreamDestroy(s));
  variants.clear();
  return samples;
}

}  // namespace symcomm::tune
