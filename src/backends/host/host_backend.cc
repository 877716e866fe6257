// The host backend: memfd symmetric segments, the step-protocol collectives, and a worker thread for the
// asynchronous variants.

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "backends/backend.h"
#include "backends/host/host_algos.h"
#include "backends/host/host_heap.h"
#include "backends/host/host_p2p.h"
#include "base/check.h"
#include "base/deadline.h"
#include "base/logging.h"
#include "memory/heap_allocator.h"

namespace symcomm::detail {
namespace {

class HostWork final : public Work {
 public:
  bool is_completed() override {
    std::lock_guard lock(mu_);
    return done_;
  }
  void wait() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, time_after(timeout), [&] { return done_; })) return false;
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  std::exception_ptr exception() override {
    std::lock_guard lock(mu_);
    return error_;
  }
  void complete(std::exception_ptr error) {
    std::lock_guard lock(mu_);
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class HostBackend final : public Backend {
 public:
  using Ops = std::vector<std::pair<Request, Algorithm>>;

  explicit HostBackend(CommContext& ctx)
      : ctx_(ctx),
        schedules_(ctx.topology),
        segments_(ctx),
        engine_(ctx, segments_),
        p2p_(ctx, segments_),
        allocator_(segments_.heap_bytes()) {
    caps_.backend = BackendKind::kHost;
    caps_.world_size = ctx.ranks.world_size;
  }

  ~HostBackend() override {
    {
      std::lock_guard lock(queue_mu_);
      stopping_ = true;
      // Queued work would wait for peers that may be gone: fail it instead of blocking destruction.
      if (!queue_.empty() || busy_) ctx_.aborted.store(true);
      queue_cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
  }

  BackendKind kind() const override { return BackendKind::kHost; }
  const Capabilities& capabilities() const override { return caps_; }

  void* alloc(size_t bytes) override {
    std::lock_guard lock(alloc_mu_);
    return segments_.heap(ctx_.ranks.rank) + allocator_.allocate(bytes);
  }
  void free(void* ptr) override {
    std::lock_guard lock(alloc_mu_);
    auto off = segments_.own_heap_offset(ptr, 0);
    SYMCOMM_CHECK_ARG(off.has_value(), "free({}): not a pointer from alloc()", ptr);
    allocator_.release(*off - segments_.heap_offset());
  }
  void* peer_ptr(const void* ptr, int peer) const override {
    auto off = segments_.own_heap_offset(ptr, 0);
    return off ? segments_.base(peer) + *off : nullptr;
  }

  // A topology that links every pair needs no schedule; one no schedule serves refuses the all-reduce,
  // all-gather or reduce-scatter here, before anything is recorded (NOTE [schedule semantics] and NOTE [gather
  // schedules] in src/algos/schedule.h).
  void check_buffers(const Request& r) override { (void)topology_schedule(r.kind); }

  void check_p2p(const Request& /*r*/) override {}  // NOTE [point-to-point] in host_p2p.cc

  void run(const Request& r, Algorithm algo) override {
    wait_idle();
    execute({{r, algo}});
  }

  // NOTE [host worker start] The worker thread of the `*_async` calls starts with the first of them, here:
  // CommCore::enqueue() calls check_async() before it records the op, so a thread that cannot be created
  // (std::system_error: EAGAIN when threads or memory run out) is Error(kSystem) with nothing queued, nothing
  // recorded and the communicator usable; a later call tries again. Were it created in submit() after the job
  // is queued, the caller would get a raw std::system_error, and the job would stay queued, to run (its Work
  // never completing) once a later call started the thread. submit() also starts it for group_end_async() of a group
  // without `*_async` calls; there a failure is an error of the whole group, which makes the communicator fail
  // like any other kSystem error of a collective.
  void check_async(const Request&) override {
    std::lock_guard lock(queue_mu_);
    start_worker();
  }

  std::shared_ptr<Work> run_async(const Request& r, Algorithm algo) override { return submit({{r, algo}}); }

  void run_group(const Ops& ops) override {
    wait_idle();
    execute(ops);
  }

  std::shared_ptr<Work> run_group_async(const Ops& ops) override { return submit(ops); }

  bool can_reduce_scatter_gathered() const override { return true; }
  void bucket_copy(const BucketCopySegment* segs, size_t n, char* dst, size_t row_stride, int rows,
                   Stream /*stream*/) override {
    host_bucket_copy(segs, n, dst, row_stride, rows);
  }

  void reduce_scatter_gathered(const GatheredReduceScatter& g) override {
    wait_idle();
    std::lock_guard lock(exec_mu_);
    ctx_.throw_if_failed();
    engine_.begin_op(host_gathered_variant(g));
    host_reduce_scatter_gathered(engine_, g);
  }

  // A refusal of a message this rank sent (NOTE [point-to-point]) becomes its sticky error.
  void poll_errors() override {
    if (std::optional<Error> refusal = p2p_refusal(segments_, ctx_.ranks.rank, ctx_.ranks.world_size)) {
      ctx_.set_sticky(*refusal);
    }
  }

  void abort() override {
    // Waits poll ctx_.aborted; wake the worker in case it sleeps on an empty queue.
    std::lock_guard lock(queue_mu_);
    queue_cv_.notify_all();
  }

 private:
  struct Job {
    Ops ops;
    std::shared_ptr<HostWork> work;
  };

  std::shared_ptr<Work> submit(const Ops& ops) {
    auto work = std::make_shared<HostWork>();
    std::lock_guard lock(queue_mu_);
    start_worker();  // before queuing: NOTE [host worker start]
    queue_.push_back(Job{ops, work});
    queue_cv_.notify_all();
    return work;
  }

  // With queue_mu_ held.
  void start_worker() {
    if (worker_.joinable()) return;
    try {
      worker_ = std::thread([this] { work_loop(); });
    } catch (const std::system_error& e) {
      SYMCOMM_THROW(kSystem,
                    "rank {}: cannot start the host backend's worker thread for asynchronous collectives: {} "
                    "(nothing was queued)",
                    ctx_.ranks.rank, e.what());
    }
  }

  // NOTE [host coalescing]
  // A group (or a single collective) runs under one lock. Consecutive small all-reduces of one dtype and op
  // whose algorithm was left to symcomm are packed into one buffer and reduced by one collective (one step
  // sequence instead of one per tensor), then unpacked: element-wise reduction in rank order does not care
  // where an element sits, so the bits are those of the separate all-reduces. Every rank issues the same
  // group, so every rank packs the same way.
  static constexpr size_t kPackTensorMaxBytes = 256 << 10;
  static constexpr size_t kPackMaxBytes = 4 << 20;

  static bool packable(const Request& r) {
    return r.kind == Collective::kAllReduce && r.count > 0 && r.options.algorithm == Algorithm::kAuto &&
           r.count * r.elem_size() <= kPackTensorMaxBytes;
  }

  // One submission at a time per communicator: its collectives, then its sends and receives (NOTE
  // [point-to-point] in host_p2p.cc).
  void execute(const Ops& ops) {
    std::lock_guard lock(exec_mu_);
    if (!has_p2p(ops)) return execute_collectives(ops);
    const P2pPlan plan = plan_p2p(ops, ctx_.ranks.rank);  // refuses unmatched messages to itself before anything runs
    Ops collectives;
    for (size_t i : plan.collectives) collectives.push_back(ops[i]);
    execute_collectives(collectives);
    p2p_.run(ops, plan);
  }

  void execute_collectives(const Ops& ops) {
    for (size_t i = 0; i < ops.size();) {
      size_t j = i, bytes = 0;
      while (j < ops.size() && packable(ops[j].first) && ops[j].first.dtype == ops[i].first.dtype &&
             ops[j].first.op == ops[i].first.op &&
             bytes + ops[j].first.count * ops[j].first.elem_size() <= kPackMaxBytes) {
        bytes += ops[j].first.count * ops[j].first.elem_size();
        ++j;
      }
      if (j - i >= 2) {
        execute_packed(ops, i, j, bytes);
        i = j;
      } else {
        execute_one(ops[i].first, ops[i].second);
        ++i;
      }
    }
  }

  void execute_packed(const Ops& ops, size_t begin, size_t end, size_t bytes) {
    pack_in_.resize(bytes);
    pack_out_.resize(bytes);
    size_t off = 0;
    for (size_t k = begin; k < end; ++k) {
      size_t b = ops[k].first.count * ops[k].first.elem_size();
      std::memcpy(pack_in_.data() + off, ops[k].first.in, b);
      off += b;
    }
    const Request& first = ops[begin].first;
    Request packed{.kind = Collective::kAllReduce,
                   .in = pack_in_.data(),
                   .out = pack_out_.data(),
                   .count = bytes / first.elem_size(),
                   .dtype = first.dtype,
                   .op = first.op,
                   .root = 0,
                   .options = {}};
    Algorithm algo =
        select_algorithm(SelectRequest{.kind = packed.kind, .dtype = packed.dtype, .op = packed.op, .bytes = bytes},
                         caps_, ctx_.config.tuning);
    execute_one(packed, algo);
    off = 0;
    for (size_t k = begin; k < end; ++k) {
      size_t b = ops[k].first.count * ops[k].first.elem_size();
      std::memcpy(ops[k].first.out, pack_out_.data() + off, b);
      off += b;
    }
  }

  /// The schedule of an all-reduce, all-gather or reduce-scatter over the communicator's topology; nullptr for
  /// the other collectives and where every pair is linked (or no topology is given). Throws kUnsupported where no
  /// schedule serves the topology.
  const Schedule* topology_schedule(Collective kind) { return schedules_.require(kind, ctx_.ranks.rank); }

  void execute_one(const Request& r, Algorithm algo) {
    ctx_.throw_if_failed();
    const Schedule* scheduled = topology_schedule(r.kind);
    note_path(scheduled ? KernelPath::kHostScheduled : KernelPath::kHost);
    // NOTE [step variant]: ranks that forced different all-reduce algorithms must not pass each other.
    engine_.begin_op(scheduled ? 3 : r.kind != Collective::kAllReduce ? 0 : 1 + (algo == Algorithm::kTwoShot));
    switch (r.kind) {
      case Collective::kAllReduce:
        if (scheduled) return host_all_reduce_scheduled(engine_, r, *scheduled);
        return algo == Algorithm::kTwoShot ? host_all_reduce_two_shot(engine_, r)
                                           : host_all_reduce_one_shot(engine_, r);
      case Collective::kAllGather:
        return scheduled ? host_gather_scheduled(engine_, r, *scheduled) : host_all_gather(engine_, r);
      case Collective::kReduceScatter:
        return scheduled ? host_gather_scheduled(engine_, r, *scheduled) : host_reduce_scatter(engine_, r);
      case Collective::kBroadcast: return host_broadcast(engine_, r);
      case Collective::kAllToAll: return host_all_to_all(engine_, r);
      case Collective::kBarrier: return host_barrier(engine_, r);
    }
    SYMCOMM_THROW(kInternal, "unhandled collective {}", static_cast<int>(r.kind));
  }

  void wait_idle() {
    std::unique_lock lock(queue_mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }

  void work_loop() {
    std::unique_lock lock(queue_mu_);
    while (true) {
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      Job job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        execute(job.ops);
      } catch (const Error& e) {
        if (is_fatal(e.code())) ctx_.set_sticky(e);
        error = std::current_exception();
      } catch (...) {
        error = std::current_exception();
      }
      job.work->complete(error);
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }

  CommContext& ctx_;
  Capabilities caps_;
  TopologySchedules schedules_;  ///< of ctx_.topology
  HostSegments segments_;
  HostEngine engine_;
  HostP2p p2p_;
  std::mutex alloc_mu_;
  HeapAllocator allocator_;
  std::mutex exec_mu_;
  std::vector<uint8_t> pack_in_, pack_out_;
  std::mutex queue_mu_;
  std::condition_variable queue_cv_, idle_cv_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Backend> make_host_backend(CommContext& ctx) { return std::make_unique<HostBackend>(ctx); }

}  // namespace symcomm::detail
