#include "backends/cuda/cuda_backend_cuda.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "algos/cuda_all_reduce_ll.h"
#include "backends/cuda/cuda_topology_cuda.h"
#include "base/check.h"
#include "base/cuda_check.h"
#include "base/deadline.h"
#include "base/kernel_loading_cuda.h"
#include "base/logging.h"
#include "base/memory_ledger.h"

namespace symcomm::detail {
namespace {

constexpr uint32_t kTagSmCount = 35;  // mesh tag of the SM-count exchange (setup)

using device::DeviceError;

uint64_t read_error(const ControlBlock& c) {
  return c.host ? *reinterpret_cast<const volatile uint64_t*>(&c.host->error) : 0;
}

// Work of the CUDA backend: an event recorded after the collective plus the communicator's error word.
class CudaWork final : public Work {
 public:
  CudaWork(CudaBackend* backend, std::shared_ptr<ControlBlock> control, cudaEvent_t ev, std::chrono::milliseconds limit)
      : backend_(backend), control_(std::move(control)), ev_(ev), limit_(limit) {}
  ~CudaWork() override {
    if (ev_) cudaEventDestroy(ev_);
  }
  bool is_completed() override {
    if (done_) return true;
    cudaError_t q = cudaEventQuery(ev_);
    if (q == cudaErrorNotReady && !read_error(*control_)) return false;
    if (q != cudaErrorNotReady && q != cudaSuccess) cudaGetLastError();
    finish();
    return true;
  }
  void wait() override {
    if (!wait_for(limit_)) {
      error_ = std::make_exception_ptr(Error(ErrorCode::kTimeout,
                                             fmt::format("collective did not complete within {} ms", limit_.count()),
                                             __FILE__, __LINE__));
      backend_->ctx().set_sticky(Error(ErrorCode::kTimeout, "a collective did not complete", __FILE__, __LINE__));
      done_ = true;
    }
    if (error_) std::rethrow_exception(error_);
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    const auto until = time_after(timeout);
    PollPause pause;  // NOTE [polling pauses]
    while (!is_completed()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      pause();
    }
    return true;
  }
  std::exception_ptr exception() override { return done_ ? error_ : nullptr; }

