// Communicators that span fake nodes (symcomm/multinode.h), run under mpirun at 4 ranks (2 nodes of 2) and 6
// ranks (3 nodes of 2) by ctest: every collective, dtype and op on each path (hierarchical, flat, kAuto), in place
// and out of place, on consecutive and round-robin nodes and on nodes of different sizes, against the exact
// reference of tests/harness/test_values.h; poisoned outputs with canaries behind them. Every rank runs every
// test; a rank's failures make the job fail (main below).

#include "symcomm/multinode.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <vector>

#include "algos/elements.h"
#include "harness/test_values.h"

namespace symcomm::testing {
namespace {

constexpr uint8_t kPoison = 0xA5;
constexpr size_t kCanary = 64;  // bytes behind every output that must stay poisoned

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

MultiNodeOptions options(int node_size, bool round_robin = false, std::string min_bytes = "") {
  MultiNodeOptions o;
  o.fake_node_size = node_size;
  o.fake_round_robin = round_robin;
  o.min_bytes = std::move(min_bytes);
  Config c;
  c.timeout = std::chrono::seconds(60);
  o.node.config = c;
  return o;
}

std::vector<uint8_t> poisoned(size_t bytes) { return std::vector<uint8_t>(bytes + kCanary, kPoison); }

void fill(uint8_t* p, size_t count, DataType d, uint64_t seed, int rank, size_t first, ReduceOp op, bool reduction) {
  for (size_t i = 0; i < count; ++i) {
    detail::store_element(d, p, i, input_value(seed, rank, first + i, op, d, reduction));
  }
}

// Checks `count` elements at p against want(i), within the tolerance of `op` (exact but for float avg), then the
// canary behind them; reports the first mismatch.
template <class F>
void expect_elements(const uint8_t* p, size_t count, DataType d, F want, const std::string& what,
                     ReduceOp op = ReduceOp::kSum) {
  for (size_t i = 0; i < count; ++i) {
    const double got = detail::load_element(d, p, i), w = want(i);
    if (std::fabs(got - w) > tolerance(op, d, w)) {
      ADD_FAILURE() << what << ": element " << i << " is " << got << ", expected " << w;
      return;
    }
  }
  const uint8_t* c = p + count * dtype_size(d);
  for (size_t i = 0; i < kCanary; ++i) {
    if (c[i] != kPoison) {
      ADD_FAILURE() << what << ": canary byte " << i << " behind the output was overwritten";
      return;
    }
  }
}

struct Shape {
  int node_size;
  bool round_robin;
};

const char* kPathNames[] = {"auto", "hierarchical", "flat"};

class MultiNode : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    comm_ = MultiNodeCommunicator::create(MPI_COMM_WORLD, options(GetParam().node_size, GetParam().round_robin));
  }
  std::unique_ptr<MultiNodeCommunicator> comm_;
};

std::vector<Hierarchy> paths_of(const MultiNodeCommunicator& c) {
  int sizes[2] = {c.local_world_size(), -c.local_world_size()};
  MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  const bool uniform = sizes[0] == -sizes[1] && sizes[0] > 1;
  if (c.num_nodes() > 1 && uniform) return {Hierarchy::kAuto, Hierarchy::kHierarchical, Hierarchy::kFlat};
  return {Hierarchy::kAuto, Hierarchy::kFlat};
}

TEST_P(MultiNode, LayoutNamesEveryRanksNode) {
  const int n = world_size(), size = GetParam().node_size, nodes = (n + size - 1) / size;
  EXPECT_EQ(comm_->world_size(), n);
  EXPECT_EQ(comm_->rank(), world_rank());
  EXPECT_EQ(comm_->num_nodes(), nodes);
  const int node = GetParam().round_robin ? world_rank() % nodes : world_rank() / size;
  EXPECT_EQ(comm_->node(), node);
  EXPECT_EQ(comm_->node_communicator().world_size(), comm_->local_world_size());
  EXPECT_EQ(comm_->node_communicator().rank(), comm_->local_rank());
}

