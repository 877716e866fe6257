#pragma once
// symcomm-tune (docs/tuning.md): times every path the selector chooses between, for each collective and size,
// checks each path's result, derives the Tuning thresholds (tune/derive.h) and writes them into a tuning file
// (tune/output.h). Run under symcomm-run; rank 0 prints the progress (stderr) and the derived table (stdout)
// and writes the file. The runners: tune_host.cc (host_one_shot_max_bytes), tune_cuda.cu (the CUDA thresholds).

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "symcomm/communicator.h"
#include "symcomm/store.h"
#include "tune/derive.h"

namespace symcomm::tune {

struct TuneOptions {
  BackendKind backend = BackendKind::kHost;
  std::vector<Collective> collectives;
  std::vector<size_t> sizes;  ///< ascending; the bytes the selector compares (Sample::bytes)
  DataType dtype = DataType::kFloat32;
  bool graph = true;  ///< CUDA: time inside CUDA graphs (else eagerly)
  int warmup = 2;
  int iters = 20;  ///< most timed calls per batch (fewer for large sizes: iters_for)
  int batches = 5;
};

/// Timed calls per batch at `bytes`: about 64 MB of payload per batch, at least 2, at most o.iters.
int iters_for(const TuneOptions& o, size_t bytes);

/// One measurement a runner will make, and about how long it takes (for the estimate and the time left).
struct PlanItem {
  Collective collective;
  std::string path;
  size_t bytes;
  double estimate_s;
};

/// The ranks' shared context: the job's store (for the wrong-element sums, which must not depend on the
/// collectives being measured) and the configuration the measuring communicators start from.
struct TuneContext {
  RankInfo ranks;
  std::shared_ptr<Store> store;
  Config base;  ///< SYMCOMM_* settings, without a tuning file or tuning fields of their own
  /// A communicator named `name` over the job's store with `config`.
  std::unique_ptr<Communicator> make_comm(const std::string& name, const Config& config, BackendKind backend) const;
  /// Every rank's `wrong` summed (-1 if any rank could not verify), returned on rank 0 (others: their own).
  /// Goes through the store: `key` must be new for every call.
  long long sum_wrong(const std::string& key, long long wrong) const;
  /// Returns once every rank has called it with `key` (new for every call): a barrier that needs no
  /// communicator (one whose collectives are refused here still frees its buffers after it).
  void store_barrier(const std::string& key) const;
};

/// Progress on stderr (rank 0): the plan's estimated total before the first measurement, then after each one
/// the measurement, the time elapsed and an estimate of the time left (the plan's estimates, scaled by how long
/// the measurements so far took against theirs).
class Progress {
 public:
  Progress(bool root, std::vector<PlanItem> plan);
  /// Prints measurement `index` of the plan as done.
  void done(size_t index, const Sample& sample);

 private:
  bool root_;
  std::vector<PlanItem> plan_;
  std::chrono::steady_clock::time_point start_;
  double estimated_done_ = 0;
};

/// The runners: every rank calls one, with the same options; they return the samples (times from rank 0's
/// clock; wrong counts summed over the ranks on rank 0).
std::vector<Sample> tune_host(const TuneContext& ctx, const TuneOptions& o);
#if defined(SYMCOMM_BENCH_CUDA)
/// `device_name`: the name of the GPU the ranks measured on, as CUDA reports it (the entry's device).
std::vector<Sample> tune_cuda(const TuneContext& ctx, const TuneOptions& o, std::string* device_name);
/// cudaDeviceProp::name of `device`.
std::string cuda_device_name_of(int device);
#endif

}  // namespace symcomm::tune
