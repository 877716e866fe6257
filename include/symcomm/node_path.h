#pragma once
/// \file node_path.h
/// Communicators that span nodes: their options and how each collective runs (symcomm/multinode.h: MPI between the
/// nodes, host backend; symcomm/multinode_cuda.h: NCCL between the nodes, CUDA backend).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "symcomm/communicator.h"

namespace symcomm {

/// The path a multi-node collective took (last_path()).
enum class NodePath : uint8_t {
  kNone,          ///< nothing has run yet
  kNode,          ///< the job is one node: the whole call ran on symcomm
  kHierarchical,  ///< symcomm inside each node, the inter-node engine between the nodes
  kFlat,          ///< the whole job on the inter-node engine
};

/// What a caller asks for: kAuto picks by size from the communicator's thresholds (the same on every rank).
enum class Hierarchy : uint8_t { kAuto, kHierarchical, kFlat };

std::string_view to_string(NodePath p);

struct MultiNodeOptions {
  /// The node communicators' options: the host backend for MultiNodeCommunicator, the CUDA backend for
  /// CudaMultiNodeCommunicator (another backend: Error(kUnsupported)). Its config (or Config::from_env()) also gives
  /// the deadline of the inter-node waits. CUDA: `device` -1 is the rank's local rank on its host.
  CommOptions node;
  /// Declares nodes of this many consecutive ranks (the last may be smaller), so one machine can run the
  /// multi-node paths; 0: the real nodes (MultiNodeCommunicator: MPI_COMM_TYPE_SHARED; CudaMultiNodeCommunicator:
  /// the ranks of one boot of one host and pid namespace).
  int fake_node_size = 0;
  /// Fake nodes take ranks round-robin (rank r on node r % nodes, as `mpirun --map-by node` places them) instead
  /// of consecutively.
  bool fake_round_robin = false;
  /// Sizes (bytes, as detail::path_bytes counts them) from which kAuto takes the hierarchical path, as
  /// "all_reduce=64K,all_gather=256K,..." over the compiled-in table (nullopt: that table). Must be equal on every
  /// rank (Error(kMismatch) otherwise).
  std::optional<std::string> min_bytes;
};

/// Per-call options.
struct NodeCollOptions {
  Hierarchy hierarchy = Hierarchy::kAuto;
  /// CUDA: the stream the call is ordered on (every stage of it, on both engines). Ignored on the host backend.
  Stream stream = nullptr;
};

}  // namespace symcomm
