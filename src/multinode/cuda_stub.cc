// Stand-in for CudaMultiNodeCommunicator (symcomm/multinode_cuda.h) in builds without CUDA (see src/CMakeLists.txt):
// create() throws Error(kUnsupported), so no object exists and the other members are never reached.
#include "base/check.h"
#include "symcomm/multinode_cuda.h"

namespace symcomm {

class CudaMultiNodeCommunicator::Impl {};

namespace {
[[noreturn]] void unsupported() {
  SYMCOMM_THROW(kUnsupported, "this build of symcomm has no CUDA backend (nvcc was not found at build time)");
}
}  // namespace

std::unique_ptr<CudaMultiNodeCommunicator> CudaMultiNodeCommunicator::create(std::shared_ptr<Store>, const RankInfo&,
                                                                             const MultiNodeOptions&) {
  unsupported();
}
CudaMultiNodeCommunicator::CudaMultiNodeCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaMultiNodeCommunicator::~CudaMultiNodeCommunicator() = default;
int CudaMultiNodeCommunicator::rank() const { unsupported(); }
int CudaMultiNodeCommunicator::world_size() const { unsupported(); }
int CudaMultiNodeCommunicator::node() const { unsupported(); }
int CudaMultiNodeCommunicator::num_nodes() const { unsupported(); }
int CudaMultiNodeCommunicator::local_rank() const { unsupported(); }
int CudaMultiNodeCommunicator::local_world_size() const { unsupported(); }
int CudaMultiNodeCommunicator::device() const { unsupported(); }
Communicator& CudaMultiNodeCommunicator::node_communicator() { unsupported(); }
void CudaMultiNodeCommunicator::all_reduce(const void*, void*, size_t, DataType, ReduceOp, const NodeCollOptions&) {
  unsupported();
}
void CudaMultiNodeCommunicator::all_gather(const void*, void*, size_t, DataType, const NodeCollOptions&) {
  unsupported();
}
void CudaMultiNodeCommunicator::reduce_scatter(const void*, void*, size_t, DataType, ReduceOp, const NodeCollOptions&) {
  unsupported();
}
void CudaMultiNodeCommunicator::broadcast(const void*, void*, size_t, DataType, int, const NodeCollOptions&) {
  unsupported();
}
void CudaMultiNodeCommunicator::all_to_all(const void*, void*, size_t, DataType, const NodeCollOptions&) {
  unsupported();
}
void CudaMultiNodeCommunicator::barrier(const NodeCollOptions&) { unsupported(); }
void CudaMultiNodeCommunicator::send(const void*, size_t, DataType, int, const NodeCollOptions&) { unsupported(); }
void CudaMultiNodeCommunicator::recv(void*, size_t, DataType, int, const NodeCollOptions&) { unsupported(); }
void CudaMultiNodeCommunicator::group_start() { unsupported(); }
void CudaMultiNodeCommunicator::group_end() { unsupported(); }
void CudaMultiNodeCommunicator::group_cancel() { unsupported(); }
NodePath CudaMultiNodeCommunicator::last_path() const { unsupported(); }
void CudaMultiNodeCommunicator::abort() { unsupported(); }
bool CudaMultiNodeCommunicator::is_aborted() const { unsupported(); }
void CudaMultiNodeCommunicator::check() const { unsupported(); }

}  // namespace symcomm
