#pragma once
// select(): the pure function that picks the algorithm of a collective. Same inputs, same answer, on every
// rank: all inputs are either arguments every rank passes identically or capabilities agreed by all ranks
// at creation. Tested as a table in tests/unit/select_test.cc.

#include <cstddef>

#include "symcomm/config.h"
#include "symcomm/types.h"

namespace symcomm::detail {

/// What the ranks agreed they can do (identical on every rank).
struct Capabilities {
  BackendKind backend = BackendKind::kHost;
  int world_size = 1;
  bool full_nvlink = false;     ///< every pair of GPUs is NVLink-connected and P2P works (CUDA)
  bool nccl_available = false;  ///< an NCCL communicator exists (CUDA)
  bool copy_engine = false;     ///< copy-engine paths are available (CUDA)
};

struct SelectRequest {
  Collective kind = Collective::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t bytes = 0;  ///< payload: all_reduce/broadcast total bytes; others bytes per rank
  Algorithm forced = Algorithm::kAuto;
  Contention contention = Contention::kAuto;
};

/// The algorithm to run, never kAuto. Throws Error(kInvalidArgument) if `forced` cannot run the request.
/// `tuning` is the communicator's Tuning in effect (resolve_tuning() in src/core/tuning_file.h).
Algorithm select_algorithm(const SelectRequest& request, const Capabilities& caps, const Tuning& tuning);

/// `tuning` with the CUDA values compiled in for `world_size` ranks (NOTE [measured CUDA thresholds]) in the
/// fields still at Tuning's (2-rank) default. A communicator calls it once, at creation, on Tuning's defaults
/// and puts a tuning file's entry and the explicit settings over the result (resolve_tuning(), NOTE [tuning
/// precedence]); select_algorithm() and the kernels take the Tuning they are given as it is.
Tuning measured_cuda_tuning(const Tuning& tuning, int world_size);

}  // namespace symcomm::detail
