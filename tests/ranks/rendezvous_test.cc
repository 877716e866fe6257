// Communicators made again and again from one rendezvous on a fixed port (NOTE [rendezvous generations] in
// src/core/communicator.cc): rank 0 lingers before each destroy, so the other ranks, already destroyed, reach
// its earlier store server while it still runs. Every creation must succeed and every all-reduce be exact.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "harness/rank_harness.h"

namespace symcomm::testing {
namespace {

TEST(RendezvousRanks, RecreatedOnTheSamePortWhileTheEarlierServerStillRuns) {
  expect_success(3, [](RankEnv& env) {
    const int me = env.info.rank, n = env.info.world_size;
    Rendezvous rv;
    rv.ranks = env.info;
    rv.token = "rendezvous-test-token";
    CommOptions copts;
    copts.config = env.config;
    uint16_t port = 0;
    for (int round = 0; round < 12; ++round) {
      if (round == 0 && me == 0) {
        rv.store_port = 0;  // rank 0 picks a free port, then every round reuses it
        rv.on_store_started = [&](uint16_t p) {
          port = p;
          env.store->set("rv/port", std::to_string(p));
        };
      } else {
        if (port == 0) {
          const Bytes b = env.store->get("rv/port");
          port = static_cast<uint16_t>(std::stoi(std::string(b.begin(), b.end())));
        }
        rv.store_port = port;
        rv.on_store_started = nullptr;
      }
      auto comm = Communicator::create(rv, copts);
      ASSERT_EQ(comm->rank(), me);
      std::vector<int32_t> in(1031), out(1031, -7);
      for (size_t i = 0; i < in.size(); ++i) in[i] = round * 100 + me + static_cast<int32_t>(i);
      comm->all_reduce(in.data(), out.data(), in.size(), DataType::kInt32, ReduceOp::kSum);
      for (size_t i = 0; i < out.size(); ++i) {
        const int32_t want = n * (round * 100 + static_cast<int32_t>(i)) + n * (n - 1) / 2;
        ASSERT_EQ(out[i], want) << "round " << round << " element " << i;
      }
      // Rank 0's server outlives the others' communicators by 100 ms: they create the next one meanwhile.
      if (me == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      comm.reset();
    }
  });
}

// Ranks 0 and 1 first make a communicator of their own (a sub-group, rank 2 takes no part), then all three make
// one: the ranks have made different numbers of communicators, and must still agree on its store keys.
TEST(RendezvousRanks, ACommunicatorOfEveryRankAfterASubGroupsOwn) {
  expect_success(3, [](RankEnv& env) {
    const int me = env.info.rank;
    CommOptions copts;
    copts.config = env.config;
    auto make = [&](const std::string& tag, int rank, int world) {
      Rendezvous rv;
      rv.ranks = RankInfo{rank, world, rank, world};
      rv.token = "rendezvous-subgroup-" + tag;
      if (rank == 0) {
        rv.store_port = 0;
        rv.on_store_started = [&](uint16_t p) { env.store->set(tag + "/port", std::to_string(p)); };
      } else {
        const Bytes b = env.store->get(tag + "/port");
        rv.store_port = static_cast<uint16_t>(std::stoi(std::string(b.begin(), b.end())));
      }
      return Communicator::create(rv, copts);
    };
    auto sum_of_ranks = [](Communicator& c) {
      int32_t v = c.rank(), out = -1;
      c.all_reduce(&v, &out, 1, DataType::kInt32, ReduceOp::kSum);
      return out;
    };
    if (me < 2) {
      auto pair = make("pair", me, 2);
      EXPECT_EQ(sum_of_ranks(*pair), 1);
    }
    auto all = make("all", me, 3);
    EXPECT_EQ(sum_of_ranks(*all), 3);
  });
}

}  // namespace
}  // namespace symcomm::testing
