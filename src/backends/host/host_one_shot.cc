// One-shot all-reduce: every rank publishes its whole input and reduces everyone's, in rank order.
// One step per round: the latency-optimal choice for small payloads.
#include <vector>

#include "algos/host_reduce.h"
#include "backends/host/host_algos.h"

namespace symcomm::detail {

void host_all_reduce_one_shot(HostEngine& e, const Request& r) {
  const size_t es = r.elem_size(), chunk = e.round_elems(es, 1);
  const int n = e.world_size();
  // Zero-copy publication is unsafe when the output overlaps the input: this rank would overwrite data
  // peers are still reading.
  const bool zc = !overlaps(r.in, r.count * es, r.out, r.count * es);
  std::vector<const void*> srcs(n);
  uint64_t round = 0;
  for (size_t off = 0; off < r.count; off += chunk, ++round) {
    size_t len = std::min(chunk, r.count - off);
    const uint8_t* in = static_cast<const uint8_t*>(r.in) + off * es;
    e.exchange(r, round, in, 0, 1, len * es, zc);
    for (int p = 0; p < n; ++p) srcs[p] = p == e.rank() ? in : e.peer_block(p, 0);
    host_reduce(r.dtype, r.op, static_cast<uint8_t*>(r.out) + off * es, srcs.data(), n, len);
    e.end_step();
  }
  e.finish_op(r);
}

}  // namespace symcomm::detail
