// symcomm-bench --backend cuda --extra fused: the fused GEMM + collective operations (include/symcomm/fused.h)
// against, in the same run and on the same inputs,
//   nccl_unfused    cuBLASLt GEMM + NCCL collective on one stream (all-gather then GEMM; GEMM then bf16
//                   reduce-scatter), the usual unfused tensor-parallel code;
//   symcomm_unfused the library's own unfused fallback (FusedOptions::force_unfused);
//   matmul          the GEMM alone: on the already-gathered A (all-gather + matmul), the full local GEMM
//                   (matmul + reduce-scatter).
// Every GEMM is the same cuBLASLt call (src/fused/cublaslt_gemm_cuda.h). The fused op is also run with a
// few forced chunk counts ("fused_c<k>", pipelined at every size where the op has a pipelined path) to place
// the automatic choice.
//
// Shapes: all-gather + matmul gathers A [M, K] along M (M global); matmul + reduce-scatter has A [M, K] with
// K per rank and scatters the product along M. Timing as in cuda_runner.cu (events around `iters` eager
// ops, median of `batches`, rank 0's clock). Ends with a table of each time over the matmul alone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "algos/elements.h"
#include "bench.h"
#include "cuda_util.h"
#include "fused/cublaslt_gemm_cuda.h"
#include "symcomm/fused.h"

namespace symcomm::bench {
namespace {

using detail::fused::cublaslt_gemm;
using detail::fused::Gemm;

// Uniform in [-1, 1) from a hash of (seed, i): no host round trip for 100+ MB inputs.
__global__ void fill_random(void* dst, DataType dt, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 29;
    const float v = static_cast<float>(h >> 40) * 0x1p-23f - 1.0f;
    switch (dt) {
      case DataType::kBFloat16: static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v); break;
      case DataType::kFloat16: static_cast<__half*>(dst)[i] = __float2half_rn(v); break;
      default: static_cast<float*>(dst)[i] = v; break;
    }
  }
}

void* alloc_random(DataType dt, size_t count, uint64_t seed, cudaStream_t s) {
  void* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, std::max<size_t>(count * dtype_size(dt), 16)));
  if (count) fill_random<<<1024, 256, 0, s>>>(p, dt, count, seed);
  return p;
}

struct Shape {
  bool all_gather;  ///< all-gather + matmul, else matmul + reduce-scatter
  int64_t m, k, n;  ///< global M; K per rank for the reduce-scatter
};

class FusedBench {
 public:
  FusedBench(Communicator& comm, const BenchOptions& o, Reporter& rep) : comm_(comm), o_(o), rep_(rep) {}
  long long run();

 private:
  double time(const std::function<void()>& op);
  long long compare(const void* got, const void* want, size_t count, double tol_abs);
  void record(const Shape& sh, const std::string& impl, const std::string& algo, double us, long long wrong);
  /// Times the baselines, then the fused op (automatic and forced chunk counts, and its unfused fallback),
  /// each checked against the NCCL baseline's output `ref` (copied from `out` after one baseline run).
  void run_variants(const Shape& sh, const std::function<void()>& nccl_unfused, const Gemm& matmul,
                    const std::function<void(const FusedOptions&)>& fused, void* out, void* ref, size_t count,
                    double tol, std::initializer_list<int> chunk_counts);
  void run_all_gather(const Shape& sh);
  void run_reduce_scatter(const Shape& sh);
  void print_summary(const std::vector<Shape>& shapes);

  Communicator& comm_;
  const BenchOptions& o_;
  Reporter& rep_;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t s_ = nullptr;
  std::unique_ptr<FusedWorkspace> ws_;
  DataType dt_ = DataType::kBFloat16;
  int n_ = 1, me_ = 0;
  long long wrong_ = 0;
  std::map<std::tuple<bool, int64_t, int64_t, int64_t, std::string>, double> times_;  ///< (op, M, K, N, impl)
};

