// Contention benchmark (symcomm-bench --backend cuda --extra contention): how much a collective running on a
// side stream slows a bf16 GEMM (cuBLASLt, 8192^3) and how much the GEMM slows the collective, for symcomm's
// low-contention (copy-engine) path, symcomm's throughput path (SM kernels) and NCCL, in the same run.
//
// Method, per (collective, size, implementation) and batch:
//   - both streams first wait on a host flag (a one-thread spin kernel), so the GEMMs and the collectives
//     are released together;
//   - the GEMM stream runs G GEMMs between two events; the collective stream runs K collectives with an
//     event after each, K chosen (identically on all ranks) so that they outlast the GEMMs even unslowed;
//   - GEMM time while overlapped = (end - start) / G; the collective's overlapped time = mean gap between
//     consecutive collective events that both fall inside the GEMM window.
// Alone times come from the same loops without the other stream; the GEMMs alone run again right before each
// overlapped batch and the slowdown is the median of per-batch ratios. Reported: medians over --batches.
// Every collective (not the probes) is then run once more on known inputs beside the GEMMs and its output
// checked (the "wrong" column, every rank's count summed; -1 for the probes); the timed runs use zeroed inputs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench.h"
#include "cuda_util.h"

namespace symcomm::bench {
namespace {

constexpr int kGemmN = 8192;
constexpr int kGemms = 10;
constexpr int kGateOps = 32;  // collectives queued before the gate opens
constexpr int kMaxOverlapOps = 1000;

__global__ void gate_kernel(const volatile int* flag) {
  while (*flag == 0) {
  }
}

struct ContImpl {
  std::string name;
  std::function<void(Collective, size_t, cudaStream_t)> op;
  std::function<std::string()> algo;
  /// The input and output `op` uses for (collective, count), for its verification; unset for the probes, which
  /// are no collective (their rows' wrong count is -1, unverified).
  std::function<std::pair<const void*, void*>(Collective, size_t)> buffers;
};

class ContentionBench {
 public:
  ContentionBench(Communicator& comm, const BenchOptions& o, Reporter& rep)
      : comm_(comm), o_(o), rep_(rep), n_(comm.world_size()), me_(comm.rank()) {}
  long long run();

 private:
  float ms(cudaEvent_t a, cudaEvent_t b) {
    float v = 0;
    BENCH_CUDA(cudaEventElapsedTime(&v, a, b));
    return v;
  }
  void release_gate() { __atomic_store_n(flag_, 1, __ATOMIC_RELEASE); }
  void arm_gate(cudaStream_t s) { gate_kernel<<<1, 1, 0, s>>>(flag_dev_); }
  // Agreed on every rank: the maximum of v (a device all-reduce through symcomm).
  int agree_max(int v);
  double gemm_alone();
  double coll_alone(ContImpl& impl, Collective c, size_t count);
  struct Overlap {
    double gemm_alone_us = 0;  ///< median of the GEMMs alone, measured right before each overlapped batch
    double gemm_us = 0;        ///< median GEMM time while overlapped
    double slowdown_pct = 0;   ///< median over batches of (overlapped / alone of the same batch - 1)
    double coll_us = 0;        ///< median collective time while overlapped
    int inside = 0;            ///< collectives inside the GEMM window (median)
    bool covered = true;       ///< the collectives outlasted the GEMMs in every batch
  };
  Overlap overlapped(ContImpl& impl, Collective c, size_t count, int k);
  /// One op of `impl` on known inputs while the GEMMs run beside it, checked (verify_collective); -1 for a probe.
  long long verify_beside_gemms(ContImpl& impl, Collective c, size_t count);

