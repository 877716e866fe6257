#include <cublasLt.h>

#include <vector>

#include "core/nccl_map.h"
#include "cuda_util.h"

namespace symcomm::bench {

#define BENCH_CUBLAS(expr)                                                                       \
  do {                                                                                           \
    cublasStatus_t s_ = (expr);                                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                           \
      std::fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #expr, (int)s_); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

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
