// Two-shot all-reduce: reduce-scatter then all-gather within each round. Step 1: every rank publishes its
// input; rank k reduces slice k (rank order) into its output. Step 2: every rank publishes its reduced slice
// (from its output if that is in the heap, else from scratch) and copies the other slices. Each element is
// reduced exactly once, by one rank, so all ranks hold identical bits; it moves 2(n-1)/n of the data per
// rank instead of n-1, the bandwidth-optimal choice for large payloads.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algos/host_reduce.h"
#include "backends/host/host_algos.h"

namespace symcomm::detail {
namespace {

// Bytes reduced before the piece is staged (NOTE [two-shot staging]): well inside a core's L2 cache.
constexpr size_t kPieceBytes = size_t{64} << 10;

struct Slice {
  size_t lo, hi;
};

// Slice k of a round of `len` elements: equal parts rounded to 64 bytes, the last ones possibly shorter.
Slice slice_of(int k, int n, size_t len, size_t es) {
  size_t align = 64 / es;
  size_t per = (len + n - 1) / n;
  per = (per + align - 1) / align * align;
  size_t lo = std::min(len, per * k);
  return {lo, std::min(len, lo + per)};
}

}  // namespace

void host_all_reduce_two_shot(HostEngine& e, const Request& r) {
  const size_t es = r.elem_size(), chunk = e.round_elems(es, 1);
  const int n = e.world_size(), me = e.rank();
  const bool in_zc = !overlaps(r.in, r.count * es, r.out, r.count * es);
  std::vector<const void*> srcs(n);
  uint64_t round = 0;
  for (size_t off = 0; off < r.count; off += chunk, ++round) {
    size_t len = std::min(chunk, r.count - off);
    const uint8_t* in = static_cast<const uint8_t*>(r.in) + off * es;
    uint8_t* out = static_cast<uint8_t*>(r.out) + off * es;
    Slice mine = slice_of(me, n, len, es);

    // Peers may write into the output only where nobody reads: not when it partially overlaps the input.
    if (in_zc || in == out) e.offer_output(out, len * es);
    // Staged, the input goes into scratch but for this rank's own slice, which only this rank reads.
    e.exchange(r, 2 * round, in, 0, 1, len * es, in_zc, {mine.lo * es, mine.hi * es});
    const bool push = e.all_outputs_offered();
    uint8_t* slice = out + mine.lo * es;
    const size_t slice_bytes = (mine.hi - mine.lo) * es;
    // NOTE [two-shot staging] Where the reduced slice is published from scratch, each piece of it is copied
    // there right after it is reduced, while it is in this core's cache, instead of in a second pass over the
    // whole slice.
    const bool stage = !push && !e.in_own_heap(slice, slice_bytes);
    for (size_t lo = mine.lo; lo < mine.hi; lo += kPieceBytes / es) {
      const size_t hi = std::min(mine.hi, lo + kPieceBytes / es);
      for (int p = 0; p < n; ++p) srcs[p] = (p == me ? in : e.peer_block(p, 0)) + lo * es;
      host_reduce(r.dtype, r.op, out + lo * es, srcs.data(), n, hi - lo);
      if (stage) std::memcpy(e.next_scratch() + (lo - mine.lo) * es, out + lo * es, (hi - lo) * es);
    }
    if (push) {
      // NOTE [two-shot push] Every output is in the heap: write the reduced slice straight into every
      // peer's output (this rank is the only writer of that slice anywhere) instead of letting each peer
      // pull it after the next step. The slice is hot in this rank's cache; the pull would move lines the
      // owner has just modified. The second step then only says "your slice is written".
      for (int p = 0; p < n; ++p) {
        if (p != me) std::memcpy(e.peer_output(p) + mine.lo * es, out + mine.lo * es, (mine.hi - mine.lo) * es);
      }
      e.end_step();
      e.exchange_empty(r, 2 * round + 1);
      e.end_step();
      continue;
    }
    e.end_step();

    // Publish only the reduced slice: zero-copy from the output when it is in the heap (peers read this
    // slice while this rank writes the others), else from scratch, where it was copied piece by piece.
    if (stage) {
      e.exchange_scratch(r, 2 * round + 1);
    } else {
      e.exchange(r, 2 * round + 1, slice, 0, 1, slice_bytes, /*allow_zero_copy=*/true);
    }
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      Slice s = slice_of(p, n, len, es);
      std::memcpy(out + s.lo * es, e.peer_block(p, 0), (s.hi - s.lo) * es);
    }
    e.end_step();
  }
  e.finish_op(r);
}

}  // namespace symcomm::detail
