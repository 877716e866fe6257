// symcomm-tune on the host backend: the all-reduce's one-shot and two-shot paths (forced through
// CollOptions::algorithm) at each size, on buffers of the symmetric heap, for host_one_shot_max_bytes.

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "host_util.h"
#include "tune/tune.h"

namespace symcomm::tune {

std::vector<Sample> tune_host(const TuneContext& ctx, const TuneOptions& o) {
  for (Collective c : o.collectives) {
    SYMCOMM_CHECK_ARG(c == Collective::kAllReduce, "the host backend tunes all_reduce only, not {}", to_string(c));
  }
  const int n = ctx.ranks.world_size, me = ctx.ranks.rank;
  const size_t es = dtype_size(o.dtype);
  const size_t max_bytes = o.sizes.empty() ? 0 : o.sizes.back();
  Config config = ctx.base;
  config.heap_bytes = std::max(config.heap_bytes, 2 * max_bytes + (size_t{4} << 20));
  auto comm = ctx.make_comm("tune/host", config, BackendKind::kHost);
  auto* in = static_cast<uint8_t*>(comm->alloc(std::max<size_t>(max_bytes, es)));
  auto* out = static_cast<uint8_t*>(comm->alloc(std::max<size_t>(max_bytes, es)));

  const std::pair<const char*, Algorithm> paths[] = {{kPathOneShot, Algorithm::kOneShot},
                                                     {kPathTwoShot, Algorithm::kTwoShot}};
  std::vector<PlanItem> plan;
  for (size_t bytes : o.sizes) {
    for (const auto& [path, algo] : paths) {
      // Shared memory: ~20 us per call, ~2 GB/s; the check reads every element once.
      const double per_call = 20e-6 + static_cast<double>(bytes) / 2e9;
      const int calls = o.warmup + 1 + o.batches * iters_for(o, bytes);
      plan.push_back({Collective::kAllReduce, path, bytes, calls * per_call + static_cast<double>(bytes) / es * 5e-9});
    }
  }
  // One untimed call of each path at the largest size first: the heap's pages are committed on first touch
  // and the first calls start the backend's threads, which would otherwise be timed at the first size.
  for (const auto& [path, algo] : paths) {
    comm->all_reduce(in, out, max_bytes / es, o.dtype, ReduceOp::kSum, {.algorithm = algo});
  }
  Progress progress(me == 0, plan);
  std::vector<Sample> samples;
  for (size_t k = 0; k < plan.size(); ++k) {
    const PlanItem& item = plan[k];
    const Algorithm algo = item.path == kPathOneShot ? Algorithm::kOneShot : Algorithm::kTwoShot;
    const size_t count = item.bytes / es;
    const bench::HostPattern pattern{Collective::kAllReduce, n, me, count};
    for (size_t j = 0; j < count; ++j) bench::put_value(o.dtype, in, j, pattern.input(j));
    std::memset(out, 0xa5, count * es);
    const auto op = [&] { comm->all_reduce(in, out, count, o.dtype, ReduceOp::kSum, {.algorithm = algo}); };
    op();
    const long long wrong = bench::host_count_wrong(pattern, o.dtype, ReduceOp::kSum, out, count);
    for (int w = 0; w < o.warmup; ++w) op();
    std::vector<double> batches;
    const int iters = iters_for(o, item.bytes);
    for (int b = 0; b < o.batches; ++b)
      batches.push_back(bench::time_host_batch(
          op, [&] { comm->barrier(); }, iters));
    const Sample s{.collective = std::string(to_string(item.collective)),
                   .path = item.path,
                   .bytes = item.bytes,
                   .time_us = bench::median(batches),
                   .wrong = ctx.sum_wrong(fmt::format("tune/host/wrong/{}", k), wrong)};
    progress.done(k, s);
    samples.push_back(s);
  }
  comm->barrier();
  comm->free(out);
  comm->free(in);
  return samples;
}

}  // namespace symcomm::tune
