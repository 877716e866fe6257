// Broadcast: the root publishes its input; every other rank copies it. Non-roots publish only a header
// (that is how they learn the root reached the step and check the arguments match).
#include <cstring>

#include "backends/host/host_algos.h"
#include "base/check.h"

namespace symcomm::detail {

void host_broadcast(HostEngine& e, const Request& r) {
  const size_t es = r.elem_size(), chunk = e.round_elems(es, 1);
  const bool root = e.rank() == r.root;
  const auto* in = static_cast<const uint8_t*>(r.in);
  auto* out = static_cast<uint8_t*>(r.out);
  const size_t bytes = r.count * es;
  // The root's own copy may move bytes peers are reading when in and out overlap without being equal.
  const bool zc = in == out || !overlaps(in, bytes, out, bytes);
  if (root && bytes > 0) SYMCOMM_CHECK_ARG(in != nullptr, "broadcast: the root's input pointer is null");
  uint64_t round = 0;
  for (size_t off = 0; off < r.count; off += chunk, ++round) {
    size_t len = std::min(chunk, r.count - off);
    if (root) {
      e.exchange(r, round, in + off * es, 0, 1, len * es, zc);
      if (in != out) std::memmove(out + off * es, in + off * es, len * es);
    } else {
      e.exchange_empty(r, round);
      std::memcpy(out + off * es, e.peer_block(r.root, 0), len * es);
    }
    e.end_step();
  }
  e.finish_op(r);
}

}  // namespace symcomm::detail
