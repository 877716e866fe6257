#include "base/memory_ledger.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "base/logging.h"

namespace symcomm {
namespace detail {
namespace {

struct Reader {
  int device;
  MemoryKind kind;
  std::function<size_t()> read;
};

struct Ledger {
  std::mutex mu;
  std::map<int, CudaMemoryUse> by_device;  ///< what ledger_add/ledger_remove counted
  std::map<const void*, Reader> readers;   ///< what is measured when asked (ledger_set_reader)
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

void ledger_set_reader(const void* key, int device, MemoryKind kind, std::function<size_t()> read) {
  Ledger& l = ledger();
  std::lock_guard lock(l.mu);
  if (read) {
    l.readers[key] = {device, kind, std::move(read)};
  } else {
    l.readers.erase(key);
  }
}

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
  CudaMemoryUse u = it == l.by_device.end() ? CudaMemoryUse{} : it->second;
  for (const auto& [key, r] : l.readers) {
    if (r.device != device) continue;
    const size_t bytes = r.read();
    detail::field(u, r.kind) += bytes;
    u.allocations += bytes > 0 ? 1 : 0;
  }
  return u;
}

std::string to_string(const CudaMemoryUse& u) {
  return fmt::format("{} device bytes, {} peer-mapped bytes, {} pinned host bytes in {} allocations", u.device_bytes,
                     u.peer_mapped_bytes, u.pinned_host_bytes, u.allocations);
}

}  // namespace symcomm
