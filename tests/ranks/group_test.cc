// Coalescing on the host backend: random groups of collectives (mixed kinds, dtypes, ops, sizes; small
// all-reduces get packed) must give, element for element, what the same collectives give one by one.

#include <gtest/gtest.h>

#include <cstring>

#include "backend_cases/group_cases.h"
#include "harness/rank_harness.h"
#include "harness/test_memory.h"
#include "harness/test_values.h"

namespace symcomm::testing {
namespace {

struct Op {
  Collective kind;
  DataType dtype;
  ReduceOp op;
  size_t count;
  std::vector<uint8_t> in, out;
};

std::vector<Op> random_ops(uint64_t seed, int n, int me, int how_many) {
  std::vector<Op> ops;
  for (int k = 0; k < how_many; ++k) {
    uint64_t h = mix64(seed * 977 + k);
    Op o{};
    o.kind = (h % 4 == 0) ? Collective::kAllGather : (h % 4 == 1) ? Collective::kReduceScatter : Collective::kAllReduce;
    o.dtype = static_cast<DataType>((h >> 8) % kNumDataTypes);
    o.op = static_cast<ReduceOp>((h >> 16) % kNumReduceOps);
    o.count = (h >> 24) % 3 == 0 ? (h >> 32) % 70000 : (h >> 32) % 300;  // mostly small: packed together
    size_t es = dtype_size(o.dtype);
    size_t in_elems = o.kind == Collective::kReduceScatter ? o.count * n : o.count;
    size_t out_elems = o.kind == Collective::kAllGather ? o.count * n : o.count;
    o.in.resize(in_elems * es);
    o.out.assign(out_elems * es, 0xa5);
    bool reduction = o.kind != Collective::kAllGather;
    for (size_t i = 0; i < in_elems; ++i) {
      detail::store_element(o.dtype, o.in.data(), i, input_value(seed * 1000 + k, me, i, o.op, o.dtype, reduction));
    }
    ops.push_back(std::move(o));
  }
  return ops;
}

void issue(Communicator& c, Op& o) {
  switch (o.kind) {
    case Collective::kAllReduce: c.all_reduce(o.in.data(), o.out.data(), o.count, o.dtype, o.op); break;
    case Collective::kAllGather: c.all_gather(o.in.data(), o.out.data(), o.count, o.dtype); break;
    case Collective::kReduceScatter: c.reduce_scatter(o.in.data(), o.out.data(), o.count, o.dtype, o.op); break;
    default: FAIL();
  }
}

enum class Style { kExplicit, kAsync, kRaii };

void run_groups(RankEnv& env, Style style) {
  auto comm = env.make_comm();
  const int n = env.info.world_size, me = env.info.rank;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    auto grouped = random_ops(seed, n, me, 1 + static_cast<int>(seed % 40));
    auto single = random_ops(seed, n, me, 1 + static_cast<int>(seed % 40));
    for (Op& o : single) issue(*comm, o);
    if (style == Style::kRaii) {
      CollectiveGroup g(*comm);
      for (Op& o : grouped) issue(*comm, o);
    } else {
      comm->group_start();
      for (Op& o : grouped) issue(*comm, o);
      if (style == Style::kAsync) {
        auto work = comm->group_end_async();
        work->wait();
        EXPECT_TRUE(work->is_completed());
        EXPECT_EQ(work->exception(), nullptr);
      } else {
        comm->group_end();
      }
    }
    for (size_t k = 0; k < grouped.size(); ++k) {
      ASSERT_EQ(grouped[k].out, single[k].out) << "seed " << seed << " op " << k << " " << to_string(grouped[k].kind)
                                               << " " << to_string(grouped[k].dtype) << " count " << grouped[k].count;
    }
  }
}

class HostGroups : public ::testing::TestWithParam<int> {};

TEST_P(HostGroups, GroupedEqualsOneByOne) {
  expect_success(GetParam(), [](RankEnv& env) { run_groups(env, Style::kExplicit); });
}

TEST_P(HostGroups, AsyncGroupWorkWaitsForEverything) {
  expect_success(GetParam(), [](RankEnv& env) { run_groups(env, Style::kAsync); });
}

TEST_P(HostGroups, RaiiGroupRunsAtScopeEnd) {
  expect_success(GetParam(), [](RankEnv& env) { run_groups(env, Style::kRaii); });
}

// The body the GPU program runs too (tests/backend_cases/group_cases.h).
TEST_P(HostGroups, GroupedAllReducesMatchTheReference) {
  expect_success(GetParam(), [](RankEnv& env) {
    HostMemory mem;
    grouped_all_reduces_case(env, mem);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, HostGroups, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(HostGroupRules, AsyncCallsInsideAGroupCompleteWithIt) {
  expect_success(2, [](RankEnv& env) {
    auto comm = env.make_comm();
    std::vector<int32_t> a(100, env.info.rank + 1), b(100, 0), c(50, 2), d(50, 0);
    comm->group_start();
    auto w1 = comm->all_reduce_async(a.data(), b.data(), a.size(), DataType::kInt32, ReduceOp::kSum);
    auto w2 = comm->all_reduce_async(c.data(), d.data(), c.size(), DataType::kInt32, ReduceOp::kMax);
    // Waiting before the group ends would wait forever: it is an error instead.
    EXPECT_THROW(w1->wait(), Error);
    EXPECT_EQ(b[0], 0) << "nothing runs before group_end";
    comm->group_end();
    w1->wait();
    w2->wait();
    EXPECT_EQ(b[0], 3);
    EXPECT_EQ(b[99], 3);
    EXPECT_EQ(d[49], 2);
  });
}

TEST(HostGroupRules, BadArgumentsThrowAtIssueAndCancelRunsNothing) {
  expect_success(2, [](RankEnv& env) {
    auto comm = env.make_comm();
    std::vector<float> x(8, 1.0f), y(8, 0.0f);
    comm->group_start();
    EXPECT_THROW(comm->all_reduce(nullptr, y.data(), 8, DataType::kFloat32, ReduceOp::kSum), Error);
    comm->all_reduce(x.data(), y.data(), 8, DataType::kFloat32, ReduceOp::kSum);
    comm->group_cancel();
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_THROW(comm->group_end(), Error);  // no group open
    try {
      CollectiveGroup g(*comm);
      comm->all_reduce(x.data(), y.data(), 8, DataType::kFloat32, ReduceOp::kSum);
      throw std::runtime_error("leave the scope by an exception");
    } catch (const std::runtime_error&) {
    }
    EXPECT_EQ(y[0], 0.0f) << "a group left by an exception is cancelled, not run";
    comm->all_reduce(x.data(), y.data(), 8, DataType::kFloat32, ReduceOp::kSum);  // still in step
    EXPECT_EQ(y[0], 2.0f);
  });
}

// NOTE [nested groups]: each level ends or cancels on its own. Were an inner cancel to drop the whole group,
// an exception leaving two nested guards would terminate the process (the outer guard's cancel would throw
// while unwinding), and an inner level cancelled and caught would drop the outer level's collectives too.
TEST(HostGroupRules, NestedLevelsCancelOnlyThemselves) {
  expect_success(2, [](RankEnv& env) {
    auto comm = env.make_comm();
    const int me = env.info.rank;
    const std::vector<int32_t> x(8, me + 1);
    std::vector<int32_t> a(8, 0), b(8, 0), c(8, 0);
    auto sum_into = [&](std::vector<int32_t>& out) {
      comm->all_reduce(x.data(), out.data(), x.size(), DataType::kInt32, ReduceOp::kSum);
    };
    try {
      CollectiveGroup outer(*comm);
      sum_into(a);
      CollectiveGroup inner(*comm);
      sum_into(b);
      throw std::runtime_error("leave both levels");
    } catch (const std::runtime_error&) {
    }
    EXPECT_EQ(a[0], 0);
    EXPECT_EQ(b[0], 0);
    EXPECT_THROW(comm->group_end(), Error) << "both levels are closed";

    std::shared_ptr<Work> inner_work, outer_work;
    {
      CollectiveGroup outer(*comm);
      sum_into(a);
      try {
        CollectiveGroup inner(*comm);
        inner_work = comm->all_reduce_async(x.data(), b.data(), x.size(), DataType::kInt32, ReduceOp::kSum);
        throw std::runtime_error("leave the inner level");
      } catch (const std::runtime_error&) {
      }
      outer_work = comm->all_reduce_async(x.data(), c.data(), x.size(), DataType::kInt32, ReduceOp::kMax);
    }
    EXPECT_EQ(a, std::vector<int32_t>(8, 3)) << "recorded by the outer level before the inner one";
    EXPECT_EQ(b, std::vector<int32_t>(8, 0)) << "dropped with the inner level";
    EXPECT_EQ(c, std::vector<int32_t>(8, 2)) << "recorded by the outer level after the inner one";
    try {
      inner_work->wait();
      ADD_FAILURE() << "the cancelled level's Work completed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
    outer_work->wait();

    // Explicit levels: a level that ended inside a cancelled one is dropped with it; its Work fails.
    std::vector<int32_t> d(8, 0), e(8, 0);
    comm->group_start();
    comm->group_start();
    comm->group_start();
    sum_into(d);
    auto third = comm->group_end_async();
    comm->group_cancel();
    sum_into(e);
    auto first = comm->group_end_async();
    first->wait();
    EXPECT_THROW(third->wait(), Error);
    EXPECT_EQ(d, std::vector<int32_t>(8, 0));
    EXPECT_EQ(e, std::vector<int32_t>(8, 3));
    // Two levels ended normally: the inner level's Work completes with the group.
    std::fill(d.begin(), d.end(), 0);
    comm->group_start();
    comm->group_start();
    sum_into(d);
    auto inner_level = comm->group_end_async();
    comm->group_end();
    inner_level->wait();
    EXPECT_EQ(d, std::vector<int32_t>(8, 3));
    comm->barrier();  // every rank is still in step
  });
}

}  // namespace
}  // namespace symcomm::testing