TEST_P(MultiNode, AllReduceEveryDtypeOpAndPath) {
  const int me = comm_->rank(), n = comm_->world_size();
  for (Hierarchy h : paths_of(*comm_)) {
    for (int di = 0; di < kNumDataTypes; ++di) {
      for (int oi = 0; oi < kNumReduceOps; ++oi) {
        const auto d = static_cast<DataType>(di);
        const auto op = static_cast<ReduceOp>(oi);
        for (size_t count : {size_t{1}, size_t{5}, size_t{1027}, size_t{70001}}) {
          for (bool in_place : {false, true}) {
            const uint64_t seed = di * 131 + oi * 17 + count + (in_place ? 7 : 0);
            const size_t es = dtype_size(d);
            std::vector<uint8_t> in(count * es), out = poisoned(count * es);
            uint8_t* src = in_place ? out.data() : in.data();
            fill(src, count, d, seed, me, 0, op, true);
            comm_->all_reduce(src, out.data(), count, d, op, {h});
            if (h == Hierarchy::kHierarchical) {
              EXPECT_EQ(comm_->last_path(), NodePath::kHierarchical);
            }
            if (h == Hierarchy::kFlat) {
              EXPECT_EQ(comm_->last_path(), NodePath::kFlat);
            }
            const std::string what = fmt::format("all_reduce {} {} count {} {} {}", to_string(d), to_string(op), count,
                                                 kPathNames[static_cast<int>(h)], in_place ? "in place" : "");
            expect_elements(
                out.data(), count, d, [&](size_t i) { return expected_reduction(seed, n, i, op, d); }, what, op);
          }
        }
      }
    }
  }
}

TEST_P(MultiNode, ReduceScatterEveryDtypeOpAndPath) {
  const int me = comm_->rank(), n = comm_->world_size();
  for (Hierarchy h : paths_of(*comm_)) {
    for (int di = 0; di < kNumDataTypes; ++di) {
      for (int oi = 0; oi < kNumReduceOps; ++oi) {
        const auto d = static_cast<DataType>(di);
        const auto op = static_cast<ReduceOp>(oi);
        for (size_t count : {size_t{1}, size_t{3}, size_t{4099}}) {
          const uint64_t seed = 7000 + di * 131 + oi * 17 + count;
          const size_t es = dtype_size(d);
          std::vector<uint8_t> in(n * count * es), out = poisoned(count * es);
          fill(in.data(), n * count, d, seed, me, 0, op, true);
          comm_->reduce_scatter(in.data(), out.data(), count, d, op, {h});
          const std::string what = fmt::format("reduce_scatter {} {} count {} {}", to_string(d), to_string(op), count,
                                               kPathNames[static_cast<int>(h)]);
          expect_elements(
              out.data(), count, d, [&](size_t i) { return expected_reduction(seed, n, me * count + i, op, d); }, what,
              op);
        }
      }
    }
  }
}

TEST_P(MultiNode, AllGatherEveryDtypeAndPath) {
  const int me = comm_->rank(), n = comm_->world_size();
  for (Hierarchy h : paths_of(*comm_)) {
    for (int di = 0; di < kNumDataTypes; ++di) {
      const auto d = static_cast<DataType>(di);
      for (size_t count : {size_t{1}, size_t{3}, size_t{4099}}) {
        for (bool in_place : {false, true}) {
          const uint64_t seed = 9000 + di * 13 + count;
          const size_t es = dtype_size(d);
          std::vector<uint8_t> in(count * es), out = poisoned(n * count * es);
          uint8_t* src = in_place ? out.data() + me * count * es : in.data();
          fill(src, count, d, seed, me, 0, ReduceOp::kSum, false);
          comm_->all_gather(src, out.data(), count, d, {h});
          expect_elements(
              out.data(), n * count, d,
              [&](size_t i) {
                return input_value(seed, static_cast<int>(i / count), i % count, ReduceOp::kSum, d, false);
              },
              fmt::format("all_gather {} count {} {} {}", to_string(d), count, kPathNames[static_cast<int>(h)],
                          in_place ? "in place" : ""));
        }
      }
    }
  }
}

