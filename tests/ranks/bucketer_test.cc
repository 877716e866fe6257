// ReduceScatterBucketer on the host backend: random sequences of bucketed reduce-scatters (mixed dtypes, ops,
// counts including 0 and larger than a bucket, explicit flushes, teardowns) must give, element for element,
// what the same reduce-scatters give one by one on poisoned outputs; and what they give must equal the
// independent reference of test_values.h. Invalid uses throw kInvalidArgument and leave everything usable (the
// body of tests/backend_cases/bucketer_cases.h, which the GPU program runs too).

#include "symcomm/bucketer.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>

#include "backend_cases/bucketer_cases.h"
#include "harness/rank_harness.h"
#include "harness/test_memory.h"
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
    detail::store_element(it.dtype, it.in.data(), i, input_value(seed, me, i, it.op, it.dtype, true));
  }
  it.single.assign(it.count * es, kPoison);
  it.bucketed.assign(it.count * es, kPoison);
  return it;
}

void expect_reference(const Item& it, int n, int me) {
  for (size_t i = 0; i < it.count; ++i) {
    double want = expected_reduction(it.seed, n, me * it.count + i, it.op, it.dtype);
    double got = detail::load_element(it.dtype, it.single.data(), i);
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
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE(world);
    expect_success(world, [](RankEnv& env) {
      HostMemory mem;
      bucketer_rules_case(env, mem);
    });
  }
}

// NOTE [callback storage]: callables of any capture size, move-only ones and over-aligned ones are each
// constructed once, run once and destroyed once; pending ones dropped by the destructor are destroyed
// without running; a callback may record again (and so fill and flush a bucket from inside a flush).
struct Tracked {
  static inline int alive = 0, runs = 0;
  std::array<int32_t, 48> payload{};  // 192 bytes of capture
  std::unique_ptr<int> move_only = std::make_unique<int>(7);
  std::vector<int32_t>* sink = nullptr;
  explicit Tracked(std::vector<int32_t>* s, int32_t v) : sink(s) {
    payload.fill(v);
    ++alive;
  }
  Tracked(Tracked&& o) noexcept : payload(o.payload), move_only(std::move(o.move_only)), sink(o.sink) { ++alive; }
  Tracked(const Tracked&) = delete;
  ~Tracked() { --alive; }
  void operator()(const void* r, size_t c) {
    ++runs;
    EXPECT_EQ(*move_only, 7);
    const auto* v = static_cast<const int32_t*>(r);
    sink->assign(v, v + c);
    sink->push_back(payload[47]);
  }
};

struct alignas(64) OverAligned {
  int32_t* out;
  void operator()(const void* r, size_t) const {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(this) % 64, 0u);
    *out = *static_cast<const int32_t*>(r);
  }
};

