#include "fused/cublaslt_gemm_cuda.h"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/memory_ledger.h"

namespace symcomm::detail::fused {
namespace {

#define LT_CHECK(expr)                                                                \
  do {                                                                                \
    cublasStatus_t lt_status_ = (expr);                                               \
    SYMCOMM_CHECK(lt_status_ == CUBLAS_STATUS_SUCCESS, kCuda, "{} failed: {}", #expr, \
                  cublasLtGetStatusString(lt_status_));                               \
  } while (0)

// NOTE [cuBLASLt workspace] 32 MiB is what NVIDIA recommends for Hopper (cuBLAS documentation, "cuBLAS
// workspace"); larger buys nothing measurable for these GEMM shapes. Where a GEMM's workspace comes from:
// - Eager, on one of the first kMaxStreamWorkspaces streams a device's GEMMs ran on: that stream's own, kept for
//   the rest of the process (as PyTorch keeps cuBLAS's); nothing to do per GEMM. A destroyed stream keeps its
//   entry (nothing tells symcomm); a new stream that gets the same handle uses it, which is safe because the
//   driver frees a stream, handle included, only after its work has completed.
//   cudaStreamPerThread is not one stream but one per thread under one handle, so it never gets one: GEMMs on
//   it from two threads would otherwise share a workspace while they run at once.
// - Eager, on any other stream: a stream-ordered pool of symcomm's own (one per device, made outside any
//   capture), allocated right before the GEMM and freed right after, both on the GEMM's stream. The pool holds
//   as many workspaces as GEMMs were in flight at once on different streams: a block freed on a stream is reused
//   by that stream at once and by another once the free has executed (opportunistic reuse); reuse that would
//   make one stream wait for another (internal dependencies) is off. It keeps what it reserved (release
//   threshold unlimited) instead of unmapping and remapping around synchronisations; the ledger reads its
//   reserve when asked. This costs ~1.6-2.3 us of host time per GEMM (1 x H100), not GPU time.
// - Captured: cudaMallocAsync and cudaFreeAsync around the GEMM, i.e. an allocation node and a free node. The
//   graph owns its workspace, so a replay on any stream never shares one with eager GEMMs on the stream it was
//   captured on, as a stream's own workspace would. The price is CUDA's rule for graphs with memory nodes: one
//   executable graph at a time per graph, and a child graph must move its ownership to the parent.
// A workspace of its own for every stream, kept for ever, would grow memory with every stream a GEMM ever ran
// on: the fused tests, which make a stream per case, would hold 640 MiB of workspaces after 20 cases (as
// cuda_memory_use shows).
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
constexpr size_t kMaxStreamWorkspaces = 4;  ///< per device
// Cached plans are never freed (like cuBLAS's own handles); past this many shapes new ones are not cached.
constexpr size_t kMaxCachedPlans = 512;

cudaDataType_t cuda_type(DataType d) {
  switch (d) {
    case DataType::kBFloat16: return CUDA_R_16BF;
    case DataType::kFloat16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

uint32_t alignment(const void* p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, uint32_t, uint32_t,
                           uint32_t, size_t, int64_t, uint32_t>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t b_as_a = nullptr, a_as_b = nullptr, c = nullptr, acc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void destroy() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (b_as_a) cublasLtMatrixLayoutDestroy(b_as_a);
    if (a_as_b) cublasLtMatrixLayoutDestroy(a_as_b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (acc) cublasLtMatrixLayoutDestroy(acc);
  }
};

struct LtState {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;
  std::map<int, cudaMemPool_t> pools;                ///< NOTE [cuBLASLt workspace]
  std::map<int, std::map<cudaStream_t, void*>> own;  ///< the streams with a workspace of their own, per device
  std::map<PlanKey, Plan> plans;
};

LtState& state() {
  static LtState* s = new LtState;  // never destroyed: handles may be used until exit
  return *s;
}

// Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLASLt's "A" is our B (n × k, ld ldb), its "B" is our A
// (k × m, ld lda), and D is Cᵀ (n × m, ld ldc); cuBLASLt's C is our acc (n × m, ld ldacc) when there is one.
Plan make_plan(cublasLtHandle_t h, const Gemm& g, uint32_t align_a, uint32_t align_b, uint32_t align_c,
               uint32_t align_acc, size_t ws_bytes) {
  Plan p;
  try {
    LT_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cudaDataType_t ab = cuda_type(g.ab), ct = cuda_type(g.c_dtype);
    LT_CHECK(cublasLtMatrixLayoutCreate(&p.b_as_a, ab, g.n, g.k, g.ldb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p.a_as_b, ab, g.k, g.m, g.lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&p.c, ct, g.n, g.m, g.ldc));
    if (g.acc) LT_CHECK(cublasLtMatrixLayoutCreate(&p.acc, ct, g.n, g.m, g.ldacc));
    cublasLtMatmulPreference_t pref = nullptr;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    // The operand roles are swapped (see above): cuBLASLt's A is our B.
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b, sizeof(align_b));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a, sizeof(align_a));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_acc,
                                         sizeof(align_acc));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.b_as_a, p.a_as_b, p.acc ? p.acc : p.c, p.c, pref, 1,
                                                       &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    LT_CHECK(st);
    SYMCOMM_CHECK(found > 0, kCuda, "cuBLASLt has no algorithm for a {}x{}x{} GEMM ({} inputs, {} output)", g.m, g.n,
                  g.k, to_string(g.ab), to_string(g.c_dtype));
    p.algo = result.algo;
  } catch (...) {
    p.destroy();
    throw;
  }
  return p;
}

// NOTE [cuBLASLt workspace]
cudaMemPool_t make_workspace_pool(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  SYMCOMM_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  uint64_t keep = UINT64_MAX;
  int off = 0;
  SYMCOMM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  SYMCOMM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &off));
  // What the pool reserved is symcomm's (a capture allocates from the graph's pool instead, not counted).
  ledger_set_reader(pool, device, MemoryKind::kDevice, [pool] {
    uint64_t reserved = 0;
    return cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess
               ? static_cast<size_t>(reserved)
               : size_t{0};
  });
  return pool;
}

}  // namespace

