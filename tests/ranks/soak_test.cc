// Soak on the host backend: the body of tests/backend_cases/soak_cases.h (a long randomized mix of collectives,
// every result verified, bitwise identical across ranks) over kind, dtype, op, count, algorithm, heap or plain
// buffers, in place or not and misaligned, with small random per-rank delays, at 3 ranks. SYMCOMM_SOAK_OPS sets the
// number of collectives (default 100000; the sequence is the same on every rank, derived from SYMCOMM_SOAK_SEED,
// default 1).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "backend_cases/soak_cases.h"
#include "harness/host_case.h"
#include "harness/test_memory.h"

namespace symcomm::testing {
namespace {

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

/// Counts stay below this (pick(200000) below).
constexpr size_t kMaxCount = 200000;

SoakOp random_op(uint64_t k, uint64_t seed, int world_size) {
  uint64_t h = mix64(seed * 0x100000001b3ull + k);
  auto pick = [&](uint64_t n) {
    uint64_t r = h % n;
    h = mix64(h);
    return r;
  };
  SoakOp c{};
  const Collective kinds[] = {Collective::kAllReduce,     Collective::kAllReduce, Collective::kAllGather,
                              Collective::kReduceScatter, Collective::kBroadcast, Collective::kAllToAll};
  c.kind = kinds[pick(6)];
  c.dtype = kAllDtypes[pick(8)];
  bool reduction = c.kind == Collective::kAllReduce || c.kind == Collective::kReduceScatter;
  c.op = reduction ? kAllOps[pick(5)] : ReduceOp::kSum;
  // Mostly small counts (latency paths), sometimes large ones (several scratch rounds).
  uint64_t scale = pick(100);
  c.count = scale < 80 ? pick(64) : scale < 97 ? pick(5000) : pick(kMaxCount);
  c.in_place = pick(2);
  c.heap = pick(2);
  c.misalign = pick(4) == 0 ? 1 + pick(15) : 0;
  c.algo = Algorithm::kAuto;
  if (c.kind == Collective::kAllReduce) {
    const Algorithm algos[] = {Algorithm::kAuto, Algorithm::kOneShot, Algorithm::kTwoShot};
    c.algo = algos[pick(3)];
  }
  c.seed = seed * 1000000007ull + k;
  c.root = static_cast<int>(pick(world_size));
  return c;
}

TEST(Soak, RandomMixedCollectivesAllVerified) {
  const uint64_t ops = env_u64("SYMCOMM_SOAK_OPS", 100000);
  const uint64_t seed = env_u64("SYMCOMM_SOAK_SEED", 1);
  HarnessOptions opts;
  opts.timeout = std::chrono::minutes(20);
  opts.config.timeout = std::chrono::seconds(10);
  const SoakPlan plan{
      .ops = ops,
      .max_count = kMaxCount,
      .pick = [seed](uint64_t k, int world) { return random_op(k, seed, world); },
      // About 1 op in 64, up to 200 µs.
      .delay_us =
          [seed](uint64_t k, int rank) {
            const uint64_t d = mix64(k * 31 + rank + seed * 7);
            return d % 64 == 0 ? d % 200 : 0;
          },
  };
  expect_success(
      3,
      [&](RankEnv& env) {
        HostMemory mem;
        SoakLauncher launcher;
        soak_case(env, mem, plan, launcher);
      },
      opts);
}

}  // namespace
}  // namespace symcomm::testing