  Communicator& comm_;
  const BenchOptions& o_;
  Reporter& rep_;
  int n_, me_;
  cudaStream_t sg_ = nullptr, sc_ = nullptr;
  int* flag_ = nullptr;
  int* flag_dev_ = nullptr;
  BenchGemm* gemm_ = nullptr;
};

int ContentionBench::agree_max(int v) {
  int* d = static_cast<int*>(comm_.alloc(sizeof(int)));
  BENCH_CUDA(cudaMemcpy(d, &v, sizeof(int), cudaMemcpyHostToDevice));
  comm_.all_reduce(d, d, 1, DataType::kInt32, ReduceOp::kMax, {.stream = sc_});
  BENCH_CUDA(cudaStreamSynchronize(sc_));
  BENCH_CUDA(cudaMemcpy(&v, d, sizeof(int), cudaMemcpyDeviceToHost));
  comm_.free(d);
  return v;
}

double ContentionBench::gemm_alone() {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  std::vector<double> v;
  for (int k = 0; k < o_.batches; ++k) {
    BENCH_CUDA(cudaEventRecord(a, sg_));
    for (int i = 0; i < kGemms; ++i) gemm_->run(sg_);
    BENCH_CUDA(cudaEventRecord(b, sg_));
    BENCH_CUDA(cudaEventSynchronize(b));
    v.push_back(ms(a, b) * 1000.0 / kGemms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(v);
}

double ContentionBench::coll_alone(ContImpl& impl, Collective c, size_t count) {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < o_.warmup; ++i) impl.op(c, count, sc_);
  std::vector<double> v;
  const int iters = std::max(o_.iters, 5);
  for (int k = 0; k < o_.batches; ++k) {
    comm_.barrier({.stream = sc_});
    BENCH_CUDA(cudaEventRecord(a, sc_));
    for (int i = 0; i < iters; ++i) impl.op(c, count, sc_);
    BENCH_CUDA(cudaEventRecord(b, sc_));
    BENCH_CUDA(cudaEventSynchronize(b));
    v.push_back(ms(a, b) * 1000.0 / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(v);
}

ContentionBench::Overlap ContentionBench::overlapped(ContImpl& impl, Collective c, size_t count, int k) {
  cudaEvent_t g0, g1;
  BENCH_CUDA(cudaEventCreate(&g0));
  BENCH_CUDA(cudaEventCreate(&g1));
  std::vector<cudaEvent_t> ev(k + 1);
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
  std::vector<double> alone_us, gemm_us, slow, coll_us, insides;
  bool covered = true;
  for (int b = 0; b < o_.batches; ++b) {
    // The GEMMs alone right before each overlapped batch: the slowdown compares neighbours in time (the GEMM's
    // own speed drifts by a few percent over a run, with clocks and temperature).
    BENCH_CUDA(cudaEventRecord(g0, sg_));
    for (int i = 0; i < kGemms; ++i) gemm_->run(sg_);
    BENCH_CUDA(cudaEventRecord(g1, sg_));
    BENCH_CUDA(cudaEventSynchronize(g1));
    alone_us.push_back(ms(g0, g1) * 1000.0 / kGemms);
    comm_.barrier({.stream = sc_});
    BENCH_CUDA(cudaStreamSynchronize(sc_));
    __atomic_store_n(flag_, 0, __ATOMIC_RELEASE);
    arm_gate(sc_);
    arm_gate(sg_);
    BENCH_CUDA(cudaEventRecord(g0, sg_));
    for (int i = 0; i < kGemms; ++i) gemm_->run(sg_);
    BENCH_CUDA(cudaEventRecord(g1, sg_));
    // Release the gate after the first collectives are queued: a stream holds a bounded number of pending
    // commands, and enqueueing more behind a closed gate would block this thread forever.
    BENCH_CUDA(cudaEventRecord(ev[0], sc_));
    for (int i = 1; i <= k; ++i) {
      impl.op(c, count, sc_);
      BENCH_CUDA(cudaEventRecord(ev[i], sc_));
      if (i == std::min(k, kGateOps)) release_gate();
    }
    BENCH_CUDA(cudaStreamSynchronize(sg_));
    BENCH_CUDA(cudaStreamSynchronize(sc_));
    const double window = ms(g0, g1);
    gemm_us.push_back(window * 1000.0 / kGemms);
    slow.push_back((gemm_us.back() / alone_us.back() - 1.0) * 100.0);
    // Collectives entirely inside the GEMM window.
    double first = -1, last = -1;
    int inside = 0;
    for (int i = 1; i <= k; ++i) {
      double t0 = ms(g0, ev[i - 1]), t1 = ms(g0, ev[i]);
      if (t0 >= 0 && t1 <= window) {
        if (first < 0) first = t0;
        last = t1;
        ++inside;
      }
    }
    if (ms(g0, ev[k]) < window) covered = false;
    double per_op = inside > 0 ? (last - first) * 1000.0 / inside : 0;
    // None ended inside the window: one collective outlasted the GEMMs. Its own duration then (it ran beside
    // them), not 0, which pulled the median down or, in every batch, made the row's time 0 and dropped it from
    // the verdicts (symcomm-targets also fails such rows: "inside" is 0).
    for (int i = 1; i <= k && inside == 0; ++i) {
      const double t0 = ms(g0, ev[i - 1]);
      if (t0 >= 0 && t0 < window) {
        per_op = (ms(g0, ev[i]) - t0) * 1000.0;
        break;
      }
    }
    coll_us.push_back(per_op);
    insides.push_back(inside);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  cudaEventDestroy(g0);
  cudaEventDestroy(g1);
  return {.gemm_alone_us = median(alone_us),
          .gemm_us = median(gemm_us),
          .slowdown_pct = median(slow),
          .coll_us = median(coll_us),
          .inside = static_cast<int>(median(insides)),
          .covered = covered};
}

long long ContentionBench::verify_beside_gemms(ContImpl& impl, Collective c, size_t count) {
  if (!impl.buffers) return -1;
  const auto [in, out] = impl.buffers(c, count);
  comm_.barrier({.stream = sc_});
  BENCH_CUDA(cudaStreamSynchronize(sc_));
  const auto gemms = [this] {
    for (int i = 0; i < kGemms; ++i) gemm_->run(sg_);
  };
  const long long wrong = verify_collective(impl.op, c, count, in, out, o_.dtype, o_.op, me_, n_, sc_, false, gemms);
  BENCH_CUDA(cudaStreamSynchronize(sg_));
  return wrong;
}

long long ContentionBench::run() {
  BENCH_CUDA(cudaSetDevice(comm_.device()));
  BENCH_CUDA(cudaStreamCreateWithFlags(&sg_, cudaStreamNonBlocking));
  BENCH_CUDA(cudaStreamCreateWithFlags(&sc_, cudaStreamNonBlocking));
  BENCH_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&flag_), sizeof(int), cudaHostAllocMapped));
  BENCH_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev_), flag_, 0));
  *flag_ = 1;
  // Ranks sharing one GPU (SYMCOMM_SHARED_GPU=1): NCCL refuses two ranks on one device, so its rows are left out.
  const bool with_nccl = !comm_.config().shared_gpu || n_ == 1;
  ncclComm_t nccl = with_nccl ? make_nccl_comm(comm_) : nullptr;
  BenchGemm gemm(kGemmN);
  gemm_ = &gemm;
  for (int i = 0; i < 5; ++i) gemm.run(sg_);
  BENCH_CUDA(cudaStreamSynchronize(sg_));

