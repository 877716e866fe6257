// Point-to-point on the host backend (Communicator::send / recv; NOTE [point-to-point] in
// src/backends/host/host_p2p.cc): ring shifts, all-pairs exchanges and long message sequences at every dtype and
// at sizes from empty to several staging rounds, buffered blocking sends, async Works, collectives that stay in step
// on ranks that do no point-to-point, messages to self, and the errors: mismatched counts on both ranks, bad
// arguments, a killed peer, abort, timeout. Payloads are seeded random bytes compared against an independent copy;
// receive buffers are poisoned and guarded.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/expect_error.h"
#include "harness/guarded_buffer.h"
#include "harness/rank_harness.h"

namespace symcomm::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// The staging chunk of most tests: messages of a few KiB already take several rounds.
constexpr size_t kChunk = 4096;

HarnessOptions small_chunks() {
  HarnessOptions o;
  o.config.p2p_chunk_bytes = kChunk;
  return o;
}

// The bytes of message `tag` from rank `from` to rank `to`: seeded random, the same on both sides.
std::vector<uint8_t> payload(uint64_t tag, int from, int to, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  const uint64_t seed = mix64(tag * 1000003u + static_cast<uint64_t>(from) * 7919u + static_cast<uint64_t>(to));
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t h = mix64(seed + i);
    std::memcpy(out.data() + i, &h, std::min<size_t>(8, bytes - i));
  }
  return out;
}

// A message this rank sends: its bytes, kept alive until the submission completes.
struct Outgoing {
  std::vector<uint8_t> bytes;
  size_t count;
  DataType dtype;
  int peer;
};

// A message this rank receives into a poisoned, guarded buffer, with the bytes it must hold afterwards.
struct Incoming {
  Incoming(uint64_t tag, int from, int me, size_t count, DataType dtype)
      : want(payload(tag, from, me, count * dtype_size(dtype))),
        buf(std::make_unique<GuardedBuffer>(nullptr, want.size())),
        count(count),
        dtype(dtype),
        peer(from) {
    buf->poison();
  }
  std::vector<uint8_t> want;
  std::unique_ptr<GuardedBuffer> buf;
  size_t count;
  DataType dtype;
  int peer;
};

Outgoing outgoing(uint64_t tag, int me, int to, size_t count, DataType dtype) {
  return Outgoing{payload(tag, me, to, count * dtype_size(dtype)), count, dtype, to};
}

void send(Communicator& c, const Outgoing& m) { c.send(m.bytes.data(), m.count, m.dtype, m.peer); }
void recv(Communicator& c, Incoming& m) { c.recv(m.buf->data(), m.count, m.dtype, m.peer); }

void expect_received(const Incoming& m, const std::string& what) {
  EXPECT_TRUE(std::equal(m.want.begin(), m.want.end(), m.buf->data()))
      << what << ": " << m.count << " x " << to_string(m.dtype) << " from rank " << m.peer;
  EXPECT_TRUE(m.buf->guards_intact()) << what << ": bytes written outside the buffer";
}

// Element counts of the size matrix: empty, one element, odd, and several staging rounds with a partial last one.
std::vector<size_t> counts_of(DataType d) {
  const size_t es = dtype_size(d);
  return {0, 1, 7, (3 * kChunk + 5 * es + 1) / es};
}

// Each rank sends to rank + 1 and receives from rank - 1 in one group, the receive issued first on odd tags.
void ring_shift(Communicator& c, uint64_t tag, size_t count, DataType dtype) {
  const int n = c.world_size(), me = c.rank();
  const Outgoing out = outgoing(tag, me, (me + 1) % n, count, dtype);
  Incoming in(tag, (me + n - 1) % n, me, count, dtype);
  c.group_start();
  if (tag % 2) recv(c, in);
  send(c, out);
  if (!(tag % 2)) recv(c, in);
  c.group_end();
  expect_received(in, fmt::format("ring shift {}", tag));
}

TEST(P2p, RingShiftInAGroupAtEveryDtypeAndSize) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(fmt::format("{} ranks", n));
    expect_success(
        n,
        [&](RankEnv& env) {
          auto comm = env.make_comm();
          uint64_t tag = 0;
          for (int d = 0; d < kNumDataTypes; ++d) {
            const auto dtype = static_cast<DataType>(d);
            for (size_t count : counts_of(dtype)) {
              for (int order = 0; order < 2; ++order) ring_shift(*comm, ++tag, count, dtype);
            }
          }
        },
        small_chunks());
  }
}