 private:
  void finish() {
    done_ = true;
    try {
      backend_->poll_errors();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  CudaBackend* backend_;  // the Communicator outlives its Work objects (documented rule of Work)
  std::shared_ptr<ControlBlock> control_;
  cudaEvent_t ev_;
  std::chrono::milliseconds limit_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace

CudaBackend::CudaBackend(CommContext& ctx, int device) : ctx_(ctx), device_(device), schedules_(ctx.topology) {
  try {
    setup();
  } catch (...) {
    // A creation that failed part-way (a peer died, NCCL could not be created) frees what it made: no
    // destructor runs for an object whose constructor threw.
    release();
    throw;
  }
}

void CudaBackend::setup() {
  const int n = ctx_.ranks.world_size, me = ctx_.ranks.rank;
  SYMCOMM_CUDA_CHECK(cudaSetDevice(device_));
  SYMCOMM_CUDA_CHECK(cudaFree(nullptr));  // create the context
  // Every kernel now, none at a first launch (NOTE [kernel loading]).
  load_kernel_modules();
  caps_.backend = BackendKind::kCuda;
  caps_.world_size = n;
  caps_.copy_engine = false;

  // Symmetric heap, signal pad, staging buffer (cuMem, collective).
  // The LL buffer: LL's [parity][source rank] slots of 2x payload, then LL128's (NOTE [LL128 lines]).
  ll128_offset_ = 2 * n * 2 * kLLPayloadBytes;
  ll128_slot_bytes_ = cuda::all_reduce_ll128_slot_bytes(kLL128PayloadBytes);
  const size_t ll_bytes = ll128_offset_ + 2 * n * ll128_slot_bytes_;
  const size_t half = std::max<size_t>(ctx_.config.cuda_scratch_bytes / 2 / 4096 * 4096, 64 << 10);
  // The topology schedules' inboxes, where a topology restricts the links: halves of the staging halves' size.
  const bool restricted = schedules_.restricted() && n <= device::kMaxDeviceRanks;
  inbox_half_bytes_ = restricted ? half : 0;
  heap_ = std::make_unique<CudaHeap>(
      ctx_, device_,
      ctx_.config.heap_bytes + ctx_.config.cuda_scratch_bytes + ll_bytes + 2 * inbox_half_bytes_ + (16 << 20));
  pad_ = heap_->alloc(device::kPadBytes);
  ll_ = heap_->alloc(ll_bytes);
  scratch_ = heap_->alloc(2 * half);
  ce_pad_ = heap_->alloc(CopyEngine::kPadBytes);
  if (restricted) inbox_ = heap_->alloc(2 * inbox_half_bytes_);
  SYMCOMM_CUDA_CHECK(cudaMemset(pad_, 0, device::kPadBytes));
  SYMCOMM_CUDA_CHECK(cudaMemset(ll_, 0, ll_bytes));  // no stale word may look like a line of seq 1
  SYMCOMM_CUDA_CHECK(cudaMemset(ce_pad_, 0, CopyEngine::kPadBytes));
  SYMCOMM_CUDA_CHECK(cudaMalloc(&state_, sizeof(device::DeviceState)));
  ledger_add(device_, MemoryKind::kDevice, sizeof(device::DeviceState));
  SYMCOMM_CUDA_CHECK(cudaMemset(state_, 0, sizeof(device::DeviceState)));
  if (ctx_.config.debug_seq_start != 0 || ctx_.config.debug_signal_lag != 0) {
    // Testing only (NOTE [signal refresh]): the counter starts elsewhere, the slots behind it.
    const std::vector<uint32_t> slots(device::kSignalSlots, ctx_.config.debug_seq_start - ctx_.config.debug_signal_lag);
    SYMCOMM_CUDA_CHECK(cudaMemcpy(pad_, slots.data(), slots.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
    SYMCOMM_CUDA_CHECK(
        cudaMemcpy(&state_->seq, &ctx_.config.debug_seq_start, sizeof(uint32_t), cudaMemcpyHostToDevice));
  }
  control_ = std::make_shared<ControlBlock>();
  SYMCOMM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&control_->host), sizeof(device::HostControl),
                                   cudaHostAllocMapped | cudaHostAllocPortable));
  ledger_add(device_, MemoryKind::kPinnedHost, sizeof(device::HostControl));
  std::memset(control_->host, 0, sizeof(device::HostControl));
  SYMCOMM_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&control_dev_), control_->host, 0));
  SYMCOMM_CUDA_CHECK(cudaDeviceSynchronize());

  // Peer liveness -> the device abort path. The callback holds the control block, not the backend.
  std::weak_ptr<ControlBlock> weak = control_;
  if (ctx_.mesh)
    ctx_.mesh->on_peer_lost([weak](int rank, bool died) {
      if (auto c = weak.lock()) {
        std::lock_guard lock(c->mu);
        if (c->host) {
          uint64_t* mask = died ? &c->host->dead_mask : &c->host->left_mask;
          reinterpret_cast<std::atomic<uint64_t>*>(mask)->fetch_or(uint64_t{1} << rank);
        }
      }
    });

  comm_.rank = me;
  comm_.world_size = n;
  comm_.state = state_;
  comm_.control = control_dev_;
  comm_.scratch_half_bytes = half;
  comm_.ll_slot_bytes = 2 * kLLPayloadBytes;
  auto timeout_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(ctx_.config.timeout).count();
  comm_.timeout_ns = timeout_ns > 0 ? static_cast<uint64_t>(timeout_ns) : 1;
  std::vector<char*> probe_areas(n);
  for (int p = 0; p < n && p < device::kMaxDeviceRanks; ++p) {
    comm_.signals[p] = static_cast<uint32_t*>(heap_->peer_ptr(pad_, p));
    comm_.scratch[p] = static_cast<char*>(heap_->peer_ptr(scratch_, p));
    comm_.ll[p] = static_cast<char*>(heap_->peer_ptr(ll_, p));
    probe_areas[p] = comm_.scratch[p];
  }

