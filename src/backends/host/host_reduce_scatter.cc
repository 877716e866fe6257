// Reduce-scatter: every rank publishes its whole input (n blocks); rank k reduces block k of every rank,
// in rank order.
#include <algorithm>
#include <vector>

#include "algos/bucket_copy.h"
#include "algos/host_reduce.h"
#include "backends/host/host_algos.h"
#include "base/hash.h"

namespace symcomm::detail {

void host_reduce_scatter(HostEngine& e, const Request& r) {
  const int n = e.world_size(), me = e.rank();
  const size_t es = r.elem_size(), chunk = e.round_elems(es, n);
  const auto* in = static_cast<const uint8_t*>(r.in);
  auto* out = static_cast<uint8_t*>(r.out);
  const size_t block = r.count * es;
  const bool zc = !overlaps(in, n * block, out, block);
  std::vector<const void*> srcs(n);
  uint64_t round = 0;
  for (size_t off = 0; off < r.count; off += chunk, ++round) {
    size_t len = std::min(chunk, r.count - off);
    e.exchange(r, round, in + off * es, block, n, len * es, zc);
    for (int p = 0; p < n; ++p) srcs[p] = p == me ? in + me * block + off * es : e.peer_block(p, me);
    host_reduce(r.dtype, r.op, out + off * es, srcs.data(), n, len);
    e.end_step();
  }
  e.finish_op(r);
}

// NOTE [step variant] in host_engine.h: ranks whose flushes lay their inputs out differently disagree here.
uint32_t host_gathered_variant(const GatheredReduceScatter& g) {
  Fnv1a fnv(fnv1a("gathered"));
  for (size_t k = 0; k < g.nseg; ++k) fnv.add(g.segs[k].dst_offset).add(g.segs[k].bytes);
  const uint64_t h = fnv.value();
  return static_cast<uint32_t>(h ^ (h >> 32)) | 1;  // never 0, the variant of a plain reduce-scatter
}

// NOTE [host gathered flush] A bucket flush on the host backend. The peers need rows q != me of every input
// in shared memory, so those are copied into the bucket's rows (g.stage, in the heap) and published
// zero-copy, one round per scratch-half's worth as above; this rank's own row is read where it is, in the
// inputs, instead of being copied too (copying every row would copy n rows where n - 1 suffice).
// Each round reduces, piece by piece (inputs sorted by offset), the own row and the peers' published rows
// in rank order, so the bits equal those of copying every row into the bucket and running
// host_reduce_scatter on it.
void host_reduce_scatter_gathered(HostEngine& e, const GatheredReduceScatter& g) {
  const int n = e.world_size(), me = e.rank();
  const size_t es = dtype_size(g.dtype), row = g.count * es;
  auto* stage = static_cast<uint8_t*>(g.stage);
  auto* out = static_cast<uint8_t*>(g.out);
  host_bucket_copy(g.segs, g.nseg, reinterpret_cast<char*>(stage), row, n, me);
  const Request r{.kind = Collective::kReduceScatter,
                  .in = stage,
                  .out = out,
                  .count = g.count,
                  .dtype = g.dtype,
                  .op = g.op,
                  .root = 0,
                  .options = g.options};
  const size_t chunk = e.round_elems(es, n);
  std::vector<const void*> srcs(n);
  size_t first = 0;  // the first input whose row ends after this round's start
  uint64_t round = 0;
  for (size_t off = 0; off < g.count; off += chunk, ++round) {
    const size_t len = std::min(chunk, g.count - off);
    e.exchange(r, round, stage + off * es, row, n, len * es, true);
    while (first < g.nseg && (g.segs[first].dst_offset + g.segs[first].bytes) / es <= off) ++first;
    for (size_t k = first; k < g.nseg && g.segs[k].dst_offset / es < off + len; ++k) {
      const size_t v0 = g.segs[k].dst_offset / es, v1 = v0 + g.segs[k].bytes / es;
      const size_t b = std::max(off, v0), end = std::min(off + len, v1);
      if (b >= end) continue;
      for (int p = 0; p < n; ++p) {
        srcs[p] = p == me ? static_cast<const uint8_t*>(g.segs[k].src) + static_cast<size_t>(me) * g.segs[k].bytes +
                                (b - v0) * es
                          : e.peer_block(p, me) + (b - off) * es;
      }
      host_reduce(g.dtype, g.op, out + b * es, srcs.data(), n, end - b);
    }
    e.end_step();
  }
  e.finish_op(r);
}

}  // namespace symcomm::detail
