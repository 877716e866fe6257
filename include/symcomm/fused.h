#pragma once
/// \file fused.h
/// Fused GEMM + communication for tensor parallelism (micro-pipelining): all-gather + matmul and
/// matmul + reduce-scatter.
///
/// Both operations are collective: every rank calls them in the same order, with the same shapes, dtypes,
/// dims, op and options (only the data pointers differ), like any other collective of the communicator.
/// Which path runs — the pipelined one or the unfused fallback (GEMM + one symcomm collective) — is a pure
/// function of those arguments, so all ranks always take the same path.
///
/// Tensors are dense and row-major: leading batch dimensions, then rows, then columns (the last dimension is
/// contiguous). A is [batch..., M, K]; the weights B are [K, N]. Inputs and outputs are bfloat16, float16 or
/// float32 (one dtype per call); GEMMs accumulate in float32.
///
/// CUDA backend: buffers are device memory; the operations are enqueued on CollOptions::stream and return
/// without waiting (no host synchronisation inside; CUDA-graph capture works). Of CollOptions only `stream`
/// is used: the pipelined path issues its collectives on the workspace's side stream with
/// Contention::kLow (copy engine where available), the unfused path on `stream` with kAuto (matmul +
/// reduce-scatter from three ranks with Algorithm::kDirect, see matmul_reduce_scatter). Host backend:
/// buffers are host memory; the operations return when done (reference implementation on a CPU BLAS).
/// Like any collective, these operations are ordered with the communicator's other collectives on `stream`.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "symcomm/communicator.h"

namespace symcomm {

/// A dense row-major tensor that symcomm reads or writes but does not own.
struct TensorRef {
  void* data = nullptr;
  DataType dtype = DataType::kBFloat16;
  std::vector<int64_t> shape;  ///< [batch..., rows, cols]; every extent >= 0

  /// Number of elements (1 for a 0-dim tensor).
  int64_t numel() const;
  int ndim() const { return static_cast<int>(shape.size()); }
};

/// Which implementation ran (test and benchmark hook).
enum class FusedPath : uint8_t {
  kUnfused,    ///< the whole collective, then the whole GEMM (or GEMM, then the collective)
  kPipelined,  ///< GEMM chunks overlapped with the communication of other chunks
};
std::string_view to_string(FusedPath path);

/// Memory the pipelined paths need: a buffer in the communicator's symmetric heap (so the collectives run
/// zero-copy) and, on the CUDA backend, a side stream and events. One workspace serves one operation at a
/// time in stream order (reuse it for consecutive operations on one stream).
class FusedWorkspace {
 public:
  /// Collective, like Communicator::alloc(): every rank calls it in the same order with the same `bytes`.
  /// Destroy it (again on every rank) before the communicator.
  static std::unique_ptr<FusedWorkspace> create(Communicator& comm, size_t bytes);
  ~FusedWorkspace();
  FusedWorkspace(const FusedWorkspace&) = delete;
  FusedWorkspace& operator=(const FusedWorkspace&) = delete;

