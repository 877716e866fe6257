// Stand-in for the CUDA backend in builds without CUDA (see src/CMakeLists.txt).
#include "algos/bucket_copy.h"
#include "backends/backend.h"
#include "base/check.h"

namespace symcomm::detail {

std::unique_ptr<Backend> make_cuda_backend(CommContext&, int) {
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no CUDA backend (nvcc was not found at build time)");
}

std::string cuda_device_name(const CommContext&, int) {
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no CUDA backend (nvcc was not found at build time)");
}

// The bucketer's batched copy (src/algos/cuda_bucket_copy.cu); unreachable without a CUDA backend.
void cuda_bucket_copy(const BucketCopySegment*, size_t, char*, size_t, int, int, Stream) {
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no CUDA backend");
}

}  // namespace symcomm::detail
