// symcomm-tune's derivation (bench/tune/derive.h, NOTE [threshold derivation]) as tables: given the time of each
// path at each size, the segmentation and the Tuning fields; and its file output (bench/tune/output.h): merged
// entries, other entries kept, a file that is not a tuning file refused.
#if defined(SYMCOMM_HAVE_TUNE)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/tuning_file.h"
#include "symcomm/error.h"
#include "tune/derive.h"
#include "tune/output.h"

namespace symcomm::tune {
namespace {

constexpr size_t kKB = size_t{1} << 10, kMB = size_t{1} << 20;
constexpr double kInf = std::numeric_limits<double>::infinity();

/// Rows of (path -> time in us) per size; a missing path was not measured there.
using Times = std::vector<std::pair<size_t, std::map<std::string, double>>>;

std::vector<Sample> samples_of(const std::string& collective, const Times& rows) {
  std::vector<Sample> out;
  for (const auto& [bytes, paths] : rows) {
    for (const auto& [path, us] : paths) {
      out.push_back({.collective = collective, .path = path, .bytes = bytes, .time_us = us, .wrong = 0});
    }
  }
  return out;
}

std::vector<Sample> operator+(std::vector<Sample> a, const std::vector<Sample>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The derived fields as a map (absent: not derived).
std::map<std::string, size_t> fields_of(const Derived& d) { return {d.fields.begin(), d.fields.end()}; }

std::vector<size_t> ends_of(const std::vector<std::vector<double>>& counted,
                            const std::vector<std::vector<double>>& raw = {}) {
  const Segmentation s = best_segmentation(counted, raw.empty() ? counted : raw);
  EXPECT_TRUE(s.feasible);
  return s.ends;
}

// --- best_segmentation: losses in, ranges out -----------------------------------------------------------------

TEST(TuneSegmentation, EachPathTakesTheSizesItWins) {
  // Two paths, four sizes: A wins the first two, B the last two.
  EXPECT_EQ(ends_of({{0, 0, 0.5, 0.5}, {0.5, 0.5, 0, 0}}), (std::vector<size_t>{2, 4}));
  // Three paths; B never wins: its range is empty.
  EXPECT_EQ(ends_of({{0, 0.9, 0.9}, {0.5, 0.5, 0.5}, {0.9, 0, 0}}), (std::vector<size_t>{1, 1, 3}));
  // One path wins everything.
  EXPECT_EQ(ends_of({{0, 0, 0}, {0.2, 0.2, 0.2}}), (std::vector<size_t>{3, 3}));
  EXPECT_EQ(ends_of({{0.2, 0.2, 0.2}, {0, 0, 0}}), (std::vector<size_t>{0, 3}));
}

TEST(TuneSegmentation, TheOrderIsMonotoneWhateverTheData) {
  // A, B, A, B at four sizes: no path may come back; the least total loss is A | B from the second size
  // (loss 0.1 at size 3) rather than A up to the third (loss 0.5 at size 2).
  EXPECT_EQ(ends_of({{0, 0.5, 0, 0.6}, {0.4, 0, 0.1, 0}}), (std::vector<size_t>{1, 4}));
}

TEST(TuneSegmentation, APathThatCannotServeASizeIsNotGivenIt) {
  // B is fastest everywhere but cannot serve the second size (beyond its buffer, or wrong there): A keeps the
  // first two sizes, B takes the last.
  EXPECT_EQ(ends_of({{0.3, 0.3, 0.3}, {0, kInf, 0}}), (std::vector<size_t>{2, 3}));
  // B cannot serve the last size: A everywhere, since nothing follows B.
  EXPECT_EQ(ends_of({{0.3, 0.3, 0.3}, {0, 0, kInf}}), (std::vector<size_t>{3, 3}));
  // No path can serve size 1: infeasible.
  EXPECT_FALSE(best_segmentation({{0, kInf}, {0, kInf}}, {{0, kInf}, {0, kInf}}).feasible);
}

TEST(TuneSegmentation, TiesGoToFewerRangesThenToTheLowerRawLoss) {
  // Counted losses (after the tolerance) are 0 for A and C everywhere they are given; B is 1% ahead of A at
  // size 2 (raw), within the tolerance: A A A C C (two ranges) beats A A B C C (three) despite its raw loss.
  const std::vector<std::vector<double>> counted = {
      {0, 0, 0, 0.5, 0.5}, {0.5, 0.5, 0, 0.5, 0.5}, {0.5, 0.5, 0.5, 0, 0}};
  const std::vector<std::vector<double>> raw = {{0, 0, 0.01, 0.5, 0.5}, {0.5, 0.5, 0, 0.5, 0.5}, {0.5, 0.5, 0.5, 0, 0}};
  EXPECT_EQ(ends_of(counted, raw), (std::vector<size_t>{3, 3, 5}));
  // Two equally short tables: the lower raw loss decides (A | B at size 2, where B is 1% ahead).
  EXPECT_EQ(ends_of({{0, 0, 0, 0.5}, {0.5, 0.5, 0, 0}}, {{0, 0, 0.01, 0.5}, {0.5, 0.5, 0, 0}}),
            (std::vector<size_t>{2, 4}));
}

// --- derive(): samples in, Tuning fields out -------------------------------------------------------------------

const Times kHostCrossing = {{4 * kKB, {{"one_shot", 10}, {"two_shot", 20}}},
                             {16 * kKB, {{"one_shot", 12}, {"two_shot", 20}}},
                             {64 * kKB, {{"one_shot", 30}, {"two_shot", 32}}},
                             {256 * kKB, {{"one_shot", 90}, {"two_shot", 50}}},
                             {1 * kMB, {{"one_shot", 300}, {"two_shot", 150}}}};

TEST(TuneDerive, HostOneShotMaxIsTheGeometricMeanOfTheSizesAroundTheCrossing) {
  const Derived d = derive(BackendKind::kHost, samples_of("all_reduce", kHostCrossing));
  // One-shot up to 64 KB (two-shot's 6.7% loss there is above the tolerance), two-shot from 256 KB.
  EXPECT_EQ(fields_of(d), (std::map<std::string, size_t>{{"host_one_shot_max_bytes", 128 * kKB}}));
  ASSERT_EQ(d.chains.size(), 1u);
  EXPECT_EQ(d.chains[0].chosen, (std::vector<int>{0, 0, 0, 1, 1}));
}

TEST(TuneDerive, HostOnePathEverywhere) {
  Times one = kHostCrossing, two = kHostCrossing;
  for (auto& [bytes, t] : one) t["one_shot"] = t["two_shot"] / 2;
  for (auto& [bytes, t] : two) t["two_shot"] = t["one_shot"] / 2;
  EXPECT_EQ(fields_of(derive(BackendKind::kHost, samples_of("all_reduce", one)))["host_one_shot_max_bytes"], SIZE_MAX);
  EXPECT_EQ(fields_of(derive(BackendKind::kHost, samples_of("all_reduce", two)))["host_one_shot_max_bytes"], 0u);
}

TEST(TuneDerive, AGainWithinTheToleranceDoesNotGetARange) {
  // One-shot wins everywhere but at 1 MB, where two-shot is 2% faster (noise): one-shot at every size.
  Times t = kHostCrossing;
  for (auto& [bytes, row] : t) row["two_shot"] = row["one_shot"] * 1.5;
  t.back().second = {{"one_shot", 102}, {"two_shot", 100}};
  EXPECT_EQ(fields_of(derive(BackendKind::kHost, samples_of("all_reduce", t)))["host_one_shot_max_bytes"], SIZE_MAX);
  // Counted without a tolerance, the 2% gives two-shot the last size.
  EXPECT_EQ(
      fields_of(derive(BackendKind::kHost, samples_of("all_reduce", t), {.tolerance = 0}))["host_one_shot_max_bytes"],
      512 * kKB);
  // A tolerance of 1% counts it too.
  EXPECT_EQ(fields_of(derive(BackendKind::kHost, samples_of("all_reduce", t),
                             {.tolerance = 0.01}))["host_one_shot_max_bytes"],
            512 * kKB);
}

TEST(TuneDerive, NoiseWithinTheToleranceDoesNotMoveTheBoundary) {
  // Two-shot is 2% faster at 16 KB (noise): one-shot still keeps 4-64 KB.
  Times noisy = kHostCrossing;
  noisy[1].second = {{"one_shot", 20.4}, {"two_shot", 20}};
  EXPECT_EQ(fields_of(derive(BackendKind::kHost, samples_of("all_reduce", noisy)))["host_one_shot_max_bytes"],
            128 * kKB);
  // With no tolerance the 2% counts, but starting two-shot at 16 KB would cost its 6.7% at 64 KB: it stays.
  EXPECT_EQ(fields_of(derive(BackendKind::kHost, samples_of("all_reduce", noisy),
                             {.tolerance = 0}))["host_one_shot_max_bytes"],
            128 * kKB);
}

TEST(TuneDerive, AWrongResultDisqualifiesThePathAtThatSizeAndIsReported) {
  std::vector<Sample> s = samples_of("all_reduce", kHostCrossing);
  for (Sample& x : s) {
    if (x.path == "one_shot" && x.bytes == 16 * kKB) x.wrong = 3;
  }
  const Derived d = derive(BackendKind::kHost, s);
  // One-shot cannot serve 16 KB, and two-shot cannot hand sizes back: two-shot from 16 KB on.
  EXPECT_EQ(fields_of(d)["host_one_shot_max_bytes"], 8 * kKB);
  ASSERT_EQ(d.disqualified.size(), 1u);
  EXPECT_EQ(d.disqualified[0], "all_reduce one_shot at 16384 bytes: 3 wrong elements");
}

// CUDA all-reduce: LL wins up to 16 KB, LL128 64-256 KB, the staged one-shot 1 MB, the LL128 two-shot 4 MB,
// two-shot pulling 16 MB, pushing 64 MB, NCCL 256 MB. LL was measured up to 256 KB only (its buffer), LL128 up
// to 4 MB, the LL128 two-shot up to 8 MB.
Times cuda_all_reduce() {
  Times t;
  const std::vector<size_t> sizes = {4 * kKB, 16 * kKB, 64 * kKB, 256 * kKB, kMB,
                                     4 * kMB, 16 * kMB, 64 * kMB, 256 * kMB};
  const std::vector<std::string> winner = {
      "ll", "ll", "ll128", "ll128", "one_shot", "ll128_two_shot", "two_shot", "two_shot_push", "nccl"};
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::map<std::string, double> row;
    const double base = 5.0 + static_cast<double>(sizes[k]) / 1e4;
    for (const char* p : {"ll", "ll128", "one_shot", "ll128_two_shot", "two_shot", "two_shot_push", "nccl"}) {
      if (std::string(p) == "ll" && sizes[k] > 256 * kKB) continue;
      if (std::string(p) == "ll128" && sizes[k] > 4 * kMB) continue;
      if (std::string(p) == "ll128_two_shot" && sizes[k] > 8 * kMB) continue;
      row[p] = winner[k] == p ? base : base * 1.5;
    }
    t.emplace_back(sizes[k], row);
  }
  return t;
}

TEST(TuneDerive, CudaAllReduceChainGivesEveryThreshold) {
  const Derived d = derive(BackendKind::kCuda, samples_of("all_reduce", cuda_all_reduce()));
  EXPECT_EQ(fields_of(d), (std::map<std::string, size_t>{
                              {"cuda_ll_max_bytes", 32 * kKB},
                              {"cuda_ll128_max_bytes", 512 * kKB},
                              {"cuda_one_shot_max_bytes", 2 * kMB},
                              {"cuda_ll128_two_shot_max_bytes", 8 * kMB},
                              {"cuda_two_shot_push_min_bytes", 32 * kMB + 1},
                              // Only the all-reduce measured: NCCL's start is cuda_nccl_min_bytes alone.
                              {"cuda_two_shot_max_bytes", SIZE_MAX},
                              {"cuda_nccl_min_bytes", 128 * kMB + 1},
                          }));
  // The fields come in the config table's order.
  ASSERT_EQ(d.fields.size(), 7u);
  EXPECT_EQ(d.fields[0].first, "cuda_one_shot_max_bytes");
}

TEST(TuneDerive, CudaPathsThatServeTheEndsKeepServingBeyondThem) {
  // LL everywhere it fits (4-256 KB measured): its threshold is its field's maximum, the buffer; LL128 and
  // the staged one-shot then get no measured size.
  Times t;
  for (size_t b : {4 * kKB, 64 * kKB, 256 * kKB})
    t.push_back({b, {{"ll", 2}, {"ll128", 4}, {"one_shot", 5}, {"two_shot", 6}, {"two_shot_push", 7}, {"nccl", 9}}});
  const auto f = fields_of(derive(BackendKind::kCuda, samples_of("all_reduce", t)));
  EXPECT_EQ(f.at("cuda_ll_max_bytes"), kMB);
  EXPECT_EQ(f.at("cuda_ll128_max_bytes"), 4 * kMB);
  EXPECT_EQ(f.at("cuda_one_shot_max_bytes"), SIZE_MAX);
  EXPECT_EQ(f.at("cuda_ll128_two_shot_max_bytes"), 0u);       // serves no size
  EXPECT_EQ(f.at("cuda_two_shot_push_min_bytes"), SIZE_MAX);  // never reached
  EXPECT_EQ(f.at("cuda_nccl_min_bytes"), SIZE_MAX);
}

TEST(TuneDerive, WithoutNcclMeasuredItsFieldsAreLeftOut) {
  Times t = cuda_all_reduce();
  for (auto& [bytes, row] : t) row.erase("nccl");
  Times g = {{4 * kKB, {{"ll", 2}, {"direct", 5}}}, {64 * kKB, {{"ll", 4}, {"direct", 3}}}};
  const auto f = fields_of(derive(BackendKind::kCuda, samples_of("all_reduce", t) + samples_of("all_gather", g)));
  EXPECT_FALSE(f.contains("cuda_nccl_min_bytes"));
  EXPECT_FALSE(f.contains("cuda_two_shot_max_bytes"));
  EXPECT_FALSE(f.contains("cuda_direct_nccl_max_bytes"));
  EXPECT_EQ(f.at("cuda_ll_gather_max_bytes"), 16 * kKB);
  EXPECT_EQ(f.at("cuda_two_shot_push_min_bytes"), 32 * kMB + 1);
}

// Gathers: NCCL at 4 KB, LL 16-64 KB, direct 256 KB-16 MB, NCCL from 64 MB, for all-gather and reduce-scatter.
Times cuda_gather(double nccl_large_factor) {
  Times t;
  const std::vector<size_t> sizes = {4 * kKB, 16 * kKB, 64 * kKB, 256 * kKB, 16 * kMB, 64 * kMB, 256 * kMB};
  const std::vector<std::string> winner = {"nccl", "ll", "ll", "direct", "direct", "nccl", "nccl"};
  for (size_t k = 0; k < sizes.size(); ++k) {
    const double base = 5.0 + static_cast<double>(sizes[k]) / 1e4;
    std::map<std::string, double> row;
    for (const char* p : {"nccl", "ll", "direct"}) {
      if (std::string(p) == "ll" && sizes[k] > 256 * kKB) continue;
      row[p] = winner[k] == p ? base : base * (k >= 5 && std::string(p) == "direct" ? nccl_large_factor : 1.5);
    }
    t.emplace_back(sizes[k], row);
  }
  return t;
}

TEST(TuneDerive, CudaGatherChainGivesItsThresholds) {
  const auto g = cuda_gather(1.5);
  const Derived d = derive(BackendKind::kCuda, samples_of("all_gather", g) + samples_of("reduce_scatter", g));
  EXPECT_EQ(fields_of(d), (std::map<std::string, size_t>{{"cuda_direct_nccl_max_bytes", 8 * kKB},
                                                         {"cuda_ll_gather_max_bytes", 128 * kKB},
                                                         {"cuda_ll128_gather_max_bytes", 0},
                                                         {"cuda_ll128_reduce_scatter_max_bytes", 0},
                                                         {"cuda_nccl_min_bytes", 32 * kMB + 1}}));
}

TEST(TuneDerive, CudaGatherChainGivesTheLL128RangeBetweenLLAndDirect) {
  // LL fastest up to 16 KB, LL128 at 64-256 KB, direct from 1 MB; LL128 is not measured beyond its buffer.
  Times g;
  for (size_t b : {4 * kKB, 16 * kKB, 64 * kKB, 256 * kKB, kMB, 16 * kMB}) {
    std::map<std::string, double> row = {{"direct", b >= kMB ? 10.0 : 20.0}};
    if (b <= 256 * kKB) row["ll"] = b <= 16 * kKB ? 5.0 : 30.0;
    if (b <= 4 * kMB) row["ll128"] = b <= 16 * kKB ? 8.0 : b <= 256 * kKB ? 9.0 : 15.0;
    g.emplace_back(b, row);
  }
  const auto f = fields_of(derive(BackendKind::kCuda, samples_of("all_gather", g) + samples_of("reduce_scatter", g)));
  EXPECT_EQ(f.at("cuda_ll_gather_max_bytes"), 32 * kKB);      // between 16 and 64 KB
  EXPECT_EQ(f.at("cuda_ll128_gather_max_bytes"), 512 * kKB);  // between 256 KB and 1 MB
  EXPECT_EQ(f.at("cuda_ll128_reduce_scatter_max_bytes"), 512 * kKB);
}

TEST(TuneDerive, ReduceScatterLeavesLL128WhereItsOwnTimesSay) {
  // LL up to 16 KB for both; the all-gather's direct kernel wins from 1 MB, the reduce-scatter's only from 4 MB.
  // One shared bound would cost one of them 20-50% at 1-2 MB; each gets its own, the rest of the chain shared.
  auto times = [](size_t direct_from) {
    Times t;
    for (size_t b : {4 * kKB, 16 * kKB, 64 * kKB, 256 * kKB, kMB, 2 * kMB, 4 * kMB, 16 * kMB}) {
      std::map<std::string, double> row = {{"direct", b >= direct_from ? 10.0 : 15.0}};
      if (b <= 256 * kKB) row["ll"] = b <= 16 * kKB ? 5.0 : 30.0;
      if (b <= 4 * kMB) row["ll128"] = b <= 16 * kKB ? 8.0 : b < direct_from ? 9.0 : 12.0;
      t.emplace_back(b, row);
    }
    return t;
  };
  const Derived d =
      derive(BackendKind::kCuda, samples_of("all_gather", times(kMB)) + samples_of("reduce_scatter", times(4 * kMB)));
  const auto f = fields_of(d);
  EXPECT_EQ(f.at("cuda_ll_gather_max_bytes"), 32 * kKB);
  EXPECT_EQ(f.at("cuda_ll128_gather_max_bytes"), 512 * kKB);        // between 256 KB and 1 MB
  EXPECT_EQ(f.at("cuda_ll128_reduce_scatter_max_bytes"), 2965820);  // between 2 and 4 MB
  // The report's "chosen" column at 2 MB: each collective's own path.
  const std::string report =
      format_report(d, samples_of("all_gather", times(kMB)) + samples_of("reduce_scatter", times(4 * kMB)));
  auto chosen_at = [&](const std::string& collective, size_t bytes) {
    const size_t section = report.find("# " + collective + ":");
    const size_t row = report.find(fmt::format("\n{:>12} ", bytes), section);
    if (section == std::string::npos || row == std::string::npos) return std::string("(missing)");
    const size_t eol = report.find('\n', row + 1);
    const std::string line = report.substr(row + 1, eol - row - 1);
    return line.substr(line.find_last_of(' ') + 1);
  };
  EXPECT_EQ(chosen_at("all_gather", 2 * kMB), "direct");
  EXPECT_EQ(chosen_at("reduce_scatter", 2 * kMB), "ll128");
  EXPECT_EQ(chosen_at("reduce_scatter", 4 * kMB), "direct");
}

TEST(TuneDerive, OneNcclMinimumServesTheAllReduceAndTheGathers) {
  // The gathers want NCCL from 64 MB (direct 50% slower there, in two collectives); the all-reduce only from
  // 256 MB (NCCL 50% slower at 64 MB). cuda_nccl_min_bytes is shared: from 64 MB costs the all-reduce 50% once,
  // from 256 MB would cost the gathers 50% twice: 32 MB + 1, and the all-reduce's NCCL range is then
  // cuda_nccl_min_bytes's alone.
  const auto g = cuda_gather(1.5);
  const Times ar = cuda_all_reduce();
  auto f = fields_of(derive(BackendKind::kCuda, samples_of("all_reduce", ar) + samples_of("all_gather", g) +
                                                    samples_of("reduce_scatter", g)));
  EXPECT_EQ(f.at("cuda_nccl_min_bytes"), 32 * kMB + 1);
  EXPECT_EQ(f.at("cuda_two_shot_max_bytes"), SIZE_MAX);
  // With direct only 2% slower than NCCL from 64 MB for the gathers (a tie), the gathers need no NCCL range
  // (fewer ranges): cuda_nccl_min_bytes is never, and the all-reduce reaches NCCL through two-shot's end.
  const auto g_tie = cuda_gather(1.02);
  f = fields_of(derive(BackendKind::kCuda, samples_of("all_reduce", ar) + samples_of("all_gather", g_tie) +
                                               samples_of("reduce_scatter", g_tie)));
  EXPECT_EQ(f.at("cuda_nccl_min_bytes"), SIZE_MAX);
  EXPECT_EQ(f.at("cuda_two_shot_max_bytes"), 128 * kMB);
  // The all-reduce wanting NCCL before the gathers do: two-shot ends there (cuda_two_shot_max_bytes).
  Times early = cuda_all_reduce();
  early[6].second["nccl"] = 1;  // 16 MB
  early[7].second["nccl"] = 1;  // 64 MB
  f = fields_of(derive(BackendKind::kCuda, samples_of("all_reduce", early) + samples_of("all_gather", g) +
                                               samples_of("reduce_scatter", g)));
  EXPECT_EQ(f.at("cuda_nccl_min_bytes"), 32 * kMB + 1);
  EXPECT_EQ(f.at("cuda_two_shot_max_bytes"), 8 * kMB);
}

// --- the file output ---------------------------------------------------------------------------------------------

const char* kOtherEntry = R"({"format": "symcomm-tuning", "version": 1, "entries": [
  {"world_size": 3, "device": "host", "tuning": {"host_one_shot_max_bytes": 4096},
   "provenance": {"note": "kept as it is"}, "measurements": [{"bytes": 1}]}]})";

