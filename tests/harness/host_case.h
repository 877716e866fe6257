#pragma once
// One verified collective on the host backend (shared by the matrix and soak tests): builds guarded input
// and output buffers (heap or plain, optionally misaligned, in place or not), fills exactly-known inputs,
// runs the collective, and checks every output element, the guard bytes, and a running hash that all ranks
// compare at the end to prove bitwise-identical results.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "harness/guarded_buffer.h"
#include "harness/rank_harness.h"
#include "harness/test_values.h"

namespace symcomm::testing {

inline constexpr DataType kAllDtypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                          DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                          DataType::kInt32,    DataType::kInt64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};

struct Case {
  Collective kind;
  DataType dtype;
  ReduceOp op;
  size_t count;
  bool in_place;
  bool heap;
  size_t misalign;
  Algorithm algo;
  uint64_t seed;
  int root;
};

inline std::string describe(const Case& c) {
  return fmt::format("{} dtype={} op={} count={} in_place={} heap={} misalign={} algo={} root={}", to_string(c.kind),
                     to_string(c.dtype), to_string(c.op), c.count, c.in_place, c.heap, c.misalign, to_string(c.algo),
                     c.root);
}

class CaseRunner {
 public:
  CaseRunner(Communicator& comm) : comm_(comm), n_(comm.world_size()), me_(comm.rank()) {}

  /// Runs one case on every rank; returns false (after ADD_FAILURE) on a wrong result.
  bool run(const Case& c) {
    const size_t es = dtype_size(c.dtype);
    const bool reduction = c.kind == Collective::kAllReduce || c.kind == Collective::kReduceScatter;
    size_t in_elems = c.count, out_elems = c.count;
    if (c.kind == Collective::kAllGather || c.kind == Collective::kAllToAll) out_elems = c.count * n_;
    if (c.kind == Collective::kReduceScatter || c.kind == Collective::kAllToAll) in_elems = c.count * n_;
    Communicator* heap = c.heap ? &comm_ : nullptr;
    GuardedBuffer out(heap, out_elems * es, c.misalign);
    GuardedBuffer in_storage(heap, c.in_place ? 0 : in_elems * es, c.misalign);
    out.poison();
    uint8_t* in = in_storage.data();
    if (c.in_place) {
      in = out.data();
      if (c.kind == Collective::kAllGather) in = out.data() + me_ * c.count * es;
      if (c.kind == Collective::kReduceScatter) in = nullptr;  // handled below: out is a view into in
    }
    std::unique_ptr<GuardedBuffer> rs_in;  // in-place reduce-scatter: out = in + rank * count
    uint8_t* out_ptr = out.data();
    if (c.in_place && c.kind == Collective::kReduceScatter) {
      rs_in = std::make_unique<GuardedBuffer>(heap, in_elems * es, c.misalign);
      in = rs_in->data();
      out_ptr = in + me_ * c.count * es;
    }
    for (size_t i = 0; i < in_elems; ++i) {
      detail::store_element(c.dtype, in, i, input_value(c.seed, me_, i, c.op, c.dtype, reduction));
    }
    CollOptions o{.algorithm = c.algo};
    switch (c.kind) {
      case Collective::kAllReduce: comm_.all_reduce(in, out_ptr, c.count, c.dtype, c.op, o); break;
      case Collective::kAllGather: comm_.all_gather(in, out_ptr, c.count, c.dtype, o); break;
      case Collective::kReduceScatter: comm_.reduce_scatter(in, out_ptr, c.count, c.dtype, c.op, o); break;
      case Collective::kBroadcast: comm_.broadcast(in, out_ptr, c.count, c.dtype, c.root, o); break;
      case Collective::kAllToAll: comm_.all_to_all(in, out_ptr, c.count, c.dtype, o); break;
      case Collective::kBarrier: comm_.barrier(o); break;
    }
    bool ok = check(c, out_ptr, out_elems, reduction);
    if (!out.guards_intact() || !in_storage.guards_intact() || (rs_in && !rs_in->guards_intact())) {
      ADD_FAILURE() << "rank " << me_ << ": guard bytes overwritten in " << describe(c);
      ok = false;
    }
    hash_ = fnv1a(out_ptr, c.kind == Collective::kReduceScatter || c.kind == Collective::kAllToAll ? 0 : out_elems * es,
                  hash_);
    return ok;
  }

  uint64_t hash() const { return hash_; }

 private:
  double expected(const Case& c, size_t i) const {
    switch (c.kind) {
      case Collective::kAllReduce: return expected_reduction(c.seed, n_, i, c.op, c.dtype);
      case Collective::kReduceScatter: return expected_reduction(c.seed, n_, me_ * c.count + i, c.op, c.dtype);
      case Collective::kAllGather: return input_value(c.seed, i / c.count, i % c.count, c.op, c.dtype, false);
      case Collective::kBroadcast: return input_value(c.seed, c.root, i, c.op, c.dtype, false);
      case Collective::kAllToAll:
        return input_value(c.seed, i / c.count, me_ * c.count + i % c.count, c.op, c.dtype, false);
      case Collective::kBarrier: return 0;
    }
    return 0;
  }

  bool check(const Case& c, const uint8_t* out, size_t out_elems, bool reduction) {
    for (size_t i = 0; i < out_elems; ++i) {
      double want = expected(c, i);
      double got = detail::load_element(c.dtype, out, i);
      double tol = reduction ? tolerance(c.op, c.dtype, want) : 0;
      if (!(std::fabs(got - want) <= tol)) {
        ADD_FAILURE() << "rank " << me_ << " of " << n_ << ": " << describe(c) << ": element " << i << " is " << got
                      << ", expected " << want;
        return false;
      }
    }
    return true;
  }

  Communicator& comm_;
  int n_, me_;
  uint64_t hash_ = 14695981039346656037ull;
};

}  // namespace symcomm::testing