  size_t bytes() const;
  Communicator& communicator() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit FusedWorkspace(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Options of a fused operation (the collective's stream comes in CollOptions).
struct FusedOptions {
  /// Workspace for the pipelined path; nullptr or too small (see *_workspace_bytes) means the unfused path.
  FusedWorkspace* workspace = nullptr;
  /// Number of pipeline chunks; 0 = automatic. Tests force small values to reach the pipelined path with
  /// small inputs. Clamped to what the shape allows (at most kMaxFusedChunks).
  int chunks = 0;
  /// GEMMs with fewer floating-point operations (2·M·N·K over all ranks' rows) than this take the unfused
  /// path: below it the pipeline's extra launches and smaller GEMMs cost more than the overlap saves.
  /// Negative: the measured threshold of the operation (kAutoPipelinedFlops*); tests set 0.
  double min_pipelined_flops = -1;
  /// Always take the unfused path (benchmark baseline, debugging).
  bool force_unfused = false;
  /// If not null, receives the path that ran.
  FusedPath* path_out = nullptr;
};

/// Upper bound of FusedOptions::chunks.
inline constexpr int kMaxFusedChunks = 16;

/// The automatic FusedOptions::min_pipelined_flops, from `symcomm-bench --extra fused` on 2 and 4 x H100
/// (bf16): all-gather + matmul pipelined gained at most 2% below 2^40 flops (M = N = K = 8192) at 4 ranks and
/// lost up to 2.4 x at M = 1024 (its GEMMs split in world - 1 chunks); at 2 ranks it was within ±4% of the
/// unfused path below 2^40 and 9% faster at 2^40. Matmul + reduce-scatter (two ranks) lost 5% at 1.2·10^11
/// flops (M = 1024, K = 4096, N = 14336) and gained 8-18% from 3.7·10^11.
inline constexpr double kAutoPipelinedFlopsAllGather = 0x1p40;
inline constexpr double kAutoPipelinedFlopsReduceScatter = 0x1p38;

/// all_gather_matmul: A = all-gather of `a_shard` along `gather_dim` (rank order), then out[i] = A · b[i].
///
/// a_shard: [batch..., M_local, K] (ndim >= 2); gather_dim in [-ndim, ndim - 1) and not the last dim (K, the
/// contraction dim); A has a_shard's shape with that extent multiplied by the world size.
/// b[i]: [K, N_i]; out[i]: A's shape with the last extent N_i. a_gathered: nullptr, or a tensor of A's shape
/// that receives A. All tensors have a_shard's dtype. On the pipelined path each rank multiplies its own
/// shard while the others' shards arrive. Throws Error(kInvalidArgument) before anything runs if shapes,
/// dtypes, dims or pointers are inconsistent.
void all_gather_matmul(Communicator& comm, const TensorRef& a_shard, std::span<const TensorRef> b, int gather_dim,
                       std::span<const TensorRef> out, const TensorRef* a_gathered = nullptr,
                       const CollOptions& coll = {}, const FusedOptions& fused = {});

/// matmul_reduce_scatter: out = reduce-scatter (op over ranks) of a · b along `scatter_dim`.
///
/// a: [batch..., M, K_local] (each rank holds a slice of the contraction dim); b: [K_local, N]; the product
/// P = a · b has a's shape with the last extent N; scatter_dim in [-ndim, ndim - 1) indexes a's dims (not
/// K) and its extent must be divisible by the world size; out has P's shape with that extent divided by the
/// world size and holds block `rank` of the reduction. op is kSum or kAvg. Each rank's partial product is
/// rounded to the dtype once, the partials are summed in float32 and the sum is rounded once (the accuracy
/// of a GEMM followed by symcomm's reduce-scatter). Where the communicator lacks full peer access
/// (Communicator::full_peer_access(): its reduce-scatter is NCCL's, which rounds every intermediate sum)
/// and more than two ranks take part, the partials stay in float32 and only the sum is rounded.
void matmul_reduce_scatter(Communicator& comm, const TensorRef& a, const TensorRef& b, ReduceOp op, int scatter_dim,
                           const TensorRef& out, const CollOptions& coll = {}, const FusedOptions& fused = {});

/// Workspace bytes the pipelined path of all_gather_matmul needs for these arguments (`chunks` as in
/// FusedOptions; `want_gathered`: a_gathered is passed); at least 1, since a path that stages nothing still
/// runs on the workspace's streams. FusedWorkspace::create(comm, this) enables the pipelined path.
size_t all_gather_matmul_workspace_bytes(int world_size, const TensorRef& a_shard, int gather_dim, bool want_gathered,
                                         int chunks = 0);
/// Workspace bytes the pipelined path of matmul_reduce_scatter needs for these arguments.
size_t matmul_reduce_scatter_workspace_bytes(int world_size, const TensorRef& a, const TensorRef& b, int scatter_dim,
                                             int chunks = 0);

}  // namespace symcomm
