#include "backends/cuda/op_order_cuda.h"

#include "base/cuda_check.h"

namespace symcomm::detail {
namespace {

constexpr unsigned long long kUnknown = ~0ull;

// The id of the capture `s` is in, 0 where it is not capturing (an invalidated capture counts as none: it fails at
// its end whatever is enqueued), kUnknown where the runtime cannot say (its error is cleared from the thread, as
// stream_capturing() does).
unsigned long long capture_of(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(s, &status, &id) != cudaSuccess) {
    cudaGetLastError();
    return kUnknown;
  }
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

}  // namespace

OpOrder::~OpOrder() {
  if (eager_ != nullptr) cudaEventDestroy(eager_);
  if (captured_ != nullptr) cudaEventDestroy(captured_);
}

void OpOrder::enter(cudaStream_t s) {
  std::lock_guard lock(mu_);
  if (!any_ || s == last_) return;
  if (capture_of(s) != last_capture_) return;
  SYMCOMM_CUDA_CHECK(cudaStreamWaitEvent(s, last_capture_ != 0 ? captured_ : eager_, 0));
}

// Never throws: the operation is enqueued already, and an error here would tell the caller it was not. Where the
// event cannot be recorded, the next operation is not ordered against this one (as before any operation).
void OpOrder::leave(cudaStream_t s) {
  std::lock_guard lock(mu_);
  any_ = false;
  const unsigned long long capture = capture_of(s);
  if (capture == kUnknown) return;
  cudaEvent_t& ev = capture != 0 ? captured_ : eager_;
  if ((ev == nullptr && cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) ||
      cudaEventRecord(ev, s) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  last_ = s;
  last_capture_ = capture;
  any_ = true;
}

}  // namespace symcomm::detail
