#pragma once
// The host runner's pieces that symcomm-tune (bench/tune) uses too: the verification pattern and its check,
// the element counts of a benchmark size, the iterations per batch, and the timing of one batch.

#include <cstddef>
#include <functional>

#include "bench.h"

namespace symcomm::bench {

/// Element i of buf, of type d, as a double / from a double.
void put_value(DataType d, void* buf, size_t i, double v);
double get_value(DataType d, const void* buf, size_t i);

/// Inputs are small integers (exact in every dtype); expected() gives the exact result for sum/min/max.
struct HostPattern {
  Collective c;
  int n, me;
  size_t count;
  double input(size_t j) const;
  /// NaN: not checkable for this op.
  double expected(size_t i, ReduceOp op) const;
};

struct HostSizes {
  size_t count, in_elems, out_elems, bytes;
};
/// Counts of collective c at benchmark size `bytes` (nccl-tests convention: the larger of input and output).
HostSizes host_sizes_for(Collective c, size_t bytes, size_t es, int n);

/// Wrong elements of out[0..out_elems) against p.expected(); -1 where the op cannot be checked.
long long host_count_wrong(const HostPattern& p, DataType d, ReduceOp op, const void* out, size_t out_elems);

/// Iterations per batch: fewer for large messages so a size takes well under a second per implementation.
int host_iters_for(const BenchOptions& o, size_t bytes);

/// One timed batch: sync(), then `iters` calls of op(); the wall-clock microseconds per call.
double time_host_batch(const std::function<void()>& op, const std::function<void()>& sync, int iters);

}  // namespace symcomm::bench
