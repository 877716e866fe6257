// Topology files on the host backend (Config::topology_file, docs/design/topology.md): all-reduces, all-gathers and
// reduce-scatters over a simulated topology run the schedules that use only its links (KernelPath::kHostScheduled)
// and are exact and bitwise identical on every rank, whatever algorithm is asked for; a topology no schedule serves
// refuses them (kUnsupported) and leaves the communicator usable; a split gets its members' links; ranks whose
// files give different links, or a file for another world size, fail at creation on every rank.

#include "algos/topology.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "harness/expect_error.h"
#include "harness/host_case.h"
#include "harness/rank_harness.h"
#include "harness/temp_files.h"

namespace symcomm::testing {
namespace {

using detail::LinkKind;
using detail::Topology;

Topology pairs(int n) {
  Topology t(n);
  for (int a = 0; a + 1 < n; a += 2) t.set(a, a + 1, {LinkKind::kNvlink, 2});
  return t;
}

std::unique_ptr<Communicator> make_comm(RankEnv& env, const std::string& name, const std::string& path) {
  Config c = env.config;
  c.topology_file = path;
  return env.make_comm({.name = name, .config = c});
}

// All-reduces, all-gathers and reduce-scatters over the topology (NOTE [schedule semantics], NOTE [gather
// schedules]): every dtype and op (the all-gather has none to vary), counts 0 to several scratch rounds, in place
// or not, heap or plain memory, some misaligned, the all-reduce with each algorithm asked for.
void collective_matrix(Communicator& comm, RankEnv& env, const std::string& tag) {
  CaseRunner runner(comm);
  uint64_t seed = 7;
  int failures = 0;
  for (Collective kind : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter}) {
    for (DataType d : kAllDtypes) {
      for (ReduceOp op : kAllOps) {
        if (kind == Collective::kAllGather && op != ReduceOp::kSum) continue;
        for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{4099}}) {
          const int variant = static_cast<int>(seed % 4);
          const size_t misalign = seed % 3 == 0 ? seed % 15 + 1 : 0;
          const Algorithm algo = kind == Collective::kAllReduce && seed % 2 ? Algorithm::kTwoShot : Algorithm::kAuto;
          const Case c{kind, d, op, count, (variant & 1) != 0, (variant & 2) != 0, misalign, algo, seed++, 0};
          if (!runner.run(c) && ++failures >= 5) break;
          if (count > 0) {
            EXPECT_EQ(comm.last_path(), KernelPath::kHostScheduled) << describe(c);
          }
        }
      }
    }
  }
  for (DataType d : {DataType::kFloat32, DataType::kBFloat16}) {  // 300007 elements: several rounds
    runner.run(Case{Collective::kAllReduce, d, ReduceOp::kSum, 300007, false, seed % 2 == 0, 0, Algorithm::kOneShot,
                    seed++, 0});
  }
  for (Collective kind : {Collective::kAllGather, Collective::kReduceScatter}) {
    runner.run(Case{kind, DataType::kFloat32, ReduceOp::kSum, size_t{300007} / env.info.world_size, false,
                    seed % 2 == 0, 0, Algorithm::kAuto, seed++, 0});
  }
  env.store->set(fmt::format("{}/hash/{}", tag, env.info.rank), std::to_string(runner.hash()));
  for (int p = 0; p < env.info.world_size; ++p) {
    EXPECT_EQ(env.store->get_string(fmt::format("{}/hash/{}", tag, p)), std::to_string(runner.hash()))
        << "rank " << p << " and rank " << env.info.rank << " produced different bits";
  }
}

struct Layout {
  const char* name;
  Topology topology;
};
void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

class TopologyRanks : public ::testing::TestWithParam<Layout> {};

