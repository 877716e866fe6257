#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/backend.h"
#include "core/check.h"
#include "core/logging.h"

namespace symcomm::detail {

void CommContext::set_sticky(const Error& e) {
  {
    std::lock_guard lock(mu_);
    if (sticky_) return;
    sticky_ = e;
  }
  SYMCOMM_LOG_ERROR("{}\nlast operations of {}:\n{}", e.what(), prefix, history.dump());
}

std::optional<Error> CommContext::sticky() const {
  std::lock_guard lock(mu_);
  return sticky_;
}

Error CommContext::peer_lost_error(uint64_t dead, uint64_t left, const char* file, int line) const {
  std::vector<int> ranks_lost;
  std::string what;
  const std::vector<int>* pids = mesh ? &mesh->pids() : nullptr;
  for (int r = 0; r < ranks.world_size; ++r) {
    uint64_t bit = uint64_t{1} << r;
    if (!((dead | left) & bit)) continue;
    ranks_lost.push_back(r);
    int pid = pids && r < static_cast<int>(pids->size()) ? (*pids)[r] : -1;
    what += fmt::format("{}rank {} (pid {}) {}", what.empty() ? "" : ", ", r, pid,
                        (dead & bit) ? "died (its connection closed without goodbye)" : "left the communicator");
  }
  return Error(ErrorCode::kPeerDead, fmt::format("rank {}: {}", ranks.rank, what), file, line, ranks_lost);
}

Bytes CommContext::store_get(const std::string& key, const Deadline& deadline) const {
  store->wait({key}, std::chrono::milliseconds(std::max<long long>(1, deadline.remaining_ms())));
  return store->get(key);
}

std::vector<std::vector<uint8_t>> CommContext::mesh_all_gather(uint32_t tag, const std::vector<uint8_t>& mine) {
  const int n = ranks.world_size, me = ranks.rank;
  std::vector<std::vector<uint8_t>> all(n);
  all[me] = mine;
  for (int p = 0; p < n; ++p) {
    if (p != me) mesh->send(p, tag, mine);
  }
  for (int p = 0; p < n; ++p) {
    if (p != me) all[p] = mesh->receive(p, tag, deadline(), &aborted).payload;
  }
  return all;
}

void CommContext::throw_if_failed() const {
  if (auto e = sticky()) throw *e;
  if (aborted.load(std::memory_order_acquire)) {
    SYMCOMM_THROW(kAborted, "rank {}: the communicator was aborted", ranks.rank);
  }
  // A dead peer breaks the communicator. A peer that left cleanly (destroyed its communicator) only fails
  // the operations that wait for it: a rank may still finish, or run count-0 no-ops, after a peer left.
  if (mesh) {
    if (uint64_t dead = mesh->dead_mask()) throw peer_lost_error(dead, 0, __FILE__, __LINE__);
  }
}

}  // namespace symcomm::detail