// The default staging (Config::p2p_chunk_bytes): a message of several default chunks goes in rounds too.
TEST(P2p, RingShiftLargerThanTheDefaultStaging) {
  expect_success(3, [&](RankEnv& env) {
    auto comm = env.make_comm();
    const size_t chunk = Config().p2p_chunk_bytes;
    ring_shift(*comm, 1, (5 * chunk + 12) / 4, DataType::kFloat32);
    ring_shift(*comm, 2, 3 * chunk + 1, DataType::kInt8);
  });
}

// Every rank sends to and receives from every other rank in one group, sizes of several rounds that differ per
// pair, the sends issued first on even ranks and the receives first on odd ones.
TEST(P2p, EveryPairExchangesBothWaysInOneGroup) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(fmt::format("{} ranks", n));
    expect_success(
        n,
        [&](RankEnv& env) {
          auto comm = env.make_comm();
          const int me = env.info.rank;
          auto count = [&](int from, int to) { return 5 * kChunk + 97 * static_cast<size_t>(from * n + to); };
          std::vector<Outgoing> outs;
          std::vector<Incoming> ins;
          for (int p = 0; p < n; ++p) {
            if (p == me) continue;
            outs.push_back(outgoing(7, me, p, count(me, p), DataType::kInt8));
            ins.emplace_back(7, p, me, count(p, me), DataType::kInt8);
          }
          CollectiveGroup group(*comm);
          for (int pass = 0; pass < 2; ++pass) {
            if ((pass == 0) == (me % 2 == 0)) {
              for (const Outgoing& o : outs) send(*comm, o);
            } else {
              for (Incoming& i : ins) recv(*comm, i);
            }
          }
          group.end();
          for (const Incoming& i : ins) expect_received(i, "all pairs");
        },
        small_chunks());
  }
}

// Messages from one rank to another match in issue order: 40 messages of 0 to 3 chunks, sent in one group and
// received in groups of 10, then one by one with blocking calls on both sides.
TEST(P2p, ManyMessagesToOnePeerKeepTheirOrder) {
  constexpr int kMessages = 40;
  expect_success(
      3,
      [&](RankEnv& env) {
        auto comm = env.make_comm();
        const int me = env.info.rank;
        if (me == 2) return;  // takes no part
        auto count = [](int k) { return static_cast<size_t>(k * 331 % (3 * kChunk)); };
        for (int round = 0; round < 2; ++round) {
          const bool grouped = round == 0;
          if (me == 0) {
            std::vector<Outgoing> outs;
            for (int k = 0; k < kMessages; ++k)
              outs.push_back(outgoing(100 * round + k, 0, 1, count(k), DataType::kUInt8));
            if (grouped) comm->group_start();
            for (const Outgoing& o : outs) send(*comm, o);
            if (grouped) comm->group_end();
            continue;
          }
          std::vector<Incoming> ins;
          for (int k = 0; k < kMessages; ++k) ins.emplace_back(100 * round + k, 0, 1, count(k), DataType::kUInt8);
          for (int k = 0; k < kMessages; ++k) {
            if (grouped && k % 10 == 0) comm->group_start();
            recv(*comm, ins[k]);
            if (grouped && k % 10 == 9) comm->group_end();
          }
          for (int k = 0; k < kMessages; ++k) expect_received(ins[k], fmt::format("round {} message {}", round, k));
        }
      },
      small_chunks());
}

