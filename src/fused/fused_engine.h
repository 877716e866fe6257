#pragma once
// The few primitives the fused operations are written in (fused_ops.cc), implemented once per backend:
// fused_host.cc (CPU BLAS, everything in order on the calling thread) and fused_engine_cuda.cc (cuBLASLt, a
// side stream and events). Work goes to one of two lanes; on the CUDA backend the main lane is the caller's
// stream and the side lane the workspace's side stream (the same stream on the unfused path).

#include <cstddef>
#include <cstdint>
#include <memory>

#include "symcomm/fused.h"

namespace symcomm::detail::fused {

enum class Lane : uint8_t { kMain, kSide };

/// Row-major C[m×n] = alpha · A[m×k] · B[k×n] (+ beta · acc[m×n] when acc is set) with leading dimensions
/// (in elements), float32 accumulation. A and B have dtype `ab`; C and acc have dtype `c_dtype` (ab or
/// float32). acc may be C itself (same leading dimension) or another buffer; the sum is formed in float32
/// and rounded once to c_dtype.
struct Gemm {
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  int64_t m = 0, n = 0, k = 0;
  DataType ab = DataType::kBFloat16;
  DataType c_dtype = DataType::kBFloat16;
  const void* acc = nullptr;
  int64_t ldacc = 0;
  float alpha = 1.0f, beta = 0.0f;  ///< beta is used only with acc
};

/// Events of one operation: indices in [0, kMaxEvents).
inline constexpr int kMaxEvents = 2 * kMaxFusedChunks + 2;

class Engine {
 public:
  virtual ~Engine() = default;
  virtual void gemm(const Gemm& g, Lane lane) = 0;
  /// `height` rows of `width` bytes from src (pitch spitch) to dst (pitch dpitch).
  virtual void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                       Lane lane) = 0;
  /// dst[r·ld_dst + c] = dtype(scale · src[r·cols + c]) for r < rows, c < cols (float32 to the output).
  virtual void store_rows(const float* src, int64_t rows, int64_t cols, void* dst, int64_t ld_dst, DataType dtype,
                          float scale, Lane lane) = 0;
  /// Options for a collective issued on the lane.
  virtual CollOptions coll(Lane lane) const = 0;
  /// The side lane starts after everything issued so far on the main lane.
  virtual void fork() = 0;
  /// Records event `e` on lane `from` / makes lane `on` wait for it.
  virtual void signal(int e, Lane from) = 0;
  virtual void wait(int e, Lane on) = 0;
  /// The main lane continues after everything issued so far on the side lane.
  virtual void join() = 0;
  /// Temporary memory ordered with the main lane, released by finish().
  virtual void* temp(size_t bytes) = 0;
  /// Ends the operation (releases temporaries in stream order).
  virtual void finish() = 0;
};

/// Host engine (CPU BLAS). Throws kUnsupported in builds without BLAS.
std::unique_ptr<Engine> make_host_engine();
/// CUDA engine on `stream`; `workspace` provides the side stream and events when `pipelined`.
std::unique_ptr<Engine> make_cuda_engine(Communicator& comm, Stream stream, FusedWorkspace* workspace, bool pipelined);

}  // namespace symcomm::detail::fused
