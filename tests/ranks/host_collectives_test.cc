// The host backend's collectives over the full matrix: world sizes 1, 2, 3, 4, 8; every collective, dtype
// and reduce op; counts 0, 1, odd, prime and large (several scratch rounds); in place and out of place;
// buffers in the symmetric heap (zero-copy) and in plain memory (staged), some misaligned; exact expected
// values, poisoned outputs, guard bytes, and bitwise-identical results across ranks.

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "harness/guarded_buffer.h"
#include "harness/rank_harness.h"
#include "harness/test_values.h"

namespace symcomm::testing {
namespace {

constexpr DataType kAllDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                   DataType::kInt8,    DataType::kUInt8,   DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};

struct Case {
  Collective kind;
  DataType dtype;
  ReduceOp op;
  size_t count;
  bool in_place;
  bool heap;
  size_t misalign;
  Algorithm algo;
  uint64_t seed;
  int root;
};

std::string describe(const Case& c) {
  return fmt::format("{} dtype={} op={} count={} in_place={} heap={} misalign={} algo={} root={}", to_string(c.kind),
                     to_string(c.dtype), to_string(c.op), c.count, c.in_place, c.heap, c.misalign, to_string(c.algo),
                     c.root);
}

class CaseRunner {
 public:
  CaseRunner(Communicator& comm) : comm_(comm), n_(comm.world_size()), me_(comm.rank()) {}

  /// Runs one case on every rank; returns false (after ADD_FAILURE) on a wrong result.
  bool run(const Case& c) {
    const size_t es = dtype_size(c.dtype);
    const bool reduction = c.kind == Collective::kAllReduce || c.kind == Collective::kReduceScatter;
    size_t in_elems = c.count, out_elems = c.count;
    if (c.kind == Collective::kAllGather || c.kind == Collective::kAllToAll) out_elems = c.count * n_;
    if (c.kind == Collective::kReduceScatter || c.kind == Collective::kAllToAll) in_elems = c.count * n_;
    Communicator* heap = c.heap ? &comm_ : nullptr;
    GuardedBuffer out(heap, out_elems * es, c.misalign);
    GuardedBuffer in_storage(heap, c.in_place ? 0 : in_elems * es, c.misalign);
    out.poison();
    uint8_t* in = in_storage.data();
    if (c.in_place) {
      in = out.data();
      if (c.kind == Collective::kAllGather) in = out.data() + me_ * c.count * es;
      if (c.kind == Collective::kReduceScatter) in = nullptr;  // handled below: out is a view into in
    }
    std::unique_ptr<GuardedBuffer> rs_in;  // in-place reduce-scatter: out = in + rank * count
    uint8_t* out_ptr = out.data();
    if (c.in_place && c.kind == Collective::kReduceScatter) {
      rs_in = std::make_unique<GuardedBuffer>(heap, in_elems * es, c.misalign);
      in = rs_in->data();
      out_ptr = in + me_ * c.count * es;
    }
    for (size_t i = 0; i < in_elems; ++i) {
      store_value(c.dtype, in, i, input_value(c.seed, me_, i, c.op, c.dtype, reduction));
    }
    CollOptions o{.algorithm = c.algo};
    switch (c.kind) {
      case Collective::kAllReduce: comm_.all_reduce(in, out_ptr, c.count, c.dtype, c.op, o); break;
      case Collective::kAllGather: comm_.all_gather(in, out_ptr, c.count, c.dtype, o); break;
      case Collective::kReduceScatter: comm_.reduce_scatter(in, out_ptr, c.count, c.dtype, c.op, o); break;
      case Collective::kBroadcast: comm_.broadcast(in, out_ptr, c.count, c.dtype, c.root, o); break;
      case Collective::kAllToAll: comm_.all_to_all(in, out_ptr, c.count, c.dtype, o); break;
      case Collective::kBarrier: comm_.barrier(o); break;
    }
    bool ok = check(c, out_ptr, out_elems, reduction);
    if (!out.guards_intact() || !in_storage.guards_intact() || (rs_in && !rs_in->guards_intact())) {
      ADD_FAILURE() << "rank " << me_ << ": guard bytes overwritten in " << describe(c);
      ok = false;
    }
    hash_ = fnv1a(out_ptr, c.kind == Collective::kReduceScatter || c.kind == Collective::kAllToAll ? 0 : out_elems * es,
                  hash_);
    return ok;
  }

  uint64_t hash() const { return hash_; }

 private:
  double expected(const Case& c, size_t i) const {
    switch (c.kind) {
      case Collective::kAllReduce: return expected_reduction(c.seed, n_, i, c.op, c.dtype);
      case Collective::kReduceScatter: return expected_reduction(c.seed, n_, me_ * c.count + i, c.op, c.dtype);
      case Collective::kAllGather: return input_value(c.seed, i / c.count, i % c.count, c.op, c.dtype, false);
      case Collective::kBroadcast: return input_value(c.seed, c.root, i, c.op, c.dtype, false);
      case Collective::kAllToAll:
        return input_value(c.seed, i / c.count, me_ * c.count + i % c.count, c.op, c.dtype, false);
      case Collective::kBarrier: return 0;
    }
    return 0;
  }

