// Point-to-point requests without ranks: their argument checks (validate_request), how a submission that holds them
// is sorted (plan_p2p: collectives in order, transfers, messages to itself matched in order) and how the op history
// prints them.
#include "algos/p2p_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "base/op_history.h"

namespace symcomm::detail {
namespace {

using Ops = std::vector<std::pair<Request, Algorithm>>;

uint8_t g_buf[64];

Request p2p(P2pDir dir, int peer, size_t count = 4, DataType dtype = DataType::kFloat32, void* buf = g_buf) {
  return Request{.in = dir == P2pDir::kSend ? buf : nullptr,
                 .out = dir == P2pDir::kRecv ? buf : nullptr,
                 .count = count,
                 .dtype = dtype,
                 .options = {},
                 .p2p = dir,
                 .peer = peer};
}

Request coll() { return Request{.kind = Collective::kAllReduce, .in = g_buf, .out = g_buf, .count = 4, .options = {}}; }

Ops ops_of(const std::vector<Request>& rs) {
  Ops ops;
  for (const Request& r : rs) ops.emplace_back(r, r.is_p2p() ? Algorithm::kDirect : Algorithm::kOneShot);
  return ops;
}

ErrorCode code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kInternal;  // stands for "nothing thrown"
}

TEST(P2pRequest, ArgumentChecks) {
  const auto ok = ErrorCode::kInternal, bad = ErrorCode::kInvalidArgument;
  auto with_algo = [](Request r, Algorithm a) {
    r.options.algorithm = a;
    return r;
  };
  struct Row {
    const char* what;
    Request r;
    ErrorCode want;
  };
  const Row rows[] = {
      {"send", p2p(P2pDir::kSend, 3), ok},
      {"receive", p2p(P2pDir::kRecv, 0), ok},
      {"peer is itself (checked by the core)", p2p(P2pDir::kSend, 1), ok},
      {"peer below 0", p2p(P2pDir::kSend, -1), bad},
      {"peer at the world size", p2p(P2pDir::kRecv, 4), bad},
      {"null send buffer", p2p(P2pDir::kSend, 2, 1, DataType::kInt8, nullptr), bad},
      {"null receive buffer", p2p(P2pDir::kRecv, 2, 1, DataType::kInt8, nullptr), bad},
      {"null buffer, count 0", p2p(P2pDir::kRecv, 2, 0, DataType::kInt8, nullptr), ok},
      {"invalid dtype", p2p(P2pDir::kSend, 2, 1, static_cast<DataType>(40)), bad},
      {"byte size overflows", p2p(P2pDir::kSend, 2, SIZE_MAX / 4, DataType::kFloat64), bad},
      {"largest count", p2p(P2pDir::kSend, 2, (uint64_t{1} << 63) / 8 - 1, DataType::kFloat64), ok},
      {"forced direct", with_algo(p2p(P2pDir::kSend, 2), Algorithm::kDirect), ok},
      {"forced one-shot", with_algo(p2p(P2pDir::kSend, 2), Algorithm::kOneShot), bad},
      {"invalid algorithm", with_algo(p2p(P2pDir::kSend, 2), static_cast<Algorithm>(50)), bad},
      {"invalid direction", p2p(static_cast<P2pDir>(9), 2), bad},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    EXPECT_EQ(code_of([&] { validate_request(row.r, 4); }), row.want);
  }
  EXPECT_EQ(p2p(P2pDir::kSend, 1, 5).in_count(4), 5u);
  EXPECT_EQ(p2p(P2pDir::kSend, 1, 5).out_count(4), 0u);
  EXPECT_EQ(p2p(P2pDir::kRecv, 1, 5).out_count(4), 5u);
  EXPECT_FALSE(p2p(P2pDir::kRecv, 1).has_reduction());
}

TEST(P2pPlan, CollectivesInOrderThenTransfersAndSelfPairsMatchedInOrder) {
  const int me = 1;
  const Ops ops = ops_of({
      p2p(P2pDir::kSend, me, 3),  // 0: first to itself
      coll(),                     // 1
      p2p(P2pDir::kRecv, 0),      // 2
      p2p(P2pDir::kSend, me, 5),  // 3: second to itself
      p2p(P2pDir::kRecv, me, 3),  // 4: first from itself
      coll(),                     // 5
      p2p(P2pDir::kSend, 2),      // 6
      p2p(P2pDir::kRecv, me, 5),  // 7: second from itself
  });
  const P2pPlan plan = plan_p2p(ops, me);
  EXPECT_EQ(plan.collectives, (std::vector<size_t>{1, 5}));
  EXPECT_EQ(plan.transfers, (std::vector<size_t>{2, 6}));
  EXPECT_EQ(plan.self, (std::vector<std::pair<size_t, size_t>>{{0, 4}, {3, 7}}));
  EXPECT_TRUE(has_p2p(ops));
  EXPECT_FALSE(has_p2p(ops_of({coll(), coll()})));
  const P2pPlan none = plan_p2p(ops_of({coll()}), 0);
  EXPECT_EQ(none.collectives, std::vector<size_t>{0});
  EXPECT_TRUE(none.transfers.empty() && none.self.empty());
}

TEST(P2pPlan, UnmatchedOrMismatchedMessagesToItselfAreRefused) {
  struct Row {
    const char* what;
    std::vector<Request> ops;
    ErrorCode want;
  };
  const Row rows[] = {
      {"a send without its receive", {p2p(P2pDir::kSend, 0), p2p(P2pDir::kRecv, 1)}, ErrorCode::kInvalidArgument},
      {"a receive without its send", {p2p(P2pDir::kRecv, 0)}, ErrorCode::kInvalidArgument},
      {"two sends, one receive",
       {p2p(P2pDir::kSend, 0), p2p(P2pDir::kSend, 0), p2p(P2pDir::kRecv, 0)},
       ErrorCode::kInvalidArgument},
      {"counts differ", {p2p(P2pDir::kSend, 0, 4), p2p(P2pDir::kRecv, 0, 5)}, ErrorCode::kMismatch},
      {"dtypes differ",
       {p2p(P2pDir::kSend, 0, 4, DataType::kInt32), p2p(P2pDir::kRecv, 0, 4, DataType::kFloat32)},
       ErrorCode::kMismatch},
      {"second pair differs",
       {p2p(P2pDir::kSend, 0, 4), p2p(P2pDir::kSend, 0, 6), p2p(P2pDir::kRecv, 0, 6), p2p(P2pDir::kRecv, 0, 4)},
       ErrorCode::kMismatch},
      {"matched in order",
       {p2p(P2pDir::kSend, 0, 4), p2p(P2pDir::kRecv, 0, 4), p2p(P2pDir::kSend, 1)},
       ErrorCode::kInternal},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    EXPECT_EQ(code_of([&] { plan_p2p(ops_of(row.ops), 0); }), row.want);
  }
  try {
    plan_p2p(ops_of({p2p(P2pDir::kSend, 2, 4), p2p(P2pDir::kRecv, 2, 5)}), 2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.ranks(), std::vector<int>{2}) << e.what();
  }
}

TEST(P2pRecord, PrintsDirectionAndPeer) {
  EXPECT_EQ(
      format_op(OpRecord{
          .seq = 13, .dtype = DataType::kInt8, .count = 7, .state = OpState::kDone, .p2p = P2pDir::kSend, .peer = 2}),
      "op 13 send peer=2 dtype=int8 count=7 done");
  EXPECT_EQ(format_op(OpRecord{.seq = 1, .count = 0, .state = OpState::kFailed, .p2p = P2pDir::kRecv, .peer = 0}),
            "op 1 recv peer=0 dtype=float32 count=0 failed");
}

}  // namespace
}  // namespace symcomm::detail
