#pragma once
// FusedWorkspace's insides: the symmetric buffer and, on the CUDA backend, the side stream and events.

#include <memory>

#include "symcomm/fused.h"

namespace symcomm::detail::fused {

/// Backend resources of a workspace beyond its memory (CUDA: side stream, events).
class LaneResources {
 public:
  virtual ~LaneResources() = default;
};

/// CUDA: a side stream and kMaxEvents events on the communicator's device (fused_engine_cuda.cc).
std::unique_ptr<LaneResources> make_cuda_lanes(Communicator& comm);

}  // namespace symcomm::detail::fused

namespace symcomm {

struct FusedWorkspace::Impl {
  Communicator* comm = nullptr;
  void* data = nullptr;  ///< symmetric heap
  size_t bytes = 0;
  std::unique_ptr<detail::fused::LaneResources> lanes;
};

}  // namespace symcomm
