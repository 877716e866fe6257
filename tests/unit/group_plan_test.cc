// The pure planning functions of the CUDA multi-tensor groups (src/algos/group_plan.h), as tables.
#include "algos/group_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace symcomm::detail {
namespace {

using Ops = std::vector<std::pair<Request, Algorithm>>;

Request req(Collective kind, DataType dt = DataType::kBFloat16, ReduceOp op = ReduceOp::kSum, size_t count = 100) {
  return Request{
      .kind = kind, .in = nullptr, .out = nullptr, .count = count, .dtype = dt, .op = op, .root = 0, .options = {}};
}

std::vector<size_t> run_ends(const Ops& ops) {
  std::vector<size_t> ends;
  for (size_t i = 0; i < ops.size(); i = group_run_end(ops, i)) ends.push_back(group_run_end(ops, i));
  return ends;
}

TEST(GroupPlan, RunsSplitWhereKindDtypeOpStreamOrOptionsChange) {
  const auto ar = Collective::kAllReduce, rs = Collective::kReduceScatter, ag = Collective::kAllGather;
  auto on_stream = [](Request r, uintptr_t s) {
    r.options.stream = reinterpret_cast<Stream>(s);
    return r;
  };
  auto forced = [](Request r) {
    r.options.algorithm = Algorithm::kTwoShot;
    return r;
  };
  auto low = [](Request r) {
    r.options.contention = Contention::kLow;
    return r;
  };
  struct Row {
    const char* what;
    std::vector<Request> ops;
    std::vector<size_t> ends;
  };
  const std::vector<Row> rows = {
      {"one run", {req(ar), req(ar), req(ar)}, {3}},
      {"kind changes", {req(ar), req(ar), req(rs), req(rs), req(ag)}, {2, 4, 5}},
      {"dtype changes", {req(ar), req(ar, DataType::kFloat32), req(ar, DataType::kFloat32)}, {1, 3}},
      {"op changes", {req(ar), req(ar, DataType::kBFloat16, ReduceOp::kMax)}, {1, 2}},
      {"all-gather ignores op", {req(ag), req(ag, DataType::kBFloat16, ReduceOp::kMax)}, {2}},
      {"stream changes", {req(ar), on_stream(req(ar), 16), on_stream(req(ar), 16)}, {1, 3}},
      {"forced algorithm stands alone", {req(ar), forced(req(ar)), req(ar)}, {1, 2, 3}},
      {"contention changes", {req(ar), low(req(ar))}, {1, 2}},
      {"zero count stands alone", {req(ar), req(ar, DataType::kBFloat16, ReduceOp::kSum, 0), req(ar)}, {1, 2, 3}},
      {"broadcast and barrier never fuse",
       {req(Collective::kBroadcast), req(Collective::kBroadcast), req(Collective::kBarrier), req(Collective::kBarrier)},
       {1, 2, 3, 4}},
      {"all-to-all never fuses", {req(Collective::kAllToAll), req(Collective::kAllToAll)}, {1, 2}},
  };
  for (const Row& row : rows) {
    Ops ops;
    for (const Request& r : row.ops) ops.emplace_back(r, Algorithm::kAuto);
    EXPECT_EQ(run_ends(ops), row.ends) << row.what;
  }
}

TEST(GroupPlan, VirtualOffsetsArePaddedBetweenTensorsOnly) {
  struct Row {
    std::vector<uint64_t> counts;
    uint64_t align;
    std::vector<uint64_t> offsets;
    uint64_t total;
  };
  const std::vector<Row> rows = {
      {{}, 8, {}, 0},
      {{5}, 8, {0}, 5},
      {{5, 3, 8, 1}, 8, {0, 8, 16, 24}, 25},
      {{16, 16}, 16, {0, 16}, 32},
      {{0, 7, 0, 9}, 4, {0, 0, 8, 8}, 17},
      {{3, 3, 3}, 1, {0, 3, 6}, 9},
  };
  for (const Row& row : rows) {
    std::vector<uint64_t> off(row.counts.size());
    EXPECT_EQ(virtual_offsets(row.counts.data(), row.counts.size(), row.align, off.data()), row.total);
    EXPECT_EQ(off, row.offsets);
  }
}

}  // namespace
}  // namespace symcomm::detail
