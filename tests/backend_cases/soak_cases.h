#pragma once
// Soak on either backend (tests/backend_cases/README.md): a long randomized mix of collectives, the same sequence
// on every rank, with small random per-rank delays, every result verified. Each collective runs on guarded
// buffers (ordinary memory or the symmetric heap, out of place or in place, optionally misaligned) whose output is
// poisoned first; every output element is compared with the reference of harness/test_values.h, bitwise except an
// average of floats over a world size that is not a power of two (within tolerance(): one ulp); the guard bytes
// must be intact; and a running hash of the outputs that are the same on every rank (all-reduce, all-gather,
// broadcast) must agree across ranks at the end, so that the results are bitwise identical everywhere.
//
// The program supplies the mix (SoakPlan: which collectives, sizes, algorithms, delays) and a SoakLauncher, which
// issues each collective: as it is by default; the GPU program's on a stream of its own, captured into a CUDA graph
// and launched where the op says so.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "algos/elements.h"
#include "harness/rank_harness.h"
#include "harness/test_memory.h"
#include "harness/test_values.h"

namespace symcomm::testing {

/// One collective of the soak.
struct SoakOp {
  Collective kind;
  DataType dtype;
  ReduceOp op;
  size_t count;
  Algorithm algo;
  bool heap;        ///< buffers in the symmetric heap (else the memory's own)
  bool in_place;    ///< all-gather: input at out + rank · count; reduce-scatter: out at in + rank · count
  size_t misalign;  ///< bytes, below GuardedTestBuffer::kMaxMisalign
  int root;         ///< broadcast
  uint64_t seed;    ///< of the inputs (harness/test_values.h)
  bool graph;       ///< captured into a CUDA graph (the GPU program's launcher)
};

inline std::string describe(const SoakOp& c) {
  return fmt::format("{} dtype={} op={} count={} algo={} heap={} in_place={} misalign={} root={} graph={}",
                     to_string(c.kind), to_string(c.dtype), to_string(c.op), c.count, to_string(c.algo), c.heap,
                     c.in_place, c.misalign, c.root, c.graph);
}

/// The mix of a soak: `ops` collectives, op k = pick(k, world) (a function of k and the world size only, so the same
/// on every rank), each issued after rank r has slept delay_us(k, r) microseconds.
struct SoakPlan {
  uint64_t ops = 0;
  /// Counts every pick stays below: the buffers hold max_count · world elements of 8 bytes.
  size_t max_count = 0;
  std::function<SoakOp(uint64_t k, int world)> pick;
  std::function<uint64_t(uint64_t k, int rank)> delay_us;
};

/// Issues one collective: `issue(stream)` enqueues it on `stream`. This one calls it as it is (default stream).
class SoakLauncher {
 public:
  virtual ~SoakLauncher() = default;
  virtual void launch(const SoakOp&, const std::function<void(Stream)>& issue) { issue(nullptr); }
};

/// Poison of the soak's outputs: never a test value in any dtype.
inline constexpr uint8_t kSoakPoison = 0xcd;

inline void soak_case(RankEnv& env, TestMemory& mem, const SoakPlan& plan, SoakLauncher& launcher) {
  auto comm = env.make_comm(mem.options());
  const int me = comm->rank(), world = comm->world_size();
  const size_t cap = plan.max_count * world * 8;
  GuardedTestBuffer plain_in(mem, cap), plain_out(mem, cap), heap_in(mem, cap, comm.get()),
      heap_out(mem, cap, comm.get());
  uint64_t hash = fnv1a(nullptr, 0), wrong_ops = 0, graphs = 0;
  std::vector<uint8_t> input, want(8);

  for (uint64_t k = 0; k < plan.ops; ++k) {
    const SoakOp c = plan.pick(k, world);
    const size_t es = dtype_size(c.dtype);
    const bool reduction = c.kind == Collective::kAllReduce || c.kind == Collective::kReduceScatter;
    const size_t in_elems =
        c.kind == Collective::kReduceScatter || c.kind == Collective::kAllToAll ? c.count * world : c.count;
    const size_t out_elems =
        c.kind == Collective::kAllGather || c.kind == Collective::kAllToAll ? c.count * world : c.count;
    GuardedTestBuffer& in_buf = c.heap ? heap_in : plain_in;
    GuardedTestBuffer& out_buf = c.heap ? heap_out : plain_out;

    // The output poisoned, then the input written: into the output where in place (reduce-scatter in place: the
    // output buffer holds the whole input, the output is block `rank` of it).
    const bool rs_in_place = c.in_place && c.kind == Collective::kReduceScatter;
    uint8_t* out = out_buf.prepare((rs_in_place ? in_elems : out_elems) * es, c.misalign);
    out_buf.poison(kSoakPoison);
    uint8_t* in = out;
    size_t out_offset = 0;  // bytes of the output into out_buf's payload
    if (!c.in_place) {
      in = in_buf.prepare(in_elems * es, c.misalign);
    } else if (c.kind == Collective::kAllGather) {
      in = out + me * c.count * es;
    } else if (rs_in_place) {
      out_offset = me * c.count * es;
    }
    input.resize(in_elems * es);
    for (size_t i = 0; i < in_elems; ++i) {
      detail::store_element(c.dtype, input.data(), i, input_value(c.seed, me, i, c.op, c.dtype, reduction));
    }
    mem.write(in, input.data(), input.size());

    // Ranks arrive out of step.
    if (const uint64_t d = plan.delay_us(k, me)) std::this_thread::sleep_for(std::chrono::microseconds(d));
    uint8_t* out_ptr = out + out_offset;
    const auto issue = [&](Stream s) {
      const CollOptions o{.stream = s, .algorithm = c.algo};
      switch (c.kind) {
        case Collective::kAllReduce: comm->all_reduce(in, out_ptr, c.count, c.dtype, c.op, o); break;
        case Collective::kAllGather: comm->all_gather(in, out_ptr, c.count, c.dtype, o); break;
        case Collective::kReduceScatter: comm->reduce_scatter(in, out_ptr, c.count, c.dtype, c.op, o); break;
        case Collective::kBroadcast: comm->broadcast(in, out_ptr, c.count, c.dtype, c.root, o); break;
        case Collective::kAllToAll: comm->all_to_all(in, out_ptr, c.count, c.dtype, o); break;
        case Collective::kBarrier: comm->barrier(o); break;
      }
    };
    try {
      launcher.launch(c, issue);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << me << " op " << k << " " << describe(c) << " threw: " << e.what();
      return;
    }
    graphs += c.graph;
    mem.sync();

    bool guards = false;
    const std::vector<uint8_t> payload = out_buf.read(&guards);
    if (!c.in_place) guards = in_buf.guards_ok() && guards;
    const uint8_t* got = payload.data() + out_offset;
    std::string wrong;
    if (!guards) wrong = "guard bytes overwritten";
    for (size_t i = 0; i < out_elems && wrong.empty(); ++i) {
      double expected = 0;
      switch (c.kind) {
        case Collective::kAllReduce: expected = expected_reduction(c.seed, world, i, c.op, c.dtype); break;
        case Collective::kReduceScatter:
          expected = expected_reduction(c.seed, world, me * c.count + i, c.op, c.dtype);
          break;
        case Collective::kAllGather:
          expected = input_value(c.seed, static_cast<int>(i / c.count), i % c.count, c.op, c.dtype, false);
          break;
        case Collective::kBroadcast: expected = input_value(c.seed, c.root, i, c.op, c.dtype, false); break;
        case Collective::kAllToAll:
          expected =
              input_value(c.seed, static_cast<int>(i / c.count), me * c.count + i % c.count, c.op, c.dtype, false);
          break;
        case Collective::kBarrier: break;
      }
      // An average of small integers over 2, 4 or 8 ranks is exact; over other world sizes within one ulp.
      const bool exact = !reduction || c.op != ReduceOp::kAvg || (world & (world - 1)) == 0;
      bool ok;
      if (exact) {
        detail::store_element(c.dtype, want.data(), 0, expected);
        ok = std::memcmp(got + i * es, want.data(), es) == 0;
      } else {
        ok = std::fabs(detail::load_element(c.dtype, got, i) - expected) <= tolerance(c.op, c.dtype, expected);
      }
      if (!ok) {
        wrong = fmt::format("element {} is {}, expected {}", i, detail::load_element(c.dtype, got, i), expected);
      }
    }
    if (!wrong.empty() && ++wrong_ops <= 5) {
      ADD_FAILURE() << "rank " << me << " of " << world << ", op " << k << " " << describe(c) << ": " << wrong;
    }
    if (c.kind != Collective::kReduceScatter && c.kind != Collective::kAllToAll)
      hash = fnv1a(got, out_elems * es, hash);
  }

  comm->check();
  EXPECT_EQ(wrong_ops, 0u);
  env.store->set(fmt::format("soak/{}", me), std::to_string(hash));
  for (int p = 0; p < world; ++p) {
    EXPECT_EQ(env.store->get_string(fmt::format("soak/{}", p)), std::to_string(hash))
        << "rank " << p << "'s results differ from rank " << me << "'s";
  }
  if (me == 0) {
    std::printf("soak: %llu collectives (%llu in graphs) on %d ranks, %llu wrong\n",
                static_cast<unsigned long long>(plan.ops), static_cast<unsigned long long>(graphs), world,
                static_cast<unsigned long long>(wrong_ops));
  }
  // No rank frees its heap buffers while a peer may still reach them.
  SoakOp barrier{};
  barrier.kind = Collective::kBarrier;
  launcher.launch(barrier, [&](Stream s) { comm->barrier({.stream = s}); });
  mem.sync();
}

}  // namespace symcomm::testing
