#include "algos/request.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include "base/check.h"

namespace symcomm::detail {

size_t Request::in_count(int world_size) const {
  if (is_p2p()) return p2p == P2pDir::kSend ? count : 0;
  switch (kind) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kAllGather: return count;
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return count * static_cast<size_t>(world_size);
    case Collective::kBarrier: return 0;
  }
  return 0;
}

size_t Request::out_count(int world_size) const {
  if (is_p2p()) return p2p == P2pDir::kRecv ? count : 0;
  switch (kind) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduceScatter: return count;
    case Collective::kAllGather:
    case Collective::kAllToAll: return count * static_cast<size_t>(world_size);
    case Collective::kBarrier: return 0;
  }
  return 0;
}

std::string Request::describe() const {
  if (is_p2p()) {
    return fmt::format("{}(count={}, dtype={}, peer={}, buf={})", p2p_dir_name(p2p), count, to_string(dtype), peer,
                       p2p == P2pDir::kSend ? in : static_cast<const void*>(out));
  }
  return fmt::format("{}(count={}, dtype={}, op={}, root={}, in={}, out={})", to_string(kind), count, to_string(dtype),
                     to_string(op), root, in, static_cast<const void*>(out));
}

namespace {

// Byte sizes must fit in size_t and in the signed 64-bit range used by offsets.
constexpr size_t kMaxBytes = static_cast<size_t>(std::numeric_limits<int64_t>::max());

void validate_options(const Request& r) {
  SYMCOMM_CHECK_ARG(is_valid(r.options.algorithm), "invalid algorithm value {}", static_cast<int>(r.options.algorithm));
  SYMCOMM_CHECK_ARG(is_valid(r.options.contention), "invalid contention value {}",
                    static_cast<int>(r.options.contention));
}

void validate_p2p(const Request& r, int world_size) {
  const char* what = p2p_dir_name(r.p2p);
  SYMCOMM_CHECK_ARG(r.p2p == P2pDir::kSend || r.p2p == P2pDir::kRecv, "invalid point-to-point direction {}",
                    static_cast<int>(r.p2p));
  SYMCOMM_CHECK_ARG(is_valid(r.dtype), "{}: invalid dtype value {}", what, static_cast<int>(r.dtype));
  validate_options(r);
  SYMCOMM_CHECK_ARG(r.peer >= 0 && r.peer < world_size, "{}: peer {} is outside [0, {})", what, r.peer, world_size);
  SYMCOMM_CHECK_ARG(r.options.algorithm == Algorithm::kAuto || r.options.algorithm == Algorithm::kDirect,
                    "{}: algorithm {} cannot run a point-to-point operation (kAuto or kDirect)", what,
                    to_string(r.options.algorithm));
  SYMCOMM_CHECK_ARG(r.count <= kMaxBytes / r.elem_size(), "{}: count {} of {} overflows the byte size", what, r.count,
                    to_string(r.dtype));
  const void* buf = r.p2p == P2pDir::kSend ? r.in : r.out;
  SYMCOMM_CHECK_ARG(r.count == 0 || buf != nullptr, "{}: buffer pointer is null", what);
}

}  // namespace

void validate_request(const Request& r, int world_size) {
  if (r.is_p2p()) return validate_p2p(r, world_size);
  SYMCOMM_CHECK_ARG(is_valid(r.kind), "invalid collective value {}", static_cast<int>(r.kind));
  SYMCOMM_CHECK_ARG(is_valid(r.dtype), "invalid dtype value {}", static_cast<int>(r.dtype));
  SYMCOMM_CHECK_ARG(!r.has_reduction() || is_valid(r.op), "invalid reduce op value {}", static_cast<int>(r.op));
  validate_options(r);
  if (r.kind == Collective::kBroadcast) {
    SYMCOMM_CHECK_ARG(r.root >= 0 && r.root < world_size, "broadcast root {} is outside [0, {})", r.root, world_size);
  }
  if (r.kind == Collective::kBarrier) return;
  size_t per_elem = r.elem_size();
  size_t scale = (r.kind == Collective::kAllReduce || r.kind == Collective::kBroadcast) ? 1 : world_size;
  SYMCOMM_CHECK_ARG(r.count <= kMaxBytes / per_elem / scale, "count {} of {} overflows the byte size", r.count,
                    to_string(r.dtype));
  if (r.count == 0) return;
  bool needs_in = r.kind != Collective::kBroadcast;  // broadcast reads `in` on the root only (check_request)
  SYMCOMM_CHECK_ARG(!needs_in || r.in != nullptr, "{}: input pointer is null", to_string(r.kind));
  SYMCOMM_CHECK_ARG(r.out != nullptr, "{}: output pointer is null", to_string(r.kind));
}

void check_request(const Request& r, int rank, int world_size) {
  validate_request(r, world_size);
  if (r.is_p2p()) return;
  // What only this rank's place decides: a broadcast reads its input on the root alone.
  SYMCOMM_CHECK_ARG(r.kind != Collective::kBroadcast || r.root != rank || r.count == 0 || r.in != nullptr,
                    "broadcast: the root's input pointer is null");
  check_in_place(r, rank, world_size);
}

void check_in_place(const Request& r, int rank, int world_size) {
  if (r.is_p2p() || r.kind == Collective::kBarrier || r.count == 0) return;
  if (r.kind == Collective::kBroadcast && r.root != rank) return;
  const size_t es = r.elem_size(), in_bytes = r.in_count(world_size) * es, out_bytes = r.out_count(world_size) * es;
  const auto in = reinterpret_cast<uintptr_t>(r.in), out = reinterpret_cast<uintptr_t>(r.out);
  if (in + in_bytes <= out || out + out_bytes <= in) return;  // disjoint
  const size_t own_block = static_cast<size_t>(rank) * r.count * es;
  switch (r.kind) {
    case Collective::kAllGather:
      SYMCOMM_CHECK_ARG(in == out + own_block,
                        "all_gather: the input {} overlaps the output {} other than as this rank's block (rank {}: "
                        "output + {} bytes)",
                        r.in, static_cast<const void*>(r.out), rank, own_block);
      return;
    case Collective::kReduceScatter:
      SYMCOMM_CHECK_ARG(out == in + own_block,
                        "reduce_scatter: the output {} overlaps the input {} other than as this rank's block (rank "
                        "{}: input + {} bytes)",
                        static_cast<const void*>(r.out), r.in, rank, own_block);
      return;
    default:
      SYMCOMM_CHECK_ARG(in == out, "{}: the input {} and the output {} overlap without being the same buffer",
                        to_string(r.kind), r.in, static_cast<const void*>(r.out));
  }
}

}  // namespace symcomm::detail