  // Capabilities, agreed by all ranks: the links (the kernels need NVLink between every pair, or one shared GPU).
  LocalProbe probe = probe_topology(ctx_, device_);
  bool p2p = n <= device::kMaxDeviceRanks && functional_p2p_check(ctx_, probe_areas.data(), 0x5c0ffee5a11d00dull ^ n);
  if (!p2p || !probe.detail.empty()) {
    SYMCOMM_LOG_WARN("rank {}: symcomm NVLink kernels unavailable here ({}functional P2P {}); using NCCL", me,
                     probe.detail, p2p ? "ok" : "failed");
  }
  const Topology links = agree_links(ctx_, probe, p2p);
  caps_.full_nvlink = links.full_mesh(LinkKind::kNvlink);
  SYMCOMM_LOG_INFO("rank {}: links {}", me, links.to_json());
  if (restricted && caps_.full_nvlink) setup_schedules(half);
  // Copy-engine collectives need the same peer mappings as the kernels (and the pads zeroed everywhere,
  // which the functional P2P check's exchange has ordered before any peer's first signal). The engine's local
  // resources are made before the next exchange, which carries whether that worked: a rank that cannot make
  // them (out of device memory for its staging buffer) fails the creation on every rank, not on its own.
  caps_.copy_engine = caps_.full_nvlink;
  std::exception_ptr ce_error;
  if (caps_.copy_engine) {
    std::vector<uint32_t*> ce_pads(n);
    std::vector<char*> ce_scratch(n);
    for (int p = 0; p < n; ++p) {
      ce_pads[p] = static_cast<uint32_t*>(heap_->peer_ptr(ce_pad_, p));
      ce_scratch[p] = comm_.scratch[p];
    }
    try {
      ce_ = std::make_unique<CopyEngine>(ctx_, device_, control_, control_dev_, *heap_, ce_pads, ce_scratch, 2 * half);
    } catch (...) {
      ce_error = std::current_exception();
    }
  }
  // Grids of one block per SM use the ranks' smallest SM count, so that every rank slices alike (NOTE
  // [configuration agreement]). The message also says whether the copy engine was set up.
  struct SetupMsg {
    int32_t sms;
    int32_t ce_failed;
  };
  SetupMsg own{0, ce_error ? 1 : 0};
  SYMCOMM_CUDA_CHECK(cudaDeviceGetAttribute(&own.sms, cudaDevAttrMultiProcessorCount, device_));
  const auto* own_bytes = reinterpret_cast<const uint8_t*>(&own);
  fewest_sms_ = own.sms;
  std::vector<int> ce_failed;
  const auto all = ctx_.mesh_all_gather(kTagSmCount, std::vector<uint8_t>(own_bytes, own_bytes + sizeof(own)));
  for (int p = 0; p < static_cast<int>(all.size()); ++p) {
    SetupMsg theirs{};
    SYMCOMM_CHECK(all[p].size() == sizeof(theirs), kInternal, "bad set-up message ({} bytes)", all[p].size());
    std::memcpy(&theirs, all[p].data(), sizeof(theirs));
    fewest_sms_ = std::min(fewest_sms_, static_cast<int>(theirs.sms));
    if (theirs.ce_failed) ce_failed.push_back(p);
  }
  if (ce_error) std::rethrow_exception(ce_error);
  if (!ce_failed.empty()) {
    throw Error(ErrorCode::kCuda,
                fmt::format("rank {}: rank(s) {} could not set up their copy engine (see their errors)", me,
                            fmt::join(ce_failed, ", ")),
                __FILE__, __LINE__, ce_failed);
  }
  // Config::nccl (NcclInit). Without NVLink peer access NCCL is the only path, so it is created now whatever
  // the mode (except off). Lazily, NCCL counts as available until its creation fails (the same on every rank).
  // NCCL refuses two ranks on one GPU, so where ranks may share one (Config::shared_gpu) it is never made.
  nccl_mode_ = ctx_.config.shared_gpu ? NcclInit::kOff : ctx_.config.nccl;
  if (nccl_mode_ == NcclInit::kEager || (nccl_mode_ == NcclInit::kLazy && !caps_.full_nvlink)) {
    init_nccl();
  } else {
    caps_.nccl_available = nccl_mode_ == NcclInit::kLazy;
  }
  SYMCOMM_LOG_INFO("rank {}: CUDA backend on device {}: full_nvlink={} nccl={}{} scratch={} B{}", me, device_,
                   caps_.full_nvlink, caps_.nccl_available, nccl_ ? "" : " (not created)", 2 * half,
                   caps_.restricted_links ? fmt::format(", topology schedules for collectives {:#x}", caps_.schedules)
                                          : std::string());
}

void CudaBackend::setup_schedules(size_t half) {
  const int n = ctx_.ranks.world_size, me = ctx_.ranks.rank;
  caps_.restricted_links = true;
  for (Collective kind : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter}) {
    if (const Schedule* sch = schedules_.find(kind)) {
      plans_[schedule_index(kind)] = make_schedule_plan(*sch, n, me);
      caps_.schedules |= 1u << static_cast<int>(kind);
    }
  }
  for (int p = 0; p < n; ++p) inbox_peers_[p] = static_cast<char*>(heap_->peer_ptr(inbox_, p));
  // The parity counter (zeroed: every rank starts at the same half), then the reduce-scatter's work area: one
  // round of every block, each as large as an inbox half.
  sched_state_bytes_ = 256 + n * half;
  SYMCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sched_state_), sched_state_bytes_));
  ledger_add(device_, MemoryKind::kDevice, sched_state_bytes_);
  SYMCOMM_CUDA_CHECK(cudaMemset(sched_state_, 0, 256));
  SYMCOMM_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaBackend::ensure_nccl(cudaStream_t s) {
  std::lock_guard lock(nccl_mu_);
  if (nccl_tried_ || nccl_mode_ != NcclInit::kLazy) return;
  // NCCL's creation allocates and copies synchronously, which a stream capture does not allow; refused on
  // every rank alike (they capture the same collective), so nothing is half-created.
  SYMCOMM_CHECK(!stream_capturing(s), kUnsupported,
                "rank {}: this collective runs through NCCL, whose communicator is created lazily (SYMCOMM_NCCL=lazy) "
                "and cannot be created inside a CUDA graph capture: run one such collective before capturing, or "
                "use SYMCOMM_NCCL=eager",
                ctx_.ranks.rank);
  init_nccl();
  SYMCOMM_CHECK(caps_.nccl_available, kUnsupported,
                "rank {}: NCCL could not be created on every rank (see the warnings); later collectives of this "
                "communicator use symcomm's kernels",
                ctx_.ranks.rank);
}

