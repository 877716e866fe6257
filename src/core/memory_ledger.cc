#include "core/memory_ledger.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "core/logging.h"

namespace symcomm {
namespace detail {
namespace {

struct Ledger {
  std::mutex mu;
  std::map<int, CudaMemoryUse> by_device;
};

Ledger& ledger() {
  static auto* l = new Ledger;  // never destroyed: frees may run from other static destructors
  return *l;
}

size_t& field(CudaMemoryUse& u, MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kDevice: return u.device_bytes;
    case MemoryKind::kPeerMapped: return u.peer_mapped_bytes;
    case MemoryKind::kPinnedHost: break;
  }
  return u.pinned_host_bytes;
}

}  // namespace

void ledger_add(int device, MemoryKind kind, size_t bytes) {
  Ledger& l = ledger();
  std::lock_guard lock(l.mu);
  CudaMemoryUse& u = l.by_device[device];
  field(u, kind) += bytes;
  ++u.allocations;
}

void ledger_remove(int device, MemoryKind kind, size_t bytes) {
  Ledger& l = ledger();
  std::lock_guard lock(l.mu);
  CudaMemoryUse& u = l.by_device[device];
  size_t& count = field(u, kind);
  if (count < bytes || u.allocations == 0) {
    SYMCOMM_LOG_ERROR("memory ledger: device {} takes back {} bytes of kind {} with {} recorded ({} allocations)",
                      device, bytes, static_cast<int>(kind), count, u.allocations);
  }
  count -= count < bytes ? count : bytes;
  u.allocations -= u.allocations > 0 ? 1 : 0;
}

}  // namespace detail

CudaMemoryUse cuda_memory_use(int device) {
  detail::Ledger& l = detail::ledger();
  std::lock_guard lock(l.mu);
  auto it = l.by_device.find(device);
  return it == l.by_device.end() ? CudaMemoryUse{} : it->second;
}

std::string to_string(const CudaMemoryUse& u) {
  return fmt::format("{} device bytes, {} peer-mapped bytes, {} pinned host bytes in {} allocations", u.device_bytes,
                     u.peer_mapped_bytes, u.pinned_host_bytes, u.allocations);
}

}  // namespace symcomm
