#include "backends/cuda/cuda_copy_engine_cuda.h"

#include <algorithm>
#include <chrono>

#include "algos/cuda_local_reduce.h"
#include "backends/backend.h"
#include "backends/cuda/cuda_backend_cuda.h"
#include "backends/cuda/cuda_heap_cuda.h"
#include "base/check.h"
#include "base/cuda_check.h"
#include "base/debug_fault.h"
#include "base/driver_api_cuda.h"
#include "base/logging.h"
#include "base/memory_ledger.h"

namespace symcomm::detail {
namespace {

static_assert(kCeMaxRanks == device::kMaxDeviceRanks);

constexpr int kMax = device::kMaxDeviceRanks;
// Word offsets in a pad: arrive and depart slots, the gave-up words (NOTE [copy-engine stall]) and the
// abandon words (NOTE [copy-engine late peer]).
constexpr size_t kArrive = 0, kDepart = kMax, kGaveUp = 2 * kMax, kAbandon = 3 * kMax;
// An abandon word's value once its peer gave up: the top bit, which a GEQ-0 wait reads as negative.
constexpr uint32_t kAbandoned = 0x80000000u;
// Local stage per lane (reduce-scatter chunks of every peer) and the chunk size: 8 MB chunks keep the copy
// engine busy for ~20 us per chunk at 390 GB/s, long enough to hide the reduction of the previous one.
constexpr size_t kStagePerLane = 16 << 20;
// HostControl::ce_active values: 0 idle, kMarked seen by the watchdog, else the running op's header | kBusy.
constexpr uint32_t kMarked = 1;
constexpr uint32_t kBusy = 0x80000000u;
constexpr size_t kChunkBytes = 8 << 20;
// Reduction kernels of the copy-engine reduce-scatter: one block per this many bytes, at most kMaxReduceBlocks
// (a few SMs; the rest stay with the compute running beside).
constexpr size_t kReduceBytesPerBlock = 512 << 10;
constexpr int kMaxReduceBlocks = 16;
// The watchdog's readings for an early mismatch: from this long into an op, this often (NOTE [copy-engine
// watchdog]). Longer than a scheduling time slice of a GPU that ranks share, short against any deadline.
constexpr int64_t kEarlyAfterNs = 20'000'000, kEarlyEveryNs = 20'000'000;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Every write is preceded by a memory fence scoped to the stream (the v2 API's only behaviour).
CUstreamBatchMemOpParams write_op(const uint32_t* addr, uint32_t value) {
  CUstreamBatchMemOpParams op{};
  op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = reinterpret_cast<CUdeviceptr>(addr);
  op.writeValue.value = value;
  op.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;  // NO_MEMORY_BARRIER is not supported by the v2 API
  return op;
}

CUstreamBatchMemOpParams wait_op(const uint32_t* addr, uint32_t value, unsigned flags = CU_STREAM_WAIT_VALUE_EQ) {
  CUstreamBatchMemOpParams op{};
  op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  op.waitValue.address = reinterpret_cast<CUdeviceptr>(addr);
  op.waitValue.value = value;
  op.waitValue.flags = flags;
  return op;
}

// Passes while the word's top bit is clear: GEQ compares (int32_t)(*addr - value) >= 0.
CUstreamBatchMemOpParams wait_top_bit_clear(const uint32_t* addr) { return wait_op(addr, 0, CU_STREAM_WAIT_VALUE_GEQ); }

// The error word for a stall reading (at the deadline or early): kMismatch, kAbandoned or kTimeout naming the peer.
uint64_t stall_error(const CeStall& stall, uint32_t header) {
  using device::DeviceError;
  const DeviceError code = stall.kind == CeStall::kMismatch    ? DeviceError::kMismatch
                           : stall.kind == CeStall::kAbandoned ? DeviceError::kAbandoned
                                                               : DeviceError::kTimeout;
  return device::pack_error(code, stall.peer, header);
}

void batch(cudaStream_t s, std::vector<CUstreamBatchMemOpParams>& ops) {
  if (ops.empty()) return;
  CUresult res =
      driver().stream_batch_mem_op(reinterpret_cast<CUstream>(s), static_cast<unsigned>(ops.size()), ops.data(), 0);
  SYMCOMM_CHECK(res == CUDA_SUCCESS, kCuda, "cuStreamBatchMemOp failed: {}", driver_error_string(res));
}

}  // namespace

CopyEngine::CopyEngine(CommContext& ctx, int device, std::shared_ptr<ControlBlock> control,
                       device::HostControl* control_dev, CudaHeap& heap, const std::vector<uint32_t*>& pads,
                       const std::vector<char*>& scratch, size_t scratch_bytes)
    : ctx_(ctx),
      device_(device),
      control_(std::move(control)),
      active_dev_(&control_dev->ce_active),
      heap_(heap),
      pads_(pads),
      scratch_(scratch),
      scratch_bytes_(scratch_bytes) {
  // Lanes get the highest stream priority: the block scheduler then dispatches the small reduction kernels
  // (and any copy the driver runs as a kernel) ahead of the pending blocks of compute queued on
  // normal-priority streams, instead of after the whole compute kernel.
  // A failure part-way frees what was made (no destructor runs for an object whose constructor threw).
  try {
    int least = 0, greatest = 0;
    SYMCOMM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    for (auto& l : lanes_) SYMCOMM_CUDA_CHECK(cudaStreamCreateWithPriority(&l, cudaStreamNonBlocking, greatest));
    for (auto& e : join_) SYMCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SYMCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    SYMCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&release_stream_, cudaStreamNonBlocking));
    const size_t stage_bytes = kLanes * kStagePerLane;
    SYMCOMM_CHECK(!debug_fault("ce_setup", ctx_.ranks.rank), kCuda,
                  "rank {}: cannot allocate the copy engine's {}-byte staging buffer (SYMCOMM_DEBUG_FAULT)",
                  ctx_.ranks.rank, stage_bytes);
    SYMCOMM_CUDA_CHECK(cudaMalloc(&stage_, stage_bytes));
    stage_bytes_ = stage_bytes;
    ledger_add(device_, MemoryKind::kDevice, stage_bytes_);
    thread_ = std::thread([this] { watchdog(); });
  } catch (...) {
    release();
    throw;
  }
}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  release();
}

