// What both communicators that span nodes share (multinode/node_common.h): a call's path and its argument errors,
// the options check, the naming of a node communicator's errors as the job's ranks, the dead-rank watch (against a
// child process that has ended) and the host block copies.
#include "multinode/node_common.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "harness/expect_error.h"

namespace symcomm::detail {
namespace {

using symcomm::testing::expect_error;

TEST(NodeCommon, CallPathFollowsTheThresholdsAndRefusesBadHierarchies) {
  const NodeLayout l = make_node_layout(fake_node_keys(4, 2));
  NodeThresholds t;
  t.all_reduce = 1024;
  const Request small = make_request(Collective::kAllReduce, nullptr, nullptr, 255, DataType::kFloat32);
  const Request large = make_request(Collective::kAllReduce, nullptr, nullptr, 256, DataType::kFloat32);
  EXPECT_EQ(call_path(l, t, small, Hierarchy::kAuto), NodePath::kFlat);
  EXPECT_EQ(call_path(l, t, large, Hierarchy::kAuto), NodePath::kHierarchical);
  EXPECT_EQ(call_path(l, t, large, Hierarchy::kFlat), NodePath::kFlat);
  expect_error(ErrorCode::kInvalidArgument, [&] { call_path(l, t, large, static_cast<Hierarchy>(7)); });
  const Request a2a = make_request(Collective::kAllToAll, nullptr, nullptr, 256, DataType::kFloat32);
  expect_error(ErrorCode::kInvalidArgument, [&] { call_path(l, t, a2a, Hierarchy::kHierarchical); });
}

TEST(NodeCommon, NcclTakesRanksOnlyAtDistinctPlaces) {
  // Two ranks on one GPU of one host: refused; an NCCL_HOSTID of its own for each makes them distinct hosts.
  const std::string bus = "0000:19:00.0";
  EXPECT_FALSE(nccl_takes_ranks({nccl_place("", "boot-a", bus), nccl_place("", "boot-a", bus)}));
  EXPECT_TRUE(nccl_takes_ranks({nccl_place("r0", "boot-a", bus), nccl_place("r1", "boot-a", bus)}));
  EXPECT_FALSE(nccl_takes_ranks(
      {nccl_place("r0", "boot-a", bus), nccl_place("r1", "boot-a", bus), nccl_place("r0", "boot-b", bus)}));
  EXPECT_TRUE(nccl_takes_ranks({nccl_place("", "boot-a", bus), nccl_place("", "boot-b", bus)}));
  EXPECT_TRUE(nccl_takes_ranks({nccl_place("", "boot-a", bus), nccl_place("", "boot-a", "0000:2a:00.0")}));
  // A host id equal to another host's identity names a different place; a line break cannot end the line early.
  EXPECT_NE(nccl_place("boot-a", "x", bus), nccl_place("", "boot-a", bus));
  EXPECT_EQ(nccl_place("a\nb", "x", bus).find('\n'), std::string::npos);
  EXPECT_TRUE(nccl_takes_ranks({}));
}

TEST(NodeCommon, StickyFaultKeepsTheFirstErrorAndThenTheAbort) {
  StickyFault f;
  EXPECT_FALSE(f.failed());
  EXPECT_NO_THROW(f.check(3));
  f.set_aborted();
  EXPECT_TRUE(f.failed());
  EXPECT_FALSE(f.has_error());
  expect_error(ErrorCode::kAborted, [&] { f.check(3); });
  f.record(Error(ErrorCode::kPeerDead, "first", "", 0, {1}));
  f.record(Error(ErrorCode::kTimeout, "second"));
  const Error e = expect_error(ErrorCode::kPeerDead, [&] { f.check(3); });
  EXPECT_EQ(e.ranks(), std::vector<int>{1});
}

TEST(NodeCommon, DifferingOptionsNameTheRanks) {
  check_same_options(1, "a", {"a", "a", "a"});
  const Error e = expect_error(ErrorCode::kMismatch, [] { check_same_options(0, "a", {"a", "b", "a", "c"}); });
  EXPECT_EQ(e.ranks(), (std::vector<int>{1, 3}));
  EXPECT_NE(e.message().find("rank 1 'b'"), std::string::npos) << e.message();
}

TEST(NodeCommon, NodeErrorsNameTheJobsRanks) {
  // Node 1 of 2 fake nodes of 2, round-robin: ranks 1 and 3, local indices 0 and 1.
  const NodeLayout l = make_node_layout(fake_node_keys(4, 2, true));
  const Error local(ErrorCode::kPeerDead, "local rank 1 died", "f.cc", 7, {1, 5});
  const Error e = node_error(l, 1, 1, local, "the node all-gather");
  EXPECT_EQ(e.code(), ErrorCode::kPeerDead);
  EXPECT_EQ(e.ranks(), std::vector<int>{3});  // local index 5 is no rank of the node: left out
  EXPECT_NE(e.message().find("the node all-gather on node 1"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("local rank 1 is rank 3"), std::string::npos) << e.message();
  EXPECT_EQ(e.line(), 7);
}

TEST(NodeCommon, DeadHostPeersAreTheEndedProcesses) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  // Ended, not reaped: a zombie, as a killed rank is until its launcher reaps it; its pid cannot be reused meanwhile.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  const std::vector<int> pids{static_cast<int>(::getpid()), static_cast<int>(child), static_cast<int>(::getpid())};
  EXPECT_FALSE(dead_host_peers(0, {2}, pids, "a call").has_value());
  const auto dead = dead_host_peers(0, {1, 2}, pids, "a call");
  ASSERT_TRUE(dead.has_value());
  EXPECT_EQ(dead->code(), ErrorCode::kPeerDead);
  EXPECT_EQ(dead->ranks(), std::vector<int>{1});
  EXPECT_NE(dead->message().find("rank 1 (pid " + std::to_string(child) + ")"), std::string::npos) << dead->message();
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
}

// Each call waits until every call has started: one after the other, the first would wait for ever (here: 20 s).
TEST(NodeCommon, RunTogetherStartsEveryCallBeforeAnyReturns) {
  for (const int n : {0, 1, 2, 3}) {
    std::mutex mu;
    std::condition_variable cv;
    int started = 0;
    std::vector<int> saw_all(n, -1);
    std::vector<std::function<void()>> calls;
    for (int i = 0; i < n; ++i) {
      calls.emplace_back([&, i] {
        std::unique_lock lock(mu);
        ++started;
        cv.notify_all();
        saw_all[i] = cv.wait_for(lock, std::chrono::seconds(20), [&] { return started == n; }) ? 1 : 0;
      });
    }
    run_together(calls);
    EXPECT_EQ(started, n);
    EXPECT_EQ(saw_all, std::vector<int>(n, 1)) << n << " calls";
  }
}

TEST(NodeCommon, CopyBlocksRunsStridedCopies) {
  const NodeLayout l = make_node_layout(fake_node_keys(6, 3));
  std::vector<uint8_t> src(6 * 5), dst(6 * 5, 0), back(6 * 5, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i + 1);
  copy_blocks(dst.data(), src.data(), block_order_copies(l, 5, true));
  for (int b = 0; b < 6; ++b) {
    for (int k = 0; k < 5; ++k) ASSERT_EQ(dst[local_major_rank(l, b) * 5 + k], src[b * 5 + k]) << b;
  }
  copy_blocks(back.data(), dst.data(), block_order_copies(l, 5, false));
  EXPECT_EQ(back, src);
}

}  // namespace
}  // namespace symcomm::detail
