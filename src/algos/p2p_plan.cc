#include "algos/p2p_plan.h"

#include <algorithm>

#include "base/check.h"

namespace symcomm::detail {
namespace {

bool is_self(const Request& r, int rank) { return r.is_p2p() && r.peer == rank; }

// Pairs the k-th send to `rank` with its k-th receive from `rank`.
std::vector<std::pair<size_t, size_t>> match_self(const std::vector<std::pair<Request, Algorithm>>& ops, int rank) {
  std::vector<size_t> sends, recvs;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (is_self(ops[i].first, rank)) (ops[i].first.p2p == P2pDir::kSend ? sends : recvs).push_back(i);
  }
  SYMCOMM_CHECK_ARG(
      sends.size() == recvs.size(),
      "rank {}: {} send(s) to itself and {} receive(s) from itself: a message to itself needs its receive "
      "in the same submission (group)",
      rank, sends.size(), recvs.size());
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t k = 0; k < sends.size(); ++k) {
    const Request& s = ops[sends[k]].first;
    const Request& r = ops[recvs[k]].first;
    if (s.count != r.count || s.dtype != r.dtype) {
      throw Error(ErrorCode::kMismatch,
                  fmt::format("rank {}: message {} to itself: the send has count {} of {}, the receive count {} of {}",
                              rank, k + 1, s.count, to_string(s.dtype), r.count, to_string(r.dtype)),
                  __FILE__, __LINE__, {rank});
    }
    pairs.emplace_back(sends[k], recvs[k]);
  }
  return pairs;
}

}  // namespace

P2pPlan plan_p2p(const std::vector<std::pair<Request, Algorithm>>& ops, int rank) {
  P2pPlan plan;
  plan.self = match_self(ops, rank);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Request& r = ops[i].first;
    if (!r.is_p2p()) {
      plan.collectives.push_back(i);
    } else if (r.peer != rank) {
      plan.transfers.push_back(i);
    }
  }
  return plan;
}

bool has_p2p(const std::vector<std::pair<Request, Algorithm>>& ops) {
  return std::any_of(ops.begin(), ops.end(), [](const auto& op) { return op.first.is_p2p(); });
}

}  // namespace symcomm::detail