void CudaBackend::init_nccl() {
  nccl_tried_ = true;
  // NCCL must never use NVLink multicast (NVLS) here: it can take shared GPUs out of service.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  ncclUniqueId id;
  std::string key = ctx_.prefix + "/cuda/nccl_id";
  if (ctx_.ranks.rank == 0) {
    SYMCOMM_NCCL_CHECK(ncclGetUniqueId(&id));
    ctx_.store->set(key, Bytes(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id)));
  } else {
    Bytes b = ctx_.store_get(key, ctx_.deadline());
    SYMCOMM_CHECK(b.size() == sizeof(id), kStore, "bad NCCL unique id in the store ({} bytes)", b.size());
    std::memcpy(&id, b.data(), sizeof(id));
  }
  // Every rank first shows, through the mesh (bounded by the deadline, a dead peer reported as such), that it
  // is alive and holds the id; a rank that dies after this is caught by nccl_settle() (NOTE [nonblocking NCCL]).
  // Every rank read the id before agreeing: the key goes, so the store does not grow with every communicator.
  // Also when the agreement fails (a peer died, abort, deadline): a stale id left under this name would be
  // read by a later creation's ranks before its rank 0 set the new one, and their NCCL creations would wait
  // for each other until the deadline.
  try {
    (void)agree_all(ctx_, true);
  } catch (...) {
    if (ctx_.ranks.rank == 0) {
      try {
        ctx_.store->remove(key);
      } catch (const Error&) {  // the store itself may be what failed
      }
    }
    throw;
  }
  if (ctx_.ranks.rank == 0) ctx_.store->remove(key);
  const auto t0 = std::chrono::steady_clock::now();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t res = ncclCommInitRankConfig(&nccl_, ctx_.ranks.world_size, id, ctx_.ranks.rank, &config);
  // A throw here (a peer died or left, abort, deadline) leaves nccl_ to release(), which aborts its creation.
  if (nccl_) res = nccl_settle(res, "the NCCL communicator's creation");
  const bool ok = res == ncclSuccess && nccl_;
  SYMCOMM_LOG_DEBUG("rank {}: NCCL communicator created in {:.1f} ms", ctx_.ranks.rank,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  if (!ok) {
    SYMCOMM_LOG_WARN("rank {}: ncclCommInitRankConfig failed: {}", ctx_.ranks.rank, ncclGetErrorString(res));
    if (nccl_) ncclCommAbort(nccl_);
    nccl_ = nullptr;
  }
  caps_.nccl_available = agree_all(ctx_, ok);
}

