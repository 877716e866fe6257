#include "algos/select.h"

#include "algos/schedule.h"
#include "base/check.h"

namespace symcomm::detail {
namespace {

Algorithm select_host(const SelectRequest& r, const Capabilities& caps, const Tuning& t) {
  bool reducing = r.kind == Collective::kAllReduce;
  switch (r.forced) {
    case Algorithm::kAuto: break;
    case Algorithm::kOneShot:
    case Algorithm::kTwoShot:
      SYMCOMM_CHECK_ARG(reducing, "algorithm {} applies to all_reduce only", to_string(r.forced));
      return r.forced;
    case Algorithm::kDirect:
      SYMCOMM_CHECK_ARG(!reducing, "all_reduce has no direct algorithm (use one_shot or two_shot)");
      return r.forced;
    case Algorithm::kCopyEngine:
    case Algorithm::kNccl: SYMCOMM_THROW(kInvalidArgument, "algorithm {} needs the CUDA backend", to_string(r.forced));
  }
  if (!reducing) return Algorithm::kDirect;
  return r.bytes <= t.host_one_shot_max_bytes ? Algorithm::kOneShot : Algorithm::kTwoShot;
}

bool copy_engine_capable(Collective c) {
  return c == Collective::kAllGather || c == Collective::kReduceScatter || c == Collective::kAllToAll ||
         c == Collective::kBroadcast;
}

}  // namespace

// NOTE [measured CUDA thresholds]
// Tuning's CUDA defaults were measured on 2 x H200. Fields left at those defaults take other values from 3 ranks on,
// from symcomm-tune at 4 ranks on 4 x H100 (every pair NV18; bf16, CUDA graph; its entry in the compiled-in table,
// src/core/tuning_defaults.json), with every all-reduce path and the kernels' push order (NOTE [push order] in
// src/algos/cuda_common.cuh): LL up to 90 KB (between the measured 64 and 128 KB), LL128 and the one-shot up to 362
// KB (between 256 and 512 KB), the LL128 two-shot up to 2.8 MB (between 2 and 4 MB), the two-shot pushing into the
// outputs above, NCCL never. Us: LL 4.60 / LL128 5.07 at 64 KB, 6.28 / 5.76 at 128 KB; LL128 7.22 / LL128 two-shot
// 8.98 at 256 KB, 10.35 / 10.21 at 512 KB; LL128 two-shot 12.1 / two-shot 14.7 / NCCL 18.1 at 1 MB, 17.7 / 19.3 /
// 27.0 at 2 MB; LL128 two-shot 34.6 / pulling two-shot 29.4 / pushing 28.7 at 4 MB; pulling 93.0 / pushing 89.1 /
// NCCL 100.7 at 16 MB, 329.8 / 308.3 / 324.4 at 64 MB, 1262 / 1205 / 1176 at 256 MB (the one size NCCL wins, by 2%);
// symcomm-tune on 4 x H200 gives the same all-reduce ranges. The gathers: LL up to 181 KB blocks (between 128 and
// 256 KB), all-gather and all-to-all LL128 up to 724 KB (between 512 KB and 1 MB), the direct kernels above, on both
// machines. Us on 4 x H200, all-gather / reduce-scatter blocks: LL 6.15 / 5.99, LL128 6.24 / 6.26 at 128 KB; LL 9.43
// / 9.04, LL128 7.57 / 7.63, direct 9.36 / 12.11 at 256 KB; LL128 10.97 / 11.10, direct 11.96 / 13.94 at 512 KB;
// LL128 19.59 / 19.12, direct 16.45 / 19.28 at 1 MB. The direct reduce-scatter (remote loads) loses to LL128 longer:
// on 4 x H100 LL128 19.0 / 31.8 / 45.9 against direct 21.3 / 32.7 / 52.1 at 1 / 2 / 4 MB blocks, so its LL128 bound
// is the LL128 buffer, 4 MB (on 4 x H200 its entry stops at 1.45 MB: direct 29.6 against LL128 32.0 at 2 MB). GPUs
// with an entry of their own use it instead (NOTE [tuning precedence] in src/core/tuning_file.cc); these values
// serve the others. From 5 ranks on, nothing is measured: one-shot reads every peer's whole input, so its crossover
// falls with the ranks (~128-256 KB at 8 ranks in TRT-LLM and SGLang on Hopper); 128 KB, and NCCL from 64 MB. The
// LL128 two-shot moves 2 (N - 1) / N of the payload out of every rank where the one-shot moves N - 1 times it, for a
// second NVLink latency: at 2 ranks the same bytes, and symcomm-tune gives it no size there (2 x H100); its fields
// keep it off. The LL kernels' blocks get 256 threads (up to 256 blocks) from 3 ranks on: on 4 x H200 (every pair
// NV18; symcomm-bench --mode graph, bf16 sum, LL forced up to 512 KB) 512-thread blocks took 3.77 / 3.83 / 4.00 /
// 4.62 / 6.02 us for the all-reduce of 8 / 16 / 32 / 64 / 128 KB, 256-thread blocks 3.46 / 3.57 / 3.84 / 4.51 /
// 5.88, and the all-gather and reduce-scatter of 32-64 KB went from 4.02-4.09 to 3.65-3.85 us, no size slower by
// more than 0.1 us; 128-thread blocks (up to 512) were faster still for the all-reduce but slower for the all-gather
// and reduce-scatter of 8 KB (3.59 / 3.45 against 3.23 / 3.24 us). At 2 ranks 512-thread blocks are the fastest
// (Tuning::cuda_ll_block_threads). A communicator applies these values once, at creation, below a tuning file's
// entry (symcomm-tune, docs/tuning.md) and explicit settings (NOTE [tuning precedence] in src/core/tuning_file.cc).
namespace {

/// From `min_world_size` ranks on, `field` defaults to `value`. Rows are applied in order, so a row for more
/// ranks placed after one for fewer overrides it.
struct MeasuredValue {
  int min_world_size;
  size_t Tuning::*field;
  size_t value;
};

constexpr MeasuredValue kMeasuredCuda[] = {
    {3, &Tuning::cuda_ll_max_bytes, size_t{90} << 10},
    {3, &Tuning::cuda_ll128_max_bytes, size_t{362} << 10},
    {3, &Tuning::cuda_one_shot_max_bytes, size_t{362} << 10},
    {3, &Tuning::cuda_ll128_two_shot_max_bytes, size_t{2896} << 10},
    {3, &Tuning::cuda_two_shot_push_min_bytes, size_t{2896} << 10},
    {3, &Tuning::cuda_ll_gather_max_bytes, size_t{181} << 10},
    {3, &Tuning::cuda_ll128_gather_max_bytes, size_t{724} << 10},
    {3, &Tuning::cuda_ll128_reduce_scatter_max_bytes, size_t{4} << 20},
    {3, &Tuning::cuda_ll_block_threads, 256},
    {3, &Tuning::cuda_ll_max_blocks, 256},
    {5, &Tuning::cuda_one_shot_max_bytes, size_t{128} << 10},
    {5, &Tuning::cuda_nccl_min_bytes, size_t{64} << 20},
};

}  // namespace

Tuning measured_cuda_tuning(const Tuning& t, int world_size) {
  const Tuning defaults;
  Tuning m = t;
  for (const MeasuredValue& v : kMeasuredCuda) {
    if (world_size >= v.min_world_size && t.*v.field == defaults.*v.field) m.*v.field = v.value;
  }
  return m;
}

namespace {

bool schedulable(Collective c) { return schedule_index(c) >= 0; }

/// select_cuda() where the topology leaves pairs unlinked (Capabilities::restricted_links): the schedule whatever
/// symcomm algorithm is asked for (checked as elsewhere; the path is KernelPath::kScheduled), NCCL where asked for,
/// and where no schedule serves the collective, NCCL unless a symcomm algorithm is asked for.
Algorithm select_restricted(const SelectRequest& r, const Capabilities& caps) {
  const bool reducing = r.kind == Collective::kAllReduce;
  switch (r.forced) {
    case Algorithm::kAuto: break;
    case Algorithm::kOneShot:
    case Algorithm::kTwoShot:
      SYMCOMM_CHECK_ARG(reducing, "algorithm {} applies to all_reduce only", to_string(r.forced));
      break;
    case Algorithm::kDirect:
      SYMCOMM_CHECK_ARG(!reducing, "all_reduce has no direct algorithm (use one_shot or two_shot)");
      break;
    case Algorithm::kCopyEngine:
      SYMCOMM_CHECK_ARG(copy_engine_capable(r.kind), "{} has no copy-engine algorithm", to_string(r.kind));
      break;
    case Algorithm::kNccl:
      SYMCOMM_CHECK(caps.nccl_available, kUnsupported, "NCCL is not available to this communicator");
      return Algorithm::kNccl;
  }
  if (((caps.schedules >> static_cast<int>(r.kind)) & 1u) == 0) {
    SYMCOMM_CHECK(r.forced == Algorithm::kAuto && caps.nccl_available, kUnsupported,
                  "no {} schedule uses only the links of this communicator's topology, {}", to_string(r.kind),
                  r.forced == Algorithm::kAuto ? std::string("and NCCL is not available")
                                               : fmt::format("so algorithm {} cannot run", to_string(r.forced)));
    return Algorithm::kNccl;
  }
  if (r.forced != Algorithm::kAuto) return r.forced;
  return reducing ? Algorithm::kTwoShot : Algorithm::kDirect;
}

Algorithm select_cuda(const SelectRequest& r, const Capabilities& caps, const Tuning& t) {
  bool reducing = r.kind == Collective::kAllReduce;
  if (caps.restricted_links && caps.full_nvlink && schedulable(r.kind)) return select_restricted(r, caps);
  switch (r.forced) {
    case Algorithm::kAuto: break;
    case Algorithm::kOneShot:
    case Algorithm::kTwoShot:
      SYMCOMM_CHECK_ARG(reducing, "algorithm {} applies to all_reduce only", to_string(r.forced));
      SYMCOMM_CHECK(caps.full_nvlink, kUnsupported, "{} needs NVLink peer access between all GPUs",
                    to_string(r.forced));
      return r.forced;
    case Algorithm::kDirect:
      SYMCOMM_CHECK_ARG(!reducing, "all_reduce has no direct algorithm (use one_shot or two_shot)");
      SYMCOMM_CHECK(caps.full_nvlink, kUnsupported, "direct needs NVLink peer access between all GPUs");
      return r.forced;
    case Algorithm::kCopyEngine:
      SYMCOMM_CHECK_ARG(copy_engine_capable(r.kind), "{} has no copy-engine algorithm", to_string(r.kind));
      SYMCOMM_CHECK(caps.copy_engine, kUnsupported, "copy-engine collectives are not available here");
      return r.forced;
    case Algorithm::kNccl:
      SYMCOMM_CHECK(caps.nccl_available, kUnsupported, "NCCL is not available to this communicator");
      return r.forced;
  }
  if (!caps.full_nvlink) {
    SYMCOMM_CHECK(caps.nccl_available, kUnsupported, "no NVLink symmetric-memory path and no NCCL fallback");
    return Algorithm::kNccl;
  }
  // Low contention asked for: the copy engine, whatever the size (NCCL's kernels would hold SMs).
  if (r.contention == Contention::kLow && caps.copy_engine && copy_engine_capable(r.kind)) {
    return Algorithm::kCopyEngine;
  }
  // The NCCL size threshold is a preference: without NCCL the symmetric-memory kernels still run.
  if (r.bytes >= t.cuda_nccl_min_bytes && caps.nccl_available && r.kind != Collective::kBarrier) {
    return Algorithm::kNccl;
  }
  if (!reducing) {
    if (r.kind != Collective::kBarrier && r.contention != Contention::kLow && caps.nccl_available && r.bytes > 0 &&
        r.bytes <= t.cuda_direct_nccl_max_bytes) {
      return Algorithm::kNccl;
    }
    return Algorithm::kDirect;
  }
  if (r.bytes <= t.cuda_one_shot_max_bytes) return Algorithm::kOneShot;
  if (r.bytes <= t.cuda_two_shot_max_bytes || !caps.nccl_available) return Algorithm::kTwoShot;
  return Algorithm::kNccl;
}

}  // namespace

Algorithm select_algorithm(const SelectRequest& r, const Capabilities& caps, const Tuning& t) {
  SYMCOMM_CHECK_ARG(is_valid(r.forced), "invalid algorithm value {}", static_cast<int>(r.forced));
  // Nothing to choose: a single rank copies locally; a barrier is one signal round (on the CUDA backend
  // only where the GPUs can signal each other directly; otherwise select_cuda sends it to NCCL).
  bool direct_barrier = r.kind == Collective::kBarrier && (caps.backend == BackendKind::kHost || caps.full_nvlink);
  if (caps.world_size == 1 || direct_barrier) {
    if (r.forced == Algorithm::kAuto || r.forced == Algorithm::kDirect) return Algorithm::kDirect;
  }
  return caps.backend == BackendKind::kHost ? select_host(r, caps, t) : select_cuda(r, caps, t);
}

KernelPath select_cuda_path(Collective kind, size_t bytes, Algorithm algo, const PathFacts& f, const Tuning& t) {
  if (algo == Algorithm::kNccl) return KernelPath::kNccl;
  if (f.scheduled && schedulable(kind)) return KernelPath::kScheduled;
  if (algo == Algorithm::kCopyEngine) return KernelPath::kCopyEngine;
  switch (kind) {
    case Collective::kBarrier: return KernelPath::kBarrier;
    case Collective::kAllReduce:
      if (algo == Algorithm::kOneShot) {
        if (bytes <= t.cuda_ll_max_bytes && bytes <= f.ll_capacity_bytes) return KernelPath::kLL;
        if (bytes <= t.cuda_ll128_max_bytes && bytes <= f.ll128_capacity_bytes) return KernelPath::kLL128;
        return KernelPath::kOneShotStaged;
      }
      if (bytes <= t.cuda_ll128_two_shot_max_bytes && bytes >= f.ll128_two_shot_min_bytes &&
          bytes <= f.ll128_two_shot_capacity_bytes) {
        return KernelPath::kLL128TwoShot;
      }
      // Pushing needs only the outputs in the heap; reading the peers' inputs in place needs both.
      if (f.out_symmetric && bytes >= t.cuda_two_shot_push_min_bytes) return KernelPath::kTwoShotPush;
      return f.out_symmetric && f.in_symmetric ? KernelPath::kTwoShotZeroCopy : KernelPath::kTwoShotStaged;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll:
    case Collective::kBroadcast: {
      // NOTE [LL all-gather and reduce-scatter] in src/algos/cuda_all_reduce_ll.cu: blocks (broadcast: payloads)
      // up to Tuning::cuda_ll_gather_max_bytes and the LL buffer's capacity.
      if (algo == Algorithm::kDirect && bytes != 0 && bytes <= t.cuda_ll_gather_max_bytes &&
          bytes <= f.ll_capacity_bytes) {
        return KernelPath::kLL;
      }
      // NOTE [LL128 all-gather and reduce-scatter]: blocks up to Tuning::cuda_ll128_gather_max_bytes
      // (reduce-scatter: cuda_ll128_reduce_scatter_max_bytes) and the LL128 buffer's capacity; no broadcast.
      const size_t ll128_max =
          kind == Collective::kReduceScatter ? t.cuda_ll128_reduce_scatter_max_bytes : t.cuda_ll128_gather_max_bytes;
      if (algo == Algorithm::kDirect && kind != Collective::kBroadcast && bytes != 0 && bytes <= ll128_max &&
          bytes <= f.ll128_capacity_bytes) {
        return KernelPath::kLL128;
      }
      // Zero-copy where the side the peers reach is in the heap: reduce-scatter reads their inputs, the others
      // write their outputs. All-to-all in place cannot: a peer would overwrite a block still to be sent.
      bool zero_copy = kind == Collective::kReduceScatter ? f.in_symmetric : f.out_symmetric;
      if (kind == Collective::kAllToAll && f.in_place) zero_copy = false;
      return zero_copy ? KernelPath::kDirectZeroCopy : KernelPath::kDirectStaged;
    }
  }
  return KernelPath::kNone;
}

KernelPath select_cuda_multi_path(Collective kind, size_t bytes, const PathFacts& f, const Tuning& t) {
  // The multi-tensor kernels touch the same remote side as one tensor's: all-reduce reads the peers' inputs
  // and writes their outputs, reduce-scatter reads their inputs, all-gather writes their outputs.
  if (kind == Collective::kAllReduce && f.out_symmetric && bytes >= t.cuda_two_shot_push_min_bytes) {
    return KernelPath::kMultiPush;
  }
  const bool zero_copy =
      (kind == Collective::kAllGather || f.in_symmetric) && (kind == Collective::kReduceScatter || f.out_symmetric);
  return zero_copy ? KernelPath::kMultiZeroCopy : KernelPath::kMultiStaged;
}

}  // namespace symcomm::detail
