#pragma once
// CopyEngine: runs copy-engine (low-contention) collectives of the CUDA backend.
//
// NOTE [copy-engine sync] Data moves with cudaMemcpyAsync between peer mappings (the GPU's copy engines, no
// SM), on the caller's stream and on internal "lane" streams forked from it and joined back (so CUDA-graph
// capture records the same work). Barriers are stream memory operations (cuStreamBatchMemOp): each rank
// writes the plan's header (31 bits, never 0) into its slot of every peer's copy-engine pad, waits until its
// own slots for all peers read its own header, then writes them back to 0. The values written and waited for
// never change between replays, so a captured graph replays them correctly. A slot is rewritten by its peer
// only after a later barrier that this rank enters after its reset (arrive and depart barriers alternate),
// and the default write carries a memory fence, so no signal is lost or seen twice. Ranks running different
// collectives (different headers) block instead of exchanging data, and a non-zero slot holding another
// header names a peer in another op (the watchdog reports kMismatch).
//
// NOTE [copy-engine watchdog] A stream memory wait cannot time out and uses no SM, so the host watches it.
// Each operation's first batch of memory operations writes its header (top bit set) into a host-mapped word
// (HostControl::ce_active) and its last batch writes 0, in eager mode and in captured graphs alike (no
// events, no host nodes). A watchdog thread polls the word every millisecond: it replaces a header it reads
// with the marker 1; if it still reads 1 a timeout later, no operation has started or ended since, so the
// one in flight is stuck. From 20 ms into an operation it also reads this rank's pad every 20 ms, and two
// readings in a row that prove a peer runs another op (NOTE [copy-engine early mismatch] in
// src/algos/ce_plan.cc) count as a mismatch at once instead of at the deadline. On either, on abort() or on a
// dead peer (HostControl::dead_mask) while an operation is in flight, it records the error in
// HostControl::error (read by the host like a kernel's error: kTimeout naming the missing rank, kMismatch
// naming the rank with another header, kPeerDead, kAborted), writes its gave-up word into every peer's pad
// (whom a peer names: NOTE [copy-engine stall] in src/algos/ce_plan.cc) and its abandon word, which stops
// every peer's op from completing with this rank (NOTE [copy-engine late peer]), and writes every wait's value
// into this rank's own slots from an internal stream, so the stuck stream drains (with garbage data; the
// communicator is failed) and the CUDA context stays usable. From 20 ms on, a reading that shows a peer gave up
// on this very op while no peer is missing reports it at once too (kAbandoned, as kTimeout naming that peer).

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "algos/ce_plan.h"
#include "algos/request.h"
#include "symcomm/device/handle.h"

namespace symcomm::detail {

struct CommContext;
struct ControlBlock;
class CudaHeap;

class CopyEngine {
 public:
  /// uint32 words of one rank's copy-engine pad: arrive and depart slots, a gave-up word and an abandon word
  /// (NOTE [copy-engine late peer] in src/algos/ce_plan.cc) per source rank.
  static constexpr size_t kPadWords = 4 * device::kMaxDeviceRanks;
  static constexpr size_t kPadBytes = kPadWords * sizeof(uint32_t);
  /// Internal copy streams: reduce-scatter alternates chunks over all; all-gather gives the last one to the
  /// local copy of the own block.
  static constexpr int kLanes = 3;

  /// `pads[p]`: rank p's copy-engine pad as mapped here (zeroed by every rank before first use);
  /// `scratch[p]`: rank p's symmetric staging buffer of `scratch_bytes`; `control_dev`: the device address
  /// of the control words.
  CopyEngine(CommContext& ctx, int device, std::shared_ptr<ControlBlock> control, device::HostControl* control_dev,
             CudaHeap& heap, const std::vector<uint32_t*>& pads, const std::vector<char*>& scratch,
             size_t scratch_bytes);
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  /// Enqueues the collective on `stream` (validated request; all_gather, all_to_all, broadcast or
  /// reduce_scatter).
  void run(const Request& r, cudaStream_t stream);

 private:
  /// Frees the streams, events and staging buffer made so far (the destructor's, and a failed constructor's).
  void release();
  void* resolve(const CeRef& ref, const Request& r);

  /// One batch: arrive (with header check) or depart barrier; `begin`/`end` add the in-flight word's writes.
  void barrier(cudaStream_t s, bool arrive, uint32_t header, bool begin, bool end);
  void watchdog();
  /// Called by the watchdog for the operation in flight: reports the error (once; `known` if not 0, else what
  /// classify() reads) and releases the waits.
  void fail_and_release(uint32_t header, bool timed_out, uint64_t known = 0);
  uint64_t classify(uint32_t header, bool timed_out);
  /// This rank's pad (slots and gave-up words) as the device sees it now; false if it cannot be read.
  bool read_pad(uint32_t* words);
  /// A peer proven to run another op than the one in flight (NOTE [copy-engine early mismatch]) or to have
  /// abandoned it (NOTE [copy-engine late peer]), read now.
  CeStall early_reading(uint32_t header);

  CommContext& ctx_;
  int device_;
  std::shared_ptr<ControlBlock> control_;
  uint32_t* active_dev_;  // device address of HostControl::ce_active
  CudaHeap& heap_;
  std::vector<uint32_t*> pads_;
  std::vector<char*> scratch_;
  size_t scratch_bytes_;
  uint64_t eager_ops_ = 0;  // eager ops run so far (NOTE [copy-engine op instance] in src/algos/ce_plan.cc)
  cudaStream_t lanes_[kLanes] = {};
  cudaEvent_t fork_ = nullptr;
  cudaEvent_t join_[kLanes] = {};
  char* stage_ = nullptr;
  size_t stage_bytes_ = 0;
  std::vector<CUstreamBatchMemOpParams> ops_;  // reused by barrier()

  // Watchdog.
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;                   // a first operation was issued: start polling
  cudaStream_t release_stream_ = nullptr;  // the watchdog's own stream (writes into this rank's pad)
  std::thread thread_;
  bool gave_up_ = false;  // the watchdog has written its gave-up words (only it touches this)
};

}  // namespace symcomm::detail
