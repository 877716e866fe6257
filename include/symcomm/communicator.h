#pragma once
/// \file communicator.h
/// A Communicator connects the ranks of one node over symmetric memory and runs collectives (and, on the host
/// backend, point-to-point sends and receives) on it.
///
/// Backends: kHost (shared memory between processes; buffers are ordinary host memory) and kCuda (cuMem
/// allocations mapped on every GPU over NVLink; buffers are device memory, collectives are enqueued on a
/// stream). Both offer the same collectives with the same semantics and bitwise-identical results on all
/// ranks.
///
/// Every collective must be called by every rank in the same order with matching arguments (count, dtype,
/// op, root). Argument errors throw Error(kInvalidArgument) before anything is launched and leave the
/// communicator usable. A dead peer, a timeout or abort() makes the pending and every later collective fail
/// with an Error that names the rank(s) involved; the communicator can then only be destroyed.

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "symcomm/config.h"
#include "symcomm/error.h"
#include "symcomm/store.h"
#include "symcomm/types.h"

struct CUstream_st;

namespace symcomm {

/// A CUDA stream (cudaStream_t) without including CUDA headers. nullptr is the legacy default stream.
using Stream = CUstream_st*;

/// Position of this process in the job.
struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
};

/// Where to meet: the store address, the job token and this process's rank.
struct Rendezvous {
  RankInfo ranks;
  std::string store_host = "127.0.0.1";  ///< rank 0 binds it; the others connect to it
  uint16_t store_port = 0;
  std::string token;  ///< shared secret of the job; required by the store
  /// Rank 0 only: called with the port actually bound once the store server is up. With store_port 0 (pick a
  /// free port) this is how the port reaches the other ranks, e.g. through MPI (see symcomm/mpi.h).
  std::function<void(uint16_t port)> on_store_started;

  /// torchrun-compatible variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
  /// MASTER_PORT) or, if RANK is unset, Open MPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} with
  /// MASTER_ADDR/MASTER_PORT (under mpirun without them, use create_communicator_mpi() from symcomm/mpi.h).
  /// The token is SYMCOMM_TOKEN (set by symcomm-run); without it a token is derived from
  /// TORCHELASTIC_RUN_ID, MASTER_ADDR and MASTER_PORT and a warning is logged.
  /// Throws Error(kInvalidArgument) naming a missing or malformed variable.
  static Rendezvous from_env();
};

/// Per-call options of a collective.
struct CollOptions {
  /// CUDA backend: the stream the collective is ordered on. Ignored by the host backend.
  /// Like NCCL, one communicator runs one collective at a time in issue order, whatever streams they name: a
  /// collective on another stream than the previous one of the communicator first makes its stream wait for
  /// that one (also inside one CUDA-graph capture; not between a capture and eager calls, which the graph's
  /// launches order); two communicators over the same ranks have separate signal pads and may run concurrently, as
  /// long as their kernels fit on the GPU side by side: the large all-reduces run one block per SM, so two of
  /// them on two communicators, issued in different orders on different ranks, can wait for each other until
  /// the deadline (kTimeout; the same hazard makes NCCL's kernels hang). Issue such collectives in the same order
  /// on every rank.
  Stream stream = nullptr;
  /// Force an algorithm (Error(kInvalidArgument) if it cannot run this request); kAuto selects.
  Algorithm algorithm = Algorithm::kAuto;
  /// Low: leave the SMs to compute running beside the collective (copy engine); throughput: fastest alone.
  Contention contention = Contention::kAuto;
};

/// Options of a communicator.
struct CommOptions {
  BackendKind backend = BackendKind::kHost;
  /// CUDA backend: device ordinal; -1 means the local rank. Creation makes it the creating thread's current
  /// device (as torch.cuda.set_device would); later calls run on it whatever device the calling thread has
  /// current, and leave the caller's current device as they found it.
  int device = -1;
  /// Store key prefix; must be equal on all ranks. Empty: "rendezvous" for create(Rendezvous) (its store server
  /// holds no other communicator's keys), else "c<n>" where n counts the communicators this process created (so
  /// ranks that create communicators in the same order agree).
  std::string name;
  /// nullopt: Config::from_env().
  std::optional<Config> config;
  /// Bound of meeting the other ranks at creation (rank 0's nonce in the store and the connections between the
  /// ranks); 0: the configuration's timeout. Lets a caller give up on a rank that never comes sooner than the
  /// collectives give up on a late peer (the NCCL drop-in library does).
  std::chrono::milliseconds meet_timeout{0};
};