void CopyEngine::release() {
  for (auto& l : lanes_) {
    if (l == nullptr) continue;
    cudaStreamSynchronize(l);
    cudaStreamDestroy(l);
    l = nullptr;
  }
  if (release_stream_ != nullptr) {
    cudaStreamSynchronize(release_stream_);
    cudaStreamDestroy(release_stream_);
    release_stream_ = nullptr;
  }
  for (auto& e : join_) {
    if (e != nullptr) cudaEventDestroy(e);
    e = nullptr;
  }
  if (fork_ != nullptr) cudaEventDestroy(fork_);
  fork_ = nullptr;
  if (stage_ != nullptr) {
    cudaFree(stage_);
    ledger_remove(device_, MemoryKind::kDevice, stage_bytes_);
  }
  stage_ = nullptr;
  stage_bytes_ = 0;
}

void* CopyEngine::resolve(const CeRef& ref, const Request& r) {
  const int me = ctx_.ranks.rank;
  switch (ref.space) {
    case CeSpace::kIn:
    case CeSpace::kOut: {
      const void* base = ref.space == CeSpace::kIn ? r.in : r.out;
      char* p = static_cast<char*>(ref.rank == me ? const_cast<void*>(base) : heap_.peer_ptr(base, ref.rank));
      SYMCOMM_CHECK(p, kInternal, "copy-engine plan addresses rank {}'s non-symmetric buffer", ref.rank);
      return p + ref.offset;
    }
    case CeSpace::kScratch: return scratch_[ref.rank] + ref.offset;
    case CeSpace::kStage: return stage_ + ref.rank * kStagePerLane + ref.offset;
  }
  return nullptr;
}

