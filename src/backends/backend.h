#pragma once
// The interface every backend implements (host shared memory, CUDA), and the context a communicator shares
// with its backend: ranks, configuration, store, peer mesh, abort flag, sticky error and op history.

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algos/bucket_copy.h"
#include "algos/request.h"
#include "algos/select.h"
#include "algos/topology.h"
#include "base/op_history.h"
#include "bootstrap/peer_mesh.h"
#include "symcomm/communicator.h"

namespace symcomm::detail {

struct CommContext {
  RankInfo ranks;
  /// The configuration in effect: `requested` with its Tuning resolved for this communicator (NOTE [tuning
  /// precedence] in src/core/tuning_file.cc).
  Config config;
  /// The configuration create() was given (or read from the environment); split() passes it on, so that each
  /// new communicator resolves the Tuning of its own world size.
  Config requested;
  std::string prefix;  ///< store key prefix of this communicator
  std::string token;
  std::shared_ptr<Store> store;
  /// Rank 0 of Communicator::create(Rendezvous) owns the server, shared with the communicators split from it.
  std::shared_ptr<StoreServer> server;
  uint32_t splits = 0;  ///< Communicator::split() calls so far (names the new communicators)
  std::unique_ptr<PeerMesh> mesh;
  /// The links between the ranks (Config::topology_file), the same on every rank; none: every pair linked.
  std::optional<Topology> topology;
  std::atomic<bool> aborted{false};
  OpHistory history;

  Deadline deadline() const { return Deadline(config.timeout); }
  /// store->get(key), waiting no longer than `deadline` (kTimeout naming the key): the store's own timeout,
  /// which bounds a plain get(), may be longer than this communicator's.
  Bytes store_get(const std::string& key, const Deadline& deadline) const;
  /// Exchanges `mine` with every rank over the mesh (collective, bounded by the deadline and abort());
  /// result[r] is rank r's payload.
  std::vector<std::vector<uint8_t>> mesh_all_gather(uint32_t tag, const std::vector<uint8_t>& mine);

  /// Records the first fatal error (peer death, timeout, abort); later operations rethrow it. The first one is
  /// also logged with a short form of the last operations (history) and the path of a file holding them all,
  /// once, whichever path found it (a collective, a Work's wait, the host backend's worker thread, a device
  /// error word; NOTE [op record] in comm_context.cc). Throws nothing.
  void set_sticky(const Error& e);
  std::optional<Error> sticky() const;
  /// Throws the sticky error if any, else kAborted if aborted, else kPeerDead if the mesh reports a dead
  /// peer (peers that left cleanly fail only the waits for them).
  void throw_if_failed() const;
  /// Builds (does not throw) the error for a lost peer; `mask` = dead | left bits.
  Error peer_lost_error(uint64_t dead, uint64_t left, const char* file, int line) const;

 private:
  mutable std::mutex mu_;
  std::optional<Error> sticky_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual int device() const { return -1; }
  /// Capabilities agreed by all ranks at creation (input of select_algorithm).
  virtual const Capabilities& capabilities() const = 0;

  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  /// Peer's mapping of the symmetric allocation containing ptr, or nullptr if ptr is not symmetric.
  virtual void* peer_ptr(const void* ptr, int peer) const = 0;

