#include "backends/cuda/cuda_topology_cuda.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/logging.h"
#include "symcomm/device/handle.h"

namespace symcomm::detail {
namespace {

constexpr uint32_t kTagTopology = 33;
constexpr uint32_t kTagAgree = 34;
constexpr uint32_t kTagLinks = 36;

// ---- the few NVML declarations we need (nvml.h is not part of the CUDA toolkit image) ----
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS on Hopper
constexpr int kNvmlRemoteSwitch = 2;    // NVML_NVLINK_DEVICE_TYPE_SWITCH
struct NvmlPciInfo {                    // nvmlPciInfo_t (v3 layout, used by the _v2 entry points)
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

// NOTE [nvml once] NVML is loaded and initialised once per process and never shut down or unloaded: loading
// it per communicator (dlopen, nvmlInit_v2, ..., nvmlShutdown, dlclose) leaves file descriptors open (driver
// 580.159.04: 10 such loads take a process from 6 to 21 fds; kept loaded, 10 init/shutdown pairs add 1), so
// a process creating communicators without NCCL (which keeps NVML loaded itself) would leak one fd per
// communicator. The GPU lifecycle test with two ranks sharing a GPU (SYMCOMM_SHARED_GPU=1, no NCCL) counts them.
struct Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*remote_pci)(nvmlDevice_t, unsigned, NvmlPciInfo*) = nullptr;
  nvmlReturn_t (*remote_type)(nvmlDevice_t, unsigned, int*) = nullptr;  // optional

  bool load() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    init = reinterpret_cast<decltype(init)>(dlsym(lib, "nvmlInit_v2"));
    by_pci = reinterpret_cast<decltype(by_pci)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    link_state = reinterpret_cast<decltype(link_state)>(dlsym(lib, "nvmlDeviceGetNvLinkState"));
    remote_pci = reinterpret_cast<decltype(remote_pci)>(dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    remote_type = reinterpret_cast<decltype(remote_type)>(dlsym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType"));
    if (!init || !by_pci || !link_state || !remote_pci || init() != kNvmlSuccess) {
      dlclose(lib);
      lib = nullptr;
      return false;
    }
    return true;
  }
};

/// The process's NVML (NOTE [nvml once]); nullptr where it cannot be loaded. Thread-safe.
const Nvml* process_nvml() {
  static const Nvml* const nvml = [] {
    auto* n = new Nvml;  // never freed: NVML stays initialised for the process
    if (n->load()) return static_cast<const Nvml*>(n);
    delete n;
    return static_cast<const Nvml*>(nullptr);
  }();
  return nvml;
}

PciAddress parse_pci(const char* s) {
  PciAddress a;
  unsigned fn = 0;
  if (std::sscanf(s, "%x:%x:%x.%x", &a.domain, &a.bus, &a.device, &fn) != 4) {
    a = PciAddress{};
    std::sscanf(s, "%x:%x.%x", &a.bus, &a.device, &fn);
  }
  return a;
}

std::vector<uint8_t> to_bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

}  // namespace

LocalProbe probe_topology(CommContext& ctx, int device) {
  using P2p = LinkSighting::P2p;
  LocalProbe out;
  const int n = ctx.ranks.world_size, me = ctx.ranks.rank;
  out.sightings.assign(n, LinkSighting{});
  char bus[64] = {0};
  SYMCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
  PciAddress mine = parse_pci(bus);
  auto all = ctx.mesh_all_gather(kTagTopology, to_bytes(&mine, sizeof(mine)));
  std::vector<PciAddress> addr(n);
  for (int p = 0; p < n; ++p) {
    SYMCOMM_CHECK(all[p].size() == sizeof(PciAddress), kInternal, "bad topology message from rank {}", p);
    std::memcpy(&addr[p], all[p].data(), sizeof(PciAddress));
  }
  // Config::shared_gpu: ranks on one GPU reach each other's memory through their own mappings, no link; they
  // count as linked by NVLink.
  auto shares_my_gpu = [&](int p) { return ctx.config.shared_gpu && addr[p] == mine; };
  // The peer's GPU as this process numbers it, or -1 where CUDA_VISIBLE_DEVICES hides it.
  std::vector<int> peer_dev(n, -1);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    std::string id = fmt::format("{:08x}:{:02x}:{:02x}.0", addr[p].domain, addr[p].bus, addr[p].device);
    if (cudaDeviceGetByPCIBusId(&peer_dev[p], id.c_str()) != cudaSuccess) {
      cudaGetLastError();
      peer_dev[p] = -1;
    }
  }