TEST(HostBucketerRules, CallbacksOfAnySizeRunOnceAndAreDestroyedOnce) {
  expect_success(2, [](RankEnv& env) {
    auto comm = env.make_comm();
    const int n = env.info.world_size, me = env.info.rank;
    Tracked::alive = Tracked::runs = 0;
    // 64 bytes of output per rank: 16 int32 per bucket.
    auto b = std::make_unique<ReduceScatterBucketer>(*comm, BucketOptions{.bucket_cap_mb = 64.0 * n / 1048576.0});
    std::vector<int32_t> in(n * 4);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(10 * i) + me;
    // Element j of rank r's block: sum over ranks p of (10 * (r * 4 + j) + p).
    auto want = [&](size_t j) { return n * 10 * static_cast<int32_t>(me * 4 + j) + n * (n - 1) / 2; };
    std::vector<std::vector<int32_t>> got(40);
    for (int k = 0; k < 40; ++k) {  // 4 per entry: a bucket holds 4, so 9 flushes happen inside the recording
      b->reduce_scatter_async(in.data(), 4, DataType::kInt32, ReduceOp::kSum, Tracked(&got[k], k));
    }
    EXPECT_EQ(Tracked::alive, 4);  // the last bucketful, pending
    b->flush();
    EXPECT_EQ(Tracked::alive, 0);
    EXPECT_EQ(Tracked::runs, 40);
    for (int k = 0; k < 40; ++k) {
      ASSERT_EQ(got[k].size(), 5u) << k;
      for (size_t j = 0; j < 4; ++j) EXPECT_EQ(got[k][j], want(j)) << k;
      EXPECT_EQ(got[k][4], k) << "the callback's own capture";
    }

    // Callbacks that record again: 4 at depth 0 each record 2 at depth 1, which each record 2 at depth 2. The
    // bucket holds 4, so buckets fill and flush (and run callbacks) from inside callbacks of an outer flush,
    // whose own callbacks still live in the bucket's memory.
    int inner = 0, wrong = 0;
    std::function<void(int)> record = [&](int depth) {
      std::array<int64_t, 8> ballast{};  // 64 more bytes of capture
      ballast.fill(depth);
      b->reduce_scatter_async(in.data(), 4, DataType::kInt32, ReduceOp::kSum,
                              [&, depth, ballast](const void* r, size_t c) {
                                ++inner;
                                const auto* v = static_cast<const int32_t*>(r);
                                for (size_t j = 0; j < c; ++j) wrong += v[j] != want(j);
                                wrong += c != 4 || ballast[7] != depth;
                                if (depth < 2) {
                                  record(depth + 1);
                                  record(depth + 1);
                                }
                              });
    };
    for (int k = 0; k < 4; ++k) record(0);
    while (b->pending() > 0) b->flush();
    EXPECT_EQ(inner, 4 + 8 + 16);
    EXPECT_EQ(wrong, 0);

    int32_t first = -1;
    b->reduce_scatter_async(in.data(), 4, DataType::kInt32, ReduceOp::kSum, OverAligned{&first});
    void (*null_fn)(const void*, size_t) = nullptr;
    EXPECT_THROW(b->reduce_scatter_async(in.data(), 4, DataType::kInt32, ReduceOp::kSum, null_fn), Error);
    b->flush();
    EXPECT_EQ(first, want(0));

    // Pending callbacks dropped by the destructor are destroyed without running.
    for (int k = 0; k < 3; ++k) {
      b->reduce_scatter_async(in.data(), 4, DataType::kInt32, ReduceOp::kSum, Tracked(&got[k], k));
    }
    EXPECT_EQ(Tracked::alive, 3);
    b->flush();  // every rank alike, so that the destructor below drops the same (nothing) everywhere
    b->reduce_scatter_async(in.data(), 4, DataType::kInt32, ReduceOp::kSum, Tracked(&got[0], 0));
    const int runs = Tracked::runs;
    b.reset();
    EXPECT_EQ(Tracked::alive, 0);
    EXPECT_EQ(Tracked::runs, runs);
    comm->barrier();
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

// Uses the bucketer has no sensible meaning for are errors that record nothing: inside a collective group
// (the group would defer the reduction past the callbacks, which would then see stale results), and
// teardown() from inside a callback (it would free the buckets while the flush still runs callbacks stored in
// them).
TEST(HostBucketerRules, InsideAGroupAndTeardownFromACallbackAreErrors) {
  expect_success(2, [](RankEnv& env) {
    auto comm = env.make_comm();
    const int me = env.info.rank;
    ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 1});
    std::vector<float> in(2 * 8, static_cast<float>(me + 1));
    std::vector<float> got(8, -1.0f);
    auto copy_out = [&](const void* r, size_t c) { std::memcpy(got.data(), r, c * sizeof(float)); };
    b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kSum, copy_out);
    b.flush();  // the bucket exists: a flush inside the group would not allocate
    std::fill(got.begin(), got.end(), -1.0f);
    {
      CollectiveGroup g(*comm);
      expect_invalid([&] { b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kSum, copy_out); },
                     "record inside a group");
      expect_invalid([&] { b.flush(); }, "flush inside a group");
      expect_invalid([&] { b.teardown(); }, "teardown inside a group");
      EXPECT_EQ(b.pending(), 0u);
    }
    EXPECT_EQ(got[0], -1.0f);

    bool refused = false;
    b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kMax, [&](const void* r, size_t c) {
      expect_invalid([&] { b.teardown(); }, "teardown from a callback");
      refused = true;
      copy_out(r, c);
    });
    b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kMax, [&](const void*, size_t) {});
    b.flush();
    EXPECT_TRUE(refused);
    EXPECT_EQ(got, std::vector<float>(8, 2.0f));
    b.teardown();  // outside the callbacks: fine
    b.reduce_scatter_async(in.data(), 8, DataType::kFloat32, ReduceOp::kSum, copy_out);
    b.flush();
    EXPECT_EQ(got, std::vector<float>(8, 3.0f));
    comm->barrier();
  });
}

