// The native layer's pure parts: which NCCL calls run on symcomm and as what (native_plan.cc), the nodes of a
// communicator that spans them (span_node_keys), and the rendezvous stamp inside an ncclUniqueId (id_stamp.cc).

#include "native_plan.h"

#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "id_stamp.h"

namespace symcomm::nccl_shim {
namespace {

constexpr ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                        ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                        ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
constexpr ncclRedOp_t kAllOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

bool is_float_type(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
}

// NCCL's semantics, written out independently of map_reduction's switch: which (type, op) pairs symcomm
// reproduces exactly, and with which of its types.
struct Expected {
  bool ok;
  DataType type;
};
Expected expected_reduction(ncclDataType_t t, ncclRedOp_t op) {
  if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2) return {false, {}};
  if (op == ncclAvg && !is_float_type(t)) return {false, {}};
  const bool order_free_bits = op == ncclSum || op == ncclProd;  // two's complement: signedness does not matter
  if ((t == ncclUint32 || t == ncclUint64) && !order_free_bits) return {false, {}};
  switch (t) {
    case ncclInt8: return {true, DataType::kInt8};
    case ncclUint8: return {true, DataType::kUInt8};
    case ncclInt32:
    case ncclUint32: return {true, DataType::kInt32};
    case ncclInt64:
    case ncclUint64: return {true, DataType::kInt64};
    case ncclFloat16: return {true, DataType::kFloat16};
    case ncclFloat32: return {true, DataType::kFloat32};
    case ncclFloat64: return {true, DataType::kFloat64};
    case ncclBfloat16: return {true, DataType::kBFloat16};
    default: return {false, {}};
  }
}

TEST(NativePlan, ReductionsMapExactlyWhereSymcommHasNcclsSemantics) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
  for (ncclDataType_t t : kAllTypes) {
    for (size_t i = 0; i < std::size(kAllOps); ++i) {
      SCOPED_TRACE(testing::Message() << "type " << t << " op " << kAllOps[i]);
      DataType got_type = DataType::kFloat64;
      ReduceOp got_op = ReduceOp::kAvg;
      const Expected e = expected_reduction(t, kAllOps[i]);
      ASSERT_EQ(map_reduction(t, kAllOps[i], &got_type, &got_op), e.ok);
      if (e.ok) {
        EXPECT_EQ(got_type, e.type);
        EXPECT_EQ(got_op, ops[i]);
      }
    }
  }
  DataType t;
  ReduceOp o;
  EXPECT_FALSE(map_reduction(ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps), &t, &o));  // a PreMulSum op
  EXPECT_FALSE(map_reduction(static_cast<ncclDataType_t>(99), ncclSum, &t, &o));
}

NativeLimits limits_of(size_t v) {
  NativeLimits l;
  for (size_t& m : l.max_bytes) m = v;
  return l;
}

TEST(NativePlan, PayloadBytesAreTheBufferEveryRankAgreesOn) {
  const NativeLimits all = limits_of(SIZE_MAX);
  for (int world : {2, 3, 8}) {
    for (ncclDataType_t t : {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64}) {
      const size_t size = nccl_type_size(t);
      const size_t count = 1000;
      const NativePlan ar = plan_call(NativeColl::kAllReduce, count, t, ncclSum, world, all, true);
      EXPECT_TRUE(ar.native);
      EXPECT_EQ(ar.bytes, count * size);
      EXPECT_EQ(ar.count, count);
      const NativePlan ag = plan_call(NativeColl::kAllGather, count, t, ncclSum, world, all, true);
      EXPECT_TRUE(ag.native);
      EXPECT_EQ(ag.bytes, count * size * world);  // the output
      EXPECT_EQ(ag.dtype, DataType::kUInt8);      // moved as bytes
      EXPECT_EQ(ag.count, count * size);
      const NativePlan rs = plan_call(NativeColl::kReduceScatter, count, t, ncclMax, world, all, true);
      EXPECT_TRUE(rs.native);
      EXPECT_EQ(rs.bytes, count * size * world);  // the input
      EXPECT_EQ(rs.count, count);
      const NativePlan bc = plan_call(NativeColl::kBroadcast, count, t, ncclSum, world, all, true);
      EXPECT_TRUE(bc.native);
      EXPECT_EQ(bc.bytes, count * size);
      EXPECT_EQ(bc.count, count * size);
    }
  }
}

