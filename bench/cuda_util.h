#pragma once
// Shared pieces of symcomm-bench's CUDA runners: error macros, NCCL type mapping, an NCCL communicator made
// through symcomm (no second rendezvous), and a cuBLASLt bf16 GEMM used as the "compute" beside
// collectives.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

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

/// Enqueues one collective of `count` elements on the stream (the timed and verified operation).
using CollectiveOp = std::function<void(Collective, size_t, cudaStream_t)>;

/// Per-op GPU time in microseconds, the median over `batches`: events around `iters` back-to-back ops after
/// `warmup` ops; `cpu_us`: the issuing thread's CPU time per op (median).
double time_cuda_eager(const CollectiveOp& op, Collective c, size_t count, cudaStream_t s, int warmup, int iters,
                       int batches, double* cpu_us);
/// The same for a CUDA graph holding `iters` ops: events around one replay per batch, after two replays.
double time_cuda_graph(const CollectiveOp& op, Collective c, size_t count, cudaStream_t s, int iters, int batches);

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

/// Input value of element i on rank r in the verified runs: small integers, exact in bf16/f16/f32 sums over 8
/// ranks.
__host__ __device__ inline int input_value(size_t i, int rank) { return static_cast<int>((i * 7 + rank * 3) % 5); }
/// dst[i] = input_value(i, rank) for i < count (bf16, f16, f32; other dtypes are left alone), on `s`.
void fill_inputs(void* dst, DataType dt, size_t count, int rank, cudaStream_t s);
/// One op of collective `c` (`op`, as timed) on known inputs, its output checked element by element against the
/// inputs of every rank (sums, blocks; broadcast root 0): the number of wrong elements, or -1 where the dtype
/// or reduction cannot be checked exactly (only sums of bf16, f16, f32 are). `in` and `out` are the buffers `op`
/// uses (in place: the input inside the output or the other way round): the output is poisoned first, then
/// the input filled. `graph`: the op runs as the replay of a CUDA graph captured around it. `beside`: if set,
/// called right before the op with the op's stream, to start work that runs at the same time (a GEMM).
long long verify_collective(const CollectiveOp& op, Collective c, size_t count, const void* in, void* out, DataType dt,
                            ReduceOp rop, int me, int n, cudaStream_t s, bool graph,
                            const std::function<void()>& beside = {});

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