// A blocking send of at most two chunks returns before its receiver calls anything (the receiver waits for the
// store key that the sender sets after its sends), so ranks may all send, then all receive; larger messages wait
// for the receiver.
TEST(P2p, BlockingSendsOfUpToTwoChunksCompleteWithoutTheReceiver) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(fmt::format("{} ranks", n));
    expect_success(
        n,
        [&](RankEnv& env) {
          auto comm = env.make_comm();
          const int me = env.info.rank, next = (me + 1) % n, prev = (me + n - 1) % n;
          // Two messages of one chunk; one of two chunks; an empty one and one of a single element.
          const std::vector<std::vector<size_t>> phases = {{kChunk / 4, 3}, {kChunk / 2}, {0, 1}};
          for (size_t phase = 0; phase < phases.size(); ++phase) {
            const std::vector<size_t>& counts = phases[phase];
            std::vector<Outgoing> outs;
            std::vector<Incoming> ins;
            for (size_t k = 0; k < counts.size(); ++k) {
              outs.push_back(outgoing(10 * phase + k, me, next, counts[k], DataType::kFloat32));
              ins.emplace_back(10 * phase + k, prev, me, counts[k], DataType::kFloat32);
            }
            for (const Outgoing& o : outs) send(*comm, o);
            const std::string sent = fmt::format("sent/{}/", phase);
            env.store->set(sent + std::to_string(me), std::string_view("1"));
            env.store->wait({sent + std::to_string(prev)}, 30s);
            for (Incoming& i : ins) recv(*comm, i);
            for (const Incoming& i : ins) expect_received(i, fmt::format("phase {}", phase));
          }
          // Five chunks: the even ranks send first, the odd ones receive first (at 3 ranks, rank 2 sends to rank 0,
          // which sent first: it waits until rank 0 turns to its receive).
          const Outgoing out = outgoing(30, me, next, 5 * kChunk, DataType::kInt8);
          Incoming in(30, prev, me, 5 * kChunk, DataType::kInt8);
          if (me % 2 == 0) send(*comm, out);
          recv(*comm, in);
          if (me % 2 == 1) send(*comm, out);
          expect_received(in, "five chunks");
        },
        small_chunks());
  }
}

// The Works of send_async / recv_async complete with their transfer and carry it out of order with the caller's
// thread; inside a group they complete with the group, whichever way it ends.
TEST(P2p, AsyncWorksCompleteWithTheirTransfers) {
  expect_success(
      2,
      [&](RankEnv& env) {
        auto comm = env.make_comm();
        const int me = env.info.rank, peer = 1 - me;
        const size_t big = 6 * kChunk + 3;
        {  // outside a group: rank 0 sends first, rank 1 receives first
          const Outgoing out = outgoing(1, me, peer, big, DataType::kInt8);
          Incoming in(1, peer, me, big, DataType::kInt8);
          std::shared_ptr<Work> w1, w2;
          if (me == 0) w1 = comm->send_async(out.bytes.data(), out.count, out.dtype, peer);
          w2 = comm->recv_async(in.buf->data(), in.count, in.dtype, peer);
          if (me == 1) w1 = comm->send_async(out.bytes.data(), out.count, out.dtype, peer);
          w2->wait();
          w1->wait();
          EXPECT_TRUE(w1->is_completed() && w2->is_completed());
          EXPECT_EQ(w2->exception(), nullptr);
          expect_received(in, "async");
        }
        for (bool end_async : {false, true}) {  // in a group
          const Outgoing out = outgoing(2 + end_async, me, peer, big, DataType::kBFloat16);
          Incoming in(2 + end_async, peer, me, big, DataType::kBFloat16);
          comm->group_start();
          auto wr = comm->recv_async(in.buf->data(), in.count, in.dtype, peer);
          auto ws = comm->send_async(out.bytes.data(), out.count, out.dtype, peer);
          std::shared_ptr<Work> group = end_async ? comm->group_end_async() : (comm->group_end(), nullptr);
          if (group) group->wait();
          wr->wait();
          ws->wait();
          expect_received(in, fmt::format("async in a group (end_async {})", end_async));
        }
      },
      small_chunks());
}