  bool check(const Case& c, const uint8_t* out, size_t out_elems, bool reduction) {
    for (size_t i = 0; i < out_elems; ++i) {
      double want = expected(c, i);
      double got = load_value(c.dtype, out, i);
      double tol = reduction ? tolerance(c.op, c.dtype, want) : 0;
      if (!(std::fabs(got - want) <= tol)) {
        ADD_FAILURE() << "rank " << me_ << " of " << n_ << ": " << describe(c) << ": element " << i << " is " << got
                      << ", expected " << want;
        return false;
      }
    }
    return true;
  }

  Communicator& comm_;
  int n_, me_;
  uint64_t hash_ = 1469598103934665603ull;
};

std::vector<Case> all_cases(int world_size) {
  std::vector<Case> cases;
  const size_t counts[] = {0, 1, 7, 131, 4099};
  uint64_t seed = 1;
  for (Collective kind : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                          Collective::kBroadcast, Collective::kAllToAll}) {
    bool reduction = kind == Collective::kAllReduce || kind == Collective::kReduceScatter;
    std::vector<Algorithm> algos = {Algorithm::kAuto};
    if (kind == Collective::kAllReduce) algos = {Algorithm::kOneShot, Algorithm::kTwoShot};
    for (DataType d : kAllDtypes) {
      for (ReduceOp op : kAllOps) {
        if (!reduction && op != ReduceOp::kSum) continue;
        for (size_t count : counts) {
          for (Algorithm algo : algos) {
            for (int variant = 0; variant < 4; ++variant) {
              bool in_place = variant & 1, heap = variant & 2;
              size_t misalign = (seed % 3 == 0) ? (seed % 15) + 1 : 0;  // every third case: 1..15 bytes off
              cases.push_back(Case{kind, d, op, count, in_place, heap, misalign, algo, seed,
                                   static_cast<int>(seed % world_size)});
              ++seed;
            }
          }
        }
      }
    }
  }
  return cases;
}

// Large counts (several rounds of the 512 KiB scratch half used by tests) on a smaller slice of the matrix.
std::vector<Case> large_cases(int world_size) {
  std::vector<Case> cases;
  uint64_t seed = 100000;
  for (Collective kind : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                          Collective::kBroadcast, Collective::kAllToAll}) {
    for (DataType d : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
      for (Algorithm algo : kind == Collective::kAllReduce ? std::vector{Algorithm::kOneShot, Algorithm::kTwoShot}
                                                            : std::vector{Algorithm::kAuto}) {
        for (int variant = 0; variant < 4; ++variant) {
          size_t count = kind == Collective::kAllReduce || kind == Collective::kBroadcast ? 300007 : 300007 / world_size;
          cases.push_back(Case{kind, d, ReduceOp::kSum, count, (variant & 1) != 0, (variant & 2) != 0, 0, algo, seed++,
                               static_cast<int>(seed % world_size)});
        }
      }
    }
  }
  return cases;
}

void run_cases(RankEnv& env, const std::vector<Case>& cases) {
  auto comm = env.make_comm();
  CaseRunner runner(*comm);
  int failures = 0;
  for (const Case& c : cases) {
    if (!runner.run(c) && ++failures >= 5) break;  // keep going a little to show a pattern, not forever
  }
  // Bitwise-identical results: every rank's hash of its all-reduce / all-gather / broadcast outputs match.
  env.store->set(fmt::format("hash/{}", env.info.rank), std::to_string(runner.hash()));
  for (int p = 0; p < env.info.world_size; ++p) {
    EXPECT_EQ(env.store->get_string(fmt::format("hash/{}", p)), std::to_string(runner.hash()))
        << "rank " << p << " and rank " << env.info.rank << " produced different bits";
  }
  comm->barrier();
}

class HostCollectives : public ::testing::TestWithParam<int> {};

TEST_P(HostCollectives, FullMatrix) {
  int n = GetParam();
  auto cases = all_cases(n);
  ASSERT_GT(cases.size(), 1000u);
  expect_success(n, [&](RankEnv& env) { run_cases(env, cases); });
}

TEST_P(HostCollectives, LargeCountsSeveralRounds) {
  int n = GetParam();
  expect_success(n, [&](RankEnv& env) { run_cases(env, large_cases(n)); });
}

TEST_P(HostCollectives, AsyncOpsCompleteInIssueOrder) {
  int n = GetParam();
  expect_success(n, [&](RankEnv& env) {
    auto comm = env.make_comm();
    const size_t count = 1000;
    std::vector<std::vector<int32_t>> ins(8, std::vector<int32_t>(count)), outs(8, std::vector<int32_t>(count, -1));
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 8; ++k) {
      for (size_t i = 0; i < count; ++i) ins[k][i] = static_cast<int32_t>(k * 1000 + i + env.info.rank);
      works.push_back(comm->all_reduce_async(ins[k].data(), outs[k].data(), count, DataType::kInt32, ReduceOp::kSum));
    }
    comm->barrier();  // a blocking call after async ones runs after them
    for (auto& w : works) EXPECT_TRUE(w->is_completed());
    for (int k = 0; k < 8; ++k) {
      works[k]->wait();
      EXPECT_EQ(works[k]->exception(), nullptr);
      for (size_t i = 0; i < count; ++i) {
        int32_t want = static_cast<int32_t>(n * (k * 1000 + i) + n * (n - 1) / 2);
        ASSERT_EQ(outs[k][i], want) << "op " << k << " element " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, HostCollectives, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace symcomm::testing