void cublaslt_gemm(const Gemm& g, int device, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    SYMCOMM_CHECK(g.acc == nullptr, kInternal, "a GEMM with k = 0 and an accumulator is not supported");
    const size_t es = dtype_size(g.c_dtype);
    SYMCOMM_CUDA_CHECK(cudaMemset2DAsync(g.c, g.ldc * es, 0, g.n * es, g.m, stream));
    return;
  }
  LtState& s = state();
  std::unique_lock lock(s.mu);
  cublasLtHandle_t& handle = s.handles[device];
  if (!handle) LT_CHECK(cublasLtCreate(&handle));
  const bool capturing = stream_capturing(stream);
  void* own_ws = nullptr;
  auto& own = s.own[device];
  // A captured GEMM takes its workspace from the pool, and so does one on cudaStreamPerThread: that one handle
  // names a different stream in every thread, which must not share a workspace (NOTE [cuBLASLt workspace]).
  if (!capturing && stream != cudaStreamPerThread) {
    if (auto o = own.find(stream); o != own.end()) {
      own_ws = o->second;
    } else if (own.size() < kMaxStreamWorkspaces) {
      SYMCOMM_CUDA_CHECK(cudaMalloc(&own_ws, kLtWorkspaceBytes));
      ledger_add(device, MemoryKind::kDevice, kLtWorkspaceBytes);  // kept until the process ends
      own.emplace(stream, own_ws);
    }
  }
  cudaMemPool_t& pool = s.pools[device];
  if (!own_ws && !capturing && !pool) pool = make_workspace_pool(device);  // no pool is made inside a capture
  cublasLtHandle_t h = handle;
  const size_t ws_bytes = kLtWorkspaceBytes;
  const uint32_t aa = alignment(g.a), ab = alignment(g.b), ac = alignment(g.c);
  const uint32_t aacc = g.acc ? alignment(g.acc) : ac;
  const PlanKey key{device,
                    g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    g.ldc,
                    static_cast<int>(g.ab),
                    static_cast<int>(g.c_dtype),
                    aa,
                    ab,
                    ac,
                    ws_bytes,
                    g.acc ? g.ldacc : -1,
                    aacc};
  auto it = s.plans.find(key);
  Plan plan;
  bool cached = it != s.plans.end();
  if (cached) {
    plan = it->second;
  } else {
    plan = make_plan(h, g, aa, ab, ac, aacc, ws_bytes);
    if (s.plans.size() < kMaxCachedPlans) {
      s.plans.emplace(key, plan);
      cached = true;
    }
  }
  const cudaMemPool_t from = pool;
  lock.unlock();
  void* ws = own_ws;
  if (!own_ws) {
    // Captured: an allocation node; its memory is the graph's whatever the pool, so the device's current one.
    const cudaError_t alloc =
        capturing ? cudaMallocAsync(&ws, ws_bytes, stream) : cudaMallocFromPoolAsync(&ws, ws_bytes, from, stream);
    if (alloc != cudaSuccess) {
      if (!cached) plan.destroy();
      SYMCOMM_CUDA_CHECK(alloc);
    }
  }
  const float alpha = g.alpha, beta = g.acc ? g.beta : 0.0f;
  const void* c_in = g.acc ? g.acc : g.c;
  cublasStatus_t st = cublasLtMatmul(h, plan.desc, &alpha, g.b, plan.b_as_a, g.a, plan.a_as_b, &beta, c_in,
                                     plan.acc ? plan.acc : plan.c, g.c, plan.c, &plan.algo, ws, ws_bytes, stream);
  const cudaError_t freed = own_ws ? cudaSuccess : cudaFreeAsync(ws, stream);
  if (!cached) plan.destroy();
  LT_CHECK(st);
  SYMCOMM_CUDA_CHECK(freed);
}

}  // namespace symcomm::detail::fused