  // (1) P2P where the peer's GPU is visible in this process. A GPU hidden by CUDA_VISIBLE_DEVICES is left
  // to the functional check (cuMem import works without it).
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    LinkSighting& l = out.sightings[p];
    if (shares_my_gpu(p)) {
      l = LinkSighting{.nvlinks = 1, .p2p = P2p::kYes};
      continue;
    }
    if (peer_dev[p] < 0) continue;  // kUnknown
    if (peer_dev[p] == device) {
      l.p2p = P2p::kNo;
      out.detail += fmt::format("rank {} uses the same GPU {}; ", p, device);
      continue;
    }
    int can = 0;
    SYMCOMM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer_dev[p]));
    l.p2p = can ? P2p::kYes : P2p::kNo;
    if (!can) out.detail += fmt::format("no P2P access from GPU {} to rank {}'s GPU {}; ", device, p, peer_dev[p]);
  }

  // (2) NVLink through NVML.
  const Nvml* nvml = process_nvml();
  out.nvml_loaded = nvml != nullptr;
  if (!out.nvml_loaded) {
    // Without NVML, native peer atomics are the best available sign of NVLink between visible GPUs.
    for (int p = 0; p < n; ++p) {
      if (p == me || shares_my_gpu(p)) continue;
      int atomics = 0;
      if (peer_dev[p] < 0 || peer_dev[p] == device ||
          cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, device, peer_dev[p]) !=
              cudaSuccess) {
        cudaGetLastError();
        atomics = 0;
      }
      out.sightings[p].nvlinks = atomics ? 1 : 0;
      if (!atomics) out.detail += fmt::format("NVML not loadable and no native P2P atomics to rank {}; ", p);
    }
    return out;
  }
  nvmlDevice_t dev = nullptr;
  if (nvml->by_pci(bus, &dev) != kNvmlSuccess) {
    out.detail += fmt::format("NVML does not know GPU {}; ", bus);
    return out;
  }
  std::vector<int> direct(n, 0);
  int to_switch = 0;  // active links to an NVSwitch, which reach every GPU on it
  for (unsigned l = 0; l < kNvmlMaxLinks; ++l) {
    int active = 0;
    if (nvml->link_state(dev, l, &active) != kNvmlSuccess || !active) continue;
    int type = -1;
    if (nvml->remote_type && nvml->remote_type(dev, l, &type) == kNvmlSuccess && type == kNvmlRemoteSwitch) {
      ++to_switch;
      continue;
    }
    NvmlPciInfo pci{};
    if (nvml->remote_pci(dev, l, &pci) != kNvmlSuccess) continue;
    PciAddress r{pci.domain, pci.bus, pci.device};
    bool is_rank_gpu = false;
    for (int p = 0; p < n; ++p) {
      if (addr[p] == r && p != me) {
        ++direct[p];
        is_rank_gpu = true;
      }
    }
    if (!is_rank_gpu && type < 0) ++to_switch;  // no type query: a link to a non-rank device is a switch
  }
  for (int p = 0; p < n; ++p) {
    if (p == me || shares_my_gpu(p)) continue;
    out.sightings[p].nvlinks = static_cast<uint8_t>(std::min(direct[p] + to_switch, 255));
    if (out.sightings[p].nvlinks == 0) out.detail += fmt::format("no NVLink to rank {}'s GPU; ", p);
  }
  return out;
}

Topology agree_links(CommContext& ctx, const LocalProbe& probe, bool reachable) {
  const int n = ctx.ranks.world_size;
  std::vector<uint8_t> mine{static_cast<uint8_t>(reachable ? 1 : 0)};
  for (const LinkSighting& l : probe.sightings) {
    mine.push_back(l.nvlinks);
    mine.push_back(static_cast<uint8_t>(l.p2p));
  }
  const auto all = ctx.mesh_all_gather(kTagLinks, mine);
  std::vector<std::vector<LinkSighting>> rows(n);
  bool every = true;
  for (int p = 0; p < n; ++p) {
    SYMCOMM_CHECK(all[p].size() == mine.size(), kInternal, "bad link message from rank {} ({} bytes)", p,
                  all[p].size());
    every = every && all[p][0] == 1;
    for (int q = 0; q < n; ++q) {
      const uint8_t p2p = all[p][2 + 2 * q];
      SYMCOMM_CHECK(p2p <= static_cast<uint8_t>(LinkSighting::P2p::kUnknown), kInternal,
                    "bad link message from rank {}", p);
      rows[p].push_back(LinkSighting{.nvlinks = all[p][1 + 2 * q], .p2p = static_cast<LinkSighting::P2p>(p2p)});
    }
  }
  return agree_topology(rows, every);
}

bool functional_p2p_check(CommContext& ctx, char* const* peer_areas, uint64_t salt) {
  const int n = ctx.ranks.world_size, me = ctx.ranks.rank;
  if (n > device::kMaxDeviceRanks) return false;
  // Cleared on the device and waited for: a cudaMemcpy from pageable host memory may return before its DMA
  // has landed, and a late zero can overwrite a peer's probe write (seen with two ranks on one GPU).
  SYMCOMM_CUDA_CHECK(cudaMemset(peer_areas[me], 0, n * sizeof(uint64_t)));
  SYMCOMM_CUDA_CHECK(cudaDeviceSynchronize());
  agree_all(ctx, true);  // everyone cleared its area before anyone writes
  launch_probe_write(peer_areas, n, me, salt);
  agree_all(ctx, true);  // everyone's writes are done
  std::vector<uint64_t> got(n, 0);
  SYMCOMM_CUDA_CHECK(cudaMemcpy(got.data(), peer_areas[me], n * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int p = 0; p < n; ++p) {
    uint64_t want = salt ^ (uint64_t{static_cast<uint32_t>(p)} << 32) ^ me;
    if (got[p] != want) {
      SYMCOMM_LOG_WARN("rank {}: functional P2P check: rank {}'s write did not arrive ({:#x} != {:#x})", me, p, got[p],
                       want);
      ok = false;
    }
  }
  return ok;
}

bool agree_all(CommContext& ctx, bool mine) {
  auto all = ctx.mesh_all_gather(kTagAgree, std::vector<uint8_t>{static_cast<uint8_t>(mine ? 1 : 0)});
  bool ok = true;
  for (auto& v : all) ok = ok && v.size() == 1 && v[0] == 1;
  return ok;
}

}  // namespace symcomm::detail