void CopyEngine::barrier(cudaStream_t s, bool arrive, uint32_t header, bool begin, bool end) {
  const int me = ctx_.ranks.rank, n = ctx_.ranks.world_size;
  const size_t slot = arrive ? kArrive : kDepart;
  ops_.clear();
  if (begin) ops_.push_back(write_op(active_dev_, header | kBusy));
  for (int p = 0; p < n; ++p) {
    if (p != me) ops_.push_back(write_op(pads_[p] + slot + me, header));  // the fence orders it after our writes
  }
  for (int p = 0; p < n; ++p) {
    if (p != me) ops_.push_back(wait_op(pads_[me] + slot + p, header));
  }
  // The op completes only if no peer has abandoned it (NOTE [copy-engine late peer]).
  for (int p = 0; p < n && end; ++p) {
    if (p != me) ops_.push_back(wait_top_bit_clear(pads_[me] + kAbandon + p));
  }
  // The op's end is visible before the reset: a watchdog reading that still sees the op in flight afterwards
  // was taken before the reset (NOTE [copy-engine early mismatch] in src/algos/ce_plan.cc).
  if (end) ops_.push_back(write_op(active_dev_, 0));
  for (int p = 0; p < n; ++p) {
    if (p != me) ops_.push_back(write_op(pads_[me] + slot + p, 0));
  }
  batch(s, ops_);
}

void CopyEngine::run(const Request& r, cudaStream_t s) {
  const int n = ctx_.ranks.world_size, me = ctx_.ranks.rank;
  const size_t es = r.elem_size(), B = r.count * es;
  const size_t in_bytes = r.in_count(n) * es, out_bytes = r.out_count(n) * es;
  const bool reads_in = r.kind != Collective::kBroadcast || r.root == me;
  auto symmetric = [&](const void* p, size_t bytes, uint64_t* place) {
    char* base = nullptr;
    size_t stride = 0;
    return p != nullptr && bytes > 0 && heap_.find(p, bytes, &base, &stride, place);
  };
  const auto* in_c = static_cast<const char*>(r.in);
  const auto* out_c = static_cast<const char*>(r.out);
  CePlanInput in;
  in.kind = r.kind;
  in.dtype = r.dtype;
  in.op = r.op;
  in.count = r.count;
  in.root = r.root;
  in.world_size = n;
  in.rank = me;
  in.in_symmetric = reads_in && symmetric(r.in, in_bytes, &in.in_place);
  in.out_symmetric = symmetric(r.out, out_bytes, &in.out_place);
  in.in_is_out = reads_in && r.in == r.out;
  in.in_overlaps_out = reads_in && in_c < out_c + out_bytes && out_c < in_c + in_bytes;
  in.in_is_own_block = (r.kind == Collective::kAllGather && in_c == out_c + me * B) ||
                       (r.kind == Collective::kReduceScatter && out_c == in_c + me * B);
  in.scratch_bytes = scratch_bytes_;
  in.stage_bytes = stage_bytes_;
  in.lanes = kLanes;
  in.chunk_bytes = kChunkBytes;
  in.instance = stream_capturing(s) ? 0 : eager_ops_ + 1;
  const CePlan plan = make_ce_plan(in);
  SYMCOMM_CHECK(plan.stage_bytes_per_lane <= kStagePerLane && plan.lanes <= kLanes, kInternal,
                "copy-engine plan needs more stage than allocated");

  auto exec = [&](const CeOp& op, cudaStream_t st) {
    void* dst = resolve(op.dst, r);
    if (op.kind == CeOp::kCopy) {
      SYMCOMM_CUDA_CHECK(cudaMemcpyAsync(dst, resolve(op.srcs[0], r), op.bytes, cudaMemcpyDeviceToDevice, st));
      return;
    }
    cuda::LocalReduceParams p{};
    p.dst = dst;
    for (int i = 0; i < op.nsrc; ++i) p.srcs[i] = resolve(op.srcs[i], r);
    p.nsrc = op.nsrc;
    p.count = op.bytes / es;
    p.dtype = r.dtype;
    p.op = r.op;
    const int blocks = static_cast<int>(
        std::clamp<size_t>((op.bytes + kReduceBytesPerBlock - 1) / kReduceBytesPerBlock, 1, kMaxReduceBlocks));
    cuda::launch_local_reduce(p, blocks, st);
  };

  if (in.instance != 0) eager_ops_ = in.instance;
  {
    std::lock_guard lock(mu_);
    if (!started_) {
      started_ = true;
      cv_.notify_all();
    }
  }
  for (size_t k = 0; k < plan.rounds.size(); ++k) {
    const CeRound& round = plan.rounds[k];
    for (const CeOp& op : round.pre) exec(op, s);
    barrier(s, true, plan.header, k == 0, false);
    int used = 0, only = -1;
    for (int l = 0; l < plan.lanes; ++l) {
      if (!round.lanes[l].empty()) {
        ++used;
        only = l;
      }
    }
    if (used == 1) {
      for (const CeOp& op : round.lanes[only]) exec(op, s);  // nothing to overlap: stay on the caller's stream
    } else if (used > 1) {
      SYMCOMM_CUDA_CHECK(cudaEventRecord(fork_, s));
      for (int l = 0; l < plan.lanes; ++l) {
        if (round.lanes[l].empty()) continue;
        SYMCOMM_CUDA_CHECK(cudaStreamWaitEvent(lanes_[l], fork_, 0));
        for (const CeOp& op : round.lanes[l]) exec(op, lanes_[l]);
        SYMCOMM_CUDA_CHECK(cudaEventRecord(join_[l], lanes_[l]));
        SYMCOMM_CUDA_CHECK(cudaStreamWaitEvent(s, join_[l], 0));
      }
    }
    barrier(s, false, plan.header, false, k + 1 == plan.rounds.size());
  }
}

