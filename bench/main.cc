// symcomm-bench: sweeps message sizes for the chosen collectives and prints an nccl-tests style table (and
// JSON lines with --json). Start it with symcomm-run (or torchrun) or, for the Open MPI baseline, mpirun.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "bench.h"
#include "symcomm/symcomm.h"
#if defined(SYMCOMM_BENCH_MPI)
#include "mpi_support.h"
#endif

namespace {

using namespace symcomm;

int run(int argc, char** argv) {
  CLI::App app{"symcomm-bench: collective benchmarks (run under symcomm-run, torchrun or mpirun)"};
  bench::BenchOptions o;
  std::string backend = "host", collectives = "all_reduce", dtype = "", op = "sum", algo = "auto", contention = "auto",
              min_b = "4K", max_b = "64M";
  std::vector<std::string> baselines, modes;
  app.add_option("--backend", backend, "host | cuda")->check(CLI::IsMember({"host", "cuda"}));
  app.add_option("-c,--collective", collectives,
                 "comma-separated: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, or all");
  app.add_option("-b,--min-bytes", min_b, "smallest size (K/M/G suffixes)");
  app.add_option("-e,--max-bytes", max_b, "largest size");
  app.add_option("-f,--step-factor", o.step_factor, "size multiplier between steps");
  app.add_option("-d,--dtype", dtype, "element type (default float32 on host, bfloat16 on cuda)");
  app.add_option("-o,--op", op, "sum | prod | min | max | avg");
  app.add_option("-w,--warmup", o.warmup, "warm-up iterations per size");
  app.add_option("-n,--iters", o.iters, "timed iterations per batch (fewer for large sizes)");
  app.add_option("--batches", o.batches, "batches per size; the median batch is reported");
  app.add_option("--baseline", baselines, "mpi (host, needs mpirun) | nccl (cuda)")->delimiter(',');
  app.add_option("--mode", modes, "eager,graph (cuda)")->delimiter(',');
  app.add_option("--algo", algo, "auto | one_shot | two_shot | direct | copy_engine | nccl");
  app.add_option("--contention", contention, "auto | low | throughput");
  app.add_option("--extra", o.extra,
                 "runner switches: plain (host: buffers outside the heap; cuda: symcomm also on cudaMalloc buffers), "
                 "contention, fused, group, bucket")
      ->delimiter(',');
  app.add_flag("!--no-check", o.check, "skip result verification");
  app.add_option("--json", o.json_path, "write one JSON object per measurement to this file");
  CLI11_PARSE(app, argc, argv);

  o.min_bytes = bench::parse_size(min_b);
  o.max_bytes = bench::parse_size(max_b);
  o.baselines = baselines;
  o.modes = modes.empty() ? std::vector<std::string>{"eager", "graph"} : modes;
  auto be = parse_backend(backend);
  auto dt = parse_dtype(dtype.empty() ? (backend == "cuda" ? "bfloat16" : "float32") : dtype);
  auto rop = parse_reduce_op(op);
  auto al = parse_algorithm(algo);
  if (!be || !dt || !rop || !al) {
    std::fprintf(stderr, "symcomm-bench: bad --backend/--dtype/--op/--algo value\n");
    return 2;
  }
  o.dtype = *dt;
  o.op = *rop;
  o.algorithm = *al;
  o.contention = contention == "low"          ? Contention::kLow
                 : contention == "throughput" ? Contention::kThroughput
                                              : Contention::kAuto;
  std::string unknown;
  o.collectives = bench::parse_collectives(collectives, &unknown);
  if (!unknown.empty()) {
    std::fprintf(stderr, "symcomm-bench: unknown collective '%s'\n", unknown.c_str());
    return 2;
  }

  CommOptions copts;
  copts.backend = *be;
  bool want_mpi = std::find(baselines.begin(), baselines.end(), "mpi") != baselines.end();
  std::unique_ptr<Communicator> comm;
#if defined(SYMCOMM_BENCH_MPI)
  bool mpi_mode = bench::mpi::launched_by_mpirun() && std::getenv("RANK") == nullptr;
  if (mpi_mode) {
    bench::mpi::init(&argc, &argv);
    comm = bench::mpi::create_communicator(copts);
  }
#else
  bool mpi_mode = false;
#endif
  if (want_mpi && !mpi_mode) {
    std::fprintf(stderr, "symcomm-bench: --baseline mpi needs a launch by mpirun (and a build with MPI)\n");
    return 2;
  }
  if (!comm) comm = Communicator::create_from_env(copts);

  long long wrong = 0;
  {
    bench::Reporter rep(comm->rank() == 0, o.json_path);
    rep.set_wrong_sum([&c = *comm](long long w) { return bench::wrong_on_all_ranks(c, w); });
    const bool coalescing = std::find(o.extra.begin(), o.extra.end(), "group") != o.extra.end() ||
                            std::find(o.extra.begin(), o.extra.end(), "bucket") != o.extra.end();
    if (coalescing) {
      wrong = bench::run_group_bench(*comm, o, rep);  // --extra group / --extra bucket
    } else if (*be == BackendKind::kHost) {
      wrong = bench::run_host(*comm, o, rep);
    } else {
#if defined(SYMCOMM_BENCH_CUDA)
      if (std::find(o.extra.begin(), o.extra.end(), "fused") != o.extra.end()) {
        wrong = bench::run_fused(*comm, o, rep);
      } else if (std::find(o.extra.begin(), o.extra.end(), "contention") != o.extra.end()) {
        wrong = bench::run_contention(*comm, o, rep);
      } else {
        wrong = bench::run_cuda(*comm, o, rep);
      }
#else
      std::fprintf(stderr, "symcomm-bench: built without CUDA\n");
      return 2;
#endif
    }
  }
  comm->barrier();
  comm.reset();
#if defined(SYMCOMM_BENCH_MPI)
  if (mpi_mode) bench::mpi::finalize();
#endif
  if (wrong > 0) {
    std::fprintf(stderr, "symcomm-bench: %lld wrong elements\n", wrong);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "symcomm-bench: %s\n", e.what());
    return 1;
  }
}
