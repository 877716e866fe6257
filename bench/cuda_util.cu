#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "algos/elements.h"
#include "base/nccl_map.h"
#include "cuda_util.h"
#include "group_bench.h"

namespace symcomm::bench {

#define BENCH_CUBLAS(expr)                                                                       \
  do {                                                                                           \
    cublasStatus_t s_ = (expr);                                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                           \
      std::fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #expr, (int)s_); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

namespace {

__global__ void fill_kernel(void* dst, DataType dt, size_t count, int rank) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    const float v = static_cast<float>(input_value(i, rank));
    switch (dt) {
      case DataType::kBFloat16: static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v); break;
      case DataType::kFloat16: static_cast<__half*>(dst)[i] = __float2half_rn(v); break;
      case DataType::kFloat32: static_cast<float*>(dst)[i] = v; break;
      default: break;  // other dtypes: timed, not verified
    }
  }
}

}  // namespace

void fill_inputs(void* dst, DataType dt, size_t count, int rank, cudaStream_t s) {
  if (count == 0) return;
  const int blocks = static_cast<int>(std::min<size_t>((count + 255) / 256, 4096));
  fill_kernel<<<blocks, 256, 0, s>>>(dst, dt, count, rank);
}

long long verify_collective(const CollectiveOp& op, Collective c, size_t count, const void* in, void* out, DataType dt,
                            ReduceOp rop, int me, int n, cudaStream_t s, bool graph,
                            const std::function<void()>& beside) {
  if (rop != ReduceOp::kSum || !(dt == DataType::kBFloat16 || dt == DataType::kFloat16 || dt == DataType::kFloat32)) {
    return -1;  // not verified (0 would read as "verified, all correct")
  }
  const size_t es = dtype_size(dt);
  const size_t in_count = c == Collective::kReduceScatter || c == Collective::kAllToAll ? count * n : count;
  const size_t out_count = c == Collective::kAllGather || c == Collective::kAllToAll ? count * n : count;
  BENCH_CUDA(cudaMemsetAsync(out, 0xff, out_count * es, s));
  fill_inputs(const_cast<void*>(in), dt, in_count, me, s);
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    op(c, count, s);
    BENCH_CUDA(cudaStreamEndCapture(s, &g));
    BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
    cudaGraphDestroy(g);
  }
  if (beside) beside();
  if (graph) {
    BENCH_CUDA(cudaGraphLaunch(exec, s));
  } else {
    op(c, count, s);
  }
  BENCH_CUDA(cudaStreamSynchronize(s));
  if (exec) cudaGraphExecDestroy(exec);
  std::vector<uint8_t> host(out_count * es);
  BENCH_CUDA(cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDeviceToHost));
  long long wrong = 0;
  for (size_t i = 0; i < out_count; ++i) {
    double want = 0;
    if (c == Collective::kAllReduce || c == Collective::kReduceScatter) {
      const size_t j = c == Collective::kReduceScatter ? me * count + i : i;
      for (int r = 0; r < n; ++r) want += input_value(j, r);
    } else if (c == Collective::kAllGather) {
      want = input_value(i % count, static_cast<int>(i / count));
    } else if (c == Collective::kBroadcast) {
      want = input_value(i, 0);  // root 0
    } else if (c == Collective::kAllToAll) {
      want = input_value(me * count + i % count, static_cast<int>(i / count));
    }
    if (detail::load_element(dt, host.data() + i * es, 0) != want) ++wrong;
  }
  return wrong;
}

