#pragma once
// Topology and capability agreement of the CUDA backend.
//
// Each rank probes (1) P2P reachability of every peer's GPU (cudaDeviceCanAccessPeer where the peer's GPU is
// visible in this process), (2) NVLink between them with NVML, loaded at run time with dlopen (no link
// dependency; a GPU whose active links go to an NVSwitch reaches every GPU on it), and (3) a functional
// check: every rank writes a pattern into every peer's symmetric memory from a kernel, and reads back what
// the peers wrote into its own. The ranks then exchange what they saw and their verdicts over the peer mesh and
// all compute the same Topology (agree_topology()), so every rank picks the same paths.

#include <cstdint>
#include <string>
#include <vector>

#include "algos/topology.h"
#include "backends/backend.h"

namespace symcomm::detail {

struct PciAddress {
  uint32_t domain = 0, bus = 0, device = 0;
  bool operator==(const PciAddress&) const = default;
};

struct LocalProbe {
  std::vector<LinkSighting> sightings;  ///< of every rank (this rank's own entry unused)
  bool nvml_loaded = false;
  std::string detail;  ///< human-readable reasons of the missing links
};

/// Probes peer access and NVLink from this rank's device to the peers' devices (collective: exchanges PCI
/// addresses).
LocalProbe probe_topology(CommContext& ctx, int device);

/// The links every rank agrees on (agree_topology() over every rank's sightings; collective): `reachable` is this
/// rank's functional P2P check, and the AND of every rank's decides the PCIe links.
Topology agree_links(CommContext& ctx, const LocalProbe& probe, bool reachable);

/// Every rank writes into every peer's `probe_area` (a symmetric buffer of at least 8*world_size bytes,
/// mapped at peer_areas[p]) from a kernel, then checks what arrived in its own (collective). True if all
/// patterns arrived.
bool functional_p2p_check(CommContext& ctx, char* const* peer_areas, uint64_t salt);

/// The AND of every rank's verdict (collective).
bool agree_all(CommContext& ctx, bool mine);

// Kernel helper (cuda_probe.cu): thread p writes value + p... into dsts[p][rank].
void launch_probe_write(char* const* dsts, int world_size, int rank, uint64_t salt);

}  // namespace symcomm::detail
