#pragma once
// NOTE [one operation at a time] A communicator's kernels share one device sequence number, its signal slots, the
// LL areas and the staging buffers, so two of its operations must never run at once. Calls on one stream run in
// stream order; calls on different streams are put in issue order here, as NCCL orders the operations of one
// communicator whatever streams they name (torch's FSDP issues its all-gathers and reduce-scatters of one group
// on two streams and orders them only partly). After each operation an event is recorded on its stream; an
// operation on another stream than the previous one first makes its stream wait for that event. Both inside one
// CUDA graph capture (the wait joins the streams in the graph) and between eager calls; not between a capture and
// eager work, nor between two captures, where the graphs' launches order the work (a wait across them is an
// error that would end the capture). A stream handle is compared, never used after its call: a destroyed stream's
// handle is reused only once its work is done. Within a group, StreamChain (cuda_group_cuda.cc) orders the runs.
#include <cuda_runtime_api.h>

#include <mutex>

namespace symcomm::detail {

class OpOrder {
 public:
  OpOrder() = default;
  OpOrder(const OpOrder&) = delete;
  OpOrder& operator=(const OpOrder&) = delete;
  ~OpOrder();

  /// Before an operation is enqueued on `s`: where the previous one went to another stream in the same capture
  /// state (both eager, or both in one capture), `s` waits for it.
  void enter(cudaStream_t s);
  /// After an operation was enqueued on `s`: what the next enter() waits for. Never throws.
  void leave(cudaStream_t s);

 private:
  std::mutex mu_;
  cudaEvent_t eager_ = nullptr;          ///< recorded after the latest operation outside a capture
  cudaEvent_t captured_ = nullptr;       ///< recorded after the latest operation inside a capture
  cudaStream_t last_ = nullptr;          ///< the stream of the latest operation
  unsigned long long last_capture_ = 0;  ///< its capture's id, 0 outside a capture
  bool any_ = false;                     ///< an operation has left
};

}  // namespace symcomm::detail
