// Reduce-scatter: every rank publishes its whole input (n blocks); rank k reduces block k of every rank,
// in rank order.
#include <vector>

#include "algos/host_algos.h"
#include "algos/host_reduce.h"

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

}  // namespace symcomm::detail
