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
Algorithm select_algorithm(const SelectRequest& request, const Capabilities& caps, const Tuning& tuning);

/// The CUDA tuning in effect at `world_size` ranks: fields left at their (2-rank) default take the values
/// measured for more ranks (NOTE [measured CUDA thresholds]); fields set by the user are kept.
Tuning measured_cuda_tuning(const Tuning& tuning, int world_size);

}  // namespace symcomm::detail