double FusedBench::time(const std::function<void()>& op) {
  comm_.barrier({.stream = s_});
  BENCH_CUDA(cudaStreamSynchronize(s_));
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < o_.warmup; ++i) op();
  std::vector<double> per_op;
  for (int k = 0; k < o_.batches; ++k) {
    BENCH_CUDA(cudaEventRecord(a, s_));
    for (int i = 0; i < o_.iters; ++i) op();
    BENCH_CUDA(cudaEventRecord(b, s_));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    per_op.push_back(ms * 1000.0 / o_.iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  comm_.check();
  return median(per_op);
}

// Elements of `got` that differ from `want` by more than 2^-6 relative + tol_abs: both are the same
// products, rounded once to bf16 (2^-8 relative each) after float32 sums in different orders, or (matmul +
// reduce-scatter against NCCL's bf16 reduce-scatter) with the partial products also rounded to bf16.
long long FusedBench::compare(const void* got, const void* want, size_t count, double tol_abs) {
  if (!o_.check) return 0;
  BENCH_CUDA(cudaStreamSynchronize(s_));
  const size_t es = dtype_size(dt_);
  std::vector<uint8_t> g(count * es), w(count * es);
  BENCH_CUDA(cudaMemcpy(g.data(), got, g.size(), cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(w.data(), want, w.size(), cudaMemcpyDeviceToHost));
  long long bad = 0;
  for (size_t i = 0; i < count; ++i) {
    const double x = detail::load_element(dt_, g.data(), i), y = detail::load_element(dt_, w.data(), i);
    if (!(std::fabs(x - y) <= 0x1p-6 * std::fabs(y) + tol_abs)) ++bad;
  }
  return bad;
}

void FusedBench::record(const Shape& sh, const std::string& impl, const std::string& algo, double us, long long wrong) {
  Measurement m;
  m.collective = sh.all_gather ? "ag_matmul" : "matmul_rs";
  m.backend = "cuda";
  m.impl = impl;
  m.algo = algo;
  m.dtype = std::string(to_string(dt_));
  m.op = "sum";
  m.bytes = static_cast<size_t>(sh.m * sh.n) * dtype_size(dt_);  // the GEMM's (global) output
  m.count = static_cast<size_t>(sh.m * sh.n);
  m.world_size = n_;
  m.time_us = us;
  m.wrong = wrong;
  m.extra_json =
      "\"M\": " + std::to_string(sh.m) + ", \"N\": " + std::to_string(sh.n) + ", \"K\": " + std::to_string(sh.k);
  rep_.add(m);
  times_[{sh.all_gather, sh.m, sh.k, sh.n, impl}] = us;
  wrong_ += wrong;
}

Gemm row_major_gemm(DataType dt, const void* a, const void* b, void* c, int64_t m, int64_t k, int64_t n) {
  return Gemm{.a = a, .lda = k, .b = b, .ldb = n, .c = c, .ldc = n, .m = m, .n = n, .k = k, .ab = dt, .c_dtype = dt};
}

void FusedBench::run_variants(const Shape& sh, const std::function<void()>& nccl_unfused, const Gemm& matmul,
                              const std::function<void(const FusedOptions&)>& fused, void* out, void* ref, size_t count,
                              double tol, std::initializer_list<int> chunk_counts) {
  const size_t bytes = count * dtype_size(dt_);
  nccl_unfused();
  BENCH_CUDA(cudaMemcpyAsync(ref, out, bytes, cudaMemcpyDeviceToDevice, s_));
  record(sh, "nccl_unfused", "nccl", time(nccl_unfused), 0);
  record(sh, "matmul", "cublaslt", time([&] { cublaslt_gemm(matmul, comm_.device(), s_); }), 0);
  std::vector<std::pair<std::string, FusedOptions>> variants = {{"fused", {}}, {"symcomm_unfused", {}}};
  variants[1].second.force_unfused = true;
  for (int c : chunk_counts) {
    variants.push_back({"fused_c" + std::to_string(c), FusedOptions{.chunks = c, .min_pipelined_flops = 0}});
  }
  for (auto& [impl, fo] : variants) {
    FusedPath path = FusedPath::kUnfused;
    fo.workspace = ws_.get();
    fo.path_out = &path;
    BENCH_CUDA(cudaMemsetAsync(out, 0xff, bytes, s_));
    fused(fo);
    const long long wrong = compare(out, ref, count, tol);
    const double us = time([&] { fused(fo); });
    record(sh, impl, std::string(to_string(path)), us, wrong);
  }
}

void FusedBench::run_all_gather(const Shape& sh) {
  const int64_t ml = sh.m / n_;
  const size_t es = dtype_size(dt_);
  void* shard = alloc_random(dt_, ml * sh.k, 1000 + me_, s_);
  void* b = alloc_random(dt_, sh.k * sh.n, 7, s_);
  void *full = nullptr, *c = nullptr, *c_ref = nullptr;
  BENCH_CUDA(cudaMalloc(&full, sh.m * sh.k * es));
  BENCH_CUDA(cudaMalloc(&c, sh.m * sh.n * es));
  BENCH_CUDA(cudaMalloc(&c_ref, sh.m * sh.n * es));
  const Gemm g = row_major_gemm(dt_, full, b, c, sh.m, sh.k, sh.n);
  TensorRef a{shard, dt_, {ml, sh.k}}, bt{b, dt_, {sh.k, sh.n}}, ct{c, dt_, {sh.m, sh.n}};
  run_variants(
      sh,
      [&] {
        BENCH_NCCL(ncclAllGather(shard, full, ml * sh.k, nccl_type(dt_), nccl_, s_));
        cublaslt_gemm(g, comm_.device(), s_);
      },
      g,
      [&](const FusedOptions& fo) {
        all_gather_matmul(comm_, a, {&bt, 1}, 0, {&ct, 1}, nullptr, {.stream = s_}, fo);
      },
      c, c_ref, sh.m * sh.n, 0x1p-6 * std::sqrt(static_cast<double>(sh.k)), {1, 2, 4});
  BENCH_CUDA(cudaStreamSynchronize(s_));
  for (void* p : {shard, b, full, c, c_ref}) cudaFree(p);
}

void FusedBench::run_reduce_scatter(const Shape& sh) {
  const int64_t ml = sh.m / n_;
  const size_t es = dtype_size(dt_);
  void* a = alloc_random(dt_, sh.m * sh.k, 2000 + me_, s_);
  void* b = alloc_random(dt_, sh.k * sh.n, 3000 + me_, s_);
  void *c = nullptr, *out = nullptr, *out_ref = nullptr;
  BENCH_CUDA(cudaMalloc(&c, sh.m * sh.n * es));
  BENCH_CUDA(cudaMalloc(&out, ml * sh.n * es));
  BENCH_CUDA(cudaMalloc(&out_ref, ml * sh.n * es));
  const Gemm g = row_major_gemm(dt_, a, b, c, sh.m, sh.k, sh.n);
  TensorRef at{a, dt_, {sh.m, sh.k}}, bt{b, dt_, {sh.k, sh.n}}, ot{out, dt_, {ml, sh.n}};
  run_variants(
      sh,
      [&] {
        cublaslt_gemm(g, comm_.device(), s_);
        BENCH_NCCL(ncclReduceScatter(c, out, ml * sh.n, nccl_type(dt_), ncclSum, nccl_, s_));
      },
      g,
      [&](const FusedOptions& fo) { matmul_reduce_scatter(comm_, at, bt, ReduceOp::kSum, 0, ot, {.stream = s_}, fo); },
      out, out_ref, ml * sh.n, 0x1p-5 * std::sqrt(static_cast<double>(sh.k * n_)), {4, 8, 16});
  BENCH_CUDA(cudaStreamSynchronize(s_));
  for (void* p : {a, b, c, out, out_ref}) cudaFree(p);
}

long long FusedBench::run() {
  n_ = comm_.world_size();
  me_ = comm_.rank();
  dt_ = o_.dtype;
  BENCH_CUDA(cudaSetDevice(comm_.device()));
  nccl_ = make_nccl_comm(comm_);
  BENCH_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
  // The two headline shapes of the fused-op requirement, then Llama-like ones (K = 4096, N = 14336 / 11008)
  // from M = 1024 to 16384.
  std::vector<Shape> shapes = {{true, 8192, 8192, 8192}, {false, 8192, 4096, 8192}};
  for (int64_t m : {1024, 4096, 16384}) {
    shapes.push_back({true, m, 4096, 14336});
    shapes.push_back({false, m, 4096, 14336});
  }
  shapes.push_back({true, 4096, 4096, 11008});
  shapes.push_back({false, 4096, 4096, 11008});
  // One workspace for every shape and chunk count: the largest need.
  size_t need = 256;
  for (const Shape& sh : shapes) {
    for (int chunks : {0, 1, 2, 4, 8, 16}) {
      TensorRef a{nullptr, dt_, {sh.all_gather ? sh.m / n_ : sh.m, sh.k}}, b{nullptr, dt_, {sh.k, sh.n}};
      need = std::max(need, sh.all_gather ? all_gather_matmul_workspace_bytes(n_, a, 0, false, chunks)
                                          : matmul_reduce_scatter_workspace_bytes(n_, a, b, 0, chunks));
    }
  }
  ws_ = FusedWorkspace::create(comm_, need);
  rep_.header("fused GEMM + collective (cuda backend, " + std::to_string(n_) + " ranks, " +
              std::string(to_string(dt_)) + ", workspace " + std::to_string(need >> 20) + " MiB)");
  for (const Shape& sh : shapes) {
    if (sh.m % n_ != 0) continue;
    sh.all_gather ? run_all_gather(sh) : run_reduce_scatter(sh);
  }
  print_summary(shapes);
  BENCH_CUDA(cudaDeviceSynchronize());
  ws_.reset();
  ncclCommDestroy(nccl_);
  cudaStreamDestroy(s_);
  return wrong_;
}

// Per shape: every implementation's time and its ratio to the matmul alone (target for "fused": <= 1.05).
void FusedBench::print_summary(const std::vector<Shape>& shapes) {
  if (me_ != 0) return;
  auto get = [&](const Shape& sh, const std::string& impl) {
    auto it = times_.find({sh.all_gather, sh.m, sh.k, sh.n, impl});
    return it == times_.end() ? -1.0 : it->second;
  };
  std::printf("\n# fused vs unfused vs matmul alone (us per op; ratio = time / matmul)\n");
  std::printf("%-10s %6s %6s %6s %9s %9s %9s %9s %8s %8s %8s %9s\n", "op", "M", "K", "N", "matmul", "fused", "sc_unfus",
              "nccl_unf", "r_fused", "r_scunf", "r_nccl", "best_fc");
  for (const Shape& sh : shapes) {
    const double mm = get(sh, "matmul"), f = get(sh, "fused"), su = get(sh, "symcomm_unfused"),
                 nu = get(sh, "nccl_unfused");
    double best = -1;
    for (const char* c : {"fused_c1", "fused_c2", "fused_c4", "fused_c8", "fused_c16"}) {
      const double x = get(sh, c);
      if (x > 0 && (best < 0 || x < best)) best = x;
    }
    auto r = [&](double x) { return mm > 0 && x > 0 ? x / mm : 0.0; };
    std::printf("%-10s %6lld %6lld %6lld %9.1f %9.1f %9.1f %9.1f %8.3f %8.3f %8.3f %9.3f\n",
                sh.all_gather ? "ag_matmul" : "matmul_rs", static_cast<long long>(sh.m), static_cast<long long>(sh.k),
                static_cast<long long>(sh.n), mm, f, su, nu, r(f), r(su), r(nu), r(best));
  }
  std::fflush(stdout);
}

}  // namespace

long long run_fused(Communicator& comm, const BenchOptions& o, Reporter& rep) {
  FusedBench b(comm, o, rep);
  return b.run();
}

}  // namespace symcomm::bench