TEST_P(TopologyRanks, CollectivesUseTheirSchedulesAndAreExact) {
  const Layout& l = GetParam();
  TempFiles files;
  const std::string path = files.write("t.json", l.topology.to_json());
  expect_success(l.topology.world_size(), [&](RankEnv& env) {
    auto comm = make_comm(env, "scheduled", path);
    collective_matrix(*comm, env, "scheduled");
    comm->barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, TopologyRanks,
                         ::testing::Values(Layout{"hybrid_cube_mesh", Topology::hybrid_cube_mesh()},
                                           Layout{"hybrid_cube_mesh_renamed",
                                                  Topology::hybrid_cube_mesh().among({3, 6, 0, 5, 7, 1, 4, 2})},
                                           Layout{"ring_of_four", Topology::ring(4)},
                                           Layout{"ring_of_five_pcie", Topology::ring(5, LinkKind::kPcie)}),
                         [](const ::testing::TestParamInfo<Layout>& i) { return std::string(i.param.name); });

// Pairs only: no schedule. The all-reduce, all-gather and reduce-scatter are refused on every rank before anything
// runs, broadcast and later calls still work; a split into the pairs links each pair fully and runs the usual
// algorithms.
TEST(TopologyRanksRefusals, PairsOnlyRefuseTheAllReduceAndStayUsable) {
  TempFiles files;
  const std::string path = files.write("pairs.json", pairs(4).to_json());
  expect_success(4, [&](RankEnv& env) {
    auto comm = make_comm(env, "pairs", path);
    std::vector<float> in(64, 1.0f), out(64 * 4, -1.0f);
    const Error e = expect_error(ErrorCode::kUnsupported, [&] {
      comm->all_reduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
    });
    EXPECT_NE(std::string(e.what()).find("no all-reduce schedule"), std::string::npos) << e.what();
    const Error g = expect_error(ErrorCode::kUnsupported,
                                 [&] { comm->all_gather(in.data(), out.data(), in.size(), DataType::kFloat32); });
    EXPECT_NE(std::string(g.what()).find("no all-gather schedule"), std::string::npos) << g.what();
    expect_error(ErrorCode::kUnsupported,
                 [&] { comm->reduce_scatter(out.data(), in.data(), in.size(), DataType::kFloat32, ReduceOp::kSum); });
    std::vector<float> b(64, static_cast<float>(env.info.rank + 1));
    comm->broadcast(b.data(), b.data(), b.size(), DataType::kFloat32, 3);
    for (float v : b) EXPECT_EQ(v, 4.0f);
    auto pair = comm->split(env.info.rank / 2, 0);
    pair->all_reduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(pair->last_path(), KernelPath::kHost);
    EXPECT_EQ(out[0], 2.0f);
  });
}

// A ring of 6 split into halves: each half keeps its members' links (a line of three ranks has no ring: refused);
// the ring itself keeps its schedule.
TEST(TopologyRanksRefusals, SplitsKeepTheirMembersLinks) {
  TempFiles files;
  const std::string path = files.write("ring6.json", Topology::ring(6).to_json());
  expect_success(6, [&](RankEnv& env) {
    auto comm = make_comm(env, "ring6", path);
    std::vector<int32_t> in(33, env.info.rank + 1), out(33, -1);
    comm->all_reduce(in.data(), out.data(), in.size(), DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(out[32], 21);
    EXPECT_EQ(comm->last_path(), KernelPath::kHostScheduled);
    auto half = comm->split(env.info.rank < 3 ? 0 : 1, 0);
    expect_error(ErrorCode::kUnsupported,
                 [&] { half->all_reduce(in.data(), out.data(), in.size(), DataType::kInt32, ReduceOp::kSum); });
    half->barrier();
  });
}

// Rank 1's file gives another link: kMismatch on every rank at creation, naming the topology; a file for another
// world size, and a missing file, fail every rank with kInvalidArgument naming the file.
TEST(TopologyRanksRefusals, DisagreeingOrWrongFilesFailTheCreationOnEveryRank) {
  TempFiles files;
  const std::string ring = files.write("ring.json", Topology::ring(4).to_json());
  Topology more = Topology::ring(4);
  more.set(0, 2, {LinkKind::kPcie, 1});
  const std::string chord = files.write("chord.json", more.to_json());
  const std::string eight = files.write("eight.json", Topology::hybrid_cube_mesh().to_json());
  expect_success(4, [&](RankEnv& env) {
    const int me = env.info.rank;
    Error e = expect_error(ErrorCode::kMismatch, [&] { make_comm(env, "differ", me == 1 ? chord : ring); });
    EXPECT_NE(std::string(e.what()).find("topology"), std::string::npos) << e.what();
    e = expect_error(ErrorCode::kInvalidArgument, [&] { make_comm(env, "eight", eight); });
    EXPECT_NE(std::string(e.what()).find("describes 8 ranks, the communicator has 4"), std::string::npos) << e.what();
    e = expect_error(ErrorCode::kInvalidArgument, [&] { make_comm(env, "missing", me == 2 ? ring + ".gone" : ring); });
    EXPECT_NE(std::string(e.what()).find(me == 2 ? "cannot be opened" : "rank 2 could not resolve"), std::string::npos)
        << e.what();
    auto comm = make_comm(env, "after", ring);
    std::vector<float> in(8, 1.0f), out(8, 0.0f);
    comm->all_reduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(out[7], 4.0f);
  });
}

}  // namespace
}  // namespace symcomm::testing
