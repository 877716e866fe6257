// All-gather: every rank publishes its input; each copies every peer's block into its place in the output.
#include <cstring>

#include "backends/host/host_algos.h"

namespace symcomm::detail {

void host_all_gather(HostEngine& e, const Request& r) {
  const size_t es = r.elem_size(), chunk = e.round_elems(es, 1);
  const int n = e.world_size(), me = e.rank();
  auto* out = static_cast<uint8_t*>(r.out);
  const auto* in = static_cast<const uint8_t*>(r.in);
  const size_t block = r.count * es;
  // In place (input = this rank's block of the output) peers read a region this rank never writes.
  const bool in_place = in == out + me * block;
  const bool zc = in_place || !overlaps(in, block, out, n * block);
  uint64_t round = 0;
  for (size_t off = 0; off < r.count; off += chunk, ++round) {
    size_t len = std::min(chunk, r.count - off);
    e.exchange(r, round, in + off * es, 0, 1, len * es, zc);
    for (int p = 0; p < n; ++p) {
      uint8_t* dst = out + p * block + off * es;
      if (p != me) {
        std::memcpy(dst, e.peer_block(p, 0), len * es);
      } else if (!in_place) {
        std::memmove(dst, in + off * es, len * es);
      }
    }
    e.end_step();
  }
  e.finish_op(r);
}

}  // namespace symcomm::detail