double time_cuda_eager(const CollectiveOp& op, Collective c, size_t count, cudaStream_t s, int warmup, int iters,
                       int batches, double* cpu_us) {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) op(c, count, s);
  std::vector<double> per_op, cpu_per_op;
  for (int k = 0; k < batches; ++k) {
    BENCH_CUDA(cudaEventRecord(a, s));
    const double c0 = group::thread_cpu_us();
    for (int i = 0; i < iters; ++i) op(c, count, s);
    cpu_per_op.push_back((group::thread_cpu_us() - c0) / iters);
    BENCH_CUDA(cudaEventRecord(b, s));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    per_op.push_back(ms * 1000.0 / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  *cpu_us = median(cpu_per_op);
  return median(per_op);
}

double time_cuda_graph(const CollectiveOp& op, Collective c, size_t count, cudaStream_t s, int iters, int batches) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < iters; ++i) op(c, count, s);
  BENCH_CUDA(cudaStreamEndCapture(s, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  BENCH_CUDA(cudaGraphLaunch(exec, s));  // warm-up (uploads the graph)
  BENCH_CUDA(cudaGraphLaunch(exec, s));
  std::vector<double> per_op;
  for (int k = 0; k < batches; ++k) {
    BENCH_CUDA(cudaEventRecord(a, s));
    BENCH_CUDA(cudaGraphLaunch(exec, s));
    BENCH_CUDA(cudaEventRecord(b, s));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    per_op.push_back(ms * 1000.0 / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(per_op);
}

ncclDataType_t nccl_type(DataType d) { return detail::to_nccl(d); }
ncclRedOp_t nccl_op(ReduceOp o) { return detail::to_nccl(o); }

ncclComm_t make_nccl_comm(Communicator& comm) {
  // NCCL must never use NVLink multicast here.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  ncclUniqueId id{};
  if (comm.rank() == 0) BENCH_NCCL(ncclGetUniqueId(&id));
  void* d = comm.alloc(sizeof(id));
  BENCH_CUDA(cudaMemcpy(d, &id, sizeof(id), cudaMemcpyHostToDevice));
  comm.broadcast(d, d, sizeof(id), DataType::kUInt8, 0);
  BENCH_CUDA(cudaDeviceSynchronize());
  BENCH_CUDA(cudaMemcpy(&id, d, sizeof(id), cudaMemcpyDeviceToHost));
  comm.free(d);
  ncclComm_t nccl = nullptr;
  BENCH_NCCL(ncclCommInitRank(&nccl, comm.world_size(), id, comm.rank()));
  return nccl;
}

void symcomm_collective(Communicator& comm, Collective c, const void* in, void* out, size_t count, DataType dt,
                        ReduceOp op, const CollOptions& opt) {
  switch (c) {
    case Collective::kAllReduce: comm.all_reduce(in, out, count, dt, op, opt); break;
    case Collective::kAllGather: comm.all_gather(in, out, count, dt, opt); break;
    case Collective::kReduceScatter: comm.reduce_scatter(in, out, count, dt, op, opt); break;
    case Collective::kBroadcast: comm.broadcast(in, out, count, dt, 0, opt); break;
    case Collective::kAllToAll: comm.all_to_all(in, out, count, dt, opt); break;
    case Collective::kBarrier: comm.barrier(opt); break;
  }
}

void nccl_collective(ncclComm_t nccl, Collective c, const void* in, void* out, size_t count, DataType dt, ReduceOp op,
                     cudaStream_t st) {
  const ncclDataType_t t = nccl_type(dt);
  switch (c) {
    case Collective::kAllReduce: BENCH_NCCL(ncclAllReduce(in, out, count, t, nccl_op(op), nccl, st)); break;
    case Collective::kAllGather: BENCH_NCCL(ncclAllGather(in, out, count, t, nccl, st)); break;
    case Collective::kReduceScatter: BENCH_NCCL(ncclReduceScatter(in, out, count, t, nccl_op(op), nccl, st)); break;
    case Collective::kBroadcast: BENCH_NCCL(ncclBroadcast(in, out, count, t, 0, nccl, st)); break;
    case Collective::kAllToAll: {
      int n = 0;
      BENCH_NCCL(ncclCommCount(nccl, &n));
      const size_t bytes = count * dtype_size(dt);
      BENCH_NCCL(ncclGroupStart());
      for (int p = 0; p < n; ++p) {
        BENCH_NCCL(ncclSend(static_cast<const char*>(in) + p * bytes, count, t, p, nccl, st));
        BENCH_NCCL(ncclRecv(static_cast<char*>(out) + p * bytes, count, t, p, nccl, st));
      }
      BENCH_NCCL(ncclGroupEnd());
      break;
    }
    case Collective::kBarrier: break;
  }
}

struct BenchGemm::Lt {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

BenchGemm::BenchGemm(int n) : n_(n), lt_(new Lt) {
  const size_t bytes = size_t{2} * n * n;
  BENCH_CUDA(cudaMalloc(&a_, bytes));
  BENCH_CUDA(cudaMalloc(&b_, bytes));
  BENCH_CUDA(cudaMalloc(&c_, bytes));
  BENCH_CUDA(cudaMalloc(&ws_, ws_bytes_));
  // Small values (0x3c00-ish bf16 patterns) so that nothing overflows; the result is not checked.
  BENCH_CUDA(cudaMemset(a_, 0x3c, bytes));
  BENCH_CUDA(cudaMemset(b_, 0x3c, bytes));
  BENCH_CUBLAS(cublasLtCreate(&lt_->handle));
  BENCH_CUBLAS(cublasLtMatmulDescCreate(&lt_->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  BENCH_CUBLAS(cublasLtMatrixLayoutCreate(&lt_->layout, CUDA_R_16BF, n, n, n));
  cublasLtMatmulPreference_t pref = nullptr;
  BENCH_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  BENCH_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes_,
                                                    sizeof(ws_bytes_)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  BENCH_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt_->handle, lt_->op, lt_->layout, lt_->layout, lt_->layout, lt_->layout,
                                              pref, 1, &heur, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0) {
    std::fprintf(stderr, "cuBLASLt found no bf16 GEMM algorithm for n=%d\n", n);
    std::abort();
  }
  lt_->algo = heur.algo;
}

BenchGemm::~BenchGemm() {
  cublasLtMatrixLayoutDestroy(lt_->layout);
  cublasLtMatmulDescDestroy(lt_->op);
  cublasLtDestroy(lt_->handle);
  delete lt_;
  cudaFree(a_);
  cudaFree(b_);
  cudaFree(c_);
  cudaFree(ws_);
}

void BenchGemm::run(cudaStream_t s) {
  const float alpha = 1.0f, beta = 0.0f;
  BENCH_CUBLAS(cublasLtMatmul(lt_->handle, lt_->op, &alpha, a_, lt_->layout, b_, lt_->layout, &beta, c_, lt_->layout,
                              c_, lt_->layout, &lt_->algo, ws_, ws_bytes_, s));
}

void cuda_sum_int64(Communicator& comm, int64_t* values, int n) {
  void* dev = nullptr;
  BENCH_CUDA(cudaMalloc(&dev, n * sizeof(int64_t)));
  BENCH_CUDA(cudaMemcpy(dev, values, n * sizeof(int64_t), cudaMemcpyHostToDevice));
  comm.all_reduce(dev, dev, n, DataType::kInt64, ReduceOp::kSum);  // the legacy stream: ordered with the copies
  BENCH_CUDA(cudaMemcpy(values, dev, n * sizeof(int64_t), cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaFree(dev));
}

}  // namespace symcomm::bench
