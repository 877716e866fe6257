#pragma once
// symcomm-bench: shared options, measurement record and reporter. Each runner (host, CUDA, baselines) fills
// Measurements; the Reporter prints an nccl-tests style table line and a JSON line for each.

#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "symcomm/communicator.h"

namespace symcomm::bench {

struct BenchOptions {
  std::vector<Collective> collectives;  ///< which collectives to sweep
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 64 << 20;
  double step_factor = 4.0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int warmup = 5;
  int iters = 20;                      ///< timed iterations per batch
  int batches = 5;                     ///< the reported time is the median of the batches' per-iteration means
  std::vector<std::string> baselines;  ///< "mpi", "nccl"
  std::vector<std::string> modes;      ///< "eager", "graph" (CUDA)
  Algorithm algorithm = Algorithm::kAuto;
  Contention contention = Contention::kAuto;
  bool check = true;  ///< verify results (the "wrong" column)
  std::string json_path;
  std::vector<std::string> extra;  ///< runner-specific switches (e.g. "contention", "fused")
};

/// One measured point. Keys match the JSON line written for it.
struct Measurement {
  std::string collective;
  std::string backend;  ///< host | cuda
  std::string impl;     ///< symcomm | mpi | nccl | nccl_symmetric
  std::string algo;
  std::string mode = "eager";
  std::string dtype;
  std::string op;
  size_t bytes = 0;  ///< nccl-tests convention: the larger of the per-rank input and output sizes
  size_t count = 0;
  int world_size = 1;
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  long long wrong = 0;
  std::string extra_json;  ///< extra "key": value pairs (already JSON, without braces), may be empty
};

/// Bus-bandwidth factor of nccl-tests: all_reduce 2(n-1)/n, all_gather / reduce_scatter / all_to_all (n-1)/n,
/// broadcast 1.
double bus_factor(Collective c, int world_size);
/// Fills algbw/busbw from bytes and time_us.
void fill_bandwidth(Measurement& m, Collective c);

class Reporter {
 public:
  /// Only rank 0 prints and writes JSON (pass is_root accordingly).
  Reporter(bool is_root, const std::string& json_path);
  ~Reporter();
  void header(const std::string& title);
  /// Every rank calls add() for every measurement, in the same order; `m.wrong` is this rank's count, and
  /// what is printed and written is every rank's (see set_wrong_sum).
  void add(const Measurement& m);
  /// How add() combines the ranks' wrong counts (a collective; without it, rank 0's count alone is reported,
  /// so an error seen only on another rank, such as a wrong reduce-scatter block there, never reaches the JSON).
  void set_wrong_sum(std::function<long long(long long)> sum) { wrong_sum_ = std::move(sum); }
  /// Prints "ratio symcomm / <impl>" lines for matching (collective, mode, bytes) points.
  void print_ratios(const std::string& baseline_impl);
  const std::vector<Measurement>& all() const { return all_; }

 private:
  bool root_;
  std::function<long long(long long)> wrong_sum_;
  FILE* json_ = nullptr;
  std::vector<Measurement> all_;
};

/// "64K", "4M", "1G", "4096": bytes (K/M/G: powers of 1024). Throws std::invalid_argument if malformed.
size_t parse_size(const std::string& s);
/// "all_reduce,all_gather" (or "all"): the collectives named; on an unknown name (or barrier), sets *unknown to
/// it and returns nothing.
std::vector<Collective> parse_collectives(const std::string& list, std::string* unknown);

/// Sizes from min to max multiplying by factor, each rounded to a multiple of `align` bytes.
std::vector<size_t> size_sweep(const BenchOptions& o, size_t align);

/// Every rank's wrong count summed (a collective over `comm`); -1 (unverified) if any rank did not verify.
long long wrong_on_all_ranks(Communicator& comm, long long wrong);
#if defined(SYMCOMM_BENCH_CUDA)
/// In-place all-reduce (sum) of `n` int64 host values over a CUDA communicator (through a device buffer).
void cuda_sum_int64(Communicator& comm, int64_t* values, int n);
#endif

/// Median of the values.
double median(std::vector<double> v);

// Runners. Each returns the number of wrong elements seen (0 = all correct).
long long run_host(Communicator& comm, const BenchOptions& o, Reporter& rep);
/// --extra group / --extra bucket: coalescing and bucketing patterns, host or CUDA (bench/group_bench.h).
long long run_group_bench(Communicator& comm, const BenchOptions& o, Reporter& rep);
#if defined(SYMCOMM_BENCH_CUDA)
long long run_cuda(Communicator& comm, const BenchOptions& o, Reporter& rep);
/// --extra contention: a GEMM beside each collective (bench/contention_cuda.cu).
long long run_contention(Communicator& comm, const BenchOptions& o, Reporter& rep);
/// --extra fused: fused GEMM + collective vs unfused vs the matmul alone (bench/fused_bench_cuda.cu).
long long run_fused(Communicator& comm, const BenchOptions& o, Reporter& rep);
#endif

}  // namespace symcomm::bench
