// Tuning files on the host backend (Config::tuning_file, NOTE [tuning precedence] in src/core/tuning_file.cc):
// ranks that read the same file select by its entry for their world size (split communicators by theirs);
// ranks that end up with different Tuning, or of which one cannot read its file, fail at creation on every rank
// with an error naming the ranks (NOTE [tuning agreement] in src/core/communicator.cc), without waiting for a
// deadline.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "harness/expect_error.h"
#include "harness/rank_harness.h"
#include "harness/temp_files.h"

namespace symcomm::testing {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Tuning files written by the parent before the ranks fork; removed with their directory.
class TuningFiles : public TempFiles {
 public:
  /// A file whose host entries give host_one_shot_max_bytes per world size.
  std::string write(const std::string& name, const std::vector<std::pair<int, size_t>>& one_shot_max) {
    std::string entries;
    for (const auto& [world, bytes] : one_shot_max) {
      entries += fmt::format(R"({}{{"world_size": {}, "device": "host", "tuning": {{"host_one_shot_max_bytes": {}}}}})",
                             entries.empty() ? "" : ", ", world, bytes);
    }
    return write_text(name, R"({"format": "symcomm-tuning", "version": 1, "entries": [)" + entries + "]}");
  }
  std::string write_text(const std::string& name, const std::string& text) { return TempFiles::write(name, text); }
};

/// The algorithm an all-reduce of `count` floats ran with on `comm`, its result checked.
Algorithm all_reduce_algorithm(Communicator& comm, size_t count) {
  std::vector<float> in(count, static_cast<float>(comm.rank() + 1)), out(count, -1);
  comm.all_reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
  const float want = static_cast<float>(comm.world_size() * (comm.world_size() + 1) / 2);
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(out[i], want) << i;
  return comm.last_algorithm();
}

// The file's entry for 3 ranks moves the one-shot threshold from 64 KiB to 1 KiB; a split's 2-rank communicator
// takes the 2-rank entry (64 bytes), its 1-rank one (no entry) Tuning's default; a value set in code wins.
TEST(TuningFileRanks, RanksReadingOneFileSelectByItsEntry) {
  TuningFiles files;
  const std::string path = files.write("same.json", {{3, 1024}, {2, 64}});
  expect_success(3, [&](RankEnv& env) {
    Config c = env.config;
    c.tuning_file = path;
    auto comm = env.make_comm({.name = "same", .config = c});
    EXPECT_EQ(comm->config().tuning.host_one_shot_max_bytes, 1024u);
    EXPECT_EQ(all_reduce_algorithm(*comm, 256), Algorithm::kOneShot);  // 1024 bytes
    EXPECT_EQ(all_reduce_algorithm(*comm, 257), Algorithm::kTwoShot);
    auto child = comm->split(env.info.rank == 2 ? 1 : 0, 0);
    if (env.info.rank == 2) {
      EXPECT_EQ(child->config().tuning.host_one_shot_max_bytes, Tuning{}.host_one_shot_max_bytes);
    } else {
      EXPECT_EQ(child->config().tuning.host_one_shot_max_bytes, 64u);
      EXPECT_EQ(all_reduce_algorithm(*child, 16), Algorithm::kOneShot);  // 64 bytes
      EXPECT_EQ(all_reduce_algorithm(*child, 17), Algorithm::kTwoShot);
    }
    c.tuning.host_one_shot_max_bytes = 4096;
    auto set = env.make_comm({.name = "set-in-code", .config = c});
    EXPECT_EQ(all_reduce_algorithm(*set, 1024), Algorithm::kOneShot);  // 4096 bytes
  });
}

// One rank's file gives another threshold: kMismatch on every rank, naming the setting, the ranks whose values
// differ from each rank's own and where each rank's Tuning came from; then a communicator of one file works.
TEST(TuningFileRanks, RanksWithDifferentFilesFailOnEveryRankNamingThem) {
  TuningFiles files;
  const std::string same = files.write("same.json", {{3, 1024}});
  const std::string other = files.write("other.json", {{3, 2048}});
  expect_success(3, [&](RankEnv& env) {
    const int me = env.info.rank;
    Config c = env.config;
    c.tuning_file = me == 1 ? other : same;
    const auto t0 = SteadyClock::now();
    const Error e = expect_error(ErrorCode::kMismatch, [&] { env.make_comm({.name = "differ", .config = c}); });
    EXPECT_LT(SteadyClock::now() - t0, env.config.timeout);  // found at once, not at a deadline
    const std::string what = e.what();
    EXPECT_NE(what.find("SYMCOMM_HOST_ONE_SHOT_MAX_BYTES: 1024 on ranks 0,2, 2048 on rank 1"), std::string::npos)
        << what;
    EXPECT_NE(what.find(fmt::format("rank 1: tuning file '{}', its entry for 3 ranks on 'host'", other)),
              std::string::npos)
        << what;
    EXPECT_EQ(e.ranks(), me == 1 ? std::vector<int>({0, 2}) : std::vector<int>({1})) << what;
    // Different paths with the same values agree.
    const std::string copy = files.write(fmt::format("copy{}.json", me), {{3, 1024}});
    c.tuning_file = me == 0 ? same : copy;
    auto comm = env.make_comm({.name = "agree", .config = c});
    EXPECT_EQ(all_reduce_algorithm(*comm, 257), Algorithm::kTwoShot);
  });
}

// A file that cannot be used on one rank fails the creation on every rank: that rank with its own error, the
// others with the same code naming it, at once; all ranks reading a malformed file each name it.
TEST(TuningFileRanks, AFileOneRankCannotReadFailsEveryRank) {
  TuningFiles files;
  const std::string good = files.write("good.json", {{3, 1024}});
  const std::string bad = files.write_text("bad.json", R"({"format": "symcomm-tuning", "version": 1, "entries": [)");
  expect_success(3, [&](RankEnv& env) {
    const int me = env.info.rank;
    Config c = env.config;
    c.tuning_file = me == 2 ? bad : good;
    const auto t0 = SteadyClock::now();
    Error e = expect_error(ErrorCode::kInvalidArgument, [&] { env.make_comm({.name = "one-bad", .config = c}); });
    EXPECT_LT(SteadyClock::now() - t0, env.config.timeout);
    std::string what = e.what();
    EXPECT_NE(what.find(fmt::format("tuning file '{}': not valid JSON", bad)), std::string::npos) << what;
    if (me != 2) {
      EXPECT_NE(what.find("rank 2 could not resolve its configuration"), std::string::npos) << what;
      EXPECT_EQ(e.ranks(), std::vector<int>({2})) << what;
    }
    c.tuning_file = bad;
    e = expect_error(ErrorCode::kInvalidArgument, [&] { env.make_comm({.name = "all-bad", .config = c}); });
    what = e.what();
    EXPECT_NE(what.find(fmt::format("tuning file '{}': not valid JSON", bad)), std::string::npos) << what;
    c.tuning_file = good;
    auto comm = env.make_comm({.name = "after", .config = c});
    EXPECT_EQ(all_reduce_algorithm(*comm, 257), Algorithm::kTwoShot);
  });
}

}  // namespace
}  // namespace symcomm::testing
