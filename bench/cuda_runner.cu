// CUDA runner of symcomm-bench: in one run and on the same sizes, symcomm vs NCCL on cudaMalloc buffers
// ("nccl") vs NCCL on ncclMemAlloc buffers registered with NCCL_WIN_COLL_SYMMETRIC ("nccl_symmetric"), each
// in eager mode and inside a CUDA graph. symcomm's buffers come from its symmetric heap (zero-copy paths).
// All-reduce is also measured with one-shot and two-shot forced (impl "symcomm_one_shot"/"symcomm_two_shot")
// to place the selection thresholds. Ends with a table of symcomm's time over the best NCCL mode.
//
// Timing: events around `iters` back-to-back ops (eager) or around one replay of a graph holding `iters`
// ops; per-op time = elapsed / iters; the reported time is the median over `batches`. Rank 0's clock.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench.h"
#include "cuda_util.h"
#include "group_bench.h"

namespace symcomm::bench {
namespace {

struct Buffers {
  void* in = nullptr;
  void* out = nullptr;
};

struct Impl {
  std::string name;
  Buffers buf;
  // Enqueues one op of (collective, count) on the stream.
  CollectiveOp op;
  std::function<std::string()> algo;
};

class CudaBench {
 public:
  CudaBench(Communicator& comm, const BenchOptions& o, Reporter& rep) : comm_(comm), o_(o), rep_(rep) {}

  long long run();

 private:
  void init_nccl();
  std::vector<Collective> collectives() const;
  size_t count_for(Collective c, size_t bytes) const;
  /// One op on known inputs, checked (verify_collective); `graph`: as the replay of a graph holding it.
  long long verify(Impl& impl, Collective c, size_t count, cudaStream_t s, bool graph);
  /// Per-op GPU time (median over batches); `cpu_us`: the issuing thread's CPU time per op (median).
  double time_eager(Impl& impl, Collective c, size_t count, cudaStream_t s, double* cpu_us);
  double time_graph(Impl& impl, Collective c, size_t count, cudaStream_t s);
  void print_summary();

