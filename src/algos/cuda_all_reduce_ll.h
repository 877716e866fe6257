#pragma once
// Low-latency (LL) one-shot all-reduce (CUDA): every 8 bytes of payload travel in a 16-byte line together
// with two copies of the op's sequence number, so the arrival of the data is its own signal: no fence, no
// separate flag, no barrier. For small payloads, where one NVLink latency is most of the cost. One more line
// carries the op's header, which thread 0 compares (NOTE [LL header line]).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "symcomm/device/handle.h"
#include "symcomm/types.h"

namespace symcomm::detail::cuda {

/// What an LL kernel computes (NOTE [LL all-gather and reduce-scatter] in cuda_all_reduce_ll.cu). `count` is
/// always the elements of one rank's block: the all-reduce's whole payload, the all-gather's input (its output
/// holds world_size blocks), the reduce-scatter's output (its input holds world_size blocks), one block of the
/// all-to-all (input and output hold world_size blocks), the broadcast's payload (NOTE [LL broadcast]).
enum class LLKind : int { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2, kAllToAll = 3, kBroadcast = 4 };

struct AllReduceLLParams {
  device::DeviceComm comm;
  const void* in;
  void* out;
  size_t count;
  DataType dtype;
  ReduceOp op;
  LLKind kind = LLKind::kAllReduce;
  int root = 0;                  ///< kBroadcast
  uint64_t header;               ///< the op's header, sent in line 0 and compared (NOTE [LL header line])
  size_t chunks_per_thread = 1;  ///< 8-byte chunks per thread before another block is added (Tuning; 1-64)
  size_t max_blocks = 128;       ///< (Tuning; 1-1024)
  size_t block_threads = 512;    ///< threads per block (Tuning; rounded down to a multiple of 32, 32-512)
  bool pdl = false;              ///< programmatic dependent launch (NOTE [PDL] in cuda_common.cuh)
};

/// LL128 one-shot all-reduce (CUDA), for payloads between LL's and the staged one-shot's: a 128-byte line
/// carries 120 bytes of payload and an 8-byte flag {seq, header} in its last lane, written by 8 lanes of a
/// warp with one store instruction and read the same way (NOTE [LL128 lines] in cuda_all_reduce_ll.cu).
/// 6.7% of extra NVLink bytes instead of LL's 100%, still no fence and no barrier; the header makes ranks
/// running different all-reduces (count, dtype, op) fail with kMismatch instead of timing out. The same lines
/// also carry a two-shot all-reduce without barriers (`two_shot`): each rank reduces one shard of the payload
/// and sends the result back on the lines, so each element crosses NVLink twice instead of world_size - 1 times.
struct AllReduceLL128Params {
  device::DeviceComm comm;
  const void* in;
  void* out;
  size_t count;
  DataType dtype;
  ReduceOp op;
  uint32_t header;             ///< the op's header (low 32 bits); the same on every rank running the same op
  size_t offset;               ///< byte offset of the LL128 area in every rank's LL buffer
  size_t slot_bytes;           ///< bytes of lines per (parity, source rank): all_reduce_ll128_slot_bytes(payload)
  size_t lines_per_group = 1;  ///< lines each 8-lane group carries before another block is added (Tuning)
  size_t max_blocks = 128;     ///< (Tuning; 1-1024)
  bool pdl = false;            ///< programmatic dependent launch (NOTE [PDL] in cuda_common.cuh)
  bool two_shot = false;       ///< the two-shot kernel (NOTE [LL128 two-shot] in cuda_all_reduce_ll.cu)
  /// The one-shot kernel's collective (NOTE [LL128 all-gather and reduce-scatter]); `count` as for LLKind.
  /// Broadcast is not an LL128 kind.
  LLKind kind = LLKind::kAllReduce;
};

/// Bytes of LL128 lines that carry `payload_bytes` of payload, and 4 lines more: so that the two-shot's halves
/// of the world_size slots (NOTE [LL128 two-shot]) hold world_size / 2 x `payload_bytes` at any world size.
size_t all_reduce_ll128_slot_bytes(size_t payload_bytes);
/// The payloads (bytes) the LL128 two-shot all-reduce serves at `world_size` ranks with slots of `slot_bytes`:
/// from one line per shard (NOTE [LL128 two-shot]) up to what the slots hold.
size_t all_reduce_ll128_two_shot_min_bytes(int world_size);
size_t all_reduce_ll128_two_shot_max_bytes(int world_size, size_t slot_bytes);
void launch_all_reduce_ll128(const AllReduceLL128Params& p, cudaStream_t stream);

/// Largest payload (bytes) the LL buffers hold.
size_t all_reduce_ll_max_bytes(const device::DeviceComm& c);
void launch_all_reduce_ll(const AllReduceLLParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
