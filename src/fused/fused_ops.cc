// all_gather_matmul and matmul_reduce_scatter: validation and planning (fused_plan.cc), then one sequence of
// engine primitives per operation, the same for both backends (fused_engine.h).
//
// NOTE [fused pipelines]
// all_gather_matmul, pipelined: fork the side lane; the side lane all-gathers the shards chunk by chunk
// (copying each chunk into a_gathered if asked) and signals each chunk, while the main lane multiplies the
// local shard (no communication needed); the main lane waits for chunk c and multiplies the other
// ranks' rows of it; finally the main lane joins the side lane. Unfused: one all-gather, then the GEMMs. One rank
// without a_gathered: the GEMMs of the shard alone.
// matmul_reduce_scatter, pipelined, two ranks (RsMode::kExchange): the output columns are cut into chunks.
// The main lane first computes, chunk by chunk, the product of the peer's rows (its block of the result) in
// the output dtype into a symmetric buffer; after each chunk the side lane swaps that chunk with the peer
// (an in-place all-gather on the copy engine: no SMs, so it runs beside the next GEMM). Then the main lane
// computes this rank's own rows chunk by chunk with the peer's partial added in the GEMM's epilogue
// (D = scale·(A·B + partial), formed in float32 and rounded once). Each partial is rounded once, as in an
// unfused GEMM followed by a float32-accumulating reduce-scatter; the own product is not rounded at all.
// The transfers hide behind the second half of the GEMMs; nothing is reduced by a separate kernel.
// Unfused: one GEMM of all rows, then one reduce-scatter straight into the output (on one rank, the GEMM into the
// output); up to two ranks in the output dtype (float32 accumulation inside the reduce-scatter, each partial
// rounded once), with more ranks in float32 and rounded once at the end (a ring reduce-scatter in bf16 would
// round every intermediate sum).
// More than two ranks have no pipelined path: a float32 pipeline over column chunks was measured at
// 1.9-8.2 x the matmul alone on 4 x H200 (the reduce-scatter kernels fight the GEMM for SMs).
// Every collective of an operation is issued on one lane, in the same order on every rank.

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "base/check.h"
#include "fused/fused_engine.h"
#include "fused/fused_plan.h"
#include "fused/fused_workspace.h"