  const std::vector<size_t> sizes = size_sweep(o_, 16 * n_);
  size_t max_bytes = 16;
  for (size_t b : sizes) max_bytes = std::max(max_bytes, b);
  void* sym_in = comm_.alloc(max_bytes);
  void* sym_out = comm_.alloc(max_bytes);
  void *in = nullptr, *out = nullptr;
  BENCH_CUDA(cudaMalloc(&in, max_bytes));
  BENCH_CUDA(cudaMalloc(&out, max_bytes));
  BENCH_CUDA(cudaMemset(in, 0, max_bytes));
  BENCH_CUDA(cudaMemset(sym_in, 0, max_bytes));
  const DataType dt = o_.dtype;
  const ReduceOp rop = o_.op;

  auto symcomm_op = [&](Contention contention) {
    return [this, contention, sym_in, sym_out, dt, rop](Collective c, size_t count, cudaStream_t st) {
      symcomm_collective(comm_, c, sym_in, sym_out, count, dt, rop, {.stream = st, .contention = contention});
    };
  };
  auto nccl_fn = [in, out, dt, rop, nccl](Collective c, size_t count, cudaStream_t st) {
    nccl_collective(nccl, c, in, out, count, dt, rop, st);
  };
  // In place (all-gather: the input is this rank's block of the output; reduce-scatter: the output is this
  // rank's block of the input), the layout FSDP uses: no own-block copy. A local device-to-device copy is a
  // kernel (measured: local_memcpy below waits for the GEMM), so only in place is a copy-engine all-gather
  // free of SM work.
  auto in_place = [this, dt](Collective c, void* base, size_t count) -> std::pair<void*, void*> {
    char* own = static_cast<char*>(base) + static_cast<size_t>(me_) * count * dtype_size(dt);
    return c == Collective::kReduceScatter ? std::pair<void*, void*>{base, own} : std::pair<void*, void*>{own, base};
  };
  auto symcomm_ip = [this, in_place, sym_in, sym_out, dt, rop](Collective c, size_t count, cudaStream_t st) {
    auto [i, o] = in_place(c, c == Collective::kReduceScatter ? sym_in : sym_out, count);
    symcomm_collective(comm_, c, i, o, count, dt, rop, {.stream = st, .contention = Contention::kLow});
  };
  auto nccl_ip = [in_place, in, out, dt, rop, nccl](Collective c, size_t count, cudaStream_t st) {
    auto [i, o] = in_place(c, c == Collective::kReduceScatter ? in : out, count);
    nccl_collective(nccl, c, i, o, count, dt, rop, st);
  };
  // What each real collective reads and writes (its verification), out of place and in place.
  const auto apart = [](const void* i, void* o) {
    return [i, o](Collective, size_t) { return std::pair<const void*, void*>{i, o}; };
  };
  const auto within = [in_place](void* in_base, void* out_base) {
    return [in_place, in_base, out_base](Collective c, size_t count) {
      auto [i, o] = in_place(c, c == Collective::kReduceScatter ? in_base : out_base, count);
      return std::pair<const void*, void*>{i, o};
    };
  };
  std::vector<ContImpl> impls;
  impls.push_back({"symcomm_low", symcomm_op(Contention::kLow),
                   [this] { return std::string(to_string(comm_.last_algorithm())); }, apart(sym_in, sym_out)});
  impls.push_back({"symcomm_low_inplace", symcomm_ip, [this] { return std::string(to_string(comm_.last_algorithm())); },
                   within(sym_in, sym_out)});
  impls.push_back({"nccl_inplace", nccl_ip, [] { return std::string("nccl"); }, within(in, out)});
  impls.push_back({"symcomm_throughput", symcomm_op(Contention::kThroughput),
                   [this] { return std::string(to_string(comm_.last_algorithm())); }, apart(sym_in, sym_out)});
  impls.push_back({"nccl", nccl_fn, [] { return std::string("nccl"); }, apart(in, out)});
  // Probe: the copy-engine protocol with a tiny payload (stream memory operations and one small copy from
  // the peer, in place): what the synchronisation alone costs and whether it waits for the GEMM.
  impls.push_back({"symcomm_low_tiny",
                   [this, in_place, sym_out, dt](Collective, size_t, cudaStream_t st) {
                     auto [i, o] = in_place(Collective::kAllGather, sym_out, 8);
                     comm_.all_gather(i, o, 8, dt, {.stream = st, .contention = Contention::kLow});
                   },
                   [this] { return std::string(to_string(comm_.last_algorithm())); }});
  // Probe: a plain copy-engine read of the peer's buffer (cudaMemcpyAsync from its mapping, no barrier).
  impls.push_back({"peer_memcpy",
                   [this, sym_in, out, dt](Collective c, size_t count, cudaStream_t st) {
                     const size_t bytes = count * dtype_size(dt) * (c == Collective::kAllGather ? n_ - 1 : 1);
                     const void* src = comm_.peer_ptr(sym_in, (me_ + 1) % n_);
                     BENCH_CUDA(cudaMemcpyAsync(out, src, bytes, cudaMemcpyDeviceToDevice, st));
                   },
                   [] { return std::string("memcpy"); }});
  // Probe: a plain local device-to-device cudaMemcpyAsync of the output size (what the copy engine alone
  // costs the GEMM on this GPU, with no communication at all).
  impls.push_back({"local_memcpy",
                   [this, in, out, dt](Collective c, size_t count, cudaStream_t st) {
                     const size_t bytes =
                         count * dtype_size(dt) * (c == Collective::kAllGather || c == Collective::kAllToAll ? n_ : 1);
                     BENCH_CUDA(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, st));
                   },
                   [] { return std::string("memcpy"); }});

  if (!with_nccl) {
    std::erase_if(impls, [](const ContImpl& i) { return i.name.rfind("nccl", 0) == 0; });
    if (me_ == 0) std::printf("# NCCL not measured: the ranks share a GPU (SYMCOMM_SHARED_GPU=1)\n");
  }
  // SYMCOMM_BENCH_IMPLS=a,b keeps only those implementations (quick probes on a short device budget).
  if (const char* only = std::getenv("SYMCOMM_BENCH_IMPLS"); only != nullptr && *only != '\0') {
    const std::string keep = std::string(",") + only + ",";
    std::erase_if(impls, [&](const ContImpl& i) { return keep.find("," + i.name + ",") == std::string::npos; });
  }
  rep_.header("contention: bf16 GEMM 8192^3 beside a collective (cuda backend)");
  if (me_ == 0) {
    std::printf("%-15s %10s %-19s %-11s %10s %10s %8s %10s %10s %7s %8s %s\n", "collective", "bytes", "impl", "algo",
                "gemm_us", "gemm_ov", "slow_%", "coll_us", "coll_ov", "ratio", "busbw", "inside/k");
  }
  std::vector<Collective> colls = o_.collectives;
  long long wrong_total = 0;
  for (Collective c : colls) {
    for (size_t bytes : sizes) {
      const size_t es = dtype_size(dt);
      const size_t count = c == Collective::kAllGather || c == Collective::kReduceScatter || c == Collective::kAllToAll
                               ? bytes / es / n_
                               : bytes / es;
      const double g_alone = gemm_alone();
      for (ContImpl& impl : impls) {
        const double alone = coll_alone(impl, c, count);
        const std::string algo = impl.algo();
        const int k = agree_max(static_cast<int>(std::ceil(1.5 * kGemms * g_alone / std::max(alone, 1.0))) + 2);
        const Overlap ov = overlapped(impl, c, count, std::min(k, kMaxOverlapOps));
        // Then checked, beside the GEMMs as it was timed, and the inputs zeroed again for the next rows (an in-place
        // reduce-scatter sums into its input).
        const long long wrong = o_.check ? verify_beside_gemms(impl, c, count) : -1;
        wrong_total += std::max<long long>(wrong, 0);
        BENCH_CUDA(cudaMemset(in, 0, max_bytes));
        BENCH_CUDA(cudaMemset(sym_in, 0, max_bytes));
        BENCH_CUDA(cudaMemset(out, 0, max_bytes));
        BENCH_CUDA(cudaMemset(sym_out, 0, max_bytes));
        Measurement m;
        m.collective = std::string(to_string(c));
        m.backend = "cuda";
        m.impl = impl.name;
        m.algo = algo;
        m.mode = "overlap";
        m.dtype = std::string(to_string(dt));
        m.op = std::string(to_string(rop));
        m.bytes = bytes;
        m.count = count;
        m.world_size = n_;
        m.time_us = ov.coll_us;
        m.wrong = wrong;
        fill_bandwidth(m, c);
        const double alone_busbw = static_cast<double>(bytes) / (alone * 1e3) * bus_factor(c, n_);
        char extra[512];
        std::snprintf(extra, sizeof(extra),
                      "\"gemm_alone_us\": %.2f, \"gemm_overlap_us\": %.2f, \"gemm_slowdown_pct\": %.3f, "
                      "\"coll_alone_us\": %.2f, \"coll_overlap_us\": %.2f, \"coll_overlap_ratio\": %.3f, "
                      "\"inside\": %d, \"covered\": %s",
                      ov.gemm_alone_us, ov.gemm_us, ov.slowdown_pct, alone, ov.coll_us,
                      alone > 0 ? ov.coll_us / alone : 0.0, ov.inside, ov.covered ? "true" : "false");
        m.extra_json = extra;
        rep_.add(m);
        if (me_ == 0) {
          std::printf("%-15s %10zu %-19s %-11s %10.1f %10.1f %8.2f %10.1f %10.1f %7.3f %8.1f %4d/%d%s\n",
                      m.collective.c_str(), bytes, impl.name.c_str(), algo.c_str(), ov.gemm_alone_us, ov.gemm_us,
                      ov.slowdown_pct, alone, ov.coll_us, alone > 0 ? ov.coll_us / alone : 0.0, alone_busbw, ov.inside,
                      k, ov.covered ? "" : "  (collectives ended early)");
          std::fflush(stdout);
        }
      }
    }
  }
  comm_.check();
  BENCH_CUDA(cudaDeviceSynchronize());
  comm_.free(sym_in);
  comm_.free(sym_out);
  cudaFree(in);
  cudaFree(out);
  if (nccl) ncclCommDestroy(nccl);
  cudaFreeHost(flag_);
  gemm_ = nullptr;
  cudaStreamDestroy(sg_);
  cudaStreamDestroy(sc_);
  return wrong_total;
}

}  // namespace

long long run_contention(Communicator& comm, const BenchOptions& o, Reporter& rep) {
  ContentionBench b(comm, o, rep);
  return b.run();
}

}  // namespace symcomm::bench
