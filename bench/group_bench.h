#pragma once
// --extra group / --extra bucket: coalescing and bucketing patterns, host and CUDA.
//   group:  64 all-reduces of 8 MB (in place) grouped vs one by one vs one flattened 512 MB all-reduce
//           (CUDA: plus NCCL grouped / one by one / flattened).
//   bucket: 512 reduce-scatters with 8 KB outputs through ReduceScatterBucketer vs one by one vs grouped vs
//           one flattened reduce-scatter of the same total (CUDA: plus NCCL one by one and grouped).
// Per variant: time of one whole pattern instance (host: wall time of the synchronous calls; CUDA: events on
// the stream) and the host CPU time (CLOCK_THREAD_CPUTIME_ID) of the issuing code per collective, medians over
// batches. Ratios to the flattened collective are printed at the end of each pattern.
#include <functional>
#include <string>
#include <vector>

#include "bench.h"

namespace symcomm::bench::group {

struct Variant {
  std::string name;
  int collectives = 1;          ///< collectives per pattern instance (CPU time is reported per collective)
  std::function<void()> issue;  ///< issues one pattern instance (host: runs it)
  long long wrong = 0;          ///< checked once before timing by the runner
};

/// How one batch is timed: start() before issuing, stop() returns the microseconds since start() once the
/// work issued in between has completed.
struct BatchClock {
  std::function<void()> start;
  std::function<double()> stop;
};

struct PatternSpec {
  std::string pattern;    ///< "group_all_reduce" | "bucket_reduce_scatter"
  std::string backend;    ///< host | cuda
  std::string reference;  ///< variant the ratios divide by
  size_t bytes = 0;       ///< payload of one instance (per rank)
  int warmup = 1, iters = 1, batches = 1;
};

/// True if --extra names `what`.
bool wants(const BenchOptions& o, const char* what);
/// Thread CPU time in microseconds.
double thread_cpu_us();
/// Sizes of the patterns: tensor bytes (8 MB) and count (64), bucket outputs (8 KB) and count (512).
struct Shapes {
  size_t group_tensor_bytes = 8 << 20;
  int group_tensors = 64;
  size_t bucket_out_bytes = 8 << 10;
  int bucket_ops = 512;
};
/// Inputs of the patterns: element j of rank r's input slab is input_value(j, r) (small integers, exact in
/// float32/bfloat16/float16 sums); results are checked for sum in those dtypes only (others: 0 wrong).
bool checkable(DataType d);
int input_value(size_t j, int rank);
void fill_host(void* dst, DataType d, size_t first, size_t count, int rank);
/// Wrong elements of out[0..count) against the sum over ranks of input_value(in_index(i), r).
long long count_wrong(const void* out, DataType d, size_t count, int world,
                      const std::function<size_t(size_t)>& in_index);

/// Times every variant, reports each as a Measurement (time_us = one pattern instance; extra_json carries
/// cpu_us_per_coll) and prints a ratio table. Returns the wrong elements of all variants.
long long measure(const PatternSpec& spec, std::vector<Variant>& variants, const BatchClock& clock,
                  const BenchOptions& o, Communicator& comm, Reporter& rep);

long long run_host_patterns(Communicator& comm, const BenchOptions& o, Reporter& rep);
#if defined(SYMCOMM_BENCH_CUDA)
long long run_cuda_patterns(Communicator& comm, const BenchOptions& o, Reporter& rep);
#endif

}  // namespace symcomm::bench::group
