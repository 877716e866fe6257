// Stand-in for the CUDA parts of the fused operations in builds without CUDA (src/CMakeLists.txt leaves
// every cuda_stub.cc out of CUDA builds). A communicator of such a build never has the CUDA backend.
#include "base/check.h"
#include "fused/fused_engine.h"
#include "fused/fused_workspace.h"

namespace symcomm::detail::fused {

std::unique_ptr<LaneResources> make_cuda_lanes(Communicator&) {
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no CUDA backend");
}

std::unique_ptr<Engine> make_cuda_engine(Communicator&, Stream, FusedWorkspace*, bool) {
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no CUDA backend");
}

}  // namespace symcomm::detail::fused