// NOTE [nonblocking NCCL] symcomm's NCCL communicator is nonblocking (ncclConfig_t::blocking = 0): its
// creation, and any call that must first connect to peers, returns ncclInProgress and is finished by NCCL's
// own threads. nccl_settle() waits for that while watching the mesh, abort() and the deadline. A blocking
// ncclCommInitRank has no deadline: a rank that dies after agreeing to create NCCL (init_nccl) would hold the
// others inside it for ever. Here they get kPeerDead naming it within milliseconds of its death, and the
// half-made communicator is aborted by release().
//
// NOTE [settling NCCL calls] On a nonblocking communicator of more than one rank every NCCL call, each
// collective included, ends in a group that NCCL runs on a thread it creates for it, and returns
// ncclInProgress (a 1-rank communicator's collectives are plain copies and return at once, so a 1-GPU
// measurement shows no cost). On 2 x H200 an eager all-gather or
// reduce-scatter of 4 KB-1 MB sent to NCCL took 110-124 us with sleeps between the polls from the first one
// and 47-95 us with PollPause (NOTE [polling pauses]), against 7-11 us through a blocking NCCL communicator:
// the thread per call is NCCL's. Hence Tuning::cuda_direct_nccl_max_bytes = 0 (symcomm's kernels for those
// sizes); in a CUDA graph the cost is paid once, at capture.
ncclResult_t CudaBackend::nccl_settle(ncclResult_t r, const char* what) {
  const Deadline deadline = ctx_.deadline();
  PollPause pause;
  while (r == ncclInProgress) {
    pause();
    ncclResult_t state = ncclInProgress;
    const ncclResult_t q = ncclCommGetAsyncError(nccl_, &state);
    r = q == ncclSuccess ? state : q;
    if (r != ncclInProgress) break;
    ctx_.throw_if_failed();  // sticky error, abort(), a dead peer
    if (const uint64_t left = ctx_.mesh ? ctx_.mesh->left_mask() : 0) {
      throw ctx_.peer_lost_error(0, left, __FILE__, __LINE__);  // NCCL would wait for it for ever too
    }
    SYMCOMM_CHECK(!deadline.expired(), kTimeout, "rank {}: {} did not finish within the timeout ({} ms)",
                  ctx_.ranks.rank, what, ctx_.config.timeout.count());
  }
  return r;
}

