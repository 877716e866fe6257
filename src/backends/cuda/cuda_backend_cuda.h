#pragma once
// CudaBackend: symmetric memory over cuMem + NVLink kernels, with NCCL as the fallback path.
//
// NOTE [cuda backend ordering] Collectives are enqueued on CollOptions::stream and return (NCCL-like). One
// communicator runs one operation at a time, in issue order, whatever streams they name: its kernels share one
// signal pad, one staging buffer and one set of device counters (NOTE [one operation at a time] in
// op_order_cuda.h). Different communicators have separate pads, staging and counters, so they may run
// concurrently on different streams.
//
// NOTE [cuda backend errors] Kernels never trap. A wait that hits the deadline, sees abort() or a dead peer,
// or finds a mismatched op header records the first error in DeviceState::error and copies it into
// host-mapped memory (HostControl::error). The host reads that word before every launch, in Work::wait()/
// is_completed(), and in poll_errors(); it becomes a sticky Error naming the rank(s). The peer-mesh
// watchdog sets HostControl::dead_mask when a peer dies (left_mask when it leaves cleanly: only the waits for it
// give up), so kernels spinning on it exit within ~1 ms of the watchdog noticing.

#include <nccl.h>

#include <memory>
#include <mutex>

#include "algos/schedule.h"
#include "algos/schedule_plan.h"
#include "backends/backend.h"
#include "backends/cuda/cuda_copy_engine_cuda.h"
#include "backends/cuda/cuda_heap_cuda.h"
#include "backends/cuda/op_order_cuda.h"
#include "symcomm/device/handle.h"

/// An NCCL call on CudaBackend::nccl_ (inside a member of CudaBackend): settled, and thrown if it failed.
#define SYMCOMM_NCCL_RUN(expr) nccl_run((expr), #expr, __FILE__, __LINE__)

namespace symcomm::detail {

// NOTE [LL threshold] One-shot all-reduces up to Tuning::cuda_ll_max_bytes (and the LL buffer's capacity,
// kLLPayloadBytes) use the LL kernel (data carries its own flags; cuda_all_reduce_ll.cu), larger ones the
// staged one-shot (push, one barrier per round). LL moves twice the bytes over NVLink but saves the fence and
// the flag round trip. Measured on 2 x H200 with tools/gpu/check.sh (bf16 sum, CUDA graph, us per
// op): staged one-shot 5.5 / 6.1 / 6.3 / 6.9 / 9.8 at 4 K / 16 K / 64 K / 256 K / 1 M; LL 2.7 / 4.5 /
// 5.4 / 6.0 / 11.9; two-shot 11.2 at 1 M. LL wins up to 256 KB and loses at 1 MB.
inline constexpr size_t kLLPayloadBytes = 1 << 20;     // LL buffer capacity (payload) per source rank and parity
inline constexpr size_t kLL128PayloadBytes = 4 << 20;  // the same for LL128 lines (NOTE [LL128 lines])

/// Host-mapped control words, shared with the peer-mesh callback (which may outlive the backend).
struct ControlBlock {
  std::mutex mu;
  device::HostControl* host = nullptr;  ///< nullptr once freed
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(CommContext& ctx, int device);
  ~CudaBackend() override;

  BackendKind kind() const override { return BackendKind::kCuda; }
  int device() const override { return device_; }
  const Capabilities& capabilities() const override { return caps_; }
  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void* peer_ptr(const void* ptr, int peer) const override;
  void check_buffers(const Request& r) override;
  void run(const Request& r, Algorithm algo) override;
  std::shared_ptr<Work> run_async(const Request& r, Algorithm algo) override;
  void check_async(const Request& r) override;
  void abort() override;

  /// Throws (and records as sticky) the device error if a kernel reported one.
  void poll_errors() override;
  CommContext& ctx() { return ctx_; }

 private:
  /// The constructor's work; on an exception the constructor releases what it made (release()) and rethrows.
  void setup();
  /// Frees everything the backend holds (the destructor; a constructor that failed part-way).
  void release();
  void init_nccl();
  /// Finishes a call on the nonblocking NCCL communicator (NOTE [nonblocking NCCL]): while the call reports
  /// ncclInProgress, waits for NCCL to finish it, and throws kPeerDead (naming the rank), kAborted or
  /// kTimeout when a peer dies or leaves, abort() is called or the deadline passes. Returns NCCL's result.
  ncclResult_t nccl_settle(ncclResult_t r, const char* what);
  /// nccl_settle(), then Error(kCuda) unless the result is ncclSuccess.
  void nccl_run(ncclResult_t r, const char* expr, const char* file, int line);
  /// Config::nccl == kLazy: creates the NCCL communicator at its first use (every rank reaches the same
  /// collective), refused while `s` is capturing. No-op once created, and in the other modes.
  void ensure_nccl(cudaStream_t s);
  /// Runs `r` on the kernel path select_cuda_path() picks for `algo` (recorded for last_path()).
  void launch(const Request& r, Algorithm algo, cudaStream_t s);
  /// The LL kernel of a small all-gather, reduce-scatter, all-to-all or broadcast (KernelPath::kLL).
  void launch_ll_gather(const Request& r, cudaStream_t s);
  /// The staged or zero-copy (`zc`) kernel of a reduce-scatter, all-gather, all-to-all or broadcast.
  void launch_direct(const Request& r, bool zc, uint64_t in_place, uint64_t out_place, cudaStream_t s);
  /// The all-reduce, all-gather or reduce-scatter over the topology's links (KernelPath::kScheduled).
  void launch_scheduled(const Request& r, cudaStream_t s);
  /// Where the topology leaves pairs unlinked and the GPUs reach each other: the plans of its schedules, the
  /// capabilities that send the collectives to them, the work area and the parity counter (setup()).
  void setup_schedules(size_t half);
  void launch_nccl(const Request& r, cudaStream_t s);
  /// One operation on `s` (NCCL or symcomm's kernels), without the ordering against the previous one: run()
  /// adds it, a group orders its runs itself.
  void enqueue(const Request& r, Algorithm algo, cudaStream_t s);
  Error device_error(uint64_t e) const;
  /// Whether [p, p+bytes) lies in the symmetric heap; `place` as CudaHeap::find's.
  bool symmetric(const void* p, size_t bytes, uint64_t* place = nullptr) const;
  /// Throws unless `p` is memory this device can access; while `stream` is capturing, pointers the driver
  /// cannot describe yet (allocations made inside the capture) pass unchecked.
  void check_pointer(const void* p, const char* what, cudaStream_t stream);