TEST_P(MultiNode, BroadcastFromEveryRootAndPath) {
  const int me = comm_->rank(), n = comm_->world_size();
  for (Hierarchy h : paths_of(*comm_)) {
    for (DataType d : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt8, DataType::kInt64}) {
      for (int root = 0; root < n; ++root) {
        for (bool in_place : {false, true}) {
          const size_t count = 1000 + root, es = dtype_size(d);
          const uint64_t seed = 11000 + root * 3 + static_cast<int>(d);
          std::vector<uint8_t> in(count * es, 0), out = poisoned(count * es);
          uint8_t* src = in_place ? out.data() : in.data();
          if (me == root) fill(src, count, d, seed, root, 0, ReduceOp::kSum, false);
          comm_->broadcast(src, out.data(), count, d, root, {h});
          expect_elements(
              out.data(), count, d, [&](size_t i) { return input_value(seed, root, i, ReduceOp::kSum, d, false); },
              fmt::format("broadcast {} root {} {}", to_string(d), root, kPathNames[static_cast<int>(h)]));
        }
      }
    }
  }
}

TEST_P(MultiNode, AllToAllAndPointToPoint) {
  const int me = comm_->rank(), n = comm_->world_size();
  const size_t count = 777;
  std::vector<int32_t> in(n * count), out(n * count + 16, -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(me * 1000000 + i);
  comm_->all_to_all(in.data(), out.data(), count, DataType::kInt32);
  for (int p = 0; p < n; ++p) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out[p * count + i], static_cast<int32_t>(p * 1000000 + me * count + i)) << "block " << p;
    }
  }
  EXPECT_EQ(out[n * count], -1);
  if (comm_->num_nodes() > 1) {
    EXPECT_THROW(comm_->all_to_all(in.data(), out.data(), count, DataType::kInt32, {Hierarchy::kHierarchical}), Error);
  }
  // A ring of sends: even ranks send first, odd ranks receive first.
  std::vector<int64_t> msg(5000), got(5000, -1);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = me * 100000 + static_cast<int64_t>(i);
  const int to = (me + 1) % n, from = (me + n - 1) % n;
  if (me % 2 == 0) {
    comm_->send(msg.data(), msg.size(), DataType::kInt64, to);
    comm_->recv(got.data(), got.size(), DataType::kInt64, from);
  } else {
    comm_->recv(got.data(), got.size(), DataType::kInt64, from);
    comm_->send(msg.data(), msg.size(), DataType::kInt64, to);
  }
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], from * 100000 + static_cast<int64_t>(i));
}

TEST_P(MultiNode, BarrierOnEveryPathAndZeroCounts) {
  for (Hierarchy h : paths_of(*comm_)) comm_->barrier({h});
  float x = 1;
  comm_->all_reduce(&x, &x, 0, DataType::kFloat32, ReduceOp::kSum);
  comm_->all_gather(&x, &x, 0, DataType::kFloat32);
  EXPECT_EQ(x, 1);
}

