// What both communicators that span nodes do alike (src/multinode/node_common.h).

#include "multinode/node_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "base/check.h"
#include "base/host_process.h"

namespace symcomm::detail {

NodePath call_path(const NodeLayout& layout, const NodeThresholds& thresholds, const Request& r, Hierarchy h) {
  SYMCOMM_CHECK_ARG(h == Hierarchy::kAuto || h == Hierarchy::kHierarchical || h == Hierarchy::kFlat,
                    "invalid hierarchy value {}", static_cast<int>(h));
  return choose_node_path(layout, r.kind, path_bytes(r.kind, r.count, r.dtype, layout.world_size), h, thresholds);
}

Error node_error(const NodeLayout& layout, int rank, int node, const Error& e, const char* what) {
  std::vector<int> ranks;
  std::string names;
  for (int l : e.ranks()) {
    if (l < 0 || l >= static_cast<int>(layout.members[node].size())) continue;
    ranks.push_back(layout.members[node][l]);
    names += fmt::format("{}local rank {} is rank {}", names.empty() ? "" : ", ", l, ranks.back());
  }
  return Error(e.code(),
               fmt::format("rank {}: {} on node {}: {}{}", rank, what, node, e.message(),
                           names.empty() ? "" : fmt::format(" ({})", names)),
               e.file(), e.line(), ranks);
}

void check_same_options(int rank, const std::string& mine, const std::vector<std::string>& all) {
  std::vector<int> differ;
  for (int p = 0; p < static_cast<int>(all.size()); ++p) {
    if (all[p] != mine) differ.push_back(p);
  }
  if (differ.empty()) return;
  throw Error(
      ErrorCode::kMismatch,
      fmt::format("rank {}: multinode options differ: here '{}', rank {} '{}'", rank, mine, differ[0], all[differ[0]]),
      __FILE__, __LINE__, differ);
}

std::string nccl_place(const std::string& nccl_hostid, const std::string& identity, const std::string& bus_id) {
  std::string place = nccl_hostid.empty() ? "host " + identity : "hostid " + nccl_hostid;
  place += " gpu " + bus_id;
  for (char& c : place) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return place;
}

bool nccl_takes_ranks(const std::vector<std::string>& places) {
  std::vector<std::string> sorted = places;
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
}

void run_together(const std::vector<std::function<void()>>& calls) {
  std::vector<std::thread> threads;
  threads.reserve(calls.size());
  for (size_t i = 1; i < calls.size(); ++i) threads.emplace_back(calls[i]);
  if (!calls.empty()) calls[0]();
  for (std::thread& t : threads) t.join();
}

void StickyFault::record(const Error& e) {
  std::lock_guard lock(mu_);
  if (!error_) error_ = e;
}

bool StickyFault::has_error() const {
  std::lock_guard lock(mu_);
  return error_.has_value();
}

void StickyFault::check(int rank) const {
  {
    std::lock_guard lock(mu_);
    if (error_) throw *error_;
  }
  if (aborted()) SYMCOMM_THROW(kAborted, "rank {}: the multi-node communicator was aborted", rank);
}

std::optional<Error> dead_host_peers(int rank, const std::vector<int>& host_peers, const std::vector<int>& pids,
                                     const char* what) {
  std::vector<int> dead;
  for (int p : host_peers) {
    if (process_gone(pids[p])) dead.push_back(p);
  }
  if (dead.empty()) return std::nullopt;
  std::string names;
  for (int p : dead) names += fmt::format("{}rank {} (pid {})", names.empty() ? "" : ", ", p, pids[p]);
  return Error(ErrorCode::kPeerDead,
               fmt::format("rank {}: {}: {} ended without leaving the communicator", rank, what, names), __FILE__,
               __LINE__, dead);
}

void copy_blocks(uint8_t* dst, const uint8_t* src, const std::vector<BlockCopy>& copies) {
  for (const BlockCopy& c : copies) {
    for (size_t k = 0; k < c.rows; ++k) {
      std::memcpy(dst + c.dst_offset + k * c.dst_pitch, src + c.src_offset + k * c.src_pitch, c.width);
    }
  }
}

}  // namespace symcomm::detail
