#pragma once
// Request: one collective or point-to-point call, as every public entry point builds it. All of them funnel
// through CommCore::enqueue(Request) (one path), which validates it, selects an algorithm and hands it to the
// backend.

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/p2p_dir.h"
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
  /// Point-to-point (Communicator::send / recv): the direction, and the peer the message goes to or comes from.
  /// A send reads `count` elements at `in`, a receive writes them at `out`; `kind`, `op` and `root` do not apply.
  P2pDir p2p = P2pDir::kNone;
  int peer = -1;

  size_t elem_size() const { return dtype_size(dtype); }
  /// Elements read from `in` / written to `out` on this rank.
  size_t in_count(int world_size) const;
  size_t out_count(int world_size) const;
  bool has_reduction() const {
    return p2p == P2pDir::kNone && (kind == Collective::kAllReduce || kind == Collective::kReduceScatter);
  }
  bool is_p2p() const { return p2p != P2pDir::kNone; }
  std::string describe() const;
};

/// The request of a collective / of a point-to-point operation, as the entry points build them.
inline Request make_request(Collective kind, const void* in, void* out, size_t count, DataType dtype,
                            ReduceOp op = ReduceOp::kSum, int root = 0, const CollOptions& o = {}) {
  return Request{
      .kind = kind, .in = in, .out = out, .count = count, .dtype = dtype, .op = op, .root = root, .options = o};
}
inline Request make_p2p(P2pDir dir, const void* in, void* out, size_t count, DataType dtype, int peer,
                        const CollOptions& o = {}) {
  return Request{.in = in, .out = out, .count = count, .dtype = dtype, .options = o, .p2p = dir, .peer = peer};
}

/// Backend-independent argument checks: enums valid, root or peer in range, element and byte counts do not
/// overflow, non-null buffers where count > 0, reductions only for reducing collectives, no algorithm forced on a
/// point-to-point operation other than kDirect. Throws Error(kInvalidArgument) naming the field.
void validate_request(const Request& r, int world_size);

/// NOTE [in place] A collective's input and output are disjoint or in place, as NCCL defines it: all_reduce,
/// broadcast (on the root; elsewhere the input is not read) and all_to_all with in == out; all_gather with the input
/// at this rank's block of the output; reduce_scatter with the output at this rank's block of the input. Any other
/// overlap throws Error(kInvalidArgument): the paths that read peers' inputs in place (zero-copy, the copy engine)
/// or write blocks before reading this rank's input would read bytes already overwritten, differently by path and
/// size (the host backend's all-gather of an input inside the output, other than its own block, wrote wrong blocks).
void check_in_place(const Request& r, int rank, int world_size);

/// Every check of a request that needs no backend, as each entry point runs them before anything is issued:
/// validate_request(), a broadcast root's non-null input, and check_in_place() for this rank.
void check_request(const Request& r, int rank, int world_size);

}  // namespace symcomm::detail