TEST(NativePlan, AutoRespectsEachLimitToTheByteAndNativeOnlyIgnoresIt) {
  for (int c = 0; c < kNumNativeColls; ++c) {
    const auto coll = static_cast<NativeColl>(c);
    SCOPED_TRACE(native_coll_name(coll));
    const bool per_rank = coll == NativeColl::kAllGather || coll == NativeColl::kReduceScatter;
    const size_t limit = per_rank ? 4096 * 2 : 4096;  // 4096 bytes per rank at 2 ranks
    NativeLimits l = limits_of(SIZE_MAX);
    l.max_bytes[c] = limit;
    const size_t at = 1024;  // float32 elements: 4096 bytes per rank
    EXPECT_TRUE(plan_call(coll, at, ncclFloat32, ncclSum, 2, l, true).native);
    const NativePlan over = plan_call(coll, at + 1, ncclFloat32, ncclSum, 2, l, true);
    EXPECT_FALSE(over.native);
    EXPECT_STRNE(over.why_not, "");
    EXPECT_TRUE(plan_call(coll, at + 1, ncclFloat32, ncclSum, 2, l, false).native);
    l.max_bytes[c] = 0;
    EXPECT_FALSE(plan_call(coll, 1, ncclFloat32, ncclSum, 2, l, true).native);
  }
}

TEST(NativePlan, EmptyOverflowingOneRankAndUnknownTypeCallsAreForwarded) {
  const NativeLimits all = limits_of(SIZE_MAX);
  EXPECT_FALSE(plan_call(NativeColl::kAllReduce, 0, ncclFloat32, ncclSum, 2, all, false).native);
  EXPECT_FALSE(plan_call(NativeColl::kAllReduce, 10, ncclFloat32, ncclSum, 1, all, false).native);
  EXPECT_FALSE(plan_call(NativeColl::kAllGather, SIZE_MAX / 4, ncclFloat32, ncclSum, 2, all, false).native);
  EXPECT_FALSE(plan_call(NativeColl::kAllReduce, SIZE_MAX / 2, ncclFloat32, ncclSum, 2, all, false).native);
  EXPECT_FALSE(plan_call(NativeColl::kBroadcast, 10, static_cast<ncclDataType_t>(99), ncclSum, 2, all, false).native);
  // FP8 has no symcomm reduction, but gathers and broadcasts move its bytes.
  EXPECT_FALSE(plan_call(NativeColl::kAllReduce, 10, ncclFloat8e4m3, ncclSum, 2, all, false).native);
  EXPECT_TRUE(plan_call(NativeColl::kAllGather, 10, ncclFloat8e4m3, ncclSum, 2, all, false).native);
}

TEST(NativePlan, DefaultLimitsNeverShrinkWithSizeWithinAWorld) {
  for (int world = 2; world <= 64; ++world) {
    const NativeLimits l = default_limits(world);
    for (int c = 0; c < kNumNativeColls; ++c) {
      // A limit is a byte count the planner compares with: plans just below it run natively.
      const auto coll = static_cast<NativeColl>(c);
      if (l.max_bytes[c] == 0) continue;
      const size_t per_rank_div = (coll == NativeColl::kAllGather || coll == NativeColl::kReduceScatter) ? world : 1;
      const size_t count = l.max_bytes[c] / per_rank_div;
      if (count == 0) continue;
      EXPECT_TRUE(plan_call(coll, count, ncclUint8, ncclSum, world, l, true).native) << native_coll_name(coll);
    }
  }
}

ncclUniqueId nccl_like_id(uint64_t seed) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  std::mt19937_64 g(seed);
  for (size_t i = 0; i < 40; ++i) id.internal[i] = static_cast<char>(g());
  return id;
}

IdStamp some_stamp(uint64_t seed) {
  std::mt19937_64 g(seed);
  IdStamp s;
  s.port = static_cast<uint16_t>(1 + g() % 65535);
  s.host = g();
  for (auto& b : s.token) b = static_cast<uint8_t>(g());
  s.nonce = g();
  return s;
}

// Every rank's words of the spanning agreement: hosts[r] and ports[r], the rest filled with r's own values.
std::vector<int64_t> span_words(const std::vector<int64_t>& hosts, const std::vector<int64_t>& ports) {
  std::vector<int64_t> w;
  for (size_t r = 0; r < hosts.size(); ++r) {
    const int64_t mine[kSpanWords] = {hosts[r], 1000 + static_cast<int64_t>(r), ports[r], 7, 8, 99, hosts[r]};
    w.insert(w.end(), mine, mine + kSpanWords);
  }
  return w;
}

