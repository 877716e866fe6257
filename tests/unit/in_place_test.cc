// check_in_place (NOTE [in place] in src/algos/request.h): which overlaps of a collective's input and output are
// accepted. The reference works in elements: it lists the elements each buffer covers and accepts a placement when
// the sets are disjoint or the input sits exactly where the collective's in-place form puts it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "algos/request.h"
#include "base/check.h"

namespace symcomm::detail {
namespace {

constexpr int kWorld = 4;
constexpr size_t kCount = 3;
float g_mem[256];

bool accepted(const Request& r, int rank) {
  try {
    check_in_place(r, rank, kWorld);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return false;
  }
  return true;
}

/// Whether the reference accepts the input at element `in_at` and the output at `out_at` of g_mem.
bool reference(Collective kind, int rank, int root, long in_at, long out_at) {
  const long n = static_cast<long>(kCount), w = kWorld;
  long in_len = n, out_len = n;
  if (kind == Collective::kAllGather) out_len = n * w;
  if (kind == Collective::kReduceScatter) in_len = n * w;
  if (kind == Collective::kAllToAll) in_len = out_len = n * w;
  if (kind == Collective::kBroadcast && rank != root) return true;  // the input is not read
  std::set<long> in, out;
  for (long i = 0; i < in_len; ++i) in.insert(in_at + i);
  for (long i = 0; i < out_len; ++i) out.insert(out_at + i);
  std::vector<long> both;
  std::set_intersection(in.begin(), in.end(), out.begin(), out.end(), std::back_inserter(both));
  if (both.empty()) return true;
  switch (kind) {
    case Collective::kAllGather: return in_at == out_at + rank * n;
    case Collective::kReduceScatter: return out_at == in_at + rank * n;
    default: return in_at == out_at;
  }
}

TEST(InPlace, EveryPlacementOfInputAndOutput) {
  const Collective kinds[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kBroadcast, Collective::kAllToAll};
  const long base = 64, span = static_cast<long>(kCount) * kWorld + 2;
  int accepted_overlaps = 0, refused = 0;
  for (Collective kind : kinds) {
    for (int rank = 0; rank < kWorld; ++rank) {
      for (long shift = -span; shift <= span; ++shift) {
        const Request r{.kind = kind,
                        .in = g_mem + base + shift,
                        .out = g_mem + base,
                        .count = kCount,
                        .dtype = DataType::kFloat32,
                        .root = 2,
                        .options = {}};
        SCOPED_TRACE(testing::Message() << to_string(kind) << " rank " << rank << " input at output + " << shift);
        const bool want = reference(kind, rank, 2, base + shift, base);
        EXPECT_EQ(accepted(r, rank), want);
        refused += !want;
        accepted_overlaps += want && std::abs(shift) < static_cast<long>(kCount);
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted_overlaps, 0);
}

TEST(InPlace, WhatIsNotChecked) {
  // Nothing to overlap: count 0, a barrier, point-to-point (one buffer each).
  Request r{.kind = Collective::kAllReduce, .in = g_mem, .out = g_mem + 1, .count = 0, .options = {}};
  EXPECT_TRUE(accepted(r, 0));
  r.kind = Collective::kBarrier;
  r.count = 8;
  EXPECT_TRUE(accepted(r, 0));
  r.kind = Collective::kAllReduce;
  EXPECT_FALSE(accepted(r, 0));
  r.p2p = P2pDir::kSend;
  r.peer = 1;
  EXPECT_TRUE(accepted(r, 0));
  // Elements of two bytes: the own block of rank 3 is 3 * count * 2 bytes into the output.
  const Request ag{.kind = Collective::kAllGather,
                   .in = reinterpret_cast<char*>(g_mem) + 3 * 5 * 2,
                   .out = g_mem,
                   .count = 5,
                   .dtype = DataType::kBFloat16,
                   .options = {}};
  EXPECT_TRUE(accepted(ag, 3));
  EXPECT_FALSE(accepted(ag, 2));
}

}  // namespace
}  // namespace symcomm::detail
