#include "backends/cuda/op_order_cuda.h"

#include "base/cuda_check.h"

namespace symcomm::detail {
namespace {

// The id of the capture `s` is in, 0 where it is not capturing (an invalidated capture counts as none: it fails
// at its end whatever is enqueued).
unsigned long long capture_of(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  SYMCOMM_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, &id));
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

void OpOrder::leave(cudaStream_t s) {
  std::lock_guard lock(mu_);
  const unsigned long long capture = capture_of(s);
  cudaEvent_t& ev = capture != 0 ? captured_ : eager_;
  if (ev == nullptr) SYMCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  SYMCOMM_CUDA_CHECK(cudaEventRecord(ev, s));
  last_ = s;
  last_capture_ = capture;
  any_ = true;
}

}  // namespace symcomm::detail