nlohmann::ordered_json entry_for(int world_size, size_t one_shot_max) {
  Derived d;
  d.fields = {{"host_one_shot_max_bytes", one_shot_max}};
  return make_entry(world_size, "host", d,
                    samples_of("all_reduce", {{4 * kKB, {{"one_shot", 1.5}, {"two_shot", 2.5}}}}),
                    {.date = "2026-01-01T00:00:00Z",
                     .machine = "m",
                     .command = "symcomm-tune --backend host",
                     .symcomm_version = "0.1.0",
                     .backend = "host",
                     .dtype = "float32",
                     .mode = "eager"});
}

TEST(TuneOutput, ANewFileHoldsTheEntryAndParses) {
  const std::string text = merge_entry("", "new.json", entry_for(2, 8192));
  const detail::TuningFile f = detail::parse_tuning_file(text, "new.json");
  ASSERT_EQ(f.entries.size(), 1u);
  EXPECT_EQ(f.entries[0].world_size, 2);
  EXPECT_EQ(f.entries[0].device, "host");
  EXPECT_EQ(f.entries[0].values, (std::vector<std::pair<std::string, size_t>>{{"host_one_shot_max_bytes", 8192}}));
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["entries"][0]["provenance"]["command"], "symcomm-tune --backend host");
  EXPECT_EQ(j["entries"][0]["measurements"].size(), 2u);
}

