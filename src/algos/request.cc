#include "algos/request.h"

#include <fmt/format.h>

#include <limits>

#include "base/check.h"

namespace symcomm::detail {

size_t Request::in_count(int world_size) const {
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
  return fmt::format("{}(count={}, dtype={}, op={}, root={}, in={}, out={})", to_string(kind), count, to_string(dtype),
                     to_string(op), root, in, static_cast<const void*>(out));
}

void validate_request(const Request& r, int world_size) {
  SYMCOMM_CHECK_ARG(is_valid(r.kind), "invalid collective value {}", static_cast<int>(r.kind));
  SYMCOMM_CHECK_ARG(is_valid(r.dtype), "invalid dtype value {}", static_cast<int>(r.dtype));
  SYMCOMM_CHECK_ARG(!r.has_reduction() || is_valid(r.op), "invalid reduce op value {}", static_cast<int>(r.op));
  SYMCOMM_CHECK_ARG(is_valid(r.options.algorithm), "invalid algorithm value {}", static_cast<int>(r.options.algorithm));
  SYMCOMM_CHECK_ARG(is_valid(r.options.contention), "invalid contention value {}",
                    static_cast<int>(r.options.contention));
  if (r.kind == Collective::kBroadcast) {
    SYMCOMM_CHECK_ARG(r.root >= 0 && r.root < world_size, "broadcast root {} is outside [0, {})", r.root, world_size);
  }
  if (r.kind == Collective::kBarrier) return;
  // Byte sizes must fit in size_t and in the signed 64-bit range used by offsets.
  constexpr size_t kMaxBytes = static_cast<size_t>(std::numeric_limits<int64_t>::max());
  size_t per_elem = r.elem_size();
  size_t scale = (r.kind == Collective::kAllReduce || r.kind == Collective::kBroadcast) ? 1 : world_size;
  SYMCOMM_CHECK_ARG(r.count <= kMaxBytes / per_elem / scale, "count {} of {} overflows the byte size", r.count,
                    to_string(r.dtype));
  if (r.count == 0) return;
  bool needs_in =
      r.kind != Collective::kBroadcast;  // broadcast reads `in` on the root only (CommCore::check_arguments)
  SYMCOMM_CHECK_ARG(!needs_in || r.in != nullptr, "{}: input pointer is null", to_string(r.kind));
  SYMCOMM_CHECK_ARG(r.out != nullptr, "{}: output pointer is null", to_string(r.kind));
}

}  // namespace symcomm::detail