// Ranks 0 and 1 exchange messages before, between and inside the collectives (in groups mixed with them, between
// packable all-reduces); the other ranks run the collectives alone. Every collective's result is right on every
// rank, with and without debug checks (whose store keys count collectives).
TEST(P2p, CollectivesStayInStepOnRanksThatDoNoPointToPoint) {
  for (bool debug : {false, true}) {
    for (int n : {3, 4}) {
      SCOPED_TRACE(fmt::format("{} ranks, debug checks {}", n, debug));
      HarnessOptions opts = small_chunks();
      opts.config.debug_checks = debug;
      expect_success(
          n,
          [&](RankEnv& env) {
            auto comm = env.make_comm();
            const int me = env.info.rank;
            const bool talker = me < 2;
            const int other = 1 - me;
            auto exchange = [&](uint64_t tag, std::vector<std::unique_ptr<Incoming>>& keep,
                                std::vector<Outgoing>& keep_out) {
              keep_out.push_back(outgoing(tag, me, other, 2 * kChunk + 1, DataType::kInt8));
              keep.push_back(std::make_unique<Incoming>(tag, other, me, 2 * kChunk + 1, DataType::kInt8));
              send(*comm, keep_out.back());
              recv(*comm, *keep.back());
            };
            for (int it = 0; it < 4; ++it) {
              std::vector<std::unique_ptr<Incoming>> ins;
              std::vector<Outgoing> outs;
              int32_t a[3] = {me + 1, 10 * (me + 1), it}, a_out[3] = {}, c[2] = {me, 1}, c_out[2] = {};
              int64_t b = me + it, b_out = 0;
              std::vector<int32_t> g_in = {me, it}, g_out(2 * n, -1);
              comm->all_reduce(a, a_out, 3, DataType::kInt32, ReduceOp::kSum);
              if (me == 0) send(*comm, outgoing(50 + it, 0, 1, 9, DataType::kFloat64));
              if (me == 1) {
                Incoming solo(50 + it, 0, 1, 9, DataType::kFloat64);
                recv(*comm, solo);
                expect_received(solo, "between collectives");
              }
              // Two packable all-reduces (int32 sum) with messages between them on ranks 0 and 1 only.
              comm->group_start();
              if (talker) exchange(60 + it, ins, outs);
              comm->all_reduce(a, a, 3, DataType::kInt32, ReduceOp::kSum);
              if (talker) exchange(70 + it, ins, outs);
              comm->all_reduce(c, c_out, 2, DataType::kInt32, ReduceOp::kSum);
              comm->all_gather(g_in.data(), g_out.data(), 2, DataType::kInt32);
              if (talker) exchange(80 + it, ins, outs);
              comm->all_reduce(&b, &b_out, 1, DataType::kInt64, ReduceOp::kMax);
              comm->group_end();
              const int32_t sum = n * (n + 1) / 2;
              for (const int32_t* x : {static_cast<const int32_t*>(a_out), static_cast<const int32_t*>(a)}) {
                EXPECT_EQ(x[0], sum);
                EXPECT_EQ(x[1], 10 * sum);
                EXPECT_EQ(x[2], n * it);
              }
              EXPECT_EQ(c_out[0], n * (n - 1) / 2);
              EXPECT_EQ(c_out[1], n);
              EXPECT_EQ(b_out, n - 1 + it);
              for (int r = 0; r < n; ++r) {
                EXPECT_EQ(g_out[2 * r], r);
                EXPECT_EQ(g_out[2 * r + 1], it);
              }
              for (const auto& i : ins) expect_received(*i, fmt::format("iteration {}", it));
            }
            comm->barrier();
          },
          opts);
    }
  }
}

// A message to itself is a copy matched inside its group (with a ring shift in the same group); outside a group, or
// without its match in the group, it is kInvalidArgument and nothing runs; a matched pair of different counts is
// kMismatch naming the rank.
TEST(P2p, MessagesToItselfMatchWithinTheirGroup) {
  for (int n : {2, 3}) {
    SCOPED_TRACE(fmt::format("{} ranks", n));
    expect_success(
        n,
        [&](RankEnv& env) {
          auto comm = env.make_comm();
          const int me = env.info.rank;
          for (size_t count : {size_t{0}, size_t{1}, 3 * kChunk + 1}) {
            const Outgoing self1 = outgoing(count, me, me, count, DataType::kInt8);
            const Outgoing self2 = outgoing(count + 1, me, me, count + 1, DataType::kInt8);
            const Outgoing ring = outgoing(count + 2, me, (me + 1) % n, count, DataType::kInt8);
            Incoming in1(count, me, me, count, DataType::kInt8), in2(count + 1, me, me, count + 1, DataType::kInt8);
            Incoming from(count + 2, (me + n - 1) % n, me, count, DataType::kInt8);
            comm->group_start();
            send(*comm, self1);
            recv(*comm, from);
            send(*comm, self2);
            recv(*comm, in1);
            send(*comm, ring);
            recv(*comm, in2);
            comm->group_end();
            expect_received(in1, "first message to itself");
            expect_received(in2, "second message to itself");
            expect_received(from, "ring shift beside them");
          }
          uint8_t x[4] = {1, 2, 3, 4}, y[4] = {};
          expect_error(ErrorCode::kInvalidArgument, [&] { comm->send(x, 4, DataType::kUInt8, me); });
          expect_error(ErrorCode::kInvalidArgument, [&] { comm->recv(y, 4, DataType::kUInt8, me); });
          expect_error(ErrorCode::kInvalidArgument, [&] { comm->send_async(x, 4, DataType::kUInt8, me); });
          comm->group_start();
          comm->send(x, 4, DataType::kUInt8, me);
          comm->send(x, 4, DataType::kUInt8, me);
          comm->recv(y, 4, DataType::kUInt8, me);
          Error e = expect_error(ErrorCode::kInvalidArgument, [&] { comm->group_end(); });
          EXPECT_NE(e.message().find("2 send(s) to itself and 1 receive(s)"), std::string::npos) << e.what();
          EXPECT_EQ(y[0], 0) << "nothing ran";
          comm->barrier();  // usable, in step
          comm->group_start();
          comm->send(x, 4, DataType::kUInt8, me);
          comm->recv(y, 3, DataType::kUInt8, me);
          e = expect_error(ErrorCode::kMismatch, [&] { comm->group_end(); });
          EXPECT_EQ(e.ranks(), std::vector<int>{me}) << e.what();
        },
        small_chunks());
  }
}