// NOTE [large buffers]: an input larger than a bucket gets a symmetric buffer of its own, reused after the next
// flush. With a 1 MiB heap and a 64 KiB output per step, holding one buffer per step until teardown() runs
// out of heap within 16 steps; 200 steps must pass, each exact, two large inputs between the same flushes
// must get different buffers, and the heap must still take one more large allocation afterwards.
TEST(HostBucketerRules, LargeInputBuffersAreReusedNotHeldUntilTeardown) {
  expect_success(2, [](RankEnv& env) {
    Config c = env.config;
    c.heap_bytes = 1 << 20;
    CommOptions opts;
    opts.config = c;
    auto comm = env.make_comm(opts);
    const int n = env.info.world_size, me = env.info.rank;
    ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 2048.0 * n / 1048576.0});  // 2 KiB per rank
    const size_t count = 16384;                                                 // 64 KiB of int32 per rank
    std::vector<int32_t> in(n * count);
    for (int step = 0; step < 200; ++step) {
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(i) * (step + 1) + me;
      const void* view = nullptr;
      size_t wrong = 0;
      b.reduce_scatter_async(in.data(), count, DataType::kInt32, ReduceOp::kSum, [&](const void* r, size_t k) {
        view = r;
        const auto* v = static_cast<const int32_t*>(r);
        for (size_t i = 0; i < k; ++i) {
          int32_t want = 0;
          for (int p = 0; p < n; ++p) want += static_cast<int32_t>(me * count + i) * (step + 1) + p;
          wrong += v[i] != want;
        }
      });
      ASSERT_EQ(wrong, 0u) << "step " << step;
      ASSERT_NE(view, nullptr);
      if (step % 2 == 1) {
        // Two large inputs between flushes: the earlier view must stay valid, so they differ.
        const void* second = nullptr;
        b.reduce_scatter_async(in.data(), count, DataType::kInt32, ReduceOp::kSum,
                               [&](const void* r, size_t) { second = r; });
        EXPECT_NE(second, view) << "step " << step;
      }
      b.flush();
    }
    void* more = comm->alloc(64 << 10);  // the heap was not used up
    comm->free(more);
    b.teardown();
    comm->barrier();
  });
}

// NOTE [step variant]: ranks that recorded a flush's inputs in different orders (same total) would get each
// other's rows mixed into their results with no error; the gathered flush's headers carry its layout, so they
// get kMismatch.
TEST(HostBucketerRules, FlushesLaidOutDifferentlyAreAMismatch) {
  HarnessOptions opts;
  opts.config.timeout = std::chrono::seconds(2);
  expect_success(
      2,
      [](RankEnv& env) {
        auto comm = env.make_comm();
        const int me = env.info.rank;
        ReduceScatterBucketer b(*comm, {.bucket_cap_mb = 1});
        std::vector<float> small(2 * 64, 1.0f), large(2 * 192, 2.0f);
        bool ran = false;
        auto record = [&](std::vector<float>& v) {
          b.reduce_scatter_async(v.data(), v.size() / 2, DataType::kFloat32, ReduceOp::kSum,
                                 [&](const void*, size_t) { ran = true; });
        };
        record(me == 0 ? small : large);
        record(me == 0 ? large : small);
        try {
          b.flush();
          ADD_FAILURE() << "the flush succeeded";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
          EXPECT_EQ(e.ranks(), std::vector<int>({me, 1 - me})) << e.what();
        }
        EXPECT_FALSE(ran) << "no callback sees a result of a failed flush";
      },
      opts);
}

}  // namespace
}  // namespace symcomm::testing
