// symcomm's rendezvous inside an ncclUniqueId (docs/nccl-drop-in.md#how-it-works).
//
// NOTE [id stamp]
// An ncclUniqueId is 128 bytes; NCCL 2.28 fills the first 40 (its bootstrap root's magic and socket address)
// and leaves the rest zero. The drop-in library writes its stamp into the last kStampBytes, only where they are
// zero, and leaves NCCL's part unchanged, so the real NCCL reads the id as it wrote it. The stamp holds the
// address of the symcomm store server of the process that made the id (a loopback port), the server's token,
// a nonce naming this id's communicator in that store, the identity of the host, and a checksum over the
// whole id: an id from another library or another NCCL, or a changed one, reads as unstamped and its
// communicator stays forward-only.
#pragma once

#include <nccl.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace symcomm::nccl_shim {

inline constexpr size_t kStampBytes = 48;
inline constexpr size_t kStampOffset = sizeof(ncclUniqueId) - kStampBytes;

struct IdStamp {
  uint16_t port = 0;                ///< the store server's port on 127.0.0.1
  uint64_t host = 0;                ///< host_identity() of the process that made the id
  std::array<uint8_t, 16> token{};  ///< the store server's token
  uint64_t nonce = 0;               ///< names the communicator's keys in the store
};

// Writes the stamp; false (and the id unchanged) where the stamp's bytes are not all zero.
bool write_stamp(ncclUniqueId* id, const IdStamp& stamp) noexcept;

// The stamp of an id, if it has a valid one.
std::optional<IdStamp> read_stamp(const ncclUniqueId& id) noexcept;

// This machine's identity: a hash of the host name and the kernel's boot id (equal for processes of one host
// and one boot; processes in containers with different host names differ, and their communicators stay
// forward-only).
uint64_t host_identity() noexcept;

}  // namespace symcomm::nccl_shim