// Where a message's count or dtype differs between its send and its receive, both ranks get kMismatch naming both
// (within 2 s; the deadline is 30 s), and it is sticky: the receiver in its receive; the sender in its send when it
// waits for the receiver (a message of more than two chunks), else in its next call (a collective waiting for the
// receiver, a point-to-point call) or in check().
struct MismatchCase {
  const char* name;
  size_t send_count, recv_count;
  DataType send_dtype, recv_dtype;
  enum class SenderSees { kInSend, kInBarrier, kInNextSend, kInCheck } sees;
};

TEST(P2p, CountOrDtypeMismatchFailsOnBothRanksNamingBoth) {
  using Sees = MismatchCase::SenderSees;
  const MismatchCase cases[] = {
      {"buffered count, next collective", 10, 12, DataType::kFloat32, DataType::kFloat32, Sees::kInBarrier},
      {"buffered count, next send", 12, 10, DataType::kFloat32, DataType::kFloat32, Sees::kInNextSend},
      {"buffered dtype of equal bytes, check()", 16, 4, DataType::kInt8, DataType::kFloat32, Sees::kInCheck},
      {"buffered dtype of equal count, next collective", 4, 4, DataType::kInt32, DataType::kFloat32, Sees::kInBarrier},
      {"empty against one element", 0, 1, DataType::kInt8, DataType::kInt8, Sees::kInBarrier},
      {"five chunks against four, in the send", 5 * kChunk, 4 * kChunk, DataType::kUInt8, DataType::kUInt8,
       Sees::kInSend},
  };
  HarnessOptions opts = small_chunks();
  opts.config.timeout = 30s;
  for (const MismatchCase& mc : cases) {
    SCOPED_TRACE(mc.name);
    expect_success(
        3,
        [&](RankEnv& env) {
          auto comm = env.make_comm();
          const int me = env.info.rank;
          if (me == 2) {
            env.store->wait({"done"}, 60s);  // takes no part
            return;
          }
          auto check_error = [&](const Error& e) {
            EXPECT_EQ(e.ranks(), (std::vector<int>{0, 1})) << e.what();
            EXPECT_NE(e.message().find(fmt::format("count {} of {}", mc.send_count, to_string(mc.send_dtype))),
                      std::string::npos)
                << e.what();
            EXPECT_NE(e.message().find(fmt::format("count {} of {}", mc.recv_count, to_string(mc.recv_dtype))),
                      std::string::npos)
                << e.what();
          };
          std::vector<uint8_t> buf(
              std::max(mc.send_count * dtype_size(mc.send_dtype), mc.recv_count * dtype_size(mc.recv_dtype)) + 1);
          if (me == 1) {
            check_error(
                expect_error(ErrorCode::kMismatch, [&] { comm->recv(buf.data(), mc.recv_count, mc.recv_dtype, 0); }));
            env.store->set("refused", std::string_view("1"));
            check_error(expect_error(ErrorCode::kMismatch, [&] { comm->barrier(); }));  // sticky
            env.store->wait({"done"}, 60s);
            return;
          }
          if (mc.sees == Sees::kInSend) {
            const auto t0 = SteadyClock::now();
            check_error(
                expect_error(ErrorCode::kMismatch, [&] { comm->send(buf.data(), mc.send_count, mc.send_dtype, 1); }));
            EXPECT_LT(SteadyClock::now() - t0, 2s) << "seen at the deadline, not when the receiver refused";
            env.store->set("done", std::string_view("1"));
            return;
          }
          comm->send(buf.data(), mc.send_count, mc.send_dtype, 1);  // staged: returns
          if (mc.sees != Sees::kInBarrier) env.store->wait({"refused"}, 30s);
          const auto t0 = SteadyClock::now();
          Error e = expect_error(ErrorCode::kMismatch, [&] {
            switch (mc.sees) {
              case Sees::kInBarrier: comm->barrier(); break;
              case Sees::kInNextSend: comm->send(buf.data(), 1, DataType::kInt8, 1); break;
              case Sees::kInCheck: comm->check(); break;
              case Sees::kInSend: break;
            }
          });
          EXPECT_LT(SteadyClock::now() - t0, 2s) << "seen at the deadline, not when the receiver refused";
          check_error(e);
          check_error(expect_error(ErrorCode::kMismatch, [&] { comm->check(); }));  // sticky
          env.store->set("done", std::string_view("1"));
        },
        opts);
  }
}