  /// Backend-specific argument checks (pointer kinds, devices, alignment rules). Throws kInvalidArgument.
  virtual void check_buffers(const Request& r) = 0;
  /// Whether this backend runs the point-to-point request r (Communicator::send / recv), called before r is run
  /// or recorded in a group. The default throws Error(kUnsupported): the backend has no point-to-point path.
  virtual void check_p2p(const Request& r);
  /// Runs a validated request with the selected algorithm. Host: returns when done. CUDA: returns when
  /// enqueued on r.options.stream.
  virtual void run(const Request& r, Algorithm algo) = 0;
  /// Asynchronous run of a request that passed check_async(); the Work completes when the collective has.
  virtual std::shared_ptr<Work> run_async(const Request& r, Algorithm algo) = 0;
  /// Checks that r may be issued asynchronously (CUDA: not on a capturing stream); called before an
  /// `*_async` call is run or recorded in a group. Throws kInvalidArgument (host: kSystem when its worker
  /// thread cannot be started; NOTE [host worker start] in host_backend.cc).
  virtual void check_async(const Request& /*r*/) {}
  /// Runs the collectives of a group (validated, selected) as one submission. The default runs them one by
  /// one; backends override it to fuse what they can.
  virtual void run_group(const std::vector<std::pair<Request, Algorithm>>& ops) {
    for (const auto& [r, algo] : ops) run(r, algo);
  }
  /// Asynchronous run_group(); the Work completes when every collective of the group has. The default
  /// issues each asynchronously and returns a Work that waits for all of them.
  virtual std::shared_ptr<Work> run_group_async(const std::vector<std::pair<Request, Algorithm>>& ops);
  /// run_group() (host: returns when done; CUDA: when enqueued) that also returns a Work completing with the
  /// group: what the `*_async` calls of a group ended by the synchronous group_end() return. The default
  /// (run_group returns when done) returns a completed Work.
  virtual std::shared_ptr<Work> run_group_with_work(const std::vector<std::pair<Request, Algorithm>>& ops);
  /// Whether every rank reaches every peer's memory (Communicator::full_peer_access()).
  virtual bool full_peer_access() const { return true; }
  /// Whether reduce_scatter_gathered() is available (the bucketer otherwise copies its inputs into the
  /// bucket and calls reduce_scatter).
  virtual bool can_reduce_scatter_gathered() const { return false; }
  /// The reduce-scatter of a bucket flush read straight from its inputs (NOTE [gathered flush]); enqueued
  /// like run().
  virtual void reduce_scatter_gathered(const GatheredReduceScatter& g);  // default: kUnsupported
  /// The bucketer's batched copy into a bucket (algos/bucket_copy.h): `rows` rows of `row_stride` bytes at
  /// `dst`, every segment's rows at its offset. Host: returns when done; CUDA: enqueued on `stream`.
  virtual void bucket_copy(const BucketCopySegment* segs, size_t n, char* dst, size_t row_stride, int rows,
                           Stream stream) = 0;
  /// Surfaces asynchronous errors (e.g. a device-side timeout recorded by a kernel) as the sticky error.
  virtual void poll_errors() {}
  /// Called by Communicator::abort() after the context's abort flag is set: wake every wait.
  virtual void abort() = 0;

  /// The kernel path of the last collective this backend ran (Communicator::last_path()).
  KernelPath last_path() const { return last_path_.load(std::memory_order_relaxed); }

 protected:
  void note_path(KernelPath path) { last_path_.store(path, std::memory_order_relaxed); }

 private:
  std::atomic<KernelPath> last_path_{KernelPath::kNone};
};

/// A Work that completes when all of `parts` have; its error is the first part's error.
std::shared_ptr<Work> make_composite_work(std::vector<std::shared_ptr<Work>> parts);
/// `work` as handed to the caller of asynchronous collectives `seqs`: once its completion is seen (through
/// any of its calls), their op-history records become done, or failed if it completed with an error.
/// `history` is a handle on the communicator's records (OpHistory copies share them).
std::shared_ptr<Work> make_tracked_work(std::shared_ptr<Work> work, OpHistory history, std::vector<uint64_t> seqs);

/// The backend of `kind` (make_host_backend or make_cuda_backend; `device` is the CUDA device).
std::unique_ptr<Backend> make_backend(BackendKind kind, CommContext& ctx, int device);
std::unique_ptr<Backend> make_host_backend(CommContext& ctx);
/// Without the CUDA backend compiled in, throws Error(kUnsupported).
std::unique_ptr<Backend> make_cuda_backend(CommContext& ctx, int device);
/// Whether this build has the CUDA backend (nvcc found at build time).
bool cuda_backend_built();
/// The name of the GPU that make_cuda_backend(ctx, device) would use, as CUDA reports it (cudaDeviceProp::name,
/// "NVIDIA H100 80GB HBM3"): what a tuning file's CUDA entries are keyed by. Without the CUDA backend compiled
/// in, throws Error(kUnsupported).
std::string cuda_device_name(const CommContext& ctx, int device);

}  // namespace symcomm::detail
