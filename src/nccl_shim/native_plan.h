// Which NCCL collective calls libsymcomm_nccl runs on symcomm's own kernels, and as what (docs/nccl-drop-in.md).
// Pure: the decision depends only on the call's arguments that every rank passes alike (collective, count,
// datatype, op, root) and on the communicator's size and settings, never on buffer addresses or properties, so
// every rank makes the same decision for the same call.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "symcomm/types.h"

namespace symcomm::nccl_shim {

enum class NativeColl : uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast };
inline constexpr int kNumNativeColls = 4;

const char* native_coll_name(NativeColl c) noexcept;

// The largest payload (bytes, NativePlan::bytes) each collective runs natively in auto mode, by world size.
// SIZE_MAX: every size; 0: never.
struct NativeLimits {
  size_t max_bytes[kNumNativeColls] = {0, 0, 0, 0};
};

// Compiled-in limits for a world size (NOTE [drop-in size limits] in native_plan.cc).
NativeLimits default_limits(int world_size) noexcept;

// The symcomm call that gives NCCL's result bit for bit where the reduction order allows it.
struct NativePlan {
  bool native = false;  ///< run on symcomm; false: forward to NCCL
  DataType dtype = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;  ///< reductions only
  size_t count = 0;              ///< symcomm's count (in dtype elements): the per-rank count for gathers/scatters
  size_t bytes = 0;              ///< payload compared with the limits: the all-reduce and broadcast buffer, the
                                 ///< all-gather output, the reduce-scatter input
  const char* why_not = "";      ///< when !native: why (for native-only's error text)
};

// The symcomm equivalent of an NCCL datatype and op, if symcomm has one with NCCL's exact semantics.
// Unsigned 32- and 64-bit sums and products wrap as the signed ones do; their min and max, ncclAvg on integers,
// FP8 types and custom (PreMulSum) ops have none.
bool map_reduction(ncclDataType_t dt, ncclRedOp_t op, DataType* out_dtype, ReduceOp* out_op) noexcept;

// Bytes per element of an NCCL datatype; 0 for a value nccl.h does not define.
size_t nccl_type_size(ncclDataType_t dt) noexcept;

// The plan for one call. count is NCCL's count argument (the per-rank count for all-gather, recvcount for
// reduce-scatter). respect_limits: auto mode; false: native-only (every call symcomm can run).
NativePlan plan_call(NativeColl coll, size_t count, ncclDataType_t dt, ncclRedOp_t op, int world_size,
                     const NativeLimits& limits, bool respect_limits) noexcept;

// NOTE [drop-in communicators that span nodes] (native.cc): the words each rank shows the others, kSpanWords per rank.
enum SpanWord : int {
  kSpanHost,    ///< host_identity()
  kSpanPid,     ///< the process id
  kSpanPort,    ///< the loopback port of the process's store server (0: it has none)
  kSpanToken0,  ///< the server's token, 16 bytes in two words
  kSpanToken1,
  kSpanName,      ///< a random number; rank 0's names the communicator's node communicators
  kSpanPidSpace,  ///< a hash of the boot and pid namespace: ranks with equal ones watch each other's pids
  kSpanWords,
};

// The node of each rank of a communicator that spans nodes, from every rank's words (`words`: kSpanWords per rank, in
// rank order): the ranks of one host, or where fake_node_size > 0 nodes of that many consecutive ranks; keys[r] is
// the lowest rank of r's node. false (keys unspecified) where the communicator cannot be served: a node whose ranks
// are not all on its lowest rank's host (the others reach that rank's store server over loopback), whose lowest rank
// has no store server, or of more than max_node_ranks ranks.
bool span_node_keys(const std::vector<int64_t>& words, int nranks, int fake_node_size, int max_node_ranks,
                    std::vector<int64_t>* keys) noexcept;

}  // namespace symcomm::nccl_shim