// Bad arguments throw kInvalidArgument at once, outside a group and inside one (when recorded), on one rank only:
// nothing is sent, and the communicator stays usable and in step.
TEST(P2p, BadArgumentsThrowAtOnceAndLeaveTheCommunicatorUsable) {
  expect_success(
      2,
      [&](RankEnv& env) {
        auto comm = env.make_comm();
        const int me = env.info.rank, peer = 1 - me;
        float x[4] = {1, 2, 3, 4};
        auto bad = [&](auto fn) {
          expect_error(ErrorCode::kInvalidArgument, fn);
          comm->group_start();
          expect_error(ErrorCode::kInvalidArgument, fn);
          comm->group_end();  // empty: runs nothing
        };
        for (int p : {-1, 2, 64, 1 << 30}) {
          bad([&] { comm->send(x, 4, DataType::kFloat32, p); });
          bad([&] { comm->recv(x, 4, DataType::kFloat32, p); });
          bad([&] { comm->recv_async(x, 4, DataType::kFloat32, p); });
        }
        bad([&] { comm->send(nullptr, 4, DataType::kFloat32, peer); });
        bad([&] { comm->recv(nullptr, 1, DataType::kFloat32, peer); });
        bad([&] { comm->send_async(nullptr, 1, DataType::kFloat32, peer); });
        bad([&] { comm->send(x, 4, static_cast<DataType>(99), peer); });
        bad([&] { comm->send(x, SIZE_MAX / 2, DataType::kFloat32, peer); });
        bad([&] { comm->recv(x, 4, DataType::kFloat32, peer, {.algorithm = Algorithm::kOneShot}); });
        // Usable and in step: an exchange (null buffers with count 0 are valid) and a collective.
        Incoming in(1, peer, me, 4, DataType::kFloat32);
        const Outgoing out = outgoing(1, me, peer, 4, DataType::kFloat32);
        {
          CollectiveGroup group(*comm);
          send(*comm, out);
          recv(*comm, in);
          comm->send(nullptr, 0, DataType::kFloat32, peer, {.algorithm = Algorithm::kDirect});
          comm->recv(nullptr, 0, DataType::kFloat32, peer);
        }
        expect_received(in, "after the refused calls");
        float y = 0;
        comm->all_reduce(x, &y, 1, DataType::kFloat32, ReduceOp::kSum);
        EXPECT_EQ(y, 2.0f);
      },
      small_chunks());
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count();
}

