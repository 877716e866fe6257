#pragma once
// Coalescing groups on either backend (tests/backend_cases/README.md): all-reduces of six sizes recorded in one
// group, ended synchronously and asynchronously, each output poisoned first and checked exactly.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "harness/rank_harness.h"
#include "harness/test_memory.h"
#include "harness/test_values.h"

namespace symcomm::testing {

inline void grouped_all_reduces_case(RankEnv& env, TestMemory& mem) {
  auto comm = env.make_comm(mem.options());
  const int me = comm->rank(), world = comm->world_size();
  const DataType dt = DataType::kFloat32;
  const ReduceOp op = ReduceOp::kSum;
  const std::vector<size_t> counts = {1, 7, 1031, 4099, 65537, 300007};
  std::vector<std::unique_ptr<TestBuffer>> ins, outs;
  for (size_t k = 0; k < counts.size(); ++k) {
    ins.push_back(std::make_unique<TestBuffer>(mem, counts[k] * sizeof(float)));
    outs.push_back(std::make_unique<TestBuffer>(mem, counts[k] * sizeof(float)));
    std::vector<float> in(counts[k]);
    for (size_t i = 0; i < counts[k]; ++i) in[i] = static_cast<float>(input_value(100 + k, me, i, op, dt, true));
    mem.write_vector(ins[k]->get(), in);
  }
  for (int style = 0; style < 2; ++style) {
    for (size_t k = 0; k < counts.size(); ++k) mem.set(outs[k]->get(), 0xcd, counts[k] * sizeof(float));
    comm->group_start();
    for (size_t k = 0; k < counts.size(); ++k) comm->all_reduce(ins[k]->get(), outs[k]->get(), counts[k], dt, op);
    if (style == 0) {
      comm->group_end();
    } else {
      comm->group_end_async()->wait();
    }
    mem.sync();
    comm->check();
    for (size_t k = 0; k < counts.size(); ++k) {
      const std::vector<float> got = mem.read_vector<float>(outs[k]->get(), counts[k]);
      size_t wrong = 0;
      for (size_t i = 0; i < counts[k]; ++i)
        wrong += got[i] != static_cast<float>(expected_reduction(100 + k, world, i, op, dt));
      EXPECT_EQ(wrong, 0u) << mem.name() << ", " << (style == 0 ? "group_end" : "group_end_async") << ", tensor " << k
                           << " of " << counts[k] << " elements";
    }
  }
}

}  // namespace symcomm::testing
