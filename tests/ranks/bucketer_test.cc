// ReduceScatterBucketer on the host backend: random sequences of bucketed reduce-scatters (mixed dtypes, ops,
// counts including 0 and larger than a bucket, explicit flushes, teardowns) must give, element for element,
// what the same reduce-scatters give one by one on poisoned outputs; and what they give must equal the
// independent reference of test_values.h. Invalid uses throw kInvalidArgument and leave everything usable.

#include "symcomm/bucketer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <optional>
#include <stdexcept>

#include "harness/rank_harness.h"
#include "harness/test_values.h"

namespace symcomm::testing {
namespace {

constexpr uint8_t kPoison = 0xa5;

struct Item {
  DataType dtype;
  ReduceOp op;
  size_t count;
  uint64_t seed;
  std::vector<uint8_t> in;      ///< world_size * count elements
  std::vector<uint8_t> single;  ///< the one-by-one result (poisoned first)
  std::vector<uint8_t> bucketed;
  int calls = 0;
};

// Per-rank output cap in bytes of the bucketer used by `seed` (small, so buckets fill and inputs overflow).
size_t cap_for(uint64_t seed) {
  const size_t caps[] = {64, 1000, 4096, 65536};
  return caps[mix64(seed) % 4];
}

// dtype and op random unless given.
Item make_item(uint64_t seed, int n, int me, size_t cap, std::optional<DataType> dtype = {},
               std::optional<ReduceOp> op = {}) {
  uint64_t h = mix64(seed * 31 + 7);
  Item it{};
  it.dtype = static_cast<DataType>(h % 3 == 0 ? (h >> 8) % kNumDataTypes : (h >> 8) % 2);  // f32/f64 often
  it.op = static_cast<ReduceOp>((h >> 16) % kNumReduceOps);
  if (dtype) it.dtype = *dtype;
  if (op) it.op = *op;
  const size_t es = dtype_size(it.dtype);
  switch ((h >> 24) % 8) {
    case 0: it.count = 0; break;
    case 1: it.count = cap / es + 1 + (h >> 32) % 50; break;  // larger than a bucket: reduced at once
    default: it.count = (h >> 32) % (cap / es + 1); break;
  }
  it.seed = seed;
  it.in.resize(n * it.count * es);
  for (size_t i = 0; i < n * it.count; ++i) {
    store_value(it.dtype, it.in.data(), i, input_value(seed, me, i, it.op, it.dtype, true));
  }
  it.single.assign(it.count * es, kPoison);
  it.bucketed.assign(it.count * es, kPoison);
  return it;
}

void expect_reference(const Item& it, int n, int me) {
  for (size_t i = 0; i < it.count; ++i) {
    double want = expected_reduction(it.seed, n, me * it.count + i, it.op, it.dtype);
    double got = load_value(it.dtype, it.single.data(), i);
    ASSERT_LE(std::fabs(got - want), tolerance(it.op, it.dtype, want))
        << "one-by-one reference, seed " << it.seed << " element " << i;
  }
}

void run_random_sequences(RankEnv& env) {
  auto comm = env.make_comm();
  const int n = env.info.world_size, me = env.info.rank;
  for (uint64_t round = 1; round <= 12; ++round) {
    const size_t cap = cap_for(round);
    ReduceScatterBucketer bucketer(*comm, {.bucket_cap_mb = static_cast<double>(cap) * n / 1048576.0});
    ASSERT_EQ(bucketer.bucket_bytes_per_rank(), cap / 16 * 16);
    std::deque<Item> items;  // stable addresses: inputs must live until their bucket is flushed
    const int how_many = 20 + static_cast<int>(mix64(round) % 60);
    for (int k = 0; k < how_many; ++k) items.push_back(make_item(round * 1000 + k, n, me, cap));
    for (Item& it : items) {  // the reference: one by one
      comm->reduce_scatter(it.in.data(), it.single.data(), it.count, it.dtype, it.op);
      expect_reference(it, n, me);
    }
    for (size_t k = 0; k < items.size(); ++k) {
      Item& it = items[k];
      bucketer.reduce_scatter_async(it.in.data(), it.count, it.dtype, it.op, [&it](const void* result, size_t count) {
        ASSERT_EQ(count, it.count);
        ASSERT_NE(result, nullptr);
        if (count > 0) std::memcpy(it.bucketed.data(), result, count * dtype_size(it.dtype));
        ++it.calls;
      });
      const uint64_t action = mix64(round * 77 + k) % 16;
      if (action == 0) bucketer.flush();
      if (action == 1) {
        bucketer.flush();
        EXPECT_EQ(bucketer.pending(), 0u);
        bucketer.teardown();  // the next input allocates again
      }
    }
    bucketer.flush();
    EXPECT_EQ(bucketer.pending(), 0u);
    for (size_t k = 0; k < items.size(); ++k) {
      const Item& it = items[k];
      ASSERT_EQ(it.calls, 1) << "round " << round << " item " << k;
      ASSERT_EQ(it.bucketed, it.single) << "round " << round << " item " << k << " " << to_string(it.dtype) << " "
                                        << to_string(it.op) << " count " << it.count << " cap " << cap;
    }
  }
}

// Buckets of 1 MB per rank over inputs of up to ~16 KB: each flush reads a few hundred inputs and takes
// several rounds of the step protocol (the tests' 1 MB of staging gives rounds of a 512 KB half), which the
// small buckets above never need (NOTE [host gathered flush]). Results equal the one-by-one reduce-scatters.
void run_large_flushes(RankEnv& env) {
  auto comm = env.make_comm();
  const int n = env.info.world_size, me = env.info.rank;
  const size_t cap = size_t{1} << 20;
  ReduceScatterBucketer bucketer(*comm, {.bucket_cap_mb = static_cast<double>(cap) * n / 1048576.0});
  for (uint64_t round = 1; round <= 3; ++round) {
    std::deque<Item> items;
    // Two buckets (1 MB per rank each, 3 MB of heap at 2 ranks): float32 sum and float64 max.
    for (int k = 0; k < 200; ++k) {
      const bool f32 = k % 3 != 0;
      items.push_back(make_item(500000 + round * 1000 + k, n, me, 16384, f32 ? DataType::kFloat32 : DataType::kFloat64,
                                f32 ? ReduceOp::kSum : ReduceOp::kMax));
    }
    for (Item& it : items) comm->reduce_scatter(it.in.data(), it.single.data(), it.count, it.dtype, it.op);
    for (Item& it : items) {
      bucketer.reduce_scatter_async(it.in.data(), it.count, it.dtype, it.op, [&it](const void* result, size_t count) {
        if (count > 0) std::memcpy(it.bucketed.data(), result, count * dtype_size(it.dtype));
        ++it.calls;
      });
    }
    bucketer.flush();
    for (size_t k = 0; k < items.size(); ++k) {
      const Item& it = items[k];
      ASSERT_EQ(it.calls, 1) << "round " << round << " item " << k;
      ASSERT_EQ(it.bucketed, it.single) << "round " << round << " item " << k << " " << to_string(it.dtype) << " "
                                        << to_string(it.op) << " count " << it.count;
    }
  }
}

class HostBucketer : public ::testing::TestWithParam<int> {};

TEST_P(HostBucketer, RandomSequencesEqualOneByOne) { expect_success(GetParam(), run_random_sequences); }
TEST_P(HostBucketer, LargeFlushesOverSeveralRoundsEqualOneByOne) { expect_success(GetParam(), run_large_flushes); }

INSTANTIATE_TEST_SUITE_P(WorldSizes, HostBucketer, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

template <class F>
void expect_invalid(F&& f, const char* what) {
  try {
    f();
    ADD_FAILURE() << what << ": no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what << ": " << e.what();
  }
}

TEST(HostBucketerRules, InvalidUseThrowsAndLeavesEverythingUsable) {
  expect_success(2, [](RankEnv& env) {
    auto comm = env.make_comm();
    const int me = env.info.rank;
    expect_invalid([&] { ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 0}); }, "zero capacity");
    expect_invalid([&] { ReduceScatterBucketer b(*comm, {.bucket_cap_mb = -1}); }, "negative capacity");
    expect_invalid([&] { ReduceScatterBucketer b(*comm, {.bucket_cap_mb = std::nan("")}); }, "NaN capacity");
    // 2 ranks: 8192 MiB is 4 GiB per rank, one past the 32-bit offsets of the copy list.
    expect_invalid([&] { ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 8192}); }, "capacity of 4 GiB per rank");
    { ReduceScatterBucketer ok(*comm, {.bucket_cap_mb = 8191}); }  // allocates nothing until a flush
    ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 1});
    std::vector<float> in(2 * 8, static_cast<float>(me + 1));
    std::vector<float> got(8, -1.0f);
    auto copy_out = [&](const void* r, size_t c) { std::memcpy(got.data(), r, c * sizeof(float)); };
    expect_invalid([&] { b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kSum, nullptr); },
                   "null callback");
    expect_invalid([&] { b.reduce_scatter_async(nullptr, 8, DataType::kFloat32, ReduceOp::kSum, copy_out); },
                   "null input");
    expect_invalid([&] { b.reduce_scatter_async(in.data(), 8, static_cast<DataType>(99), ReduceOp::kSum, copy_out); },
                   "dtype");
    expect_invalid(
        [&] { b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, static_cast<ReduceOp>(42), copy_out); }, "op");
    expect_invalid(
        [&] { b.reduce_scatter_async(in.data(), SIZE_MAX / 4, DataType::kFloat32, ReduceOp::kSum, copy_out); },
        "byte-size overflow");
    EXPECT_EQ(b.pending(), 0u) << "a rejected call records nothing";

    b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kSum, copy_out);
    EXPECT_EQ(b.pending(), 1u);
    EXPECT_EQ(got[0], -1.0f) << "nothing runs before the flush";
    expect_invalid([&] { b.teardown(); }, "teardown with pending work");
    EXPECT_EQ(b.pending(), 1u);
    b.flush();
    EXPECT_EQ(got, std::vector<float>(8, 3.0f));

    // A result view points into the bucket: feeding it back as an input is rejected.
    const void* view = nullptr;
    b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kSum, [&](const void* r, size_t) { view = r; });
    b.flush();
    ASSERT_NE(view, nullptr);
    expect_invalid([&] { b.reduce_scatter_async(view, 4, DataType::kFloat32, ReduceOp::kSum, copy_out); },
                   "input inside the bucket");

    // A throwing callback does not stop the others; its exception comes out of flush().
    int ran = 0;
    b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kSum,
                           [](const void*, size_t) { throw std::runtime_error("callback failed"); });
    b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kSum, [&](const void*, size_t) { ++ran; });
    EXPECT_THROW(b.flush(), std::runtime_error);
    EXPECT_EQ(ran, 1);
    EXPECT_EQ(b.pending(), 0u);

    b.teardown();
    b.teardown();  // nothing to free: fine
    std::fill(got.begin(), got.end(), -1.0f);
    b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kMax, copy_out);  // reallocates
    b.flush();
    EXPECT_EQ(got, std::vector<float>(8, 2.0f));
    comm->barrier();  // the communicator stayed in step
  });
}

