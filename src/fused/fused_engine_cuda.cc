// CUDA engine of the fused operations: GEMMs through cuBLASLt on the caller's stream (main lane), the
// collectives of the pipelined path on the workspace's side stream (side lane), events between the two,
// and no host synchronisation anywhere (so the operations can be captured into a CUDA graph).

#include <vector>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/memory_ledger.h"
#include "fused/cublaslt_gemm_cuda.h"
#include "fused/fused_engine.h"
#include "fused/fused_kernels.h"
#include "fused/fused_workspace.h"

namespace symcomm::detail::fused {
namespace {

class CudaLanes final : public LaneResources {
 public:
  explicit CudaLanes(int device) : device_(device) {
    DeviceScope on_device(device);
    SYMCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    for (auto& e : events) SYMCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~CudaLanes() override {
    // The side stream's last work is joined into a user stream; destroying a stream or event with work
    // pending is allowed (the resources go once that work is done).
    for (cudaEvent_t e : events) {
      if (e) cudaEventDestroy(e);
    }
    if (side) cudaStreamDestroy(side);
  }
  int device() const { return device_; }

  cudaStream_t side = nullptr;
  cudaEvent_t events[kMaxEvents + 2] = {};  ///< per-operation events, then fork and join

 private:
  int device_;
};

class CudaEngine final : public Engine {
 public:
  CudaEngine(Communicator& comm, cudaStream_t main, CudaLanes* lanes)
      : device_(comm.device()), on_device_(device_), main_(main), lanes_(lanes) {}
  ~CudaEngine() override { release(); }

  void gemm(const Gemm& g, Lane lane) override { cublaslt_gemm(g, device_, stream(lane)); }

  void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
               Lane lane) override {
    if (width == 0 || height == 0) return;
    SYMCOMM_CUDA_CHECK(
        cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, stream(lane)));
  }

  void store_rows(const float* src, int64_t rows, int64_t cols, void* dst, int64_t ld_dst, DataType dtype, float scale,
                  Lane lane) override {
    launch_store_rows(
        {.src = src, .rows = rows, .cols = cols, .dst = dst, .ld_dst = ld_dst, .dtype = dtype, .scale = scale},
        stream(lane));
  }

  // The side lane's collectives leave the SMs to the GEMMs running beside them (copy engine when available).
  CollOptions coll(Lane lane) const override {
    const bool side = lanes_ && lane == Lane::kSide;
    return CollOptions{.stream = reinterpret_cast<Stream>(stream(lane)),
                       .contention = side ? Contention::kLow : Contention::kAuto};
  }

  void fork() override {
    if (!lanes_) return;
    SYMCOMM_CUDA_CHECK(cudaEventRecord(lanes_->events[kMaxEvents], main_));
    SYMCOMM_CUDA_CHECK(cudaStreamWaitEvent(lanes_->side, lanes_->events[kMaxEvents], 0));
  }
  void signal(int e, Lane from) override {
    if (!lanes_) return;
    SYMCOMM_CHECK(e >= 0 && e < kMaxEvents, kInternal, "fused event {} out of range", e);
    SYMCOMM_CUDA_CHECK(cudaEventRecord(lanes_->events[e], stream(from)));
  }
  void wait(int e, Lane on) override {
    if (!lanes_) return;
    SYMCOMM_CHECK(e >= 0 && e < kMaxEvents, kInternal, "fused event {} out of range", e);
    SYMCOMM_CUDA_CHECK(cudaStreamWaitEvent(stream(on), lanes_->events[e], 0));
  }
  void join() override {
    if (!lanes_) return;
    SYMCOMM_CUDA_CHECK(cudaEventRecord(lanes_->events[kMaxEvents + 1], lanes_->side));
    SYMCOMM_CUDA_CHECK(cudaStreamWaitEvent(main_, lanes_->events[kMaxEvents + 1], 0));
  }

  // Inside graph capture: stream-ordered (cudaMallocAsync), so the unfused path can be captured. Eager:
  // cudaMalloc, because a stream-ordered allocation cannot be described by cudaPointerGetAttributes before
  // its stream reaches it and the collectives check their pointers (freed with cudaFree, which waits).
  void* temp(size_t bytes) override {
    void* p = nullptr;
    const bool async = stream_capturing(main_);
    if (async) {
      SYMCOMM_CUDA_CHECK(cudaMallocAsync(&p, bytes, main_));
    } else {
      SYMCOMM_CUDA_CHECK(cudaMalloc(&p, bytes));
    }
    ledger_add(device_, MemoryKind::kDevice, bytes);
    temps_.push_back({p, bytes, async});
    return p;
  }
  void finish() override { release(); }

 private:
  cudaStream_t stream(Lane lane) const { return lanes_ && lane == Lane::kSide ? lanes_->side : main_; }

  int device_;
  DeviceScope on_device_;  ///< the engine lives for one fused operation (NOTE [caller's device])
  cudaStream_t main_;
  CudaLanes* lanes_;  ///< null: unfused, one stream
  struct Temp {
    void* ptr;
    size_t bytes;
    bool async;
  };
  void release() {
    std::vector<Temp> temps;
    temps.swap(temps_);
    for (const Temp& t : temps) {
      if (t.async) {
        cudaFreeAsync(t.ptr, main_);
      } else {
        cudaFree(t.ptr);
      }
      ledger_remove(device_, MemoryKind::kDevice, t.bytes);
    }
  }
  std::vector<Temp> temps_;
};

}  // namespace

std::unique_ptr<LaneResources> make_cuda_lanes(Communicator& comm) {
  return std::make_unique<CudaLanes>(comm.device());
}

std::unique_ptr<Engine> make_cuda_engine(Communicator& comm, Stream stream, FusedWorkspace* workspace, bool pipelined) {
  CudaLanes* lanes = nullptr;
  if (pipelined) {
    SYMCOMM_CHECK(workspace != nullptr, kInternal, "the pipelined path needs a workspace");
    lanes = dynamic_cast<CudaLanes*>(workspace->impl().lanes.get());
    SYMCOMM_CHECK(lanes != nullptr && lanes->device() == comm.device(), kInternal,
                  "the fused workspace has no side stream on device {}", comm.device());
  }
  return std::make_unique<CudaEngine>(comm, reinterpret_cast<cudaStream_t>(stream), lanes);
}

}  // namespace symcomm::detail::fused
