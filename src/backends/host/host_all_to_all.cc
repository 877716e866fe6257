// All-to-all: every rank publishes its n input blocks; rank k copies block k of every peer into the peer's
// place in its output.
#include <cstring>

#include "backends/host/host_algos.h"

namespace symcomm::detail {

void host_all_to_all(HostEngine& e, const Request& r) {
  const int n = e.world_size(), me = e.rank();
  const size_t es = r.elem_size(), chunk = e.round_elems(es, n);
  const auto* in = static_cast<const uint8_t*>(r.in);
  auto* out = static_cast<uint8_t*>(r.out);
  const size_t block = r.count * es;
  const bool zc = !overlaps(in, n * block, out, n * block);
  uint64_t round = 0;
  for (size_t off = 0; off < r.count; off += chunk, ++round) {
    size_t len = std::min(chunk, r.count - off);
    e.exchange(r, round, in + off * es, block, n, len * es, zc);
    // Own block first: in place, later copies overwrite input blocks (peers read the staged copy).
    std::memmove(out + me * block + off * es, in + me * block + off * es, len * es);
    for (int p = 0; p < n; ++p) {
      if (p != me) std::memcpy(out + p * block + off * es, e.peer_block(p, me), len * es);
    }
    e.end_step();
  }
  e.finish_op(r);
}

void host_barrier(HostEngine& e, const Request& r) {
  e.exchange_empty(r, 0);
  e.end_step();
}

}  // namespace symcomm::detail