TEST(HostBucketerRules, FullBucketFlushesAndLargeInputRunsAtOnce) {
  expect_success(3, [](RankEnv& env) {
    auto comm = env.make_comm();
    const int n = env.info.world_size, me = env.info.rank;
    // 64 bytes of output per rank: 16 floats.
    ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 64.0 * n / 1048576.0});
    std::vector<int32_t> small(n * 12), big(n * 40);
    for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<int32_t>(i) + me;
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int32_t>(2 * i) - me;
    std::vector<int> order;
    std::vector<int32_t> r0(12), r1(12), r2(40);
    b.reduce_scatter_async(small.data(), 12, DataType::kInt32, ReduceOp::kSum, [&](const void* r, size_t c) {
      std::memcpy(r0.data(), r, c * 4);
      order.push_back(0);
    });
    b.reduce_scatter_async(small.data(), 12, DataType::kInt32, ReduceOp::kSum, [&](const void* r, size_t c) {
      std::memcpy(r1.data(), r, c * 4);
      order.push_back(1);
    });
    EXPECT_EQ(order, std::vector<int>{0}) << "the second input did not fit: the first bucket ran first";
    b.reduce_scatter_async(big.data(), 40, DataType::kInt32, ReduceOp::kSum, [&](const void* r, size_t c) {
      std::memcpy(r2.data(), r, c * 4);
      order.push_back(2);
    });
    EXPECT_EQ(order, (std::vector<int>{0, 2})) << "an input larger than a bucket runs at once";
    b.flush();
    EXPECT_EQ(order, (std::vector<int>{0, 2, 1}));
    for (int i = 0; i < 12; ++i) {
      int32_t want = 0;
      for (int r = 0; r < n; ++r) want += me * 12 + i + r;
      EXPECT_EQ(r0[i], want);
      EXPECT_EQ(r1[i], want);
    }
    for (int i = 0; i < 40; ++i) {
      int32_t want = 0;
      for (int r = 0; r < n; ++r) want += 2 * (me * 40 + i) - r;
      EXPECT_EQ(r2[i], want);
    }
  });
}

}  // namespace
}  // namespace symcomm::testing