// A rank killed before its send: the receive waiting for it gets kPeerDead naming it within a second of the kill
// (the deadline is 30 s); so does a send of five chunks waiting for a killed receiver. Rank 2 takes no part.
TEST(P2p, AKilledPeerIsNamedByTheReceiveOrSendWaitingForIt) {
  for (bool victim_sends : {true, false}) {
    SCOPED_TRACE(victim_sends ? "receive from a killed sender" : "send to a killed receiver");
    HarnessOptions opts = small_chunks();
    opts.config.timeout = 30s;
    opts.may_fail = {1};
    expect_success(
        3,
        [&](RankEnv& env) {
          auto comm = env.make_comm();
          const int me = env.info.rank;
          if (me == 2) {
            env.store->wait({"detected"}, 60s);  // stays alive until rank 0 is done
            return;
          }
          if (me == 1) {
            env.store->wait({"waiting"}, 30s);
            std::this_thread::sleep_for(100ms);  // lets rank 0's transfer reach its wait (it fails alike before it)
            env.store->set("killed_at", std::to_string(now_ns()));
            ::raise(SIGKILL);
          }
          std::vector<uint8_t> buf(5 * kChunk);
          auto w = victim_sends ? comm->recv_async(buf.data(), buf.size(), DataType::kUInt8, 1)
                                : comm->send_async(buf.data(), buf.size(), DataType::kUInt8, 1);
          env.store->set("waiting", std::string_view("1"));
          Error e = expect_error(ErrorCode::kPeerDead, [&] { w->wait(); });
          const int64_t detected = now_ns();
          env.store->set("detected", std::string_view("1"));
          EXPECT_EQ(e.ranks(), std::vector<int>{1}) << e.what();
          EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
          const int64_t killed = std::stoll(env.store->get_string("killed_at"));
          EXPECT_LT(detected - killed, 1'000'000'000) << "detection took " << (detected - killed) / 1e6 << " ms";
          expect_error(ErrorCode::kPeerDead, [&] { comm->recv(buf.data(), 1, DataType::kUInt8, 2); });  // sticky
        },
        opts);
  }
}

// abort() from another thread wakes a receive waiting for a message that never comes: kAborted within a second
// (the deadline is 30 s), sticky.
TEST(P2p, AbortWakesAPendingReceive) {
  HarnessOptions opts = small_chunks();
  opts.config.timeout = 30s;
  expect_success(
      2,
      [&](RankEnv& env) {
        auto comm = env.make_comm();
        if (env.info.rank == 1) {
          env.store->wait({"aborted"}, 60s);  // never sends
          return;
        }
        std::thread aborter([&] {
          std::this_thread::sleep_for(200ms);  // lets the receive reach its wait (it fails alike before it)
          comm->abort();
        });
        uint8_t x[8];
        const auto t0 = SteadyClock::now();
        expect_error(ErrorCode::kAborted, [&] { comm->recv(x, 8, DataType::kUInt8, 1); });
        EXPECT_LT(SteadyClock::now() - t0, 1s);
        aborter.join();
        env.store->set("aborted", std::string_view("1"));
        expect_error(ErrorCode::kAborted, [&] { comm->send(x, 8, DataType::kUInt8, 1); });
      },
      opts);
}

// A receive whose sender never sends times out after Config::timeout, naming the sender; a blocking send of more
// than two chunks whose receiver never receives does the same.
TEST(P2p, AWaitWithoutItsPeerTimesOutNamingIt) {
  for (bool receive : {true, false}) {
    SCOPED_TRACE(receive ? "receive" : "send");
    HarnessOptions opts = small_chunks();
    opts.config.timeout = 1s;
    expect_success(
        2,
        [&](RankEnv& env) {
          auto comm = env.make_comm();
          if (env.info.rank == 1) {
            env.store->wait({"timed out"}, 60s);  // alive, never calls
            return;
          }
          std::vector<uint8_t> buf(3 * kChunk);
          const auto t0 = SteadyClock::now();
          Error e = expect_error(ErrorCode::kTimeout, [&] {
            if (receive) {
              comm->recv(buf.data(), buf.size(), DataType::kUInt8, 1);
            } else {
              comm->send(buf.data(), buf.size(), DataType::kUInt8, 1);
            }
          });
          const auto took = SteadyClock::now() - t0;
          env.store->set("timed out", std::string_view("1"));
          EXPECT_EQ(e.ranks(), std::vector<int>{1}) << e.what();
          EXPECT_GE(took, 900ms);
          EXPECT_LT(took, 2500ms);
        },
        opts);
  }
}

}  // namespace
}  // namespace symcomm::testing