namespace symcomm {

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

std::string_view to_string(FusedPath path) { return path == FusedPath::kPipelined ? "pipelined" : "unfused"; }

FusedWorkspace::FusedWorkspace(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<FusedWorkspace> FusedWorkspace::create(Communicator& comm, size_t bytes) {
  SYMCOMM_CHECK_ARG(bytes > 0, "a fused workspace needs a positive size");
  auto impl = std::make_unique<Impl>();
  impl->comm = &comm;
  impl->bytes = bytes;
  impl->data = comm.alloc(bytes);
  if (comm.backend() == BackendKind::kCuda) {
    try {
      impl->lanes = detail::fused::make_cuda_lanes(comm);
    } catch (...) {
      comm.free(impl->data);
      throw;
    }
  }
  return std::unique_ptr<FusedWorkspace>(new FusedWorkspace(std::move(impl)));
}

FusedWorkspace::~FusedWorkspace() {
  impl_->lanes.reset();
  impl_->comm->free(impl_->data);
}

size_t FusedWorkspace::bytes() const { return impl_->bytes; }
Communicator& FusedWorkspace::communicator() const { return *impl_->comm; }

namespace detail::fused {
namespace {

char* at(const void* p, int64_t elems, size_t elem_size) {
  return static_cast<char*>(const_cast<void*>(p)) + static_cast<size_t>(elems) * elem_size;
}

std::unique_ptr<Engine> make_engine(Communicator& comm, const CollOptions& coll, FusedWorkspace* ws, bool pipelined) {
  if (comm.backend() == BackendKind::kCuda) return make_cuda_engine(comm, coll.stream, ws, pipelined);
  return make_host_engine();
}

size_t workspace_bytes(Communicator& comm, const FusedOptions& o) {
  if (!o.workspace) return 0;
  SYMCOMM_CHECK_ARG(&o.workspace->communicator() == &comm, "the fused workspace belongs to another communicator");
  return o.workspace->bytes();
}

/// Workspace memory when it is large enough, else a temporary.
char* scratch(Engine& e, const FusedOptions& o, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (o.workspace && o.workspace->bytes() >= bytes) return static_cast<char*>(o.workspace->impl().data);
  return static_cast<char*>(e.temp(bytes));
}

struct AgArgs {
  const TensorRef& a;
  std::span<const TensorRef> b;
  std::span<const TensorRef> out;
  const TensorRef* a_gathered;
};

// GEMMs of rank p's rows in chunk `ch` with every B; `src` holds them as [o1 - o0][rows][K].
void ag_gemms(Engine& e, const AgPlan& p, const AgArgs& x, int world, int rank, const char* src, const RowChunk& ch) {
  const RowSplit& s = p.rows;
  const DataType dt = x.a.dtype;
  const size_t es = dtype_size(dt);
  // With one outer index and the whole shard, all ranks' rows follow each other in src and in the output.
  const bool merged = s.outer == 1 && ch.rows() == s.m && rank < 0;
  for (size_t i = 0; i < x.b.size(); ++i) {
    const int64_t n = p.n[i];
    for (int64_t o = ch.o0; o < ch.o1; ++o) {
      const int64_t row = merged ? 0 : (o * world + rank) * s.m + ch.r0;
      e.gemm({.a = at(src, (o - ch.o0) * ch.rows() * s.k, es),
              .lda = s.k,
              .b = x.b[i].data,
              .ldb = n,
              .c = at(x.out[i].data, row * n, es),
              .ldc = n,
              .m = merged ? world * s.m : ch.rows(),
              .n = n,
              .k = s.k,
              .ab = dt,
              .c_dtype = dt},
             Lane::kMain);
    }
  }
}

// Copies chunk `ch` of every rank from the staging (laid out [world][chunk]) into a_gathered.
void ag_copy_out(Engine& e, const AgPlan& p, const AgArgs& x, int world, const char* stage, const RowChunk& ch,
                 Lane lane) {
  const RowSplit& s = p.rows;
  const size_t es = dtype_size(x.a.dtype), row_bytes = static_cast<size_t>(s.k) * es;
  for (int q = 0; q < world; ++q) {
    e.copy_2d(at(x.a_gathered->data, ((ch.o0 * world + q) * s.m + ch.r0) * s.k, es), world * s.m * row_bytes,
              stage + q * ch.elems(s.k) * es, ch.rows() * row_bytes, ch.rows() * row_bytes, ch.o1 - ch.o0, lane);
  }
}

void run_all_gather_matmul(Communicator& comm, Engine& e, const AgPlan& p, const AgArgs& x, const FusedOptions& o) {
  const int world = comm.world_size(), me = comm.rank();
  const DataType dt = x.a.dtype;
  const size_t es = dtype_size(dt);
  const RowSplit& s = p.rows;
  if (world == 1 && p.path == FusedPath::kUnfused && x.a_gathered == nullptr) {
    // One rank: the shard is the whole A, and nothing is to be gathered or copied (copying it first cost 8 % of
    // an 8192^3 bfloat16 matmul on an H100).
    ag_gemms(e, p, x, world, me, static_cast<const char*>(x.a.data), p.chunks[0]);
    return;
  }
  char* stage = p.direct ? static_cast<char*>(x.a_gathered->data) : scratch(e, o, p.staging_bytes);
  const bool copy_out = x.a_gathered && !p.direct;
  if (p.path == FusedPath::kUnfused) {
    comm.all_gather(x.a.data, stage, s.local_rows() * s.k, dt, e.coll(Lane::kMain));
    if (copy_out) ag_copy_out(e, p, x, world, stage, p.chunks[0], Lane::kMain);
    if (s.outer == 1) {
      ag_gemms(e, p, x, world, -1, stage, p.chunks[0]);
    } else {
      for (int q = 0; q < world; ++q) ag_gemms(e, p, x, world, q, stage + q * s.local_rows() * s.k * es, p.chunks[0]);
    }
    return;
  }
  e.fork();
  // The gathers are issued first so that they start at once (on the CUDA backend; the host runs in order).
  for (size_t c = 0; c < p.chunks.size(); ++c) {
    const RowChunk& ch = p.chunks[c];
    char* out = stage + world * ch.offset(s) * es;
    comm.all_gather(at(x.a.data, ch.offset(s), es), out, ch.elems(s.k), dt, e.coll(Lane::kSide));
    if (copy_out) ag_copy_out(e, p, x, world, out, ch, Lane::kSide);
    e.signal(static_cast<int>(c), Lane::kSide);
  }
  // The local shard needs no communication: multiply it while the other shards arrive.
  ag_gemms(e, p, x, world, me, static_cast<const char*>(x.a.data),
           RowChunk{.o0 = 0, .o1 = s.outer, .r0 = 0, .r1 = s.m});
  for (size_t c = 0; c < p.chunks.size(); ++c) {
    const RowChunk& ch = p.chunks[c];
    e.wait(static_cast<int>(c), Lane::kMain);
    const char* chunk = stage + world * ch.offset(s) * es;
    for (int q = 0; q < world; ++q) {
      if (q != me) ag_gemms(e, p, x, world, q, chunk + q * ch.elems(s.k) * es, ch);
    }
  }
  e.join();
}

// Products of columns `ch` for every rank's block in `c_dtype`, rank-major: block q is [outer][m][width].
void rs_gemms(Engine& e, const RsPlan& p, const TensorRef& a, const TensorRef& b, int world, void* buf,
              DataType c_dtype, const ColChunk& ch) {
  const RowSplit& s = p.rows;
  const size_t es = dtype_size(a.dtype), cs = dtype_size(c_dtype);
  const int64_t w = ch.width();
  Gemm g{.a = a.data,
         .lda = s.k,
         .b = at(b.data, ch.c0, es),
         .ldb = p.n,
         .c = buf,
         .ldc = w,
         .m = world * s.m,
         .n = w,
         .k = s.k,
         .ab = a.dtype,
         .c_dtype = c_dtype};
  if (s.outer == 1) {  // rank-major is the natural row order
    e.gemm(g, Lane::kMain);
    return;
  }
  g.m = s.m;
  for (int q = 0; q < world; ++q) {
    for (int64_t o = 0; o < s.outer; ++o) {
      g.a = at(a.data, (o * world + q) * s.m * s.k, es);
      g.c = at(buf, (q * s.outer + o) * s.m * w, cs);
      e.gemm(g, Lane::kMain);
    }
  }
}

// Two ranks: GEMMs of rank q's rows of A (every outer index) with columns `ch` of B. Without acc: into dst as
// [outer][m][width]. With acc ([outer][m][width], like dst above): dst = scale · (A·B + acc) at
// dst[(o·m + i)·ld_dst + c].
void rs_rank_gemms(Engine& e, const RsPlan& p, const TensorRef& a, const TensorRef& b, int q, const ColChunk& ch,
                   void* dst, int64_t ld_dst, const void* acc, float scale) {
  const RowSplit& s = p.rows;
  const size_t es = dtype_size(a.dtype);
  const int64_t w = ch.width();
  for (int64_t o = 0; o < s.outer; ++o) {
    Gemm g{.a = at(a.data, (o * 2 + q) * s.m * s.k, es),
           .lda = s.k,
           .b = at(b.data, ch.c0, es),
           .ldb = p.n,
           .c = at(dst, o * s.m * ld_dst, es),
           .ldc = ld_dst,
           .m = s.m,
           .n = w,
           .k = s.k,
           .ab = a.dtype,
           .c_dtype = a.dtype};
    if (acc != nullptr) {
      g.acc = at(acc, o * s.m * w, es);
      g.ldacc = w;
      g.alpha = g.beta = scale;
    }
    e.gemm(g, Lane::kMain);
  }
}

// Two ranks (NOTE [fused pipelines]): chunk j's buffer holds [2][local rows][width]; block r is rank r's
// product for the other rank, so an in-place all-gather of the buffer hands each rank its peer's partial.
void run_exchange(Communicator& comm, Engine& e, const RsPlan& p, const TensorRef& a, const TensorRef& b,
                  const TensorRef& out, char* ws) {
  const int me = comm.rank(), peer = 1 - me, nch = static_cast<int>(p.chunks.size());
  const size_t es = dtype_size(a.dtype);
  const int64_t local_rows = p.rows.local_rows();
  e.fork();
  for (int j = 0; j < nch; ++j) {
    const ColChunk& ch = p.chunks[j];
    char* buf = ws + j * p.product_bytes;
    const int64_t block = local_rows * ch.width();
    rs_rank_gemms(e, p, a, b, peer, ch, at(buf, me * block, es), ch.width(), nullptr, 1.0f);
    e.signal(j, Lane::kMain);
    e.wait(j, Lane::kSide);
    comm.all_gather(at(buf, me * block, es), buf, static_cast<size_t>(block), a.dtype, e.coll(Lane::kSide));
    e.signal(kMaxFusedChunks + j, Lane::kSide);
  }
  for (int j = 0; j < nch; ++j) {
    const ColChunk& ch = p.chunks[j];
    const char* buf = ws + j * p.product_bytes;
    e.wait(kMaxFusedChunks + j, Lane::kMain);
    rs_rank_gemms(e, p, a, b, me, ch, at(out.data, ch.c0, es), p.n, at(buf, peer * local_rows * ch.width(), es),
                  p.scale);
  }
  e.join();
}

void run_matmul_reduce_scatter(Communicator& comm, Engine& e, const RsPlan& p, const TensorRef& a, const TensorRef& b,
                               ReduceOp op, const TensorRef& out, const FusedOptions& o) {
  const int world = comm.world_size();
  const int64_t local_rows = p.rows.local_rows();
  if (world == 1 && p.mode == RsMode::kUnfused) {
    // One rank: the product is the result (every op of one value is that value), rounded once as ever.
    rs_gemms(e, p, a, b, world, out.data, a.dtype, p.chunks[0]);
    return;
  }
  char* ws = scratch(e, o, p.buffers * p.product_bytes + p.result_bytes);
  if (p.mode == RsMode::kUnfused) {
    // Products in the output dtype, reduced in float32 by the reduce-scatter (the accuracy the fused paths
    // must match), straight into the output.
    rs_gemms(e, p, a, b, world, ws, a.dtype, p.chunks[0]);
    CollOptions co = e.coll(Lane::kMain);
    if (world > 2) co.algorithm = Algorithm::kDirect;  // not NCCL's ring (RsMode::kUnfused)
    comm.reduce_scatter(ws, out.data, static_cast<size_t>(local_rows * p.n), a.dtype, op, co);
    return;
  }
  if (p.mode == RsMode::kExchange) {
    run_exchange(comm, e, p, a, b, out, ws);
    return;
  }
  // kFloat32 (more than two ranks without full peer access): float32 products and reduce-scatter, one rounding into the
  // output.
  float* result = reinterpret_cast<float*>(ws + p.product_bytes);
  rs_gemms(e, p, a, b, world, ws, DataType::kFloat32, p.chunks[0]);
  comm.reduce_scatter(ws, result, static_cast<size_t>(local_rows * p.n), DataType::kFloat32, ReduceOp::kSum,
                      e.coll(Lane::kMain));
  e.store_rows(result, local_rows, p.n, out.data, p.n, out.dtype, p.scale, Lane::kMain);
}

}  // namespace
}  // namespace detail::fused

void all_gather_matmul(Communicator& comm, const TensorRef& a_shard, std::span<const TensorRef> b, int gather_dim,
                       std::span<const TensorRef> out, const TensorRef* a_gathered, const CollOptions& coll,
                       const FusedOptions& fused) {
  using namespace detail::fused;
  comm.check();
  const AgPlan p = plan_all_gather_matmul(comm.world_size(), a_shard, b, gather_dim, out, a_gathered, fused,
                                          workspace_bytes(comm, fused));
  if (fused.path_out) *fused.path_out = p.path;
  if (p.empty) return;
  auto e = make_engine(comm, coll, fused.workspace, p.path == FusedPath::kPipelined);
  run_all_gather_matmul(comm, *e, p, AgArgs{a_shard, b, out, a_gathered}, fused);
  e->finish();
}

void matmul_reduce_scatter(Communicator& comm, const TensorRef& a, const TensorRef& b, ReduceOp op, int scatter_dim,
                           const TensorRef& out, const CollOptions& coll, const FusedOptions& fused) {
  using namespace detail::fused;
  comm.check();
  const RsPlan p = plan_matmul_reduce_scatter(comm.world_size(), a, b, op, scatter_dim, out, fused,
                                              workspace_bytes(comm, fused), comm.full_peer_access());
  if (fused.path_out) *fused.path_out = p.path;
  if (p.empty) return;
  auto e = make_engine(comm, coll, fused.workspace, p.path == FusedPath::kPipelined);
  run_matmul_reduce_scatter(comm, *e, p, a, b, op, out, fused);
  e->finish();
}

size_t all_gather_matmul_workspace_bytes(int world_size, const TensorRef& a_shard, int gather_dim, bool want_gathered,
                                         int chunks) {
  using namespace detail::fused;
  SYMCOMM_CHECK_ARG(world_size >= 1 && a_shard.ndim() >= 2, "bad world size or shard shape");
  check_extents(a_shard, "a_shard");
  const int dim = normalize_dim(gather_dim, a_shard.ndim(), "gather_dim");
  const RowSplit s = split_rows(a_shard.shape, dim, 1);
  const bool direct = want_gathered && s.outer == 1 && row_chunks(s, world_size, chunks, want_gathered).size() == 1;
  // At least 1: a path that stages nothing (gathered straight into a_gathered) still needs a workspace, for its
  // streams; 0 made callers who followed the header create none (or create(comm, 0), which throws).
  return std::max<size_t>(1, ag_staging_bytes(world_size, s, dtype_size(a_shard.dtype), direct));
}

size_t matmul_reduce_scatter_workspace_bytes(int world_size, const TensorRef& a, const TensorRef& b, int scatter_dim,
                                             int chunks) {
  using namespace detail::fused;
  SYMCOMM_CHECK_ARG(world_size >= 1 && a.ndim() >= 2 && b.ndim() == 2, "bad world size or shapes");
  check_extents(a, "a");
  check_extents(b, "b");
  const int dim = normalize_dim(scatter_dim, a.ndim(), "scatter_dim");
  SYMCOMM_CHECK_ARG(a.shape[dim] % world_size == 0, "scatter extent not divisible by the world size");
  const RowSplit s = split_rows(a.shape, dim, world_size);
  const size_t es = dtype_size(a.dtype);
  // The pipelined path's buffers where there is one, else the larger unfused path's (a workspace that large
  // spares it temporary allocations, with or without full peer access).
  const RsMode mode =
      rs_can_pipeline(world_size, s.k) ? RsMode::kExchange : rs_unfused_mode(world_size, /*full_peer_access=*/false);
  const auto c = rs_chunks(mode, b.shape[1], es, chunks);
  int buffers = 0;
  size_t product = 0, result = 0;
  return rs_workspace_bytes(mode, world_size, s, b.shape[1], es, c, &buffers, &product, &result);
}

}  // namespace symcomm
