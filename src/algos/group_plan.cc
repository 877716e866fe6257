#include "algos/group_plan.h"

namespace symcomm::detail {
namespace {

bool multi_kind(Collective k) {
  return k == Collective::kAllReduce || k == Collective::kReduceScatter || k == Collective::kAllGather;
}

bool same_run(const Request& a, const Request& b) {
  return b.kind == a.kind && b.dtype == a.dtype && (!a.has_reduction() || b.op == a.op) &&
         b.options.stream == a.options.stream && b.options.contention == a.options.contention &&
         b.options.algorithm == Algorithm::kAuto && b.count > 0;
}

}  // namespace

size_t group_run_end(const std::vector<std::pair<Request, Algorithm>>& ops, size_t begin) {
  const Request& a = ops[begin].first;
  if (!multi_kind(a.kind) || a.count == 0 || a.options.algorithm != Algorithm::kAuto) return begin + 1;
  size_t end = begin + 1;
  while (end < ops.size() && same_run(a, ops[end].first)) ++end;
  return end;
}

uint64_t virtual_offsets(const uint64_t* counts, size_t n, uint64_t align, uint64_t* offsets) {
  uint64_t v = 0;
  for (size_t k = 0; k < n; ++k) {
    v = (v + align - 1) / align * align;
    offsets[k] = v;
    v += counts[k];
  }
  return v;
}

}  // namespace symcomm::detail
