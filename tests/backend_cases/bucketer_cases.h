#pragma once
// ReduceScatterBucketer's rules on either backend (tests/backend_cases/README.md): bad capacities and arguments
// are kInvalidArgument and record nothing; nothing runs before a flush; teardown with pending inputs is refused;
// a result view fed back as an input is refused; a throwing callback does not stop the others; teardown twice is
// fine and the bucketer allocates again afterwards; the communicator stays in step throughout. Results are read
// after the flush (CUDA: a view is valid in stream order).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "harness/expect_error.h"
#include "harness/rank_harness.h"
#include "harness/test_memory.h"
#include "symcomm/bucketer.h"

namespace symcomm::testing {

inline void bucketer_rules_case(RankEnv& env, TestMemory& mem) {
  auto comm = env.make_comm(mem.options());
  const int me = comm->rank(), world = comm->world_size();
  const auto invalid = [](const char* what, auto&& fn) {
    SCOPED_TRACE(what);
    expect_error(ErrorCode::kInvalidArgument, fn);
  };
  invalid("zero capacity", [&] { ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 0}); });
  invalid("negative capacity", [&] { ReduceScatterBucketer b(*comm, {.bucket_cap_mb = -1}); });
  invalid("NaN capacity", [&] { ReduceScatterBucketer b(*comm, {.bucket_cap_mb = std::nan("")}); });
  // 4 GiB per rank is one past the 32-bit offsets of the copy list.
  const double past = 4096.0 * world;
  invalid("capacity of 4 GiB per rank", [&] { ReduceScatterBucketer b(*comm, {.bucket_cap_mb = past}); });
  { ReduceScatterBucketer ok(*comm, {.bucket_cap_mb = past - 1}); }  // allocates nothing until a flush

  ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 1});
  TestBuffer in(mem, world * 8 * sizeof(float));
  mem.write_vector(in.get(), std::vector<float>(world * 8, static_cast<float>(me + 1)));
  const void* view = nullptr;
  size_t view_count = SIZE_MAX;
  const auto keep = [&](const void* r, size_t c) {
    view = r;
    view_count = c;
  };
  const auto result = [&] {
    mem.sync();
    return view ? mem.read_vector<float>(view, view_count) : std::vector<float>{};
  };
  const float sum = static_cast<float>(world * (world + 1) / 2);

  invalid("null callback", [&] { b.reduce_scatter_async(in.get(), 8, DataType::kFloat32, ReduceOp::kSum, nullptr); });
  invalid("null input", [&] { b.reduce_scatter_async(nullptr, 8, DataType::kFloat32, ReduceOp::kSum, keep); });
  invalid("dtype", [&] { b.reduce_scatter_async(in.get(), 8, static_cast<DataType>(99), ReduceOp::kSum, keep); });
  invalid("op", [&] { b.reduce_scatter_async(in.get(), 8, DataType::kFloat32, static_cast<ReduceOp>(42), keep); });
  invalid("byte-size overflow",
          [&] { b.reduce_scatter_async(in.get(), SIZE_MAX / 4, DataType::kFloat32, ReduceOp::kSum, keep); });
  EXPECT_EQ(b.pending(), 0u) << "a rejected call records nothing";

  b.reduce_scatter_async(in.get(), 8, DataType::kFloat32, ReduceOp::kSum, keep);
  EXPECT_EQ(b.pending(), 1u);
  EXPECT_EQ(view, nullptr) << "nothing runs before the flush";
  invalid("teardown with pending work", [&] { b.teardown(); });
  EXPECT_EQ(b.pending(), 1u);
  b.flush();
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view_count, 8u);
  EXPECT_EQ(result(), std::vector<float>(8, sum));

  // A result view points into the bucket: feeding it back as an input is refused.
  invalid("input inside the bucket",
          [&] { b.reduce_scatter_async(view, 4, DataType::kFloat32, ReduceOp::kSum, [](const void*, size_t) {}); });

  // A throwing callback does not stop the others; its exception comes out of flush().
  int ran = 0;
  b.reduce_scatter_async(in.get(), 8, DataType::kFloat32, ReduceOp::kSum,
                         [](const void*, size_t) { throw std::runtime_error("callback failed"); });
  b.reduce_scatter_async(in.get(), 8, DataType::kFloat32, ReduceOp::kSum, [&](const void*, size_t) { ++ran; });
  EXPECT_THROW(b.flush(), std::runtime_error);
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(b.pending(), 0u);

  mem.sync();
  b.teardown();
  b.teardown();  // nothing to free: fine
  view = nullptr;
  b.reduce_scatter_async(in.get(), 8, DataType::kFloat32, ReduceOp::kMax, keep);  // allocates again
  b.flush();
  EXPECT_EQ(result(), std::vector<float>(8, static_cast<float>(world)));
  mem.sync();
  b.teardown();
  comm->barrier();  // the communicator stayed in step
  mem.sync();
  comm->check();
}

}  // namespace symcomm::testing
