#pragma once
/// \file multinode_cuda.h
/// CUDA communicators that span nodes (in libsymcomm, built with the CUDA backend): symcomm inside each node (its
/// NVLink symmetric heap and kernels), NCCL between the nodes. docs/design/multinode.md describes the paths.
///
/// All-reduce, all-gather, reduce-scatter, broadcast and barrier run hierarchically (a node stage on symcomm, an
/// inter-node stage on an NCCL communicator of the ranks of one local index, one rank per node, a node stage again)
/// or flat (the whole job on one NCCL communicator), chosen by size from thresholds every rank agrees on; all-to-all
/// and point-to-point run on NCCL. A job of one node runs everything on symcomm and makes no NCCL communicator.
///
/// Calls are stream-ordered, as NCCL's are: each enqueues every stage of the collective on NodeCollOptions::stream
/// and returns; the buffers are device memory and must stay valid until the stream has run the call. Semantics,
/// argument rules and results are those of Communicator's collectives (ranks are the ranks given at creation),
/// except that a hierarchical avg sums in every stage and divides once by the world size, and 16-bit float sums
/// round once per stage. The calls may be captured in a CUDA graph (the stages' scratch comes from the stream-ordered
/// allocator).
///
/// Faults: a watch thread polls, every few milliseconds, the node communicator's sticky error, NCCL's asynchronous
/// errors and the liveness of every rank on this host. The first fault (a dead rank, named; a timeout of a node
/// stage; an NCCL error, as Error(kCuda)) becomes the sticky error: the node communicator and the NCCL
/// communicators are aborted, so nothing on the streams waits for ever, and every later call throws it. abort()
/// does the same with Error(kAborted). An inter-node stage has no deadline of its own (NCCL has none): a rank that
/// stops on another node without dying is ended by abort().

#include <memory>

#include "symcomm/communicator.h"
#include "symcomm/node_path.h"
#include "symcomm/store.h"

namespace symcomm {

class CudaMultiNodeCommunicator {
 public:
  /// Collective over the `ranks.world_size` ranks of `store`: every rank publishes its host, pid and options under
  /// `options.node.name` (empty: "multinode<n>", n counting the multi-node communicators this process created, so
  /// ranks that create them in the same order agree), the ranks split into nodes, each node creates its symcomm
  /// communicator, and the ranks create an NCCL communicator of the whole job (the flat path, all-to-all,
  /// point-to-point) and, where the job has several nodes of equal size above one rank, one per local index (the
  /// inter-node stages). Where ranks share GPUs (Config::shared_gpu) NCCL, which refuses two ranks on one GPU, is not
  /// made: symcomm CUDA communicators over the same ranks take its place between fake nodes of one host (so one GPU
  /// runs every path), point-to-point is refused (Error(kUnsupported)), and so is a job over several hosts, at
  /// creation. Throws Error(kInvalidArgument) for bad options, Error(kMismatch) where the ranks' options differ,
  /// Error(kUnsupported) for a backend other than kCuda or a build without it.
  static std::unique_ptr<CudaMultiNodeCommunicator> create(std::shared_ptr<Store> store, const RankInfo& ranks,
                                                           const MultiNodeOptions& options);
  ~CudaMultiNodeCommunicator();
  CudaMultiNodeCommunicator(const CudaMultiNodeCommunicator&) = delete;
  CudaMultiNodeCommunicator& operator=(const CudaMultiNodeCommunicator&) = delete;

  int rank() const;
  int world_size() const;
  int node() const;  ///< this rank's node; nodes are numbered by their lowest rank
  int num_nodes() const;
  int local_rank() const;  ///< index within the node, by rank
  int local_world_size() const;
  int device() const;
  /// This node's symcomm communicator (ranks numbered by local index).
  Communicator& node_communicator();

  /// The collectives of Communicator, with its conventions (counts per rank; in == out allowed for all-reduce and
  /// broadcast; in place for all-gather when in == out + rank*count; root a rank of this communicator).
  void all_reduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, const NodeCollOptions& o = {});
  void all_gather(const void* in, void* out, size_t count, DataType dtype, const NodeCollOptions& o = {});
  void reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                      const NodeCollOptions& o = {});
  void broadcast(const void* in, void* out, size_t count, DataType dtype, int root, const NodeCollOptions& o = {});
  void all_to_all(const void* in, void* out, size_t count, DataType dtype, const NodeCollOptions& o = {});
  void barrier(const NodeCollOptions& o = {});
  /// Point-to-point on NCCL (its matching: the k-th send from A to B is the k-th receive on B from A). Outside a
  /// group the peer must be another rank.
  void send(const void* buf, size_t count, DataType dtype, int peer, const NodeCollOptions& o = {});
  void recv(void* buf, size_t count, DataType dtype, int peer, const NodeCollOptions& o = {});

  /// Groups: the calls issued between group_start() and the outermost group_end() are checked when issued and
  /// enqueued together at its end: the collectives in issue order, then every send and receive in one NCCL group
  /// (so exchanges cannot deadlock; a rank may send to itself there). Every rank must issue the same collectives in
  /// its group. Groups nest; group_cancel() drops what its level recorded.
  void group_start();
  void group_end();
  void group_cancel();

  /// The path of the last collective this process issued.
  NodePath last_path() const;
  /// Local, non-blocking: the node communicator and the NCCL communicators are aborted and every later call fails
  /// with Error(kAborted).
  void abort();
  bool is_aborted() const;
  /// Throws the sticky error (a dead rank, a timeout, an NCCL error, abort), if any.
  void check() const;

  class Impl;

 private:
  explicit CudaMultiNodeCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace symcomm
