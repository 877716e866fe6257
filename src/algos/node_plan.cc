#include "algos/node_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>

#include "base/check.h"

namespace symcomm::detail {

bool NodeLayout::uniform() const {
  for (const auto& m : members) {
    if (m.size() != members.front().size()) return false;
  }
  return !members.empty();
}

int NodeLayout::node_size() const { return uniform() ? static_cast<int>(members.front().size()) : 0; }

bool NodeLayout::blocked() const {
  const int l = node_size();
  if (l == 0) return false;
  for (int r = 0; r < world_size; ++r) {
    if (node_of[r] != r / l || local_of[r] != r % l) return false;
  }
  return true;
}

NodeLayout make_node_layout(const std::vector<int64_t>& key) {
  NodeLayout out;
  out.world_size = static_cast<int>(key.size());
  out.node_of.resize(key.size());
  out.local_of.resize(key.size());
  std::map<int64_t, int> index;  // key -> node, nodes numbered by their lowest rank
  for (int r = 0; r < out.world_size; ++r) {
    auto [it, fresh] = index.try_emplace(key[r], out.num_nodes());
    if (fresh) out.members.emplace_back();
    out.node_of[r] = it->second;
    out.local_of[r] = static_cast<int>(out.members[it->second].size());
    out.members[it->second].push_back(r);
  }
  return out;
}

std::vector<int64_t> fake_node_keys(int world_size, int node_size, bool round_robin) {
  SYMCOMM_CHECK_ARG(node_size >= 1, "fake node size {} must be at least 1", node_size);
  const int nodes = (world_size + node_size - 1) / node_size;
  std::vector<int64_t> keys(world_size);
  for (int r = 0; r < world_size; ++r) keys[r] = round_robin ? r % nodes : r / node_size;
  return keys;
}

size_t* NodeThresholds::slot(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return &all_reduce;
    case Collective::kAllGather: return &all_gather;
    case Collective::kReduceScatter: return &reduce_scatter;
    case Collective::kBroadcast: return &broadcast;
    case Collective::kBarrier: return &barrier;
    case Collective::kAllToAll: break;
  }
  return nullptr;
}

size_t NodeThresholds::of(Collective c) const {
  const size_t* s = const_cast<NodeThresholds*>(this)->slot(c);
  return s ? *s : SIZE_MAX;
}

void NodeThresholds::set(Collective c, size_t bytes) {
  if (size_t* s = slot(c)) *s = bytes;
}

std::string threshold_text(size_t bytes) { return bytes == SIZE_MAX ? std::string("max") : std::to_string(bytes); }

std::string NodeThresholds::to_string() const {
  return fmt::format("all_reduce={},all_gather={},reduce_scatter={},broadcast={},barrier={}",
                     threshold_text(all_reduce), threshold_text(all_gather), threshold_text(reduce_scatter),
                     threshold_text(broadcast), threshold_text(barrier));
}

// The compiled-in thresholds: the crossovers symcomm-multinode-bench measured on fake nodes of one 16-core x86 host
// (4-16 ranks as 2-4 nodes of 2, 4 and 8; docs/design/multinode.md), where MPI between the nodes runs over shared
// memory as fast as the node's own paths. Real nodes, with the slower link between them, favour the hierarchical
// path more; a job sets its own through MultiNodeOptions::min_bytes. The hierarchical all-gather won there only
// between 16 KB and 256 KB (1.1-2.1x) and lost above 1 MB (0.4-0.8x), which one threshold cannot express: flat.
NodeThresholds default_node_thresholds(int node_size) {
  NodeThresholds t;
  t.all_reduce = node_size >= 8 ? 4 << 10 : node_size >= 4 ? 16 << 10 : 64 << 10;
  t.reduce_scatter = node_size >= 4 ? 4 << 10 : 16 << 10;
  t.broadcast = node_size >= 8 ? 64 << 10 : 256 << 10;
  t.all_gather = SIZE_MAX;
  t.barrier = SIZE_MAX;  // one MPI barrier beats node, inter-node, node: 0.15-0.27x
  return t;
}

namespace {
// "<digits>[K|M|G]" of one "name=bytes" item.
size_t parse_threshold_bytes(const std::string& item, const std::string& value) {
  SYMCOMM_CHECK_ARG(!value.empty() && value[0] >= '0' && value[0] <= '9',
                    "multinode thresholds: '{}' has no byte count", item);
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  SYMCOMM_CHECK_ARG(errno != ERANGE, "multinode thresholds: '{}' is out of range", item);
  const std::string suffix(end);
  size_t scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = size_t{1} << 10;
  else if (suffix == "M" || suffix == "m")
    scale = size_t{1} << 20;
  else if (suffix == "G" || suffix == "g")
    scale = size_t{1} << 30;
  else
    SYMCOMM_CHECK_ARG(suffix.empty(), "multinode thresholds: '{}' has an unknown suffix", item);
  SYMCOMM_CHECK_ARG(v <= SIZE_MAX / scale, "multinode thresholds: '{}' is out of range", item);
  return static_cast<size_t>(v) * scale;
}
}  // namespace

NodeThresholds cuda_node_thresholds() {
  NodeThresholds t;
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kBroadcast, Collective::kBarrier}) {
    t.set(c, SIZE_MAX);
  }
  return t;
}