  CommContext& ctx_;
  int device_;
  int fewest_sms_ = 1;  ///< the smallest SM count of the ranks' GPUs (agreed at creation)
  Capabilities caps_;
  std::unique_ptr<CudaHeap> heap_;
  void* pad_ = nullptr;
  void* ll_ = nullptr;
  size_t ll128_offset_ = 0;      ///< where the LL128 lines start in the LL buffer (NOTE [LL128 lines])
  size_t ll128_slot_bytes_ = 0;  ///< bytes of LL128 lines per (parity, source rank)
  void* scratch_ = nullptr;
  void* ce_pad_ = nullptr;  ///< copy-engine signal words (NOTE [copy-engine sync])
  // ---- topology schedules (Config::topology_file; src/algos/cuda_scheduled.h) ----
  TopologySchedules schedules_;  ///< of ctx_.topology
  void* inbox_ = nullptr;        ///< the schedules' inboxes (symmetric heap), where the links are restricted
  char* inbox_peers_[device::kMaxDeviceRanks] = {};  ///< rank p's inbox as mapped here
  size_t inbox_half_bytes_ = 0;
  SchedulePlan plans_[3];        ///< this rank's plans, by schedule_index()
  char* sched_state_ = nullptr;  ///< device memory: the parity counter, then the reduce-scatter's work area
  size_t sched_state_bytes_ = 0;
  // ---- end of topology schedules ----
  std::unique_ptr<CopyEngine> ce_;  ///< copy-engine collectives; null when the ranks cannot use them
  device::DeviceState* state_ = nullptr;
  std::shared_ptr<ControlBlock> control_;
  device::HostControl* control_dev_ = nullptr;  ///< device pointer of control_->host
  device::DeviceComm comm_{};
  ncclComm_t nccl_ = nullptr;
  NcclInit nccl_mode_ = NcclInit::kOff;  ///< Config::nccl, or kOff where ranks may share a GPU
  bool nccl_tried_ = false;              ///< init_nccl() has run (kLazy: it runs once, at the first NCCL collective)
  std::mutex nccl_mu_;
  std::mutex ptr_mu_;
  std::vector<std::pair<const void*, bool>> ptr_cache_;  ///< recently checked pointers
  OpOrder order_;                                        ///< NOTE [one operation at a time]

  // ---- multi-tensor group execution (src/backends/cuda/cuda_group_cuda.cc) ----
 public:
  /// Runs of same-(kind, dtype, op, stream) all-reduces / reduce-scatters / all-gathers run as one kernel.
  void run_group(const std::vector<std::pair<Request, Algorithm>>& ops) override;
  /// Every peer's memory, and the paths that read or write it all: not where a topology restricts the links.
  bool full_peer_access() const override { return caps_.full_nvlink && !caps_.restricted_links; }
  bool can_reduce_scatter_gathered() const override { return full_peer_access(); }
  void bucket_copy(const BucketCopySegment* segs, size_t n, char* dst, size_t row_stride, int rows,
                   Stream stream) override {
    cuda_bucket_copy(segs, n, dst, row_stride, rows, device_, stream);
  }
  void reduce_scatter_gathered(const GatheredReduceScatter& g) override;
  std::shared_ptr<Work> run_group_async(const std::vector<std::pair<Request, Algorithm>>& ops) override;
  /// run_group_async(): it, too, returns once the group is enqueued.
  std::shared_ptr<Work> run_group_with_work(const std::vector<std::pair<Request, Algorithm>>& ops) override {
    return run_group_async(ops);
  }

 private:
  void launch_fused(const std::vector<std::pair<Request, Algorithm>>& ops, size_t begin, size_t end);
  /// A Work completing when `s` reaches this point (event + the error word); defined in cuda_backend_cuda.cc.
  std::shared_ptr<Work> record_work(cudaStream_t s);
  // ---- end of multi-tensor group execution ----
};

}  // namespace symcomm::detail
