#pragma once
// Planning of the collectives of a communicator that spans nodes (symcomm/multinode.h): which rank sits on which
// node, which path a call takes (one node, hierarchical, or the whole job on the inter-node engine), the block
// orders of the hierarchical all-gather and reduce-scatter, and the alpha-beta cost model of docs/design/multinode.md.
// Pure functions of values every rank has in common, so every rank plans the same.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "symcomm/node_path.h"
#include "symcomm/types.h"

namespace symcomm::detail {

/// Where every rank of the job sits.
struct NodeLayout {
  int world_size = 0;
  /// Nodes are numbered by their lowest rank; within a node, ranks are numbered by rank (local index).
  std::vector<int> node_of, local_of;
  /// members[n][l]: the rank with local index l on node n.
  std::vector<std::vector<int>> members;

  int num_nodes() const { return static_cast<int>(members.size()); }
  /// Every node holds the same number of ranks (the hierarchical algorithms need it).
  bool uniform() const;
  /// Ranks per node where uniform(), else 0.
  int node_size() const;
  /// Ranks are numbered node by node (node n holds ranks n*L .. n*L+L-1): the hierarchical all-gather and
  /// reduce-scatter then need no reordering copy.
  bool blocked() const;
};

/// `key[r]`: any value, equal for the ranks of one node (a host identity, or r / fake node size).
NodeLayout make_node_layout(const std::vector<int64_t>& key);
/// Keys of fake nodes of `node_size` ranks (the last node may be smaller): consecutive ranks, or round-robin
/// (rank r on node r % ceil(world_size / node_size)).
std::vector<int64_t> fake_node_keys(int world_size, int node_size, bool round_robin = false);

/// Sizes from which the hierarchical path is taken by kAuto, per collective (bytes as in path_bytes()).
struct NodeThresholds {
  size_t all_reduce = 0, all_gather = 0, reduce_scatter = 0, broadcast = 0, barrier = 0;
  /// The threshold of `c` (SIZE_MAX for all-to-all, which has no hierarchical path).
  size_t of(Collective c) const;
  /// Sets the threshold of `c` (all-to-all: nothing).
  void set(Collective c, size_t bytes);
  /// "SYMCOMM_MULTINODE_MIN_BYTES"-style text: "all_reduce=65536,all_gather=0,...".
  std::string to_string() const;

 private:
  size_t* slot(Collective c);
};

/// A threshold as the thresholds' text writes it: the byte count, or "max" for SIZE_MAX (never).
std::string threshold_text(size_t bytes);
/// The compiled-in thresholds of the host backend (MPI between the nodes) for nodes of `node_size` ranks (measured
/// on fake nodes of one host: docs/design/multinode.md).
NodeThresholds default_node_thresholds(int node_size);
/// The compiled-in thresholds of the CUDA backend (NCCL between the nodes): flat at every size, so that a job runs
/// no slower than on NCCL alone unless it passes measured ones (symcomm-multinode-cuda-bench prints them); no
/// crossover of the two paths on GPUs is compiled in.
NodeThresholds cuda_node_thresholds();
/// Parses "name=bytes,..." (names as in to_string(Collective); sizes with K/M/G suffixes) over `base`.
/// Throws Error(kInvalidArgument) naming what it cannot read.
NodeThresholds parse_node_thresholds(const std::string& text, NodeThresholds base);

/// The bytes a call's selection looks at: all-reduce and broadcast their buffer, all-gather its output,
/// reduce-scatter its input (world_size * count elements), barrier 0.
size_t path_bytes(Collective c, size_t count, DataType dtype, int world_size);

/// The path of a call. all-to-all (and anything else) runs flat across nodes; a layout of one node runs on
/// symcomm; a layout whose nodes differ in size, or hold one rank each, runs flat. Throws
/// Error(kInvalidArgument) where kHierarchical is asked for a call or layout that has no hierarchical path.
NodePath choose_node_path(const NodeLayout& layout, Collective c, size_t bytes, Hierarchy asked,
                          const NodeThresholds& thresholds);

/// The rank at block i = l * num_nodes + n (local index l, node n) of the hierarchical stages' buffers, which hold
/// blocks local index by local index: the reduce-scatter reorders its input so (the node stage then hands local
/// index l the blocks of every rank with local index l), and the all-gather's node stage gathers so (each block
/// then goes to its rank's place in the output).
int local_major_rank(const NodeLayout& layout, int i);

/// One strided copy: `rows` rows of `width` bytes, row k from src + src_offset + k * src_pitch to dst + dst_offset +
/// k * dst_pitch (rows == 1: one plain copy).
struct BlockCopy {
  size_t dst_offset = 0, src_offset = 0, width = 0, rows = 1, dst_pitch = 0, src_pitch = 0;
};

/// Pitches up to which a strided copy is planned: cudaMemcpy2DAsync refuses pitches above the device's limit
/// (cudaDevAttrMaxPitch, 2 GiB on sm_90); below 1 GiB every GPU takes them.
inline constexpr size_t kMaxCopyPitch = size_t{1} << 30;

/// The copies that move the `block`-byte blocks of the hierarchical stages between local-index order (block i at
/// i * block, i = l * num_nodes + n: local_major_rank(i)'s block) and rank order (rank r's block at r * block):
/// `to_rank_order` from the first to the second (the all-gather's last step), else back (the reduce-scatter's first).
/// Ranks numbered node by node (NodeLayout::blocked()): one strided copy per local index (its N blocks are one
/// block apart on one side and L blocks apart on the other) while L * block <= kMaxCopyPitch; else one copy per
/// block. Needs a uniform layout.
std::vector<BlockCopy> block_order_copies(const NodeLayout& layout, size_t block, bool to_rank_order);

/// Alpha-beta cost model (docs/design/multinode.md).
struct LinkModel {
  double latency_us = 0;      ///< per step
  double bandwidth_GBps = 0;  ///< intra: per rank; inter: per rank's share of the node's links
};
struct NodeModel {
  int num_nodes = 2, node_size = 8;
  LinkModel intra, inter;
};
/// Predicted time (µs) of a `bytes` all-reduce: flat ring over every rank (every step as slow as its inter-node
/// hop) and hierarchical (node reduce-scatter, inter-node ring all-reduce of the shard, node all-gather).
double model_flat_all_reduce_us(const NodeModel& m, double bytes);
double model_hierarchical_all_reduce_us(const NodeModel& m, double bytes);

}  // namespace symcomm::detail
