#include "fused/fused_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>

#include "base/check.h"

namespace symcomm::detail::fused {
namespace {

// cuBLASLt (and CBLAS) take 32-bit extents and leading dimensions.
constexpr int64_t kMaxExtent = INT32_MAX;

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

bool fused_dtype(DataType d) { return d == DataType::kBFloat16 || d == DataType::kFloat16 || d == DataType::kFloat32; }

void check_tensor(const TensorRef& t, const char* what, DataType dtype, int min_ndim) {
  SYMCOMM_CHECK_ARG(static_cast<int>(t.shape.size()) >= min_ndim, "{} needs at least {} dims, has shape {}", what,
                    min_ndim, shape_str(t.shape));
  check_extents(t, what);
  SYMCOMM_CHECK_ARG(t.dtype == dtype, "{} is {}, expected {}", what, to_string(t.dtype), to_string(dtype));
  SYMCOMM_CHECK_ARG(t.data != nullptr || t.numel() == 0, "{} has a null data pointer", what);
}

void check_shape(const TensorRef& t, const std::vector<int64_t>& want, const char* what) {
  SYMCOMM_CHECK_ARG(t.shape == want, "{} has shape {}, expected {}", what, shape_str(t.shape), shape_str(want));
}

// Automatic chunk counts, from 2 x H200 (`symcomm-bench --extra fused`):
// all-gather + matmul at two ranks overlaps the whole gather with the local GEMM, so one chunk; in three runs
// 1, 2 and 4 row chunks came within the run-to-run noise (±5%) of each other at the large shapes, and 4
// chunks cost 1.4 x at M = 1024. More ranks split the gather so that remote GEMMs start early (not measured).
// With a_gathered wanted and one outer index, one chunk gathers straight into it (no staging, no copies).
// Matmul + reduce-scatter: see auto_col_chunks.
int auto_row_chunks(const RowSplit& s, int world_size, bool want_gathered) {
  return want_gathered && s.outer == 1 ? 1 : std::clamp(world_size - 1, 1, 4);
}
// Matmul + reduce-scatter (two ranks): the copy engine moves a chunk while the next one is computed, so a
// few wide chunks (efficient GEMMs, few transfers of fixed cost) suffice; the last transfer still hides
// behind this rank's own rows. On 2 x H200 the automatic 4 chunks at N = 8192 beat 8 and 16.
int auto_col_chunks(int64_t n) { return static_cast<int>(std::clamp<int64_t>(n / 1024, 2, 4)); }

}  // namespace

void check_extents(const TensorRef& t, const char* what) {
  // Each extent, and the whole tensor's bytes below 2^62 (so numel(), the byte sizes and the staging sizes
  // derived from them cannot overflow: a [2^29, 2^30, 32] shard wrapped numel() to 0 and passed a null pointer).
  uint64_t bytes = std::max<size_t>(dtype_size(t.dtype), 1);
  for (int64_t e : t.shape) {
    SYMCOMM_CHECK_ARG(e >= 0 && e <= kMaxExtent, "{} has an extent outside [0, 2^31) in shape {}", what,
                      shape_str(t.shape));
    SYMCOMM_CHECK_ARG(e == 0 || bytes <= (uint64_t{1} << 62) / static_cast<uint64_t>(e),
                      "{} of shape {} holds 2^62 bytes or more", what, shape_str(t.shape));
    bytes = e == 0 ? 0 : bytes * static_cast<uint64_t>(e);
  }
}

FusedPath select_fused_path(const FusedSelect& s) {
  if (s.force_unfused || s.empty || s.world_size < 2 || !s.has_workspace) return FusedPath::kUnfused;
  if (s.flops < s.min_flops) return FusedPath::kUnfused;
  if (s.workspace_needed > s.workspace_bytes) return FusedPath::kUnfused;
  if (s.chunks < (s.needs_two_chunks ? 2 : 1)) return FusedPath::kUnfused;
  return FusedPath::kPipelined;
}

int normalize_dim(int dim, int ndim, const char* what) {
  SYMCOMM_CHECK_ARG(dim >= -ndim && dim < ndim - 1,
                    "{} {} is outside [-{}, {}) (the last dim is the contraction dim and cannot be {})", what, dim,
                    ndim, ndim - 1, what);
  return dim < 0 ? dim + ndim : dim;
}

RowSplit split_rows(const std::vector<int64_t>& shape, int dim, int64_t divide_by) {
  RowSplit s;
  const int nd = static_cast<int>(shape.size());
  for (int i = 0; i < dim; ++i) s.outer *= shape[i];
  int64_t rows = shape[dim] / divide_by;
  for (int i = dim + 1; i < nd - 1; ++i) rows *= shape[i];
  s.m = rows;
  s.k = shape[nd - 1];
  return s;
}

std::vector<RowChunk> row_chunks(const RowSplit& s, int world_size, int requested, bool want_gathered) {
  int c = requested > 0 ? requested : auto_row_chunks(s, world_size, want_gathered);
  c = std::min(c, kMaxFusedChunks);
  if (s.outer == 1) {
    c = static_cast<int>(std::clamp<int64_t>(c, 1, std::max<int64_t>(s.m, 1)));
    std::vector<RowChunk> v;
    for (int j = 0; j < c; ++j) v.push_back({.o0 = 0, .o1 = 1, .r0 = s.m * j / c, .r1 = s.m * (j + 1) / c});
    return v;
  }
  c = static_cast<int>(std::clamp<int64_t>(c, 1, s.outer));
  std::vector<RowChunk> v;
  for (int j = 0; j < c; ++j) v.push_back({.o0 = s.outer * j / c, .o1 = s.outer * (j + 1) / c, .r0 = 0, .r1 = s.m});
  return v;
}

std::vector<ColChunk> col_chunks(int64_t n, size_t elem_size, int requested) {
  // Chunk boundaries at multiples of 16 bytes of the narrowest buffer (the input dtype), so that every GEMM
  // and conversion starts on an aligned address when the tensors do.
  const int64_t unit = static_cast<int64_t>(16 / elem_size);
  const int64_t units = (n + unit - 1) / unit;
  int c = requested > 0 ? requested : auto_col_chunks(n);
  c = static_cast<int>(std::clamp<int64_t>(std::min(c, kMaxFusedChunks), 1, std::max<int64_t>(units, 1)));
  std::vector<ColChunk> v;
  for (int j = 0; j < c; ++j) {
    v.push_back({.c0 = std::min(n, units * j / c * unit), .c1 = std::min(n, units * (j + 1) / c * unit)});
  }
  return v;
}

size_t ag_staging_bytes(int world_size, const RowSplit& s, size_t elem_size, bool direct) {
  return direct ? 0 : align_up(static_cast<size_t>(world_size) * s.local_rows() * s.k * elem_size);
}

bool rs_can_pipeline(int world_size, int64_t k) { return world_size == 2 && k > 0; }
RsMode rs_unfused_mode(int world_size, bool full_peer_access) {
  return world_size <= 2 || full_peer_access ? RsMode::kUnfused : RsMode::kFloat32;
}
std::vector<ColChunk> rs_chunks(RsMode mode, int64_t n, size_t elem_size, int requested) {
  return mode == RsMode::kExchange ? col_chunks(n, elem_size, requested) : std::vector<ColChunk>{{.c0 = 0, .c1 = n}};
}

size_t rs_workspace_bytes(RsMode mode, int world_size, const RowSplit& s, int64_t n, size_t elem_size,
                          const std::vector<ColChunk>& chunks, int* buffers, size_t* product, size_t* result) {
  int64_t w = 0;
  for (const ColChunk& x : chunks) w = std::max(w, x.width());
  const size_t local_rows = static_cast<size_t>(s.local_rows()), world = static_cast<size_t>(world_size);
  *result = 0;
  switch (mode) {
    case RsMode::kUnfused:
      *buffers = 1;
      *product = align_up(world * local_rows * static_cast<size_t>(n) * elem_size);
      break;
    case RsMode::kExchange:
      *buffers = static_cast<int>(chunks.size());
      *product = align_up(2 * local_rows * static_cast<size_t>(w) * elem_size);
      break;
    case RsMode::kFloat32:
      *buffers = 1;
      *product = align_up(world * local_rows * static_cast<size_t>(n) * sizeof(float));
      *result = align_up(local_rows * static_cast<size_t>(n) * sizeof(float));
      break;
  }
  return static_cast<size_t>(*buffers) * *product + *result;
}

AgPlan plan_all_gather_matmul(int world_size, const TensorRef& a, std::span<const TensorRef> b, int gather_dim,
                              std::span<const TensorRef> out, const TensorRef* a_gathered, const FusedOptions& o,
                              size_t workspace_bytes) {
  SYMCOMM_CHECK_ARG(fused_dtype(a.dtype), "fused operations take bfloat16, float16 or float32, not {}",
                    to_string(a.dtype));
  check_tensor(a, "a_shard", a.dtype, 2);
  const int nd = a.ndim();
  const int dim = normalize_dim(gather_dim, nd, "gather_dim");
  SYMCOMM_CHECK_ARG(!b.empty(), "all_gather_matmul needs at least one B");
  SYMCOMM_CHECK_ARG(b.size() == out.size(), "{} Bs but {} outputs", b.size(), out.size());
  std::vector<int64_t> gathered = a.shape;
  gathered[dim] *= world_size;
  SYMCOMM_CHECK_ARG(gathered[dim] <= kMaxExtent, "the gathered extent {} is too large", gathered[dim]);
  AgPlan p;
  p.rows = split_rows(a.shape, dim, 1);
  for (size_t i = 0; i < b.size(); ++i) {
    const std::string bn = fmt::format("b[{}]", i), on = fmt::format("out[{}]", i);
    check_tensor(b[i], bn.c_str(), a.dtype, 2);
    SYMCOMM_CHECK_ARG(b[i].ndim() == 2 && b[i].shape[0] == p.rows.k, "{} has shape {}, expected [{}, N]", bn,
                      shape_str(b[i].shape), p.rows.k);
    check_tensor(out[i], on.c_str(), a.dtype, 2);
    std::vector<int64_t> want = gathered;
    want.back() = b[i].shape[1];
    check_shape(out[i], want, on.c_str());
    p.n.push_back(b[i].shape[1]);
  }
  if (a_gathered) {
    check_tensor(*a_gathered, "a_gathered", a.dtype, 2);
    check_shape(*a_gathered, gathered, "a_gathered");
  }
  int64_t sum_n = 0;
  for (int64_t n : p.n) sum_n += n;
  p.empty = p.rows.local_rows() == 0 || (p.rows.k == 0 && sum_n == 0);

  const size_t es = dtype_size(a.dtype);
  const auto staging = [&](bool direct) { return ag_staging_bytes(world_size, p.rows, es, direct); };
  std::vector<RowChunk> chunks = row_chunks(p.rows, world_size, o.chunks, a_gathered != nullptr);
  const bool direct_pipelined = a_gathered && p.rows.outer == 1 && chunks.size() == 1;
  const double flops = 2.0 * world_size * static_cast<double>(p.rows.local_rows()) * p.rows.k * sum_n;
  p.path =
      select_fused_path({.world_size = world_size,
                         .flops = flops,
                         .has_workspace = o.workspace != nullptr,
                         .workspace_bytes = workspace_bytes,
                         .workspace_needed = staging(direct_pipelined),
                         .chunks = static_cast<int>(chunks.size()),
                         .needs_two_chunks = false,
                         .force_unfused = o.force_unfused,
                         .min_flops = o.min_pipelined_flops >= 0 ? o.min_pipelined_flops : kAutoPipelinedFlopsAllGather,
                         .empty = p.empty});
  if (p.path == FusedPath::kPipelined) {
    p.chunks = std::move(chunks);
    p.direct = direct_pipelined;
  } else {
    p.chunks = {RowChunk{.o0 = 0, .o1 = p.rows.outer, .r0 = 0, .r1 = p.rows.m}};
    p.direct = a_gathered && p.rows.outer == 1;
  }
  p.staging_bytes = staging(p.direct);
  return p;
}

RsPlan plan_matmul_reduce_scatter(int world_size, const TensorRef& a, const TensorRef& b, ReduceOp op, int scatter_dim,
                                  const TensorRef& out, const FusedOptions& o, size_t workspace_bytes,
                                  bool full_peer_access) {
  SYMCOMM_CHECK_ARG(fused_dtype(a.dtype), "fused operations take bfloat16, float16 or float32, not {}",
                    to_string(a.dtype));
  SYMCOMM_CHECK_ARG(op == ReduceOp::kSum || op == ReduceOp::kAvg, "matmul_reduce_scatter supports sum and avg, not {}",
                    is_valid(op) ? to_string(op) : std::string_view("an invalid op"));
  check_tensor(a, "a", a.dtype, 2);
  const int nd = a.ndim();
  const int dim = normalize_dim(scatter_dim, nd, "scatter_dim");
  SYMCOMM_CHECK_ARG(a.shape[dim] % world_size == 0, "extent {} of scatter_dim {} is not divisible by the world size {}",
                    a.shape[dim], dim, world_size);
  check_tensor(b, "b", a.dtype, 2);
  SYMCOMM_CHECK_ARG(b.ndim() == 2 && b.shape[0] == a.shape.back(), "b has shape {}, expected [{}, N]",
                    shape_str(b.shape), a.shape.back());
  check_tensor(out, "out", a.dtype, 2);
  std::vector<int64_t> want = a.shape;
  want[dim] /= world_size;
  want.back() = b.shape[1];
  check_shape(out, want, "out");

  RsPlan p;
  p.rows = split_rows(a.shape, dim, world_size);
  p.n = b.shape[1];
  p.scale = op == ReduceOp::kAvg ? 1.0f / static_cast<float>(world_size) : 1.0f;
  p.empty = p.rows.local_rows() == 0 || p.n == 0;
  const size_t local_rows = static_cast<size_t>(p.rows.local_rows()), es = dtype_size(a.dtype);
  const bool can_pipeline = rs_can_pipeline(world_size, p.rows.k);
  std::vector<ColChunk> chunks = rs_chunks(RsMode::kExchange, p.n, es, o.chunks);
  int buffers = 0;
  size_t product = 0, result = 0;
  const size_t needed =
      rs_workspace_bytes(RsMode::kExchange, world_size, p.rows, p.n, es, chunks, &buffers, &product, &result);
  p.path = select_fused_path(
      {.world_size = world_size,
       .flops = 2.0 * world_size * static_cast<double>(local_rows) * p.rows.k * p.n,
       .has_workspace = o.workspace != nullptr,
       .workspace_bytes = workspace_bytes,
       .workspace_needed = needed,
       .chunks = static_cast<int>(chunks.size()),
       .needs_two_chunks = true,
       .force_unfused = o.force_unfused || !can_pipeline,
       .min_flops = o.min_pipelined_flops >= 0 ? o.min_pipelined_flops : kAutoPipelinedFlopsReduceScatter,
       .empty = p.empty});
  p.mode = p.path == FusedPath::kPipelined ? RsMode::kExchange : rs_unfused_mode(world_size, full_peer_access);
  p.chunks = p.mode == RsMode::kExchange ? std::move(chunks) : rs_chunks(p.mode, p.n, es, o.chunks);
  rs_workspace_bytes(p.mode, world_size, p.rows, p.n, es, p.chunks, &p.buffers, &p.product_bytes, &p.result_bytes);
  return p;
}

}  // namespace symcomm::detail::fused
