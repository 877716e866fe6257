#pragma once
// How a submission (one call, or a group) that holds point-to-point operations runs: its collectives in issue
// order, then its sends and receives together (NOTE [point-to-point] in src/backends/host/host_p2p.cc). A pure
// function of the submission and the rank, checked as a table by tests/unit/p2p_plan_test.cc.

#include <cstddef>
#include <utility>
#include <vector>

#include "algos/request.h"

namespace symcomm::detail {

struct P2pPlan {
  std::vector<size_t> collectives;  ///< indices of the collectives, in issue order
  std::vector<size_t> transfers;    ///< indices of the sends to and receives from other ranks, in issue order
  /// (send, receive) index pairs of this rank's messages to itself: the k-th send to itself with the k-th receive
  /// from itself.
  std::vector<std::pair<size_t, size_t>> self;
};

/// Sorts the submission `ops` of rank `rank`. Throws Error(kInvalidArgument) where the rank's sends to itself and
/// its receives from itself differ in number (one has no match in the submission), Error(kMismatch) naming the
/// rank where a matched pair differs in count or dtype.
P2pPlan plan_p2p(const std::vector<std::pair<Request, Algorithm>>& ops, int rank);

/// True if `ops` holds a send or a receive.
bool has_p2p(const std::vector<std::pair<Request, Algorithm>>& ops);

}  // namespace symcomm::detail
