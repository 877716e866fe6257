#pragma once
/// \file node_path.h
/// How a collective of a communicator that spans nodes runs (symcomm/multinode.h).

#include <cstdint>
#include <string_view>

namespace symcomm {

/// The path a multi-node collective took (MultiNodeCommunicator::last_path()).
enum class NodePath : uint8_t {
  kNone,          ///< nothing has run yet
  kNode,          ///< the job is one node: the whole call ran on symcomm
  kHierarchical,  ///< symcomm inside each node, the inter-node engine between the nodes
  kFlat,          ///< the whole job on the inter-node engine
};

/// What a caller asks for: kAuto picks by size from the communicator's thresholds (the same on every rank).
enum class Hierarchy : uint8_t { kAuto, kHierarchical, kFlat };

std::string_view to_string(NodePath p);

}  // namespace symcomm