TEST(TuneOutput, EntriesOfOtherWorldSizesAreKeptAndTheSameOneReplaced) {
  std::string text = merge_entry(kOtherEntry, "t.json", entry_for(2, 8192));
  text = merge_entry(text, "t.json", entry_for(2, 16384));
  const detail::TuningFile f = detail::parse_tuning_file(text, "t.json");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.find(3, "host")->values[0].second, 4096u);
  EXPECT_EQ(f.find(2, "host")->values[0].second, 16384u);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["entries"][0]["provenance"]["note"], "kept as it is");
  EXPECT_EQ(j["entries"][0]["measurements"][0]["bytes"], 1);
}

TEST(TuneOutput, AFileThatIsNotATuningFileIsNotOverwritten) {
  for (const char* text : {"{\"some\": \"other json\"}", "not json"}) {
    try {
      merge_entry(text, "other.json", entry_for(2, 8192));
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(e.message().find("other.json"), std::string::npos) << e.message();
    }
  }
}

TEST(TuneOutput, RederiveReplacesEachEntrysThresholdsByTheDerivationOfItsMeasurements) {
  // The entry claims 1 byte; its measurements (one-shot fastest at the only size) give one-shot every size.
  const std::string text = rederive(merge_entry("", "t.json", entry_for(2, 1)), "t.json", {});
  const detail::TuningFile f = detail::parse_tuning_file(text, "t.json");
  ASSERT_EQ(f.entries.size(), 1u);
  EXPECT_EQ(f.entries[0].values, (std::vector<std::pair<std::string, size_t>>{{"host_one_shot_max_bytes", SIZE_MAX}}));
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["entries"][0]["provenance"]["command"], "symcomm-tune --backend host");
  EXPECT_EQ(j["entries"][0]["measurements"].size(), 2u);
}

TEST(TuneOutput, RederiveRefusesMeasurementsItCannotRead) {
  try {
    rederive(kOtherEntry, "other.json", {});  // its measurement has bytes only
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("other.json"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace symcomm::tune
#endif  // SYMCOMM_HAVE_TUNE
