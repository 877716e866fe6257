#pragma once
// Planning of the fused operations: argument validation, the row/column decomposition that both backends
// execute, workspace sizes and select_fused_path(), a pure function of arguments every rank passes
// identically (so all ranks take the same path). Tested without ranks in tests/unit/fused_plan_test.cc.
//
// NOTE [fused row layout] A [batch..., M, K] tensor with a gather/scatter dim d < ndim-1 is viewed as
// [outer, n, m, K]: outer = product of the extents before d, n = world size, m = rows per rank per outer
// index (the extent of d per rank times the extents between d and K). Rank p's shard is the rows
// (o·n + p)·m + i, i < m, of the full tensor, and it is contiguous in the shard as o·m + i. So a GEMM on
// rank p's rows with outer index o writes rows (o·n + p)·m ... of the output (all-gather + matmul), and a
// GEMM on those rows of A produces rank p's block of the reduce-scatter (matmul + reduce-scatter).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "symcomm/fused.h"

namespace symcomm::detail::fused {

/// Alignment of every sub-buffer carved out of a workspace.
inline constexpr size_t kWorkspaceAlign = 256;

struct RowSplit {
  int64_t outer = 1;  ///< product of the extents before the gather/scatter dim
  int64_t m = 0;      ///< rows per rank per outer index
  int64_t k = 0;      ///< last extent of A (the contraction dim)
  int64_t local_rows() const { return outer * m; }
};

/// A slice of one rank's shard: outer indices [o0, o1) × rows [r0, r1). Either the slice spans whole rows
/// (r0 = 0, r1 = m) or the shard has one outer index, so the slice is contiguous in the shard.
struct RowChunk {
  int64_t o0 = 0, o1 = 1, r0 = 0, r1 = 0;
  int64_t rows() const { return r1 - r0; }
  int64_t elems(int64_t k) const { return (o1 - o0) * (r1 - r0) * k; }
  int64_t offset(const RowSplit& s) const { return (o0 * s.m + r0) * s.k; }  ///< in elements, in the shard
};

/// Columns [c0, c1) of the output.
struct ColChunk {
  int64_t c0 = 0, c1 = 0;
  int64_t width() const { return c1 - c0; }
};

struct AgPlan {
  FusedPath path = FusedPath::kUnfused;
  RowSplit rows;
  std::vector<int64_t> n;        ///< N_i of every B
  std::vector<RowChunk> chunks;  ///< one per all-gather; the unfused path has one covering the shard
  bool direct = false;           ///< all-gather straight into a_gathered (no staging, no copies)
  size_t staging_bytes = 0;      ///< world × shard bytes unless direct
  bool empty = false;            ///< nothing to compute or move
};

/// How matmul_reduce_scatter runs (NOTE [fused pipelines]).
enum class RsMode : uint8_t {
  kUnfused,   ///< one GEMM of every rank's rows in the output dtype, one reduce-scatter into `out` (float32
              ///< accumulation inside, each partial rounded once: the accuracy bar); from three ranks it is
              ///< forced onto the direct algorithm (symcomm's kernel), never NCCL's ring
  kFloat32,   ///< three ranks or more without full peer access: one float32 GEMM, one float32 reduce-scatter,
              ///< then rounding into `out` (NCCL's ring in the output dtype would round every intermediate sum)
  kExchange,  ///< two ranks, pipelined: the peer's rows first, swapped chunk by chunk by the copy engine, then
              ///< this rank's rows with the received partial added in the GEMM's epilogue
};

struct RsPlan {
  FusedPath path = FusedPath::kUnfused;
  RsMode mode = RsMode::kUnfused;
  RowSplit rows;                 ///< m: rows per rank (after the scatter)
  int64_t n = 0;                 ///< N
  std::vector<ColChunk> chunks;  ///< the column chunks; the unfused path has one of width N
  /// Product buffers. kExchange: one per chunk, 2 × local rows × (widest chunk) elements of the output dtype;
  /// kUnfused: one of world × local rows × N elements of the output dtype; kFloat32: one of world × local
  /// rows × N floats. Aligned.
  int buffers = 1;
  size_t product_bytes = 0;
  size_t result_bytes = 0;  ///< kFloat32: the reduce-scatter output, local rows × N floats (aligned)
  float scale = 1.0f;       ///< 1 / world for kAvg
  bool empty = false;
};

/// Inputs of the path decision (all identical on every rank).
struct FusedSelect {
  int world_size = 1;
  double flops = 0;
  bool has_workspace = false;  ///< a FusedWorkspace was passed (it also holds the CUDA side stream)
  size_t workspace_bytes = 0;  ///< its size
  size_t workspace_needed = 0;
  int chunks = 1;                 ///< pipeline chunks the shape allows with the requested count
  bool needs_two_chunks = false;  ///< matmul + reduce-scatter overlaps only from two chunks on
  bool force_unfused = false;
  double min_flops = 0;
  bool empty = false;
};

/// kPipelined only if every condition holds: more than one rank, something to compute, not forced off,
/// enough flops, enough workspace, and enough chunks.
FusedPath select_fused_path(const FusedSelect& s);

/// Normalises a dim in [-ndim, ndim - 1) to [0, ndim - 1); throws kInvalidArgument otherwise.
/// Throws kInvalidArgument for an extent outside [0, 2^31) or a tensor of 2^62 bytes or more.
void check_extents(const TensorRef& t, const char* what);
int normalize_dim(int dim, int ndim, const char* what);
RowSplit split_rows(const std::vector<int64_t>& shape, int dim, int64_t divide_by);
/// Chunk counts after clamping (automatic when `requested` is 0).
std::vector<RowChunk> row_chunks(const RowSplit& s, int world_size, int requested, bool want_gathered);
std::vector<ColChunk> col_chunks(int64_t n, size_t elem_size, int requested);

/// Staging of all_gather_matmul: world × shard bytes, or 0 when gathering straight into a_gathered.
size_t ag_staging_bytes(int world_size, const RowSplit& s, size_t elem_size, bool direct);
/// Whether matmul_reduce_scatter has a pipelined path (RsMode::kExchange) for a world size and contraction
/// extent: two ranks only (measured on 4 x H200: a float32 pipeline over column chunks took
/// 1.9-8.2 x the matmul alone, the unfused path 1.2-1.5 x).
bool rs_can_pipeline(int world_size, int64_t k);
/// The unfused mode for a world size: kUnfused up to two ranks (any reduce-scatter of two partials rounds once)
/// and, from three, where the communicator has full peer access (its direct reduce-scatter sums every partial
/// in float32 and rounds once); kFloat32 otherwise (NCCL's ring would round every intermediate sum).
RsMode rs_unfused_mode(int world_size, bool full_peer_access);
/// The column chunks of `mode`: col_chunks for kExchange, one chunk of width n otherwise.
std::vector<ColChunk> rs_chunks(RsMode mode, int64_t n, size_t elem_size, int requested);
/// Buffers of matmul_reduce_scatter in `mode` (see RsPlan): sets *buffers, *product and *result and returns
/// the workspace bytes (buffers × product + result).
size_t rs_workspace_bytes(RsMode mode, int world_size, const RowSplit& s, int64_t n, size_t elem_size,
                          const std::vector<ColChunk>& chunks, int* buffers, size_t* product, size_t* result);

/// Validates every argument (throws kInvalidArgument) and plans. `workspace_bytes` is what the caller gave.
AgPlan plan_all_gather_matmul(int world_size, const TensorRef& a, std::span<const TensorRef> b, int gather_dim,
                              std::span<const TensorRef> out, const TensorRef* a_gathered, const FusedOptions& o,
                              size_t workspace_bytes);
/// `full_peer_access`: Communicator::full_peer_access() (see rs_unfused_mode).
RsPlan plan_matmul_reduce_scatter(int world_size, const TensorRef& a, const TensorRef& b, ReduceOp op, int scatter_dim,
                                  const TensorRef& out, const FusedOptions& o, size_t workspace_bytes,
                                  bool full_peer_access);

/// Bytes rounded up to kWorkspaceAlign.
inline size_t align_up(size_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

}  // namespace symcomm::detail::fused