void CudaBackend::nccl_run(ncclResult_t r, const char* expr, const char* file, int line) {
  r = nccl_settle(r, expr);
  if (r != ncclSuccess) throw_nccl_error(static_cast<int>(r), expr, file, line);
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() {
  DeviceScope on_device(device_, std::nothrow);  // the synchronisations below are of this device
  bool failed = ctx_.sticky().has_value() || ctx_.aborted.load();
  if (!failed) cudaDeviceSynchronize();  // let enqueued kernels finish before their memory goes
  // ncclCommAbort also on a clean shutdown: it never waits for peers (which may already be gone or busy),
  // and our own NCCL work has completed (synchronised above) or must be cut off (failure). It also ends a
  // creation still in progress (NOTE [nonblocking NCCL]). ncclCommDestroy would take ~0.5 s instead of ~1 s
  // (both are NCCL's proxy threads polling every 500 ms), but its proxy thread stays until every peer has
  // closed its connection, i.e. destroyed its communicator too: a peer that is alive but busy elsewhere
  // would hold this rank here without bound.
  if (nccl_) {
    const auto t0 = std::chrono::steady_clock::now();
    ncclCommAbort(nccl_);
    nccl_ = nullptr;
    SYMCOMM_LOG_DEBUG("rank {}: ncclCommAbort took {:.1f} ms", ctx_.ranks.rank,
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (control_) {
    std::lock_guard lock(control_->mu);
    // Kernels of a failed communicator exit on their own (error word / abort); keep the words valid until
    // then by aborting them first.
    if (control_->host) {
      reinterpret_cast<volatile uint32_t*>(&control_->host->aborted)[0] = 1;
    }
  }
  cudaDeviceSynchronize();
  ce_.reset();  // its watchdog released any copy-engine wait during the synchronisation above
  if (control_) {
    std::lock_guard lock(control_->mu);
    if (control_->host) {
      cudaFreeHost(control_->host);
      ledger_remove(device_, MemoryKind::kPinnedHost, sizeof(device::HostControl));
    }
    control_->host = nullptr;
  }
  if (state_) {
    cudaFree(state_);
    ledger_remove(device_, MemoryKind::kDevice, sizeof(device::DeviceState));
  }
  state_ = nullptr;
  if (sched_state_) {
    cudaFree(sched_state_);
    ledger_remove(device_, MemoryKind::kDevice, sched_state_bytes_);
  }
  sched_state_ = nullptr;
  heap_.reset();
}

void* CudaBackend::alloc(size_t bytes) {
  DeviceScope on_device(device_);
  return heap_->alloc(bytes);
}
void CudaBackend::free(void* ptr) {
  DeviceScope on_device(device_);
  if (ptr) cudaDeviceSynchronize();  // no kernel of ours may still use it
  heap_->free(ptr);
}
void* CudaBackend::peer_ptr(const void* ptr, int peer) const { return heap_->peer_ptr(ptr, peer); }

bool CudaBackend::symmetric(const void* p, size_t bytes, uint64_t* place) const {
  char* base = nullptr;
  size_t stride = 0;
  return p && heap_->find(p, bytes, &base, &stride, place);
}

void CudaBackend::check_pointer(const void* p, const char* what, cudaStream_t stream) {
  if (symmetric(p, 1)) return;  // heap memory is this device's; skips the cache for many-tensor groups
  {
    std::lock_guard lock(ptr_mu_);
    for (auto& [q, ok] : ptr_cache_) {
      if (q == p && ok) return;
    }
  }
  cudaPointerAttributes a{};
  cudaError_t err = cudaPointerGetAttributes(&a, p);
  if (err != cudaSuccess) cudaGetLastError();
  // A stream-ordered allocation made inside the capture being recorded (cudaMallocAsync) has no mapping yet,
  // so the driver cannot describe it: such pointers are accepted unchecked while capturing.
  if ((err != cudaSuccess || a.type == cudaMemoryTypeUnregistered) && stream_capturing(stream)) return;
  bool ok =
      err == cudaSuccess && ((a.type == cudaMemoryTypeDevice && a.device == device_) ||
                             a.type == cudaMemoryTypeManaged || (a.type == cudaMemoryTypeHost && a.devicePointer == p));
  SYMCOMM_CHECK_ARG(ok,
                    "{} = {} is not memory that device {} can access (use cudaMalloc, the symmetric heap, or "
                    "mapped host memory)",
                    what, p, device_);
  std::lock_guard lock(ptr_mu_);
  if (ptr_cache_.size() >= 16) ptr_cache_.erase(ptr_cache_.begin());
  ptr_cache_.emplace_back(p, true);
}

void CudaBackend::check_buffers(const Request& r) {
  // A topology no schedule serves, without NCCL: refused here, before anything is recorded, naming the topology.
  if (caps_.restricted_links && !caps_.nccl_available) (void)schedules_.require(r.kind, ctx_.ranks.rank);
  if (r.kind == Collective::kBarrier || r.count == 0) return;
  const size_t es = r.elem_size();
  bool reads_in = r.kind != Collective::kBroadcast || r.root == ctx_.ranks.rank;
  const auto s = reinterpret_cast<cudaStream_t>(r.options.stream);
  if (reads_in) check_pointer(r.in, "in", s);
  check_pointer(r.out, "out", s);
  if (r.has_reduction()) {
    SYMCOMM_CHECK_ARG(reinterpret_cast<uintptr_t>(r.in) % es == 0 && reinterpret_cast<uintptr_t>(r.out) % es == 0,
                      "in/out must be aligned to the element size ({} bytes) for reductions", es);
  }
}

void CudaBackend::poll_errors() {
  uint64_t e = read_error(*control_);
  if (!e) return;
  Error err = device_error(e);
  ctx_.set_sticky(err);
  throw *ctx_.sticky();
}

Error CudaBackend::device_error(uint64_t e) const {
  const int me = ctx_.ranks.rank, peer = device::error_peer(e);
  std::vector<int> ranks;
  if (peer >= 0) ranks.push_back(peer);
  switch (device::error_code(e)) {
    case DeviceError::kPeerDead: {
      uint64_t dead = ctx_.mesh ? ctx_.mesh->dead_mask() : 0, left = ctx_.mesh ? ctx_.mesh->left_mask() : 0;
      if (dead | left) return ctx_.peer_lost_error(dead, left, __FILE__, __LINE__);
      return Error(ErrorCode::kPeerDead, fmt::format("rank {}: rank {} died during a collective", me, peer), __FILE__,
                   __LINE__, ranks);
    }
    case DeviceError::kAborted:
      return Error(ErrorCode::kAborted, fmt::format("rank {}: the communicator was aborted", me), __FILE__, __LINE__,
                   ranks);
    case DeviceError::kMismatch:
      return Error(ErrorCode::kMismatch,
                   fmt::format("rank {}: rank {} ran a different collective (collective, count, dtype, op, root or "
                               "buffer kind differ) at signal {}",
                               me, peer, device::error_seq(e)),
                   __FILE__, __LINE__, ranks);
    case DeviceError::kAbandoned:
      return Error(ErrorCode::kTimeout,
                   fmt::format("rank {}: rank {} gave up on this copy-engine collective (its deadline passed, it was "
                               "aborted or it lost a peer) before this rank completed it; the output is invalid",
                               me, peer),
                   __FILE__, __LINE__, ranks);
    case DeviceError::kTimeout:
    default:
      return Error(ErrorCode::kTimeout,
                   fmt::format("rank {}: waited {} ms on the device for rank {} (signal {}); it did not arrive", me,
                               ctx_.config.timeout.count(), peer, device::error_seq(e)),
                   __FILE__, __LINE__, ranks);
  }
}

void CudaBackend::abort() {
  std::lock_guard lock(control_->mu);
  if (control_->host) {
    reinterpret_cast<std::atomic<uint32_t>*>(&control_->host->aborted)->store(1, std::memory_order_release);
  }
}

void CudaBackend::run(const Request& r, Algorithm algo) {
  poll_errors();
  if (r.count == 0 && r.kind != Collective::kBarrier) return;  // every rank has count 0: nothing to move
  DeviceScope on_device(device_);
  cudaStream_t s = reinterpret_cast<cudaStream_t>(r.options.stream);
  order_.enter(s);  // NOTE [one operation at a time]
  enqueue(r, algo, s);
  order_.leave(s);
}

void CudaBackend::enqueue(const Request& r, Algorithm algo, cudaStream_t s) {
  if (r.count == 0 && r.kind != Collective::kBarrier) return;
  if (algo == Algorithm::kNccl) {
    launch_nccl(r, s);
  } else {
    SYMCOMM_CHECK(caps_.full_nvlink, kUnsupported, "symcomm kernels need P2P over NVLink between all ranks");
    launch(r, algo, s);
  }
}

void CudaBackend::check_async(const Request& r) {
  SYMCOMM_CHECK_ARG(!stream_capturing(reinterpret_cast<cudaStream_t>(r.options.stream)),
                    "asynchronous collectives cannot be captured into a CUDA graph; use the "
                    "blocking form (it only enqueues on the stream)");
}

std::shared_ptr<Work> CudaBackend::run_async(const Request& r, Algorithm algo) {
  // check_async(r) passed in CommCore::enqueue, the only caller (groups go through this backend's own
  // run_group_async, which checks its streams itself).
  DeviceScope on_device(device_);  // the event too
  run(r, algo);
  return record_work(reinterpret_cast<cudaStream_t>(r.options.stream));
}

std::shared_ptr<Work> CudaBackend::record_work(cudaStream_t s) {
  cudaEvent_t ev = nullptr;
  SYMCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(ev, s);
  if (err != cudaSuccess) {
    cudaEventDestroy(ev);
    SYMCOMM_CUDA_CHECK(err);
  }
  // The host gives up a little after the device deadline, which reports the failing rank itself.
  return std::make_shared<CudaWork>(this, control_, ev, ctx_.config.timeout + std::chrono::seconds(5));
}
namespace {

// The device a CUDA communicator uses: `device`, or by default the local rank's (Config::shared_gpu: more ranks
// than GPUs take turns on them).
int device_to_use(const CommContext& ctx, int device) {
  if (device < 0) {
    device = ctx.ranks.local_rank;
    int visible = 0;
    if (ctx.config.shared_gpu && cudaGetDeviceCount(&visible) == cudaSuccess && visible > 0) device %= visible;
  }
  return device;
}

}  // namespace

bool cuda_backend_built() { return true; }

std::unique_ptr<Backend> make_cuda_backend(CommContext& ctx, int device) {
  return std::make_unique<CudaBackend>(ctx, device_to_use(ctx, device));
}

std::string cuda_device_name(const CommContext& ctx, int device) {
  cudaDeviceProp prop{};
  SYMCOMM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_to_use(ctx, device)));
  return std::string(prop.name);
}

}  // namespace symcomm::detail
