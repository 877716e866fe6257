// Communicator::split on the host backend: groups by color, ranks by (key, parent rank), null for
// kSplitNoColor; the new communicators compute exactly, alongside the parent and after it is gone, including
// when the parent owned the store server (create(Rendezvous)); bad use is rejected without side effects.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "backend_cases/split_cases.h"
#include "harness/rank_harness.h"
#include "harness/test_memory.h"

namespace symcomm::testing {
namespace {

/// All-gather of every rank's `value` on `comm`.
std::vector<int32_t> gather_ints(Communicator& comm, int32_t value) {
  std::vector<int32_t> out(comm.world_size(), -1);
  comm.all_gather(&value, out.data(), 1, DataType::kInt32);
  return out;
}

/// Sum over `comm` of 1031 int32 elements, element i of rank r being base(r) + i: checked exactly.
void expect_sum(Communicator& comm, const std::vector<int32_t>& bases, const char* what) {
  constexpr size_t kCount = 1031;
  std::vector<int32_t> in(kCount), out(kCount, -1);
  for (size_t i = 0; i < kCount; ++i) in[i] = bases[comm.rank()] + static_cast<int32_t>(i);
  comm.all_reduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
  const int32_t total = std::accumulate(bases.begin(), bases.end(), 0);
  size_t wrong = 0;
  for (size_t i = 0; i < kCount; ++i) wrong += out[i] != total + comm.world_size() * static_cast<int32_t>(i);
  EXPECT_EQ(wrong, 0u) << what;
}

// The body the GPU program runs too (tests/backend_cases/split_cases.h), at an odd and an even world size.
TEST(Split, PairsReduceExactlyBesideAndAfterTheParent) {
  for (int world : {3, 4}) {
    SCOPED_TRACE(world);
    expect_success(world, [](RankEnv& env) {
      HostMemory mem;
      split_pairs_case(env, mem);
    });
  }
}

// 5 ranks: ranks 0-3 split by parity with keys that reverse their order, rank 4 opts out. Then: the children
// and the parent used in turn, a child split again, the parent destroyed first and the child still exact.
TEST(Split, ColorsFormCommunicatorsRankedByKey) {
  expect_success(5, [](RankEnv& env) {
    auto parent = env.make_comm();
    const int me = parent->rank();
    const int color = me < 4 ? me % 2 : kSplitNoColor;
    auto child = parent->split(color, /*key=*/-me);
    if (me == 4) {
      EXPECT_EQ(child, nullptr);
      expect_sum(*parent, {10, 20, 30, 40, 50}, "the parent after the split");
      expect_sum(*parent, {1, 2, 3, 4, 5}, "the parent after the child");
      store_barrier(*env.store, "split/parent-done", 5);
      return;
    }
    ASSERT_NE(child, nullptr);
    // Keys -me: the higher parent rank comes first. Color 0 = {2, 0}, color 1 = {3, 1}.
    const std::vector<int32_t> want = me % 2 == 0 ? std::vector<int32_t>{2, 0} : std::vector<int32_t>{3, 1};
    EXPECT_EQ(child->world_size(), 2);
    EXPECT_EQ(child->rank(), me >= 2 ? 0 : 1);
    EXPECT_EQ(gather_ints(*child, me), want) << "the child's ranks, in order, as parent ranks";
    EXPECT_EQ(child->backend(), parent->backend());

    // In turn: parent, child, parent (the parent's collectives include rank 4).
    expect_sum(*parent, {10, 20, 30, 40, 50}, "the parent after the split");
    expect_sum(*child, {want[0] * 100, want[1] * 100}, "the child");
    expect_sum(*parent, {1, 2, 3, 4, 5}, "the parent after the child");
    store_barrier(*env.store, "split/parent-done", 5);

    // A child splits again: one color, key = the child rank, so the grandchild is the child's group again.
    auto grandchild = child->split(0, child->rank());
    ASSERT_NE(grandchild, nullptr);
    EXPECT_EQ(grandchild->world_size(), 2);
    EXPECT_EQ(grandchild->rank(), child->rank());

    // The parent goes first; the child and grandchild stay exact.
    parent.reset();
    expect_sum(*child, {7, 9}, "the child after the parent was destroyed");
    expect_sum(*grandchild, {-3, 4}, "the grandchild");
  });
}

// A rank that opts out of a split creates no child, but the next communicator created without a name must
// still get the same default name on every rank (otherwise it would be c<k> on the opted-out rank and c<k+1>
// on the others, which would then wait for each other's keys until the deadline).
TEST(Split, DefaultNamesStayInStepAfterARankOptsOut) {
  HarnessOptions opts;
  opts.config.timeout = std::chrono::seconds(5);
  expect_success(
      3,
      [](RankEnv& env) {
        auto parent = env.make_comm();
        const int me = parent->rank();
        auto child = parent->split(me < 2 ? 0 : kSplitNoColor, me);
        EXPECT_EQ(child == nullptr, me == 2);
        auto next = env.make_comm();  // default name
        expect_sum(*next, {1, 2, 3}, "a communicator created after the split");
      },
      opts);
}

// The parent made by create(Rendezvous) owns the store server (rank 0). The child keeps it alive: with debug
// checks on, every child collective goes through the store, after every parent is destroyed.
TEST(Split, ChildKeepsTheParentsStoreServerAlive) {
  expect_success(3, [](RankEnv& env) {
    Rendezvous rv;
    rv.ranks = env.info;
    rv.token = "split-test-token";
    if (env.info.rank == 0) {
      rv.store_port = 0;
      rv.on_store_started = [&](uint16_t port) { env.store->set("split/port", std::to_string(port)); };
    } else {
      const Bytes port = env.store->get("split/port");
      rv.store_port = static_cast<uint16_t>(std::stoi(std::string(port.begin(), port.end())));
    }
    CommOptions opts;
    opts.config = env.config;
    auto parent = Communicator::create(rv, opts);
    Config debug = env.config;
    debug.debug_checks = true;
    auto child = parent->split(0, env.info.rank, SplitOptions{.config = debug, .name = {}});
    ASSERT_NE(child, nullptr);
    EXPECT_TRUE(child->config().debug_checks);
    EXPECT_FALSE(parent->config().debug_checks);
    parent.reset();
    store_barrier(*env.store, "split/parents-gone", 3);
    expect_sum(*child, {5, 6, 7}, "the child, its parent and the parent's store server owner gone");
    expect_sum(*child, {-1, 0, 1}, "the child again");
  });
}

// A color below kSplitNoColor and a split inside a group: kInvalidArgument, no message sent, the parent still
// in step (its next collective is exact). Then valid splits: one group; two groups under one given name.
TEST(Split, BadUseIsRejectedWithoutSideEffects) {
  expect_success(3, [](RankEnv& env) {
    auto comm = env.make_comm();
    try {
      (void)comm->split(-2, 0);
      ADD_FAILURE() << "color -2 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
    comm->group_start();
    try {
      (void)comm->split(0, 0);
      ADD_FAILURE() << "split inside a group accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
    comm->group_cancel();
    expect_sum(*comm, {1, 2, 3}, "the communicator after the rejected splits");
    auto all = comm->split(3, 0);  // every rank, same key: ordered by parent rank
    ASSERT_NE(all, nullptr);
    EXPECT_EQ(all->rank(), comm->rank());
    expect_sum(*all, {4, 5, 6}, "a split into one group");
    // One name for every group: each group still gets keys of its own (the color follows the name).
    auto named = comm->split(comm->rank() == 2 ? 1 : 0, 0, SplitOptions{.config = {}, .name = "tp"});
    ASSERT_NE(named, nullptr);
    if (comm->rank() == 2) {
      EXPECT_EQ(named->world_size(), 1);
      expect_sum(*named, {9}, "the one-rank group named tp");
    } else {
      EXPECT_EQ(named->world_size(), 2);
      expect_sum(*named, {7, 8}, "the two-rank group named tp");
    }
  });
}

}  // namespace
}  // namespace symcomm::testing