TEST(SpanNodes, HostsGiveNodesKeyedByTheirLowestRank) {
  std::vector<int64_t> keys;
  ASSERT_TRUE(span_node_keys(span_words({5, -3, 5, -3, 5, -3}, {1, 2, 3, 4, 5, 6}), 6, 0, 64, &keys));
  EXPECT_EQ(keys, (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  ASSERT_TRUE(span_node_keys(span_words({9, 9, 4}, {1, 0, 3}), 3, 0, 64, &keys));  // rank 1 needs no server
  EXPECT_EQ(keys, (std::vector<int64_t>{0, 0, 2}));
}

TEST(SpanNodes, FakeNodesAreConsecutiveRanksOfOneHost) {
  std::vector<int64_t> keys;
  ASSERT_TRUE(span_node_keys(span_words({5, 5, 5, 5, 5}, {1, 2, 3, 4, 5}), 5, 2, 64, &keys));
  EXPECT_EQ(keys, (std::vector<int64_t>{0, 0, 2, 2, 4}));
  ASSERT_TRUE(span_node_keys(span_words({5, 5, 6, 6}, {1, 2, 3, 4}), 4, 2, 64, &keys));  // within the hosts
  EXPECT_EQ(keys, (std::vector<int64_t>{0, 0, 2, 2}));
}

TEST(SpanNodes, NodesThatCannotMeetAreRefused) {
  std::vector<int64_t> keys;
  // A fake node across two hosts: rank 2 cannot reach rank 0's loopback server.
  EXPECT_FALSE(span_node_keys(span_words({5, 5, 6, 6}, {1, 2, 3, 4}), 4, 3, 64, &keys));
  // A node's lowest rank without a store server.
  EXPECT_FALSE(span_node_keys(span_words({5, 6, 5, 6}, {1, 0, 3, 4}), 4, 0, 64, &keys));
  // A node above the size limit.
  EXPECT_FALSE(span_node_keys(span_words({5, 5, 5, 6}, {1, 2, 3, 4}), 4, 0, 2, &keys));
  EXPECT_TRUE(span_node_keys(span_words({5, 5, 5, 6}, {1, 2, 3, 4}), 4, 0, 3, &keys));
  // Words of another world size.
  EXPECT_FALSE(span_node_keys(span_words({5, 5, 5}, {1, 2, 3}), 4, 0, 64, &keys));
  EXPECT_FALSE(span_node_keys({}, 0, 0, 64, &keys));
}

TEST(IdStamp, RoundTripsAndLeavesNcclsBytesUnchanged) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    ncclUniqueId id = nccl_like_id(seed);
    const ncclUniqueId before = id;
    const IdStamp s = some_stamp(seed * 31);
    ASSERT_TRUE(write_stamp(&id, s));
    EXPECT_EQ(std::memcmp(id.internal, before.internal, kStampOffset), 0);
    const auto got = read_stamp(id);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->port, s.port);
    EXPECT_EQ(got->host, s.host);
    EXPECT_EQ(got->token, s.token);
    EXPECT_EQ(got->nonce, s.nonce);
  }
}

TEST(IdStamp, AnIdWhoseStampBytesAreUsedIsLeftAlone) {
  for (size_t at = kStampOffset; at < sizeof(ncclUniqueId); ++at) {
    ncclUniqueId id = nccl_like_id(at);
    id.internal[at] = 1;
    const ncclUniqueId before = id;
    EXPECT_FALSE(write_stamp(&id, some_stamp(at)));
    EXPECT_EQ(std::memcmp(&id, &before, sizeof id), 0);
    EXPECT_FALSE(read_stamp(id).has_value());
  }
}

TEST(IdStamp, AnyChangedBitMakesTheIdUnstamped) {
  ncclUniqueId id = nccl_like_id(7);
  ASSERT_TRUE(write_stamp(&id, some_stamp(7)));
  for (size_t byte = 0; byte < sizeof id; ++byte) {
    for (int bit = 0; bit < 8; bit += 3) {
      ncclUniqueId changed = id;
      changed.internal[byte] = static_cast<char>(changed.internal[byte] ^ (1 << bit));
      EXPECT_FALSE(read_stamp(changed).has_value()) << "byte " << byte << " bit " << bit;
    }
  }
  ncclUniqueId zero;
  std::memset(&zero, 0, sizeof zero);
  EXPECT_FALSE(read_stamp(zero).has_value());
}

TEST(IdStamp, HostIdentityIsStable) {
  EXPECT_EQ(host_identity(), host_identity());
  EXPECT_NE(host_identity(), 0u);
}

}  // namespace
}  // namespace symcomm::nccl_shim
