#pragma once
// Helpers of the GPU tests: exact small-integer inputs for every dtype, expected values computed on the host
// independently of the kernels, guarded and poisoned device buffers.

#include <cuda_runtime.h>  // also the typed cudaMalloc(T**) overloads
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/test_memory.h"
#include "symcomm/communicator.h"
#include "symcomm/memory.h"

namespace symcomm {
/// gtest prints CudaMemoryUse in its failure messages through this (found by argument-dependent lookup).
inline void PrintTo(const CudaMemoryUse& use, std::ostream* os) { *os << to_string(use); }
}  // namespace symcomm

namespace symcomm::gputest {

inline constexpr DataType kAllDtypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                          DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                          DataType::kInt32,    DataType::kInt64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
/// 0, 1, odd, prime, large (several staging rounds with the test config's 1 MB scratch).
inline constexpr size_t kCounts[] = {0, 1, 7, 1031, 300007};
/// Bytes of guard (0xA5) around every buffer and the output poison byte.
inline constexpr size_t kGuard = 256;
inline constexpr uint8_t kGuardByte = 0xA5, kPoisonByte = 0xCD;

#define GPU_CHECK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

/// Small integer input of element i on rank r: exact in every dtype, and its sums/products over a few
/// ranks too. Signed types get negatives; products use 1..2.
int64_t input_value(DataType dt, ReduceOp op, uint64_t seed, int rank, size_t i);
/// Host-side expected reduction of the inputs of element i over `world` ranks, in the dtype's semantics
/// (integers wrap; avg truncates for integers).
void expected_reduce(DataType dt, ReduceOp op, uint64_t seed, int world, size_t i, void* dst);
/// Writes integer v in dtype dt.
void encode(DataType dt, int64_t v, void* dst);
/// Host array of count elements: input_value(dt, op, seed, rank, first + i).
std::vector<uint8_t> make_input(DataType dt, ReduceOp op, uint64_t seed, int rank, size_t first, size_t count);

/// Communicator options of every GPU test: the CUDA backend on the rank's local GPU.
inline CommOptions cuda_comm_options() {
  CommOptions o;
  o.backend = BackendKind::kCuda;
  return o;
}

/// cuda_comm_options() with `config` (the harness's) and no NCCL: for tests that count symcomm's own memory
/// (NCCL's is not in it) or need no fallback.
inline CommOptions cuda_comm_options_without_nccl(const Config& config) {
  CommOptions o = cuda_comm_options();
  o.config = config;
  o.config->nccl = NcclInit::kOff;
  return o;
}

enum class BufKind { kDevice, kSymmetric };
inline const char* name(BufKind k) { return k == BufKind::kDevice ? "device" : "symmetric"; }

/// A device region with guard bytes around the part handed out.
class GuardedBuffer {
 public:
  GuardedBuffer(Communicator& comm, BufKind kind, size_t capacity);
  ~GuardedBuffer();
  /// Fills everything with the guard byte and [offset, offset+bytes) of the payload with `fill`; returns
  /// the payload pointer (kGuard + offset into the region).
  char* prepare(size_t offset, size_t bytes, uint8_t fill);
  /// Copies [ptr, ptr+bytes) to the host and checks both guards around it.
  std::vector<uint8_t> read(const char* ptr, size_t bytes, bool* guards_ok);
  char* base() const { return base_; }

 private:
  Communicator& comm_;
  BufKind kind_;
  size_t capacity_;
  char* base_ = nullptr;
};

/// Device fill of count elements with input_value(dt, op, seed, rank, i) (test_kernels.cu), on a stream.
void fill_input_async(void* dst, DataType dt, ReduceOp op, uint64_t seed, int rank, size_t count, cudaStream_t s);

/// A kernel storing one byte at p + offset (test_kernels.cu): the sanitizer probe's out-of-bounds store.
void store_byte_async(void* p, size_t offset, cudaStream_t s);
/// The probes of synccheck, racecheck and initcheck (test_kernels.cu): a barrier reached by one lane of a warp,
/// two warps storing one shared word unordered, a read of device memory nothing wrote (out[1]). `out`: 64 ints.
enum class SanitizerProbe { kLoneBarrier, kSharedRace, kUninitializedRead };
void sanitizer_probe_async(SanitizerProbe probe, int* out, cudaStream_t s);

/// After a failure the context must still run kernels and copies (gtest assertions).
void expect_gpu_usable();

/// Elements of the float32 device array `dev` (count elements) that differ from the float32 sum over `world`
/// ranks of input_value(kFloat32, kSum, seed, rank, first + i); every element on a failed copy.
size_t count_wrong_sum(const float* dev, size_t count, uint64_t seed, int world, size_t first = 0);

/// The CUDA backend's memory for the bodies of tests/backend_cases/: cudaMalloc'd buffers, copies after a device
/// synchronisation (the communicator's calls run on the caller's stream, which may be any).
class CudaMemory final : public testing::TestMemory {
 public:
  const char* name() const override { return "cuda"; }
  CommOptions options() const override { return cuda_comm_options(); }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    return p;
  }
  void release(void* p) override { check(cudaFree(p), "cudaFree"); }
  // A copy from pageable host memory may return before its DMA lands; the collective that reads the data runs on
  // another stream (or a peer reads it), so the copy is waited for.
  void write(void* dst, const void* src, size_t bytes) override {
    sync();
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
    sync();
  }
  void read(void* dst, const void* src, size_t bytes) override {
    sync();
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
  }
  void set(void* dst, uint8_t byte, size_t bytes) override {
    sync();
    check(cudaMemset(dst, byte, bytes), "cudaMemset");
    sync();
  }
  void sync() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

 private:
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
};

/// True where the test ranks share GPUs (SYMCOMM_SHARED_GPU=1, testing::gpu_test_world()): NCCL, which refuses
/// two ranks on one GPU, is never created there (Config::shared_gpu).
bool ranks_share_gpus();
/// The GPU a communicator of local rank `local_rank` uses by default (its local rank, modulo the GPUs where
/// ranks share them).
int rank_device(int local_rank);

/// Ends a test that needs NCCL (as a skip) where the ranks share GPUs.
#define SKIP_WITHOUT_NCCL()                                                                              \
  do {                                                                                                   \
    if (::symcomm::gputest::ranks_share_gpus()) {                                                        \
      GTEST_SKIP() << "needs NCCL, which is not created where ranks share a GPU (SYMCOMM_SHARED_GPU=1)"; \
    }                                                                                                    \
  } while (0)

}  // namespace symcomm::gputest
