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
  /// The communicator's topology (Config::topology_file) leaves some pair unlinked: all-reduce, all-gather and
  /// reduce-scatter run its schedules, whatever algorithm is asked for, or NCCL where it is asked for or where no
  /// schedule serves the topology (CUDA; on GPUs that reach each other, full_nvlink).
  bool restricted_links = false;
  /// Bit k: a schedule serves collective k (its Collective value) over the topology's links.
  uint32_t schedules = 0;
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

/// What the CUDA kernel path of a request depends on besides its algorithm, size and Tuning: where its buffers
/// lie and the capacities of the backend's line buffers. The backend finds them per call; ranks that pass
/// buffers alike find the same (NOTE [heap keys] in src/backends/cuda/cuda_launch_cuda.cc makes a difference a
/// kMismatch rather than two paths).
struct PathFacts {
  bool in_symmetric = false;        ///< the whole input extent lies in the symmetric heap
  bool out_symmetric = false;       ///< the whole output extent lies in the symmetric heap
  bool in_place = false;            ///< in == out
  size_t ll_capacity_bytes = 0;     ///< the largest payload the LL buffer holds (per block for direct collectives)
  size_t ll128_capacity_bytes = 0;  ///< the largest all-reduce the LL128 lines hold
  /// The all-reduces the LL128 two-shot serves: from one line per shard to what its lines hold
  /// (all_reduce_ll128_two_shot_min_bytes / _max_bytes in src/algos/cuda_all_reduce_ll.h).
  size_t ll128_two_shot_min_bytes = 0;
  size_t ll128_two_shot_capacity_bytes = 0;
  /// The collective runs the schedule of the communicator's topology (Capabilities::restricted_links, and a
  /// schedule serves it): KernelPath::kScheduled unless the algorithm is NCCL.
  bool scheduled = false;
};

/// The kernel path the CUDA backend runs `kind` on with algorithm `algo` (select_algorithm()'s answer, never
/// kAuto): `bytes` is count * element size (all-reduce and broadcast: the payload; the others: one rank's
/// block). A pure function, tested as a table in tests/unit/select_test.cc (Select.CudaPathTable).
KernelPath select_cuda_path(Collective kind, size_t bytes, Algorithm algo, const PathFacts& facts,
                            const Tuning& tuning);

/// The multi-tensor kernel path of a group of `kind` collectives (all-reduce, all-gather, reduce-scatter) whose
/// segments total `bytes`; `facts` hold for every segment (false if one segment's buffer is not in the heap).
KernelPath select_cuda_multi_path(Collective kind, size_t bytes, const PathFacts& facts, const Tuning& tuning);

/// `tuning` with the CUDA values compiled in for `world_size` ranks (NOTE [measured CUDA thresholds]) in the
/// fields still at Tuning's (2-rank) default. A communicator calls it once, at creation, on Tuning's defaults
/// and puts a tuning file's entry and the explicit settings over the result (resolve_tuning(), NOTE [tuning
/// precedence]); select_algorithm() and the kernels take the Tuning they are given as it is.
Tuning measured_cuda_tuning(const Tuning& tuning, int world_size);

}  // namespace symcomm::detail