/// Completion handle of an asynchronous collective.
class Work {
 public:
  virtual ~Work() = default;
  /// Non-blocking: true once the collective finished (successfully or not).
  virtual bool is_completed() = 0;
  /// Blocks until completion; rethrows the collective's error. On the CUDA backend it waits for the
  /// device work, so the result is visible to the host afterwards.
  virtual void wait() = 0;
  /// Like wait() but gives up after timeout and returns false (the collective keeps running).
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;
  /// The collective's error once completed, or nullptr.
  virtual std::exception_ptr exception() = 0;
};

namespace detail {
class CommCore;
}

class Communicator;

/// RAII form of group_start()/group_end(): the destructor ends the group (and may throw, like group_end());
/// if the scope is left by an exception, its level is cancelled (group_cancel()) instead of run
/// half-specified. Guards nest like groups.
class CollectiveGroup {
 public:
  explicit CollectiveGroup(Communicator& comm);
  ~CollectiveGroup() noexcept(false);
  CollectiveGroup(const CollectiveGroup&) = delete;
  CollectiveGroup& operator=(const CollectiveGroup&) = delete;
  /// Ends the group now (synchronously); the destructor then does nothing.
  void end();
  /// Ends the group now and returns its Work.
  std::shared_ptr<Work> end_async();

 private:
  Communicator* comm_;
  int exceptions_at_start_;
  bool active_ = true;
};

/// Color of a rank that joins none of the communicators made by Communicator::split().
inline constexpr int kSplitNoColor = -1;

/// Options of Communicator::split().
struct SplitOptions {
  /// The new communicator's configuration; nullopt: the one the parent was created with (its Tuning is
  /// resolved again for the new world size: NOTE [tuning precedence]).
  std::optional<Config> config;
  /// Store key prefix of the new communicators, followed by "/<color>" (equal on all ranks); empty:
  /// "<parent's>/split<n>", n counting the parent's splits.
  std::string name;
};

