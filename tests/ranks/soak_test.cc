// Soak: a long randomized mix of collectives (kind, dtype, op, count, algorithm, buffers, in place or not)
// with small random per-rank delays, every result verified. SYMCOMM_SOAK_OPS sets the number of collectives
// (default 100000; the sequence is the same on every rank, derived from SYMCOMM_SOAK_SEED, default 1).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "harness/host_case.h"

namespace symcomm::testing {
namespace {

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

Case random_case(uint64_t k, uint64_t seed, int world_size) {
  uint64_t h = mix64(seed * 0x100000001b3ull + k);
  auto pick = [&](uint64_t n) {
    uint64_t r = h % n;
    h = mix64(h);
    return r;
  };
  Case c{};
  const Collective kinds[] = {Collective::kAllReduce,     Collective::kAllReduce, Collective::kAllGather,
                              Collective::kReduceScatter, Collective::kBroadcast, Collective::kAllToAll};
  c.kind = kinds[pick(6)];
  c.dtype = kAllDtypes[pick(8)];
  bool reduction = c.kind == Collective::kAllReduce || c.kind == Collective::kReduceScatter;
  c.op = reduction ? kAllOps[pick(5)] : ReduceOp::kSum;
  // Mostly small counts (latency paths), sometimes large ones (several scratch rounds).
  uint64_t scale = pick(100);
  c.count = scale < 80 ? pick(64) : scale < 97 ? pick(5000) : pick(200000);
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
  const int n = 3;
  HarnessOptions opts;
  opts.timeout = std::chrono::minutes(20);
  opts.config.timeout = std::chrono::seconds(10);
  expect_success(
      n,
      [&](RankEnv& env) {
        auto comm = env.make_comm();
        CaseRunner runner(*comm);
        uint64_t failures = 0;
        for (uint64_t k = 0; k < ops && failures < 5; ++k) {
          // Small random per-rank delays (about 1 op in 64): ranks arrive out of step.
          uint64_t d = mix64(k * 31 + env.info.rank + seed * 7);
          if (d % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(d % 200));
          if (!runner.run(random_case(k, seed, n))) ++failures;
        }
        env.store->set(fmt::format("soak/{}", env.info.rank), std::to_string(runner.hash()));
        for (int p = 0; p < n; ++p)
          EXPECT_EQ(env.store->get_string(fmt::format("soak/{}", p)), std::to_string(runner.hash()));
        if (env.info.rank == 0)
          std::printf("soak: %llu collectives on %d ranks, %llu failed\n", static_cast<unsigned long long>(ops), n,
                      static_cast<unsigned long long>(failures));
      },
      opts);
}

}  // namespace
}  // namespace symcomm::testing