// ---- watchdog ------------------------------------------------------------------------------------------

void CopyEngine::watchdog() {
  cudaSetDevice(device_);
  // The watchdog may touch CUDA while the application captures a graph in global mode on another thread;
  // in relaxed mode its calls neither fail nor invalidate that capture.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  const int64_t timeout_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(ctx_.config.timeout).count();
  uint32_t header = 0;          // of the op in flight, once read
  int64_t marked_ns = 0;        // when the watchdog last wrote kMarked
  int64_t next_reading_ns = 0;  // of the pad, for an early mismatch
  int suspect = -1;             // the peer the last reading of this op named
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return started_ || stop_; });
  while (!stop_) {
    uint32_t v = 0;
    bool failed = false;
    {
      std::lock_guard c(control_->mu);
      device::HostControl* h = control_->host;
      if (h == nullptr) break;
      v = __atomic_load_n(&h->ce_active, __ATOMIC_ACQUIRE);
      if (v != 0 && v != kMarked) {
        // A new op started (or the same one was never marked): remember it, mark it.
        header = v & ~kBusy;
        uint32_t expected = v;
        if (__atomic_compare_exchange_n(&h->ce_active, &expected, kMarked, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
          marked_ns = now_ns();
          next_reading_ns = marked_ns + kEarlyAfterNs;
          suspect = -1;
        }
      }
      failed = v != 0 && (h->aborted || h->dead_mask || h->left_mask || h->error);  // every peer takes part
    }
    const bool timed_out = v == kMarked && now_ns() - marked_ns > timeout_ns;
    if (v != 0 && (failed || timed_out)) {
      lock.unlock();
      fail_and_release(header, timed_out);
      lock.lock();
    } else if (v == kMarked && now_ns() >= next_reading_ns) {
      lock.unlock();
      const CeStall early = early_reading(header);
      if (early.peer >= 0 && early.peer == suspect) fail_and_release(header, false, stall_error(early, header));
      lock.lock();
      suspect = early.peer;
      next_reading_ns = now_ns() + kEarlyEveryNs;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(v == 0 ? 5 : 1));
  }
}

