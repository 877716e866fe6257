#pragma once
// PeerMesh: one Unix-domain stream socket between every pair of local ranks, in the abstract namespace (no
// file is left behind). It carries file descriptors (SCM_RIGHTS: how memfd and cuMem allocations are
// shared; no pidfd_getfd, which fails in containers), small messages, and liveness: a watchdog thread
// polls every socket, so when a peer process dies by any means the kernel closes its end and every survivor
// learns it at once (well under a second), instead of at a deadline. A clean shutdown sends a goodbye
// first, so peers can tell "left" from "died".
//
// All reads happen on the watchdog thread, which files incoming messages into per-peer inboxes; sends are
// done by the caller under a per-peer lock.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "symcomm/communicator.h"
#include "symcomm/store.h"

namespace symcomm::detail {

/// A message received from a peer: payload bytes and file descriptors (owned by the receiver).
struct MeshMessage {
  uint32_t tag = 0;
  std::vector<uint8_t> payload;
  std::vector<int> fds;
};

/// Name of a rank's listening socket in the abstract namespace (without the leading NUL). Anyone on the node can
/// read it from /proc/net/unix and connect (NOTE [mesh hellos] in peer_mesh.cc); tests play such strangers.
std::string mesh_socket_name(const std::string& token, const std::string& prefix, int rank);

class PeerMesh {
 public:
  /// Collective: every rank listens, publishes "<prefix>/mesh/<rank>" in the store, connects to the lower
  /// ranks and waits until each has accepted it, then accepts the higher ranks (NOTE [mesh hellos] in
  /// peer_mesh.cc). `token` authenticates the hello of each connection.
  static std::unique_ptr<PeerMesh> create(Store& store, const std::string& prefix, const RankInfo& ranks,
                                          const std::string& token, Deadline deadline);
  virtual ~PeerMesh() = default;

  /// Sends a message (and duplicates of `fds`, which stay owned by the caller). Throws kPeerDead if the
  /// peer is gone.
  virtual void send(int peer, uint32_t tag, const std::vector<uint8_t>& payload, const std::vector<int>& fds = {}) = 0;
  /// Waits for the next message from `peer` with this tag (messages with other tags stay queued).
  /// Throws kPeerDead if the peer died or left, kTimeout at the deadline, kAborted if `abort_flag` is set.
  virtual MeshMessage receive(int peer, uint32_t tag, Deadline deadline, const std::atomic<bool>* abort_flag) = 0;

  /// Bit r set: rank r died (connection lost without goodbye) / left (said goodbye).
  virtual uint64_t dead_mask() const = 0;
  virtual uint64_t left_mask() const = 0;
  /// Process id of each rank (from the socket's peer credentials; own pid for self).
  virtual const std::vector<int>& pids() const = 0;
  /// Called on the watchdog thread, once per peer, when a peer dies or leaves (`died` false = left).
  /// Must be cheap and must not call back into the mesh.
  virtual void on_peer_lost(std::function<void(int rank, bool died)> callback) = 0;
  /// Sends goodbye to every peer and stops the watchdog; idempotent. The destructor calls it.
  virtual void close() = 0;
};

}  // namespace symcomm::detail
