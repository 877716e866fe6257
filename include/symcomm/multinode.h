#pragma once
/// \file multinode.h
/// Communicators that span nodes (library symcomm::symcomm_mpi, built when MPI is found): symcomm inside each node
/// (its shared-memory heap and algorithms), MPI between the nodes. docs/design/multinode.md describes the paths.
///
/// All-reduce, all-gather, reduce-scatter, broadcast and barrier run hierarchically (a node stage on symcomm,
/// an inter-node stage on MPI among the ranks of one local index, a node stage again) or flat (the whole job
/// on MPI), chosen by size from thresholds every rank agrees on; all-to-all and point-to-point run on MPI.
/// Every call has the semantics, argument rules and results of the same call on a one-node Communicator
/// (ranks are the MPI communicator's ranks), except that 16-bit float sums of the hierarchical path round
/// once per stage (exact for values a 16-bit float holds at every stage).
///
/// Faults: every wait polls, beside its own progress, the abort flag, the deadline (Config::timeout) and the
/// liveness of every rank on this host, so a rank that dies on the host (any fake node, or the same real node)
/// fails every survivor's pending and later calls with Error(kPeerDead) naming it, and abort() fails them with
/// kAborted; MPI's error handler on the communicators symcomm makes is MPI_ERRORS_RETURN, so an MPI error is an
/// Error(kSystem). A rank that dies on another real node is MPI's to report: mpirun ends the job by default.

#include <mpi.h>

#include <memory>
#include <optional>

#include "symcomm/communicator.h"
#include "symcomm/node_path.h"

namespace symcomm {

class MultiNodeCommunicator {
 public:
  /// Collective over `comm` (MPI must be initialised; MPI_THREAD_SERIALIZED or more if several threads call
  /// symcomm or MPI). Splits it into nodes and, per local index, into the inter-node communicators, and creates
  /// each node's symcomm communicator. Throws Error(kInvalidArgument) for bad options, Error(kMismatch) where the
  /// ranks' options differ.
  static std::unique_ptr<MultiNodeCommunicator> create(MPI_Comm comm, const MultiNodeOptions& options = {});
  ~MultiNodeCommunicator();
  MultiNodeCommunicator(const MultiNodeCommunicator&) = delete;
  MultiNodeCommunicator& operator=(const MultiNodeCommunicator&) = delete;

  int rank() const;
  int world_size() const;
  int node() const;  ///< this rank's node; nodes are numbered by their lowest rank
  int num_nodes() const;
  int local_rank() const;  ///< index within the node, by rank
  int local_world_size() const;
  /// This node's symcomm communicator (ranks numbered by local index).
  Communicator& node_communicator();
  /// The MPI communicator of this rank's local index: one rank per node, ranked by node (MPI_COMM_NULL where the
  /// nodes differ in size).
  MPI_Comm inter_node_communicator() const;

  /// The collectives of Communicator, with its conventions (counts per rank; in == out allowed for all-reduce and
  /// broadcast; in place for all-gather when in == out + rank*count; root a rank of this communicator).
  void all_reduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, const NodeCollOptions& o = {});
  void all_gather(const void* in, void* out, size_t count, DataType dtype, const NodeCollOptions& o = {});
  void reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                      const NodeCollOptions& o = {});
  void broadcast(const void* in, void* out, size_t count, DataType dtype, int root, const NodeCollOptions& o = {});
  void all_to_all(const void* in, void* out, size_t count, DataType dtype, const NodeCollOptions& o = {});
  void barrier(const NodeCollOptions& o = {});
  /// Point-to-point on MPI (NCCL's matching: the k-th send from A to B is the k-th receive on B from A). A send
  /// returns once its buffer may be reused. Outside a group the peer must be another rank.
  void send(const void* buf, size_t count, DataType dtype, int peer);
  void recv(void* buf, size_t count, DataType dtype, int peer);

  /// Asynchronous forms. The arguments are checked at once (Error(kInvalidArgument), nothing issued, the
  /// communicator usable); the call then runs on this communicator's progress thread, after every call issued before
  /// it, and the Work completes when it has (wait() rethrows its error). The buffers must stay valid until then.
  /// From the first asynchronous call on, synchronous calls are handed to that thread too, and waited for, so that
  /// every call runs in issue order. The thread calls MPI: MPI must be initialised with MPI_THREAD_SERIALIZED or
  /// more (MPI_THREAD_MULTIPLE where the program calls MPI itself meanwhile), else Error(kUnsupported).
  std::shared_ptr<Work> all_reduce_async(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                         const NodeCollOptions& o = {});
  std::shared_ptr<Work> all_gather_async(const void* in, void* out, size_t count, DataType dtype,
                                         const NodeCollOptions& o = {});
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                             const NodeCollOptions& o = {});
  std::shared_ptr<Work> broadcast_async(const void* in, void* out, size_t count, DataType dtype, int root,
                                        const NodeCollOptions& o = {});
  std::shared_ptr<Work> all_to_all_async(const void* in, void* out, size_t count, DataType dtype,
                                         const NodeCollOptions& o = {});
  std::shared_ptr<Work> barrier_async(const NodeCollOptions& o = {});
  std::shared_ptr<Work> send_async(const void* buf, size_t count, DataType dtype, int peer);
  std::shared_ptr<Work> recv_async(void* buf, size_t count, DataType dtype, int peer);

  /// Groups, as on Communicator: the calls issued between group_start() and the outermost group_end() are checked
  /// when issued and run together at its end: the collectives in issue order, consecutive all-reduces of one dtype,
  /// op and hierarchy packed into one all-reduce, then every send and receive at once (so exchanges cannot
  /// deadlock; a rank may send to itself there). Every rank must issue the same collectives in its group. An
  /// `*_async` call in a group returns a Work that completes once its part of the group has run; a synchronous one
  /// returns at once, its buffers in use until the group ends. Groups nest; group_cancel() drops what its level
  /// recorded (their Works fail with kInvalidArgument). group_end() rethrows the first error of the group.
  void group_start();
  void group_end();
  /// Ends the group and returns one Work for all of it.
  std::shared_ptr<Work> group_end_async();
  void group_cancel();

  /// The path of the last collective this process issued.
  NodePath last_path() const;
  /// Local, non-blocking: every pending and later call fails with Error(kAborted); the node communicator is
  /// aborted too. MPI operations already started are left to MPI (an MPI collective cannot be cancelled).
  void abort();
  bool is_aborted() const;
  /// Throws the sticky error (a dead rank, a timeout, abort), if any.
  void check() const;

  class Impl;

 private:
  explicit MultiNodeCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace symcomm
