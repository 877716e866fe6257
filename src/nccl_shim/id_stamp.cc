#include "id_stamp.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string_view>

#include "base/hash.h"

namespace symcomm::nccl_shim {
namespace {

// "SYMN" and the layout's version, little-endian.
constexpr uint32_t kMagic = 0x4e4d5953u;
constexpr uint16_t kVersion = 1;

// Layout of the stamp's bytes (little-endian fields).
constexpr size_t kMagicAt = 0, kVersionAt = 4, kPortAt = 6, kHostAt = 8, kTokenAt = 16, kNonceAt = 32, kSumAt = 40;
static_assert(kSumAt + 8 == kStampBytes);

template <class T>
void put(uint8_t* at, T v) {
  std::memcpy(at, &v, sizeof v);
}
template <class T>
T get(const uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// FNV-1a over the whole id except the checksum itself.
uint64_t checksum(const ncclUniqueId& id) {
  return detail::fnv1a(std::string_view(id.internal, kStampOffset + kSumAt));
}

}  // namespace

bool write_stamp(ncclUniqueId* id, const IdStamp& stamp) noexcept {
  auto* s = reinterpret_cast<uint8_t*>(id->internal) + kStampOffset;
  for (size_t i = 0; i < kStampBytes; ++i) {
    if (s[i] != 0) return false;
  }
  put(s + kMagicAt, kMagic);
  put(s + kVersionAt, kVersion);
  put(s + kPortAt, stamp.port);
  put(s + kHostAt, stamp.host);
  std::memcpy(s + kTokenAt, stamp.token.data(), stamp.token.size());
  put(s + kNonceAt, stamp.nonce);
  put(s + kSumAt, checksum(*id));
  return true;
}

std::optional<IdStamp> read_stamp(const ncclUniqueId& id) noexcept {
  const auto* s = reinterpret_cast<const uint8_t*>(id.internal) + kStampOffset;
  if (get<uint32_t>(s + kMagicAt) != kMagic || get<uint16_t>(s + kVersionAt) != kVersion ||
      get<uint64_t>(s + kSumAt) != checksum(id)) {
    return std::nullopt;
  }
  IdStamp stamp;
  stamp.port = get<uint16_t>(s + kPortAt);
  stamp.host = get<uint64_t>(s + kHostAt);
  std::memcpy(stamp.token.data(), s + kTokenAt, stamp.token.size());
  stamp.nonce = get<uint64_t>(s + kNonceAt);
  if (stamp.port == 0) return std::nullopt;
  return stamp;
}

uint64_t host_identity() noexcept {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  uint64_t h = detail::fnv1a(name);
  char boot[64] = {};
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    if (std::fgets(boot, sizeof boot, f) == nullptr) boot[0] = '\0';
    std::fclose(f);
  }
  return detail::fnv1a(boot, detail::fnv1a("/", h));
}

}  // namespace symcomm::nccl_shim
