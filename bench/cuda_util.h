#pragma once
// Shared pieces of symcomm-bench's CUDA runners: error macros, NCCL type mapping, an NCCL communicator made
// through symcomm (no second rendezvous), and a cuBLASLt bf16 GEMM used as the "compute" beside
// collectives.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

#include "symcomm/communicator.h"

#define BENCH_CUDA(expr)                                                                                 \
  do {                                                                                                   \
    cudaError_t e_ = (expr);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::abort();                                                                                      \
    }                                                                                                    \
  } while (0)
#define BENCH_NCCL(expr)                                                                                 \
  do {                                                                                                   \
    ncclResult_t r_ = (expr);                                                                            \
    if (r_ != ncclSuccess) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, ncclGetErrorString(r_)); \
      std::abort();                                                                                      \
    }                                                                                                    \
  } while (0)

namespace symcomm::bench {

ncclDataType_t nccl_type(DataType d);
ncclRedOp_t nccl_op(ReduceOp o);
/// A new NCCL communicator over the same ranks; its unique id travels through comm's broadcast.
ncclComm_t make_nccl_comm(Communicator& comm);
/// One collective through symcomm / through NCCL, with the benchmark's conventions (broadcast root 0,
/// all-to-all through grouped send/recv on NCCL).
void symcomm_collective(Communicator& comm, Collective c, const void* in, void* out, size_t count, DataType dt,
                        ReduceOp op, const CollOptions& opt);
void nccl_collective(ncclComm_t nccl, Collective c, const void* in, void* out, size_t count, DataType dt, ReduceOp op,
                     cudaStream_t st);

/// C = A x B, bf16 inputs and output, float32 accumulation (cuBLASLt), square n x n.
class BenchGemm {
 public:
  explicit BenchGemm(int n);
  ~BenchGemm();
  BenchGemm(const BenchGemm&) = delete;
  BenchGemm& operator=(const BenchGemm&) = delete;
  void run(cudaStream_t s);
  int n() const { return n_; }

 private:
  int n_;
  void *a_ = nullptr, *b_ = nullptr, *c_ = nullptr, *ws_ = nullptr;
  size_t ws_bytes_ = 64 << 20;
  struct Lt;
  Lt* lt_ = nullptr;
};

}  // namespace symcomm::bench
