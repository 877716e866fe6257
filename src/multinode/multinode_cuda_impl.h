#pragma once
// The implementation of CudaMultiNodeCommunicator (symcomm/multinode_cuda.h), shared with the NCCL drop-in library:
// the engines between the nodes, the NCCL functions they call, and the communicator made from parts another layer
// already holds (the drop-in library's NOTE [drop-in communicators that span nodes]).

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "algos/node_plan.h"
#include "algos/request.h"
#include "multinode/node_common.h"
#include "symcomm/multinode_cuda.h"

namespace symcomm::detail {

/// The NCCL functions the stages between the nodes call: NCCL's own (linked_nccl_calls()), or the real library's
/// behind the drop-in library, whose exports of the same names would route the calls back into its hooks.
struct NcclCalls {
  ncclResult_t (*comm_abort)(ncclComm_t);
  /// ncclCommRevoke (NCCL 2.28+; fails where the library has none): ends a communicator's kernels, frees nothing.
  ncclResult_t (*comm_revoke)(ncclComm_t, int);
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*);
  const char* (*get_error_string)(ncclResult_t);
  const char* (*get_last_error)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce_scatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
};

/// NCCL's functions as this library links them.
const NcclCalls& linked_nccl_calls();

/// Ends the NCCL communicators `abort` (ncclCommAbort) and the kernels of `revoke` (ncclCommRevoke, unless nullptr)
/// all at once, each on its own thread (NOTE [NCCL aborts together]); returns whether `revoke` was revoked.
bool abort_nccl_together(const NcclCalls& api, const std::vector<ncclComm_t>& abort, ncclComm_t revoke);

/// Throws Error(kCuda) for a failed NCCL call `what`, with NCCL's last error text.
void check_nccl(const NcclCalls& api, ncclResult_t r, ncclComm_t comm, const char* what);

/// A communicator between the nodes (one rank per node) or of the whole job: NCCL's or, where the ranks share GPUs
/// on one host (fake nodes under SYMCOMM_SHARED_GPU, which NCCL refuses), a symcomm CUDA communicator over the same
/// ranks. Each call enqueues on the stream; errors of the symcomm one name its ranks as the job's (`job_rank`).
class NodeEngine {
 public:
  ncclComm_t nccl = nullptr;
  const NcclCalls* api = nullptr;  ///< the functions that run `nccl`
  std::unique_ptr<Communicator> sc;
  std::vector<int> job_rank;  ///< this engine's rank r is the job's job_rank[r]

  bool made() const { return nccl != nullptr || sc != nullptr; }
  void all_reduce(const void* in, void* out, size_t n, DataType dt, ReduceOp op, cudaStream_t s) const;
  void all_gather(const void* in, void* out, size_t n, DataType dt, cudaStream_t s) const;
  void reduce_scatter(const void* in, void* out, size_t n, DataType dt, ReduceOp op, cudaStream_t s) const;
  void broadcast(const void* in, void* out, size_t n, DataType dt, int root, cudaStream_t s) const;
  /// Block p of `in` (n elements) to rank p, block p of `out` from rank p.
  void all_to_all(const uint8_t* in, uint8_t* out, size_t n, DataType dt, int world, cudaStream_t s) const;
  /// The symcomm engine's error `e` with its ranks named as the job's.
  Error job_error(const Error& e) const;

 private:
  template <class F>
  void run(F&& f) const;
};

/// What a communicator that spans nodes is made of where another layer made the pieces (the NCCL drop-in library:
/// the caller's NCCL communicator is the whole job's engine).
struct CudaNodeParts {
  NodeLayout layout;
  int rank = 0;
  int device = -1;
  std::unique_ptr<Communicator> node;  ///< symcomm's communicator of this rank's node
  ncclComm_t world = nullptr;          ///< the whole job's, borrowed: the communicator never aborts it (a fault or an
                                       ///< abort revokes it, where NCCL can: NOTE [NCCL aborts together])
  ncclComm_t inter = nullptr;  ///< this rank's local index across the nodes (uniform layouts of several ranks per
                               ///< node, else nullptr), owned: aborted when the communicator ends or fails
  const NcclCalls* nccl = nullptr;
  std::vector<int> pids;        ///< every rank's process id
  std::vector<int> host_peers;  ///< the ranks on this host (their pids can be watched), this rank excluded
  NodeThresholds thresholds;
};

}  // namespace symcomm::detail

