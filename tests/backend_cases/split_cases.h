#pragma once
// Communicator::split on either backend (tests/backend_cases/README.md): pairs of ranks (color = rank / 2) get
// communicators of their own, with their own symmetric heap and signals; their collectives are exact beside the
// parent's and after the parent is destroyed.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "harness/rank_harness.h"
#include "harness/test_memory.h"
#include "harness/test_values.h"

namespace symcomm::testing {

/// A float32 sum all-reduce of `count` elements on `comm` (inputs input_value(seed)), out of ordinary memory into
/// ordinary memory or `comm`'s heap, poisoned first; checked element by element against the reference.
inline void expect_exact_sum(TestMemory& mem, Communicator& comm, size_t count, uint64_t seed, bool heap,
                             const char* what) {
  const DataType dt = DataType::kFloat32;
  std::vector<float> in(count);
  for (size_t i = 0; i < count; ++i)
    in[i] = static_cast<float>(input_value(seed, comm.rank(), i, ReduceOp::kSum, dt, true));
  TestBuffer src(mem, count * sizeof(float));
  auto out = heap ? std::make_unique<TestBuffer>(mem, comm, count * sizeof(float))
                  : std::make_unique<TestBuffer>(mem, count * sizeof(float));
  mem.write_vector(src.get(), in);
  mem.set(out->get(), 0xcd, count * sizeof(float));
  comm.all_reduce(src.get(), out->get(), count, dt, ReduceOp::kSum);
  mem.sync();
  comm.check();
  const std::vector<float> got = mem.read_vector<float>(out->get(), count);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i)
    wrong += got[i] != static_cast<float>(expected_reduction(seed, comm.world_size(), i, ReduceOp::kSum, dt));
  EXPECT_EQ(wrong, 0u) << mem.name() << ", " << what << ": " << count << " elements on " << comm.world_size()
                       << " ranks";
}

inline void split_pairs_case(RankEnv& env, TestMemory& mem) {
  auto parent = env.make_comm(mem.options());
  const int me = parent->rank(), n = parent->world_size();
  auto child = parent->split(me / 2, me);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->backend(), parent->backend());
  EXPECT_EQ(child->device(), parent->device());
  EXPECT_EQ(child->world_size(), std::min(2, n - me / 2 * 2));
  EXPECT_EQ(child->rank(), me % 2);
  {
    TestBuffer in(mem, sizeof(int32_t)), out(mem, 2 * sizeof(int32_t));
    const int32_t mine = me;
    mem.write(in.get(), &mine, sizeof mine);
    child->all_gather(in.get(), out.get(), 1, DataType::kInt32);
    mem.sync();
    const std::vector<int32_t> got = mem.read_vector<int32_t>(out.get(), child->world_size());
    for (int r = 0; r < child->world_size(); ++r) EXPECT_EQ(got[r], me / 2 * 2 + r) << "the child's rank order";
  }
  // In turn: child (small, and large into its heap), parent, child.
  expect_exact_sum(mem, *child, 1031, 11, false, "child, small");
  expect_exact_sum(mem, *child, 3000000, 12, true, "child, large into its heap");
  expect_exact_sum(mem, *parent, 300007, 13, false, "parent after the child");
  expect_exact_sum(mem, *child, 300007, 14, false, "child after the parent");
  // Parent gone (every rank's, so that none waits for it), child still exact.
  store_barrier(*env.store, "split_pairs/before-reset", n);
  parent.reset();
  expect_exact_sum(mem, *child, 3000000, 15, false, "child after the parent was destroyed");
}

}  // namespace symcomm::testing