uint64_t CopyEngine::classify(uint32_t header, bool timed_out) {
  using device::DeviceError;
  const int me = ctx_.ranks.rank, n = ctx_.ranks.world_size;
  {
    std::lock_guard c(control_->mu);
    const device::HostControl* h = control_->host;
    if (h == nullptr || h->aborted) return device::pack_error(DeviceError::kAborted, -1, 0);
    if (const uint64_t lost = h->dead_mask ? h->dead_mask : h->left_mask) {
      return device::pack_error(DeviceError::kPeerDead, __builtin_ctzll(lost), 0);
    }
  }
  if (!timed_out) return 0;
  uint32_t words[kPadWords] = {};
  if (!read_pad(words)) return device::pack_error(DeviceError::kTimeout, -1, 0);
  return stall_error(classify_ce_stall(words + kArrive, words + kDepart, words + kGaveUp, n, me, header), header);
}

bool CopyEngine::read_pad(uint32_t* words) {
  static_assert(kPadWords == 4 * kMax);
  if (cudaMemcpyAsync(words, pads_[ctx_.ranks.rank], kPadBytes, cudaMemcpyDeviceToHost, release_stream_) !=
          cudaSuccess ||
      cudaStreamSynchronize(release_stream_) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

CeStall CopyEngine::early_reading(uint32_t header) {
  uint32_t words[kPadWords] = {};
  if (!read_pad(words)) return {};
  {
    // Only the watchdog writes kMarked, so this is still the op it marked, and the reading was taken before
    // the op's last batch cleared the word and then reset the slots (barrier()).
    std::lock_guard c(control_->mu);
    const device::HostControl* h = control_->host;
    if (h == nullptr || __atomic_load_n(&h->ce_active, __ATOMIC_ACQUIRE) != kMarked) return {};
  }
  const int n = ctx_.ranks.world_size, me = ctx_.ranks.rank;
  const CeStall proven = definite_ce_mismatch(words + kArrive, words + kDepart, words + kGaveUp, n, me, header);
  if (proven.peer >= 0) return proven;
  return abandoned_ce_op(words + kArrive, words + kDepart, words + kGaveUp, n, me, header);
}

void CopyEngine::fail_and_release(uint32_t header, bool timed_out, uint64_t known) {
  bool have_error = false;
  {
    std::lock_guard c(control_->mu);
    have_error = control_->host == nullptr || control_->host->error != 0;
  }
  if (!have_error) {
    uint64_t e = known ? known : classify(header, timed_out);
    if (e != 0) {
      std::lock_guard c(control_->mu);
      if (control_->host) {
        uint64_t expected = 0;
        __atomic_compare_exchange_n(&control_->host->error, &expected, e, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      }
      SYMCOMM_LOG_WARN("rank {}: copy-engine collective failed (error word {:#x}); releasing its waits",
                       ctx_.ranks.rank, e);
    }
  }
  const int me = ctx_.ranks.rank, n = ctx_.ranks.world_size;
  std::vector<CUstreamBatchMemOpParams> ops;
  // The first time, tell the peers on which op this rank gives up, before its queued ops can write their
  // arrivals there (NOTE [copy-engine stall]), and that no op of theirs may complete with this rank any more
  // (NOTE [copy-engine late peer]). Both land before the releasing writes below, which the fences order.
  for (int p = 0; p < n && !gave_up_; ++p) {
    if (p == me) continue;
    ops.push_back(write_op(pads_[p] + kGaveUp + me, header));
    ops.push_back(write_op(pads_[p] + kAbandon + me, kAbandoned));
  }
  gave_up_ = true;
  // Release every wait of this rank's own op, the abandon words that peers which gave up wrote here included.
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    ops.push_back(write_op(pads_[me] + kArrive + p, header));
    ops.push_back(write_op(pads_[me] + kDepart + p, header));
    ops.push_back(write_op(pads_[me] + kAbandon + p, 0));
  }
  try {
    batch(release_stream_, ops);
  } catch (const Error& e) {
    SYMCOMM_LOG_ERROR("rank {}: cannot release copy-engine waits: {}", me, e.what());
  }
}

}  // namespace symcomm::detail