NodeThresholds parse_node_thresholds(const std::string& text, NodeThresholds base) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    at = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    SYMCOMM_CHECK_ARG(eq != std::string::npos, "multinode thresholds: '{}' is not name=bytes", item);
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    const size_t bytes = value == "max" ? SIZE_MAX : parse_threshold_bytes(item, value);
    const auto c = parse_collective(name);
    SYMCOMM_CHECK_ARG(c && *c != Collective::kAllToAll, "multinode thresholds: unknown collective '{}'", name);
    base.set(*c, bytes);
  }
  return base;
}

size_t path_bytes(Collective c, size_t count, DataType dtype, int world_size) {
  switch (c) {
    case Collective::kAllGather:
    case Collective::kReduceScatter: return count * dtype_size(dtype) * static_cast<size_t>(world_size);
    case Collective::kBarrier: return 0;
    default: return count * dtype_size(dtype);
  }
}

NodePath choose_node_path(const NodeLayout& layout, Collective c, size_t bytes, Hierarchy asked,
                          const NodeThresholds& thresholds) {
  if (asked == Hierarchy::kFlat) return NodePath::kFlat;
  if (layout.num_nodes() == 1) return NodePath::kNode;
  const bool can = c != Collective::kAllToAll && layout.uniform() && layout.node_size() > 1;
  if (asked == Hierarchy::kHierarchical) {
    SYMCOMM_CHECK_ARG(can, "{} has no hierarchical path {}", to_string(c),
                      c == Collective::kAllToAll ? "(it runs on the inter-node engine)"
                      : layout.uniform()         ? "with one rank per node"
                                                 : "on nodes of different sizes");
    return NodePath::kHierarchical;
  }
  return can && bytes >= thresholds.of(c) ? NodePath::kHierarchical : NodePath::kFlat;
}

int local_major_rank(const NodeLayout& layout, int i) {
  const int n_nodes = layout.num_nodes();
  return layout.members[i % n_nodes][i / n_nodes];
}

std::vector<BlockCopy> block_order_copies(const NodeLayout& layout, size_t block, bool to_rank_order) {
  const int world = layout.world_size, n_nodes = layout.num_nodes(), l_size = layout.node_size();
  std::vector<BlockCopy> copies;
  if (block == 0) return copies;
  if (layout.blocked() && l_size > 0 && block * l_size <= kMaxCopyPitch) {
    // Block l * N + n is rank n * L + l: local index l's N blocks sit one block apart in local-index order, at
    // l * N * block, and L blocks apart in rank order, at l * block.
    for (int l = 0; l < l_size; ++l) {
      const size_t major = static_cast<size_t>(l) * n_nodes * block, minor = static_cast<size_t>(l) * block;
      const size_t wide = block * l_size;
      copies.push_back(to_rank_order ? BlockCopy{minor, major, block, static_cast<size_t>(n_nodes), wide, block}
                                     : BlockCopy{major, minor, block, static_cast<size_t>(n_nodes), block, wide});
    }
    return copies;
  }
  for (int b = 0; b < world; ++b) {
    const size_t at_rank = static_cast<size_t>(local_major_rank(layout, b)) * block, at_major = b * block;
    copies.push_back(to_rank_order ? BlockCopy{at_rank, at_major, block, 1, 0, 0}
                                   : BlockCopy{at_major, at_rank, block, 1, 0, 0});
  }
  return copies;
}

namespace {
// Seconds -> µs for `bytes` over GB/s.
double transfer_us(double bytes, double GBps) { return GBps > 0 ? bytes / (GBps * 1e3) : 0; }
}  // namespace

double model_flat_all_reduce_us(const NodeModel& m, double bytes) {
  const double w = static_cast<double>(m.num_nodes) * m.node_size;
  // A ring per rank of the node (as NCCL builds them), each carrying 1/node_size of the data across one inter-node
  // link: every rank moves 2(W-1)/W of the buffer over its intra links and its share of the inter-node links.
  const double moved = 2 * (w - 1) / w * bytes;
  const double bw =
      std::max(transfer_us(moved, m.intra.bandwidth_GBps), transfer_us(moved / m.node_size, m.inter.bandwidth_GBps));
  return 2 * (w - 1) * m.inter.latency_us + bw;
}

double model_hierarchical_all_reduce_us(const NodeModel& m, double bytes) {
  const double l = m.node_size, n = m.num_nodes;
  const double node_stage = (l - 1) * m.intra.latency_us + transfer_us((l - 1) / l * bytes, m.intra.bandwidth_GBps);
  const double inter =
      2 * (n - 1) * m.inter.latency_us + transfer_us(2 * (n - 1) / n * bytes / l, m.inter.bandwidth_GBps);
  return 2 * node_stage + inter;
}

}  // namespace symcomm::detail

namespace symcomm {

std::string_view to_string(NodePath p) {
  switch (p) {
    case NodePath::kNone: return "none";
    case NodePath::kNode: return "node";
    case NodePath::kHierarchical: return "hierarchical";
    case NodePath::kFlat: return "flat";
  }
  return "invalid";
}

}  // namespace symcomm
