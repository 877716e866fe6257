// Stand-in for the CUDA backend in builds without CUDA (see src/CMakeLists.txt).
#include "backends/backend.h"
#include "base/check.h"

namespace symcomm::detail {

bool cuda_backend_built() { return false; }

std::unique_ptr<Backend> make_cuda_backend(CommContext&, int) {
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no CUDA backend (nvcc was not found at build time)");
}

std::string cuda_device_name(const CommContext&, int) {
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no CUDA backend (nvcc was not found at build time)");
}

}  // namespace symcomm::detail