namespace symcomm {

class CudaMultiNodeCommunicator::Impl {
 public:
  Impl(std::shared_ptr<Store> store, const RankInfo& ranks, const MultiNodeOptions& options);
  explicit Impl(detail::CudaNodeParts parts);
  ~Impl();

  /// Every call of the public API: checked at once, then enqueued, or recorded in the open group.
  void issue(const detail::Request& r, Hierarchy h);
  /// The path call `r` takes when asked with `h` (Error(kInvalidArgument) where it has none).
  NodePath path_of(const detail::Request& r, Hierarchy h) const;
  void group_start();
  void group_end();
  void group_cancel();
  void abort();
  void check() const;
  /// Whether the caller's whole-job NCCL communicator (detail::CudaNodeParts::world) was revoked by a fault or abort.
  bool world_revoked() const { return world_revoked_.load(); }

  int rank_ = 0, node_ = 0, local_ = 0, device_ = -1;
  detail::NodeLayout layout_;
  std::unique_ptr<Communicator> node_comm_;
  std::atomic<NodePath> last_{NodePath::kNone};
  detail::StickyFault fault_;  ///< the sticky error and the abort flag

 private:
  struct Call {
    detail::Request request;
    Hierarchy hierarchy;
  };
  void execute(const detail::Request& r, Hierarchy h);
  void exchange(const std::vector<const detail::Request*>& p2p);
  void all_reduce(const detail::Request& r, NodePath path, cudaStream_t s);
  void all_gather(const detail::Request& r, NodePath path, cudaStream_t s);
  void reduce_scatter(const detail::Request& r, NodePath path, cudaStream_t s);
  void broadcast(const detail::Request& r, NodePath path, cudaStream_t s);
  void all_to_all(const detail::Request& r, cudaStream_t s);
  void barrier(NodePath path, cudaStream_t s);
  /// The blocks of `src` into `dst`, from local-index order to rank order or back (detail::block_order_copies).
  void reorder(uint8_t* dst, const uint8_t* src, size_t block, bool to_rank_order, cudaStream_t s) const;
  void divide_if_avg(ReduceOp op, void* data, size_t count, DataType dtype, cudaStream_t s) const;

  /// The job's rank of each engine rank: the whole job's engine is the job; the one between the nodes (`inter`) holds
  /// this rank's local index of every node, by node.
  void name_engine_ranks(bool inter);

  // Faults (NOTE [multi-node CUDA faults]).
  void start_watch();
  void watch_loop();
  /// Records `e` as the sticky error (the first one wins) and aborts both engines.
  void fail(const Error& e);
  void abort_engines();
  /// Forgets the NCCL communicators (under nccl_mu_) and aborts those this communicator owns, all at once; a borrowed
  /// whole-job one is revoked instead, where this communicator failed or was aborted.
  void abort_nccl();
  /// The node communicator's error, its local ranks named as this job's ranks.
  Error node_error(const Error& e, const char* what) const;
  /// Runs a node stage's call; its errors (but argument errors) name this job's ranks.
  template <class F>
  void node_stage(const char* what, F&& f) const;

  std::shared_ptr<Store> store_;
  detail::NodeThresholds thresholds_;
  std::vector<int> pids_;
  std::vector<int> host_peers_;                  ///< ranks on this host (their pids can be watched), this rank excluded
  const detail::NcclCalls* nccl_api_ = nullptr;  ///< the functions that run the NCCL communicators
  bool has_nccl_ = false;                        ///< NCCL communicators were made (not where ranks share a GPU)
  bool world_borrowed_ = false;  ///< world_.nccl belongs to the caller (detail::CudaNodeParts): never aborted here
  std::atomic<bool> world_revoked_{false};  ///< the borrowed world_.nccl was revoked (abort_nccl())
  std::mutex nccl_mu_;                ///< the NCCL handles of world_ and inter_ between the watch and abort_engines()
  detail::NodeEngine world_, inter_;  ///< the whole job's (several nodes, or NCCL); one rank per node (uniform)

  std::once_flag engines_aborted_;
  std::timed_mutex engine_mu_;  ///< held while a call enqueues on the engines, and by abort_engines()

  int group_depth_ = 0;
  std::vector<size_t> level_starts_;
  std::vector<Call> recorded_;

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool stopping_ = false;
  std::thread watch_;
};

}  // namespace symcomm
