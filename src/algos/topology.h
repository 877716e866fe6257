#pragma once
// The links between the GPUs (or processes) of one node, as every rank of a communicator must agree on them:
// for each pair of ranks, NVLink (with its link count), PCIe peer-to-peer, or nothing. The all-reduce schedules
// of src/algos/schedule.h use only the links a Topology has. A topology is given as JSON (parse_topology):
//
//   {"world_size": 8,
//    "links": [{"ranks": [0, 1], "kind": "nvlink", "count": 2}, {"ranks": [0, 4], "kind": "pcie"}, ...]}
//
// Each pair is listed at most once, in either order; pairs not listed have no link. The builders below make
// the layouts the tests and the cost model use.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace symcomm::detail {

enum class LinkKind : uint8_t { kNone, kPcie, kNvlink };

struct Link {
  LinkKind kind = LinkKind::kNone;
  int count = 0;  ///< NVLink links between the pair (1 for PCIe, 0 for none)
};

class Topology {
 public:
  explicit Topology(int world_size);

  int world_size() const { return n_; }
  const Link& at(int a, int b) const { return links_[static_cast<size_t>(a) * n_ + b]; }
  bool linked(int a, int b) const { return a != b && at(a, b).kind != LinkKind::kNone; }
  /// Sets the link of the pair {a, b} (both directions). Throws Error(kInvalidArgument) for a rank outside the
  /// world, a == b, or a count below 1 for a link that exists.
  void set(int a, int b, Link link);
  /// Every pair linked (by a link of `kind`, where given).
  bool full_mesh() const;
  bool full_mesh(LinkKind kind) const;
  /// FNV-1a over the world size and every pair's kind and count: equal on ranks that agree.
  uint64_t fingerprint() const;
  /// The links among `ranks` (ranks of this topology, each at most once), renumbered: rank i of the result is
  /// ranks[i]. Throws Error(kInvalidArgument) for a rank outside the world or listed twice.
  Topology among(const std::vector<int>& ranks) const;
  /// The JSON form parse_topology reads (pairs in ascending order, links only).
  std::string to_json() const;

  /// Every pair linked with `kind` (count 1).
  static Topology full(int world_size, LinkKind kind = LinkKind::kNvlink);
  /// The 8-GPU hybrid cube mesh (DGX-1): ranks 0-3 and 4-7 each fully linked, and i linked to i + 4.
  static Topology hybrid_cube_mesh();
  /// Rank i linked to i + 1 (mod world_size) only.
  static Topology ring(int world_size, LinkKind kind = LinkKind::kNvlink);

 private:
  int n_;
  std::vector<Link> links_;
};

/// What one rank's detection (NVML and the CUDA runtime, src/backends/cuda/cuda_topology_cuda.cc) sees of its
/// link to one peer.
struct LinkSighting {
  enum class P2p : uint8_t { kNo, kYes, kUnknown };  ///< kUnknown: the peer's GPU is not visible in this process
  uint8_t nvlinks = 0;  ///< NVLink links to the peer's GPU (through a switch: this GPU's links to the switch)
  P2p p2p = P2p::kUnknown;
};

/// The links every rank agrees on, from every rank's sightings (sightings[r][p]: rank r's of rank p; its own entry
/// is ignored) and whether every rank's functional check (each rank writing into every peer's memory) passed:
/// without it no pair counts as linked. Otherwise a pair is NVLink where both ends see NVLink and neither sees P2P
/// refused (the smaller count), else PCIe peer-to-peer where neither sees it refused (the functional check decides
/// what a rank that cannot see its peer's GPU does not know), else none. Pure: every rank that has every rank's
/// sightings computes the same. Throws Error(kInternal) for rows of the wrong length.
Topology agree_topology(const std::vector<std::vector<LinkSighting>>& sightings, bool reachable);

/// Reads the JSON form above. Throws Error(kInvalidArgument) naming what is wrong: not JSON, a missing or
/// mistyped field, a world size outside 1-64, a rank outside the world, a pair listed twice or with itself, an
/// unknown kind ("nvlink", "pcie", "none"), an NVLink count below 1.
Topology parse_topology(std::string_view json);

}  // namespace symcomm::detail
