#pragma once
// Request: one collective call, as every public entry point builds it. All collectives funnel through
// CommCore::enqueue(Request) (one path), which validates it, selects an algorithm and hands it to the backend.

#include <cstddef>
#include <cstdint>
#include <string>

#include "symcomm/communicator.h"

namespace symcomm::detail {

struct Request {
  Collective kind = Collective::kBarrier;
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;  ///< see Communicator: total for all_reduce/broadcast, per rank for the others
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  CollOptions options;

  size_t elem_size() const { return dtype_size(dtype); }
  /// Elements read from `in` / written to `out` on this rank.
  size_t in_count(int world_size) const;
  size_t out_count(int world_size) const;
  bool has_reduction() const { return kind == Collective::kAllReduce || kind == Collective::kReduceScatter; }
  std::string describe() const;
};

/// Backend-independent argument checks: enums valid, root in range, element and byte counts do not
/// overflow, non-null buffers where count > 0, reductions only for reducing collectives. Throws
/// Error(kInvalidArgument) naming the field.
void validate_request(const Request& r, int world_size);

}  // namespace symcomm::detail