TEST_P(MultiNode, BadArgumentsThrowAndLeaveItUsable) {
  float x = 1, y = 0;
  EXPECT_THROW(comm_->all_reduce(nullptr, &y, 1, DataType::kFloat32, ReduceOp::kSum), Error);
  EXPECT_THROW(comm_->broadcast(&x, &y, 1, DataType::kFloat32, comm_->world_size()), Error);
  EXPECT_THROW(comm_->all_reduce(&x, &y, 1, static_cast<DataType>(99), ReduceOp::kSum), Error);
  EXPECT_THROW(comm_->send(&x, 1, DataType::kFloat32, comm_->rank()), Error);
  comm_->all_reduce(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(y, comm_->world_size());
}

TEST_P(MultiNode, AutoFollowsTheThresholds) {
  // Everything hierarchical from 1 KiB on, flat below (where the layout has a hierarchical path).
  auto c = MultiNodeCommunicator::create(
      MPI_COMM_WORLD, options(GetParam().node_size, GetParam().round_robin,
                              "all_reduce=1K,all_gather=1K,reduce_scatter=1K,broadcast=1K,barrier=0"));
  const bool hier = paths_of(*c).size() == 3;
  const NodePath big = c->num_nodes() == 1 ? NodePath::kNode : hier ? NodePath::kHierarchical : NodePath::kFlat;
  const NodePath small = c->num_nodes() == 1 ? NodePath::kNode : NodePath::kFlat;
  std::vector<float> a(4096, 1), b(4096 * c->world_size());
  c->all_reduce(a.data(), a.data(), 255, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(c->last_path(), small);
  c->all_reduce(a.data(), a.data(), 256, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(c->last_path(), big);
  c->all_gather(a.data(), b.data(), 1024 / c->world_size() / 4 + 1, DataType::kFloat32);
  EXPECT_EQ(c->last_path(), big);
  c->barrier();
  EXPECT_EQ(c->last_path(), big);
}

TEST_P(MultiNode, LargeBuffersToSixtyFourMegabytes) {
  const int me = comm_->rank(), n = comm_->world_size();
  const size_t bytes = size_t{64} << 20, count = bytes / 4;
  for (Hierarchy h : paths_of(*comm_)) {
    if (h == Hierarchy::kAuto) continue;
    std::vector<float> buf(count), want(count);
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((i + me) % 5);
    for (size_t i = 0; i < count; ++i) {
      double s = 0;
      for (int r = 0; r < n; ++r) s += (i + r) % 5;
      want[i] = static_cast<float>(s);
    }
    comm_->all_reduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum, {h});
    ASSERT_EQ(std::memcmp(buf.data(), want.data(), bytes), 0) << kPathNames[static_cast<int>(h)];
    // all-gather into 64 MB, reduce-scatter of 64 MB
    const size_t per = count / n;
    std::vector<int32_t> mine(per), all(per * n);
    for (size_t i = 0; i < per; ++i) mine[i] = static_cast<int32_t>(me * per + i);
    comm_->all_gather(mine.data(), all.data(), per, DataType::kInt32, {h});
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int32_t>(i)) << "all_gather " << i;
    comm_->reduce_scatter(all.data(), mine.data(), per, DataType::kInt32, ReduceOp::kMax, {h});
    for (size_t i = 0; i < per; ++i) ASSERT_EQ(mine[i], static_cast<int32_t>(me * per + i)) << "reduce_scatter";
    std::vector<uint8_t> b(bytes, me == n - 1 ? 0x3C : 0);
    comm_->broadcast(b.data(), b.data(), bytes, DataType::kUInt8, n - 1, {h});
    ASSERT_EQ(std::count(b.begin(), b.end(), 0x3C), static_cast<long>(bytes));
  }
}

TEST_P(MultiNode, AbortFailsTheNextCalls) {
  auto c = MultiNodeCommunicator::create(MPI_COMM_WORLD, options(GetParam().node_size, GetParam().round_robin));
  c->abort();
  EXPECT_TRUE(c->is_aborted());
  float x = 1;
  try {
    c->all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    ADD_FAILURE() << "an aborted communicator ran an all-reduce";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
  }
  EXPECT_THROW(c->check(), Error);
}

// Rank `rank`'s k-th input element i of the ordering tests, and the sum over n ranks.
int32_t order_value(int k, size_t i, int rank) {
  return static_cast<int32_t>(k * 1000 + static_cast<int>(i % 7) + rank);
}
int32_t order_sum(int k, size_t i, int n) { return n * order_value(k, i, 0) + n * (n - 1) / 2; }

TEST_P(MultiNode, AsyncCallsRunInIssueOrder) {
  const int me = comm_->rank(), n = comm_->world_size();
  const std::vector<Hierarchy> paths = paths_of(*comm_);  // MPI on this thread: before any call is queued
  constexpr int kCalls = 12;
  const size_t count = 1031;
  std::vector<std::vector<int32_t>> bufs(kCalls, std::vector<int32_t>(count));
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kCalls; ++k) {
    for (size_t i = 0; i < count; ++i) bufs[k][i] = order_value(k, i, me);
    works.push_back(comm_->all_reduce_async(bufs[k].data(), bufs[k].data(), count, DataType::kInt32, ReduceOp::kSum,
                                            {paths[k % paths.size()]}));
  }
  // A synchronous call after them runs after them.
  std::vector<int32_t> ranks(n, -1);
  const int32_t mine = me;
  comm_->all_gather(&mine, ranks.data(), 1, DataType::kInt32);
  for (int k = 0; k < kCalls; ++k) {
    EXPECT_TRUE(works[k]->is_completed()) << "call " << k;
    works[k]->wait();
    EXPECT_EQ(works[k]->exception(), nullptr);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(bufs[k][i], order_sum(k, i, n)) << "call " << k << " element " << i;
  }
  for (int p = 0; p < n; ++p) EXPECT_EQ(ranks[p], p);
  // Every other collective's async form.
  std::vector<float> gathered(3 * n, -1), block(3, -1), full(3 * n), exchanged(n, -1), from_root(5);
  const float x[3] = {1.0f * me, 2.0f * me, 3.0f * me};
  for (int i = 0; i < 3 * n; ++i) full[i] = static_cast<float>(i + me);
  std::vector<float> to_all(n);
  for (int p = 0; p < n; ++p) to_all[p] = static_cast<float>(me * 100 + p);
  for (int i = 0; i < 5; ++i) from_root[i] = me == n - 1 ? 7.0f + i : -1.0f;
  std::vector<std::shared_ptr<Work>> more{
      comm_->all_gather_async(x, gathered.data(), 3, DataType::kFloat32),
      comm_->reduce_scatter_async(full.data(), block.data(), 3, DataType::kFloat32, ReduceOp::kMax),
      comm_->broadcast_async(from_root.data(), from_root.data(), 5, DataType::kFloat32, n - 1),
      comm_->all_to_all_async(to_all.data(), exchanged.data(), 1, DataType::kFloat32, {Hierarchy::kFlat}),
      comm_->barrier_async()};
  for (auto& w : more) w->wait();
  for (int p = 0; p < n; ++p) {
    for (int i = 0; i < 3; ++i) EXPECT_EQ(gathered[p * 3 + i], static_cast<float>((i + 1) * p));
    EXPECT_EQ(exchanged[p], static_cast<float>(p * 100 + me));
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(block[i], static_cast<float>(me * 3 + i + n - 1));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(from_root[i], 7.0f + i);
}

TEST_P(MultiNode, GroupRunsItsCallsAtItsEndAndPacksAllReduces) {
  const int me = comm_->rank(), n = comm_->world_size();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const size_t count = 1001;
  std::vector<std::vector<int32_t>> sums(4, std::vector<int32_t>(count));
  std::vector<std::vector<int32_t>> outs(4, std::vector<int32_t>(count, -1));
  for (int k = 0; k < 4; ++k) {
    for (size_t i = 0; i < count; ++i) sums[k][i] = order_value(k, i, me);
  }
  std::vector<double> maxes(7);
  for (int i = 0; i < 7; ++i) maxes[i] = me * 10.0 + i;
  std::vector<int64_t> gathered(2 * n, -1);
  const int64_t pair[2] = {me, -me};
  std::vector<uint8_t> message(100000), received(100000, 0), to_self(33, 0x5A), from_self(33, 0);
  for (size_t i = 0; i < message.size(); ++i) message[i] = static_cast<uint8_t>(i * 31 + me);

  comm_->group_start();
  comm_->all_reduce(sums[0].data(), outs[0].data(), count, DataType::kInt32, ReduceOp::kSum);
  comm_->all_reduce(sums[1].data(), outs[1].data(), count, DataType::kInt32, ReduceOp::kSum);
  auto third = comm_->all_reduce_async(sums[2].data(), outs[2].data(), count, DataType::kInt32, ReduceOp::kSum);
  comm_->send(message.data(), message.size(), DataType::kUInt8, next);  // before the collectives: runs after them
  comm_->all_reduce(maxes.data(), maxes.data(), 7, DataType::kFloat64, ReduceOp::kMax);
  comm_->group_start();  // a nested level runs with the outermost one
  comm_->all_gather(pair, gathered.data(), 2, DataType::kInt64);
  comm_->all_reduce(sums[3].data(), outs[3].data(), count, DataType::kInt32, ReduceOp::kSum);
  auto inner = comm_->group_end_async();
  comm_->recv(received.data(), received.size(), DataType::kUInt8, prev);
  comm_->send(to_self.data(), to_self.size(), DataType::kUInt8, me);
  comm_->recv(from_self.data(), from_self.size(), DataType::kUInt8, me);
  EXPECT_EQ(outs[0][0], -1) << "a call of an open group ran";
  EXPECT_FALSE(third->is_completed());
  EXPECT_FALSE(inner->is_completed());
  auto group = comm_->group_end_async();
  group->wait();
  third->wait();
  inner->wait();
  for (int k = 0; k < 4; ++k) {
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(outs[k][i], order_sum(k, i, n)) << "all-reduce " << k << " at " << i;
  }
  for (int i = 0; i < 7; ++i) EXPECT_EQ(maxes[i], (n - 1) * 10.0 + i);
  for (int p = 0; p < n; ++p) {
    EXPECT_EQ(gathered[2 * p], p);
    EXPECT_EQ(gathered[2 * p + 1], -p);
  }
  for (size_t i = 0; i < received.size(); ++i) {
    ASSERT_EQ(received[i], static_cast<uint8_t>(i * 31 + prev)) << "message from rank " << prev << " at " << i;
  }
  EXPECT_EQ(from_self, to_self);
}

TEST_P(MultiNode, GroupMisuseIsRefusedAndCancelDropsItsLevel) {
  float x = 1, y = 0;
  EXPECT_THROW(comm_->group_end(), Error);
  EXPECT_THROW(comm_->group_cancel(), Error);
  comm_->group_start();
  auto dropped = comm_->all_reduce_async(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_THROW(comm_->all_reduce_async(nullptr, &y, 1, DataType::kFloat32, ReduceOp::kSum), Error);  // not recorded
  comm_->group_cancel();
  ASSERT_TRUE(dropped->is_completed());
  try {
    dropped->wait();
    ADD_FAILURE() << "a cancelled call completed without an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  EXPECT_EQ(y, 0) << "a cancelled call ran";
  // Argument errors of async calls are immediate and leave the communicator usable.
  EXPECT_THROW(comm_->all_reduce_async(&x, &y, 1, static_cast<DataType>(99), ReduceOp::kSum), Error);
  EXPECT_THROW(comm_->broadcast_async(&x, &y, 1, DataType::kFloat32, comm_->world_size()), Error);
  EXPECT_THROW(comm_->send_async(&x, 1, DataType::kFloat32, comm_->rank()), Error);
  if (paths_of(*comm_).size() == 3) {
    EXPECT_THROW(comm_->all_to_all_async(&x, &y, 1, DataType::kFloat32, {Hierarchy::kHierarchical}), Error);
  }
  comm_->all_reduce_async(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum)->wait();
  EXPECT_EQ(y, comm_->world_size());
}

TEST(MultiNodeOptions, RanksThatDisagreeAllFailWithMismatch) {
  const int me = world_rank();
  try {
    MultiNodeCommunicator::create(MPI_COMM_WORLD, options(2, false, me == 0 ? "all_reduce=1K" : "all_reduce=2K"));
    ADD_FAILURE() << "ranks with different thresholds made a communicator";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
  }
  EXPECT_THROW(MultiNodeCommunicator::create(MPI_COMM_WORLD, options(2, false, "all_reduce=lots")), Error);
}

std::vector<Shape> shapes() {
  // 2 ranks per node, both orders; nodes of different sizes (4 + rest); one node holding everyone.
  return {{2, false}, {2, true}, {4, false}, {64, false}};
}

INSTANTIATE_TEST_SUITE_P(Shapes, MultiNode, ::testing::ValuesIn(shapes()), [](const auto& info) {
  return fmt::format("nodes_of_{}{}", info.param.node_size, info.param.round_robin ? "_round_robin" : "");
});

}  // namespace
}  // namespace symcomm::testing
