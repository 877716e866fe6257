// All-reduce over the links of a topology (Config::topology_file): the steps of an all-reduce schedule
// (src/algos/schedule.h, NOTE [schedule semantics]) on the step protocol. Per round of one scratch half, the
// output holds this rank's chunks; in each step every rank publishes them as they are (copied into its scratch, so
// the peers read the state of the step's start) and then applies the transfers addressed to it, reading only the
// ranks its links reach. A reduce combines with the op (avg: summed, divided by the world size after the last
// step); a copy replaces. Every chunk's total is computed by one rank and copied to the others, so every rank
// holds bitwise the same result.
//
// Reduce-scatter and all-gather over the links of a topology: the steps of their schedules (NOTE [gather
// schedules]) on a buffer of one block per rank (all-gather: the output, with this rank's input in its block;
// reduce-scatter: a copy of the input), in rounds of the same element range of every block; chunk c is block c.
// The reduce-scatter's output is its block of the buffer after the last step (avg: divided by the world size).
#include <cstring>
#include <vector>

#include "algos/host_reduce.h"
#include "backends/host/host_algos.h"

namespace symcomm::detail {
namespace {

/// One transfer addressed to this rank: `n` elements from a peer's published block into `mine`, copied or
/// combined with `op`.
void apply(const Request& r, ReduceOp op, Move move, uint8_t* mine, const uint8_t* from, size_t n) {
  if (move == Move::kCopy) {
    std::memcpy(mine, from, n * r.elem_size());
  } else {
    const void* srcs[2] = {mine, from};
    host_reduce(r.dtype, op, mine, srcs, 2, n);
  }
}

}  // namespace

void host_all_reduce_scheduled(HostEngine& e, const Request& r, const Schedule& s) {
  const size_t es = r.elem_size(), cap = e.round_elems(es, 1);
  const int me = e.rank();
  const ReduceOp step_op = r.op == ReduceOp::kAvg ? ReduceOp::kSum : r.op;
  if (r.count > 0 && r.out != r.in) std::memmove(r.out, r.in, r.count * es);  // null pointers may come with 0
  uint64_t round = 0;
  for (size_t off = 0; off < r.count; off += cap, ++round) {
    const size_t len = std::min(cap, r.count - off);
    const size_t chunk = (len + s.chunks - 1) / s.chunks;
    uint8_t* out = static_cast<uint8_t*>(r.out) + off * es;
    for (const ScheduleStep& step : s.steps) {
      e.exchange(r, round, out, 0, 1, len * es, false);
      for (const Transfer& x : step.transfers) {
        if (x.dst != me) continue;
        const size_t b = std::min(static_cast<size_t>(x.chunk) * chunk, len), n = std::min(chunk, len - b);
        if (n == 0) continue;
        apply(r, step_op, x.move, out + b * es, e.peer_block(x.src, 0) + b * es, n);
      }
      e.end_step();
    }
    if (r.op == ReduceOp::kAvg) host_divide(r.dtype, out, len, e.world_size());
  }
  e.finish_op(r);
}

void host_gather_scheduled(HostEngine& e, const Request& r, const Schedule& s) {
  const size_t es = r.elem_size(), block = r.count;  // elements of one rank's block
  const int n = e.world_size(), me = e.rank();
  const bool rs = r.kind == Collective::kReduceScatter;
  const ReduceOp step_op = r.op == ReduceOp::kAvg ? ReduceOp::kSum : r.op;
  std::vector<uint8_t> work;
  uint8_t* buf = static_cast<uint8_t*>(r.out);
  if (rs) {
    work.resize(n * block * es);
    if (block > 0) std::memcpy(work.data(), r.in, n * block * es);
    buf = work.data();
  } else if (block > 0) {
    std::memmove(buf + me * block * es, r.in, block * es);  // in may be this rank's block of out already
  }
  const size_t cap = e.round_elems(es, n);
  uint64_t round = 0;
  for (size_t off = 0; off < block; off += cap, ++round) {
    const size_t len = std::min(cap, block - off);
    for (const ScheduleStep& step : s.steps) {
      e.exchange(r, round, buf + off * es, block * es, n, len * es, false);
      for (const Transfer& x : step.transfers) {
        if (x.dst != me) continue;
        apply(r, step_op, x.move, buf + (static_cast<size_t>(x.chunk) * block + off) * es, e.peer_block(x.src, x.chunk),
              len);
      }
      e.end_step();
    }
  }
  if (rs && block > 0) {
    std::memcpy(r.out, buf + me * block * es, block * es);
    if (r.op == ReduceOp::kAvg) host_divide(r.dtype, r.out, block, n);
  }
  e.finish_op(r);
}

}  // namespace symcomm::detail