  Communicator& comm_;
  const BenchOptions& o_;
  Reporter& rep_;
  ncclComm_t nccl_ = nullptr;
  int n_ = 1, me_ = 0;
  std::map<std::tuple<std::string, size_t, std::string>, double> eager_cpu_us_;  ///< (collective, bytes, impl)
};

std::vector<Collective> CudaBench::collectives() const {
  if (!o_.collectives.empty()) return o_.collectives;
  return {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter};
}

// nccl-tests convention: `bytes` is the larger of the per-rank input and output sizes.
size_t CudaBench::count_for(Collective c, size_t bytes) const {
  size_t es = dtype_size(o_.dtype);
  switch (c) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return bytes / es / n_;
    default: return bytes / es;
  }
}

void CudaBench::init_nccl() { nccl_ = make_nccl_comm(comm_); }

long long CudaBench::verify(Impl& impl, Collective c, size_t count, cudaStream_t s, bool graph) {
  return verify_collective(impl.op, c, count, impl.buf.in, impl.buf.out, o_.dtype, o_.op, me_, n_, s, graph);
}

double CudaBench::time_eager(Impl& impl, Collective c, size_t count, cudaStream_t s, double* cpu_us) {
  return time_cuda_eager(impl.op, c, count, s, o_.warmup, o_.iters, o_.batches, cpu_us);
}

double CudaBench::time_graph(Impl& impl, Collective c, size_t count, cudaStream_t s) {
  return time_cuda_graph(impl.op, c, count, s, o_.iters, o_.batches);
}

long long CudaBench::run() {
  n_ = comm_.world_size();
  me_ = comm_.rank();
  BENCH_CUDA(cudaSetDevice(comm_.device()));
  // Ranks sharing one GPU (Config::shared_gpu, SYMCOMM_SHARED_GPU=1, tests/README.md): NCCL refuses two
  // ranks on one device, so only symcomm's implementations run there (their kernels' own cost, not NVLink's).
  const bool with_nccl = !comm_.config().shared_gpu;
  if (with_nccl) {
    init_nccl();
  } else if (me_ == 0) {
    std::printf("# NCCL not measured: the ranks share a GPU (SYMCOMM_SHARED_GPU=1)\n");
  }
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::vector<size_t> sizes = size_sweep(o_, 16 * n_);
  size_t max_bytes = 16;
  for (size_t b : sizes) max_bytes = std::max(max_bytes, b);
  const DataType dt = o_.dtype;
  const ReduceOp rop = o_.op;

  // Buffers: in and out of max_bytes for every implementation.
  Buffers sym{comm_.alloc(max_bytes), comm_.alloc(max_bytes)};
  Buffers plain;
  BENCH_CUDA(cudaMalloc(&plain.in, max_bytes));
  BENCH_CUDA(cudaMalloc(&plain.out, max_bytes));
  Buffers nsym;
  ncclWindow_t win_in = nullptr, win_out = nullptr;
  if (with_nccl) {
    BENCH_NCCL(ncclMemAlloc(&nsym.in, max_bytes));
    BENCH_NCCL(ncclMemAlloc(&nsym.out, max_bytes));
    BENCH_NCCL(ncclCommWindowRegister(nccl_, nsym.in, max_bytes, &win_in, NCCL_WIN_COLL_SYMMETRIC));
    BENCH_NCCL(ncclCommWindowRegister(nccl_, nsym.out, max_bytes, &win_out, NCCL_WIN_COLL_SYMMETRIC));
  }

  auto symcomm_op = [&](Buffers b, Algorithm forced) {
    return [this, b, forced, dt, rop](Collective c, size_t count, cudaStream_t st) {
      symcomm_collective(
          comm_, c, b.in, b.out, count, dt, rop,
          {.stream = st, .algorithm = forced == Algorithm::kAuto ? o_.algorithm : forced, .contention = o_.contention});
    };
  };
  auto nccl_op_fn = [&](Buffers b) {
    return [this, b, dt, rop](Collective c, size_t count, cudaStream_t st) {
      nccl_collective(nccl_, c, b.in, b.out, count, dt, rop, st);
    };
  };
  std::vector<Impl> impls;
  impls.push_back({"symcomm", sym, symcomm_op(sym, Algorithm::kAuto),
                   [this] { return std::string(to_string(comm_.last_algorithm())); }});
  if (with_nccl) {
    impls.push_back({"nccl", plain, nccl_op_fn(plain), [] { return std::string("nccl"); }});
    impls.push_back({"nccl_symmetric", nsym, nccl_op_fn(nsym), [] { return std::string("nccl"); }});
  }
  // --extra plain: symcomm also on the cudaMalloc buffers (outside the heap: the staged paths).
  if (std::find(o_.extra.begin(), o_.extra.end(), "plain") != o_.extra.end()) {
    impls.push_back({"symcomm_plain", plain, symcomm_op(plain, Algorithm::kAuto),
                     [this] { return std::string(to_string(comm_.last_algorithm())); }});
  }
  impls.push_back(
      {"symcomm_one_shot", sym, symcomm_op(sym, Algorithm::kOneShot), [] { return std::string("one_shot"); }});
  impls.push_back(
      {"symcomm_two_shot", sym, symcomm_op(sym, Algorithm::kTwoShot), [] { return std::string("two_shot"); }});
  std::vector<std::string> modes = o_.modes.empty() ? std::vector<std::string>{"eager", "graph"} : o_.modes;

  long long wrong_total = 0;
  rep_.header("symcomm vs NCCL (cuda backend)");
  for (Collective c : collectives()) {
    for (size_t bytes : sizes) {
      const size_t count = count_for(c, bytes);
      for (Impl& impl : impls) {
        const bool forced = impl.name == "symcomm_one_shot" || impl.name == "symcomm_two_shot";
        if (forced && c != Collective::kAllReduce) continue;
        for (const std::string& mode : modes) {
          // Verified in the mode it is timed in: a graph replay runs what the capture recorded, which may differ.
          const long long wrong = o_.check ? verify(impl, c, count, s, mode == "graph") : -1;
          wrong_total += std::max<long long>(wrong, 0);
          const std::string algo = impl.algo();
          comm_.barrier({.stream = s});
          BENCH_CUDA(cudaStreamSynchronize(s));
          double cpu_us = -1;
          double us = mode == "graph" ? time_graph(impl, c, count, s) : time_eager(impl, c, count, s, &cpu_us);
          Measurement m;
          m.collective = std::string(to_string(c));
          m.backend = "cuda";
          m.impl = impl.name;
          m.algo = algo;
          m.mode = mode;
          m.dtype = std::string(to_string(dt));
          m.op = std::string(to_string(rop));
          m.bytes = bytes;
          m.count = count;
          m.world_size = n_;
          m.time_us = us;
          m.wrong = wrong;
          if (cpu_us >= 0) {
            m.extra_json = "\"cpu_us\": " + std::to_string(cpu_us);
            eager_cpu_us_[{m.collective, bytes, impl.name}] = cpu_us;
          }
          fill_bandwidth(m, c);
          rep_.add(m);
        }
      }
    }
  }
  comm_.check();
  print_summary();

  BENCH_CUDA(cudaDeviceSynchronize());
  if (with_nccl) {
    ncclCommWindowDeregister(nccl_, win_in);
    ncclCommWindowDeregister(nccl_, win_out);
    ncclMemFree(nsym.in);
    ncclMemFree(nsym.out);
  }
  cudaFree(plain.in);
  cudaFree(plain.out);
  comm_.free(sym.in);
  comm_.free(sym.out);
  if (with_nccl) ncclCommDestroy(nccl_);
  cudaStreamDestroy(s);
  return wrong_total;
}

// symcomm's time over the best NCCL mode (min over nccl / nccl_symmetric, eager / graph), per size, and
// per mode against NCCL's best in the same mode.
void CudaBench::print_summary() {
  if (me_ != 0) return;
  std::map<std::tuple<std::string, size_t, std::string, std::string>, double> t;  // (coll, bytes, impl, mode)
  for (const Measurement& m : rep_.all()) t[{m.collective, m.bytes, m.impl, m.mode}] = m.time_us;
  auto get = [&](const std::string& c, size_t b, const std::string& impl, const std::string& mode) {
    auto it = t.find({c, b, impl, mode});
    return it == t.end() ? -1.0 : it->second;
  };
  std::printf("\n# symcomm / best NCCL (lower is better); times in us; busbw of symcomm graph in GB/s\n");
  std::printf("%-15s %10s %9s %9s %9s %9s %9s %9s %8s %8s %8s %8s\n", "collective", "bytes", "sc_eager", "sc_graph",
              "nccl_e", "nccl_g", "ncsym_e", "ncsym_g", "r_eager", "r_graph", "r_best", "busbw");
  for (Collective c : collectives()) {
    std::string cs(to_string(c));
    for (size_t b : size_sweep(o_, 16 * n_)) {
      double se = get(cs, b, "symcomm", "eager"), sg = get(cs, b, "symcomm", "graph");
      double ne = get(cs, b, "nccl", "eager"), ng = get(cs, b, "nccl", "graph");
      double ye = get(cs, b, "nccl_symmetric", "eager"), yg = get(cs, b, "nccl_symmetric", "graph");
      auto best = [](std::initializer_list<double> v) {
        double r = -1;
        for (double x : v) {
          if (x > 0 && (r < 0 || x < r)) r = x;
        }
        return r;
      };
      double be = best({ne, ye}), bg = best({ng, yg}), ball = best({ne, ye, ng, yg}), sbest = best({se, sg});
      double busbw = sg > 0 ? static_cast<double>(b) / (sg * 1e3) * bus_factor(c, n_) : 0;
      std::printf("%-15s %10zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %8.3f %8.3f %8.3f %8.1f\n", cs.c_str(), b, se, sg,
                  ne, ng, ye, yg, be > 0 ? se / be : 0, bg > 0 ? sg / bg : 0, ball > 0 ? sbest / ball : 0, busbw);
    }
  }
  // The issuing thread's CPU time per eager call: where it exceeds the GPU time per op, eager mode is bound by
  // the host (launch path), not by the kernels.
  std::printf("\n# host CPU per eager call (us): symcomm, nccl, nccl_symmetric\n");
  for (Collective c : collectives()) {
    std::string cs(to_string(c));
    for (size_t b : size_sweep(o_, 16 * n_)) {
      std::printf("%-15s %10zu", cs.c_str(), b);
      for (const char* impl : {"symcomm", "nccl", "nccl_symmetric"}) {
        auto it = eager_cpu_us_.find({cs, b, impl});
        std::printf(" %9.2f", it == eager_cpu_us_.end() ? -1.0 : it->second);
      }
      std::printf("\n");
    }
  }
  std::printf("\n# all_reduce algorithm sweep (us): one_shot eager/graph, two_shot eager/graph\n");
  for (size_t b : size_sweep(o_, 16 * n_)) {
    std::printf("%10zu %9.2f %9.2f %9.2f %9.2f\n", b, get("all_reduce", b, "symcomm_one_shot", "eager"),
                get("all_reduce", b, "symcomm_one_shot", "graph"), get("all_reduce", b, "symcomm_two_shot", "eager"),
                get("all_reduce", b, "symcomm_two_shot", "graph"));
  }
  std::fflush(stdout);
}

}  // namespace

long long run_cuda(Communicator& comm, const BenchOptions& o, Reporter& rep) {
  CudaBench b(comm, o, rep);
  return b.run();
}

}  // namespace symcomm::bench