class Communicator {
 public:
  /// Creates a communicator over an existing store connection (collective over all ranks). Throws
  /// Error(kInvalidArgument) for a configuration whose Tuning is outside its ranges (Tuning::validate()), and
  /// on every rank where any rank's tuning file (Config::tuning_file) cannot be read or parsed; Error(kMismatch)
  /// where the ranks' settings, or the Tuning they resolve, differ (naming the ranks).
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, const RankInfo& ranks,
                                              const CommOptions& options = {});
  /// Rank 0 starts the store server at rendezvous.store_host:store_port (and keeps it for the
  /// communicator's life); every rank connects and creates the communicator.
  static std::unique_ptr<Communicator> create(const Rendezvous& rendezvous, const CommOptions& options = {});
  /// create(Rendezvous::from_env(), options).
  static std::unique_ptr<Communicator> create_from_env(const CommOptions& options = {});

  /// Sub-communicators, like ncclCommSplit: collective over every rank of this communicator. The ranks that
  /// pass the same color (>= 0) form a new communicator, ranked by key, ties by their rank here; a rank that
  /// passes kSplitNoColor takes part and gets null. The new communicators use this one's backend, device and
  /// store (and keep the store server of create(Rendezvous) alive while they live), and are independent of it
  /// afterwards: either may be destroyed first, and both may be used, one at a time per stream like any two
  /// communicators. Every rank must call split() in the same order relative to this communicator's other calls.
  /// Throws Error(kInvalidArgument) for a color below kSplitNoColor or inside a group.
  std::unique_ptr<Communicator> split(int color, int key, const SplitOptions& options = {});

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  const RankInfo& rank_info() const;
  BackendKind backend() const;
  /// Whether this build of symcomm has `backend` (the CUDA backend needs nvcc at build time). Creating a
  /// communicator of a backend it lacks throws Error(kUnsupported) on every rank before meeting the others.
  static bool backend_built(BackendKind backend);

  /// CUDA backend: the device in use; host backend: -1.
  int device() const;
  /// The configuration in effect, its Tuning resolved at creation for this world size and GPU (explicit
  /// settings, tuning file, compiled-in values: NOTE [tuning precedence] in src/core/tuning_file.cc). To create
  /// a communicator of another size with the same settings, pass the Config this one was created with: here
  /// every resolved value that differs from Tuning's default would count as set explicitly.
  const Config& config() const;
  /// Whether every rank reaches every peer's memory directly and its collectives may use all of it: host
  /// backend always; CUDA backend when every pair of GPUs is NVLink-connected with peer access and no topology
  /// file (Config::topology_file) restricts the links. Without peer access the CUDA backend runs every collective
  /// through NCCL, and forcing another Algorithm throws Error(kUnsupported); with a restricting topology file its
  /// all-reduces, all-gathers and reduce-scatters run the topology's schedule (docs/design/topology.md).
  bool full_peer_access() const;

  /// Allocates `bytes` from the symmetric heap: the same offset on every rank, mapped by every peer.
  /// Collectives on such buffers skip the staging copy. Must be called by all ranks in the same order with
  /// the same sizes (on the CUDA backend it is collective and blocks until all ranks call it; if any rank
  /// cannot make its part, e.g. out of device memory, every rank throws and the communicator stays usable).
  /// A CUDA collective that reaches peers' copies of a heap buffer (zero-copy) needs every rank to pass the
  /// same allocation at the same offset there; ranks that pass different heap buffers get Error(kMismatch).
  /// Buffers outside the heap have no such rule.
  void* alloc(size_t bytes);
  /// Returns memory from alloc(); same ordering rule. nullptr is ignored.
  void free(void* ptr);
  /// Address at which `peer` 's copy of the symmetric allocation containing `ptr` is mapped in this
  /// process. Throws Error(kInvalidArgument) if ptr is not in the symmetric heap.
  void* peer_ptr(const void* ptr, int peer) const;

  /// out[i] = op over ranks of in[i], i < count. in == out is allowed (in place); buffers that overlap otherwise,
  /// in this and the other collectives, throw Error(kInvalidArgument).
  void all_reduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, const CollOptions& o = {});
  /// out[r*count + i] = in_r[i]. `count` is per rank; out holds world_size*count elements. In place: in ==
  /// out + rank*count.
  void all_gather(const void* in, void* out, size_t count, DataType dtype, const CollOptions& o = {});
  /// out[i] = op over ranks of in_r[rank*count + i]. `count` is the output count per rank. In place: out ==
  /// in + rank*count.
  void reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, const CollOptions& o = {});
  /// out[i] = in_root[i] on every rank (in is read on root only; in == out allowed).
  void broadcast(const void* in, void* out, size_t count, DataType dtype, int root, const CollOptions& o = {});
  /// out[p*count + i] = in_p[rank*count + i]: block p of the output comes from peer p. `count` per peer. in ==
  /// out is allowed.
  void all_to_all(const void* in, void* out, size_t count, DataType dtype, const CollOptions& o = {});
  /// Returns (host) or completes on the stream (CUDA) once every rank has arrived.
  void barrier(const CollOptions& o = {});

  /// Asynchronous variants: return at once; Work::wait() completes them. Operations (sync and async) on
  /// one communicator run in the order they were issued.
  std::shared_ptr<Work> all_reduce_async(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                         const CollOptions& o = {});
  std::shared_ptr<Work> all_gather_async(const void* in, void* out, size_t count, DataType dtype,
                                         const CollOptions& o = {});
  std::shared_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                             const CollOptions& o = {});
  std::shared_ptr<Work> broadcast_async(const void* in, void* out, size_t count, DataType dtype, int root,
                                        const CollOptions& o = {});
  std::shared_ptr<Work> all_to_all_async(const void* in, void* out, size_t count, DataType dtype,
                                         const CollOptions& o = {});
  std::shared_ptr<Work> barrier_async(const CollOptions& o = {});

  /// Point-to-point, with NCCL's semantics: send() passes `count` elements of `dtype` at `buf` to rank `peer`,
  /// whose recv() from this rank writes them at its `buf`.
  /// - Matching: the k-th send from A to B matches the k-th receive on B from A (per ordered pair of ranks, in
  ///   issue order; there are no tags). The count and dtype of a matched pair must agree: where they differ,
  ///   both ranks fail with Error(kMismatch) naming both (the receiver in its receive; the sender in its send if
  ///   it is still waiting, else in its next send or receive, in a collective waiting for that receiver, or in
  ///   check()). count 0 is a valid, matched, empty message.
  /// - Only the two ranks of a message take part: other ranks call nothing, and the collectives before, between
  ///   and after point-to-point operations match across all ranks as if those operations had not been issued.
  /// - Buffering (host backend): each ordered pair of ranks has two staging chunks of Config::p2p_chunk_bytes
  ///   (SYMCOMM_P2P_CHUNK_BYTES, rounded up to 4 KiB) in the sender's memory; a message takes one chunk per
  ///   p2p_chunk_bytes of payload, at least one. A send returns (its Work completes) once its last chunk is staged,
  ///   so it waits for the receiver only while both chunks of its pair hold data the receiver has not copied out:
  ///   a message of at most two chunks, sent when the pair holds no earlier message still unreceived, completes
  ///   without the receiver; a larger one waits for the receiver to drain its chunks. A receive returns once its
  ///   data is in `buf`.
  /// - Outside a group each call runs in issue order like a collective, so two ranks that each receive first from
  ///   the other wait for each other (as with NCCL); exchanges go in a group. In a group (group_start() ..
  ///   group_end(), CollectiveGroup) sends and receives are recorded, and group_end() runs the group's collectives
  ///   in issue order, then all its sends and receives together, to and from any peers in any number: a group
  ///   that sends to B and receives from B completes at any size. Messages to one peer keep their issue order.
  /// - peer == rank() is a local copy, allowed only inside a group where the k-th send to itself matches the k-th
  ///   receive from itself (Error(kInvalidArgument) at group_end() when their numbers differ, and for such a call
  ///   outside a group).
  /// - Errors: a peer outside [0, world_size()), a null `buf` with count > 0, an invalid dtype or an algorithm
  ///   other than kAuto or kDirect throw Error(kInvalidArgument) before anything is sent. Waits are bounded like
  ///   the collectives': Config::timeout without progress (kTimeout naming the peer), abort() (kAborted), a dead
  ///   peer (kPeerDead naming it); these and kMismatch are sticky, as for collectives.
  /// - CUDA backend: not available; every call throws Error(kUnsupported).
  void send(const void* buf, size_t count, DataType dtype, int peer, const CollOptions& o = {});
  void recv(void* buf, size_t count, DataType dtype, int peer, const CollOptions& o = {});
  /// Asynchronous send() / recv(): return at once (in issue order with every other operation of this
  /// communicator); the Work completes when the send is staged or the receive has its data, with its error.
  std::shared_ptr<Work> send_async(const void* buf, size_t count, DataType dtype, int peer, const CollOptions& o = {});
  std::shared_ptr<Work> recv_async(void* buf, size_t count, DataType dtype, int peer, const CollOptions& o = {});

  /// Coalescing. Collectives issued on this communicator between group_start() and group_end() are
  /// validated at once (argument errors still throw immediately) but only recorded; group_end() runs them
  /// together, in issue order: small all-reduces of one dtype and op are packed into one collective, the
  /// rest are submitted back to back in one submission. Buffers must stay valid until the group completes.
  /// The collectives of one group must be independent, as in NCCL's groups: none may read a buffer that
  /// another of the group writes (packing and fusion run them together).
  /// Groups nest: only the outermost end runs them, with everything recorded at inner levels that were
  /// not cancelled. Every rank must issue the same collectives in its group; sends and receives (see send()) run
  /// after the group's collectives and concern their two ranks only.
  /// An `*_async` call inside a group returns a Work that completes with the whole group, whichever way the
  /// outermost level ends (on CUDA it then waits for the group's device work, like any Work).
  void group_start();
  /// Ends the group and runs it; returns when done (host) or enqueued (CUDA).
  void group_end();
  /// Ends the group and returns one Work covering every collective in it (its wait() waits for all).
  std::shared_ptr<Work> group_end_async();
  /// Ends the current group level without running what it recorded: the collectives recorded since its
  /// group_start() (inner levels included) are dropped and their Works fail with kInvalidArgument; those of
  /// enclosing levels stay recorded (all ranks must cancel alike).
  void group_cancel();

  /// The algorithm the last collective issued by this process ran with (test and benchmark hook).
  Algorithm last_algorithm() const;
  /// The kernel path the last collective issued by this process ran on (test and benchmark hook); kNone before
  /// the first. A collective waiting in an open group has not run yet.
  KernelPath last_path() const;

  /// Local, non-blocking, idempotent: every pending and later collective of this communicator fails with
  /// Error(kAborted). Memory stays mapped until destruction, so peers never touch freed memory.
  void abort();
  bool is_aborted() const;
  /// Throws the communicator's sticky error (peer death, timeout, abort), if any.
  void check() const;

 private:
  friend class ReduceScatterBucketer;  // runs its flushes through the core (NOTE [gathered flush])
  explicit Communicator(std::unique_ptr<detail::CommCore> core);
  std::unique_ptr<detail::CommCore> core_;
};

}  // namespace symcomm
