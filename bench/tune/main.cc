// symcomm-tune: measures the selector's paths on this machine and writes the thresholds into a tuning file
// (docs/tuning.md). Run it under symcomm-run:
//   symcomm-run -n 4 -- symcomm-tune --backend cuda --out tuning.json
// then SYMCOMM_TUNING_FILE=tuning.json makes every communicator of 4 ranks on this GPU use them.
// `symcomm-tune --rederive --out tuning.json` derives the file's thresholds again from its measurements.

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "bench.h"
#include "core/tuning_file.h"
#include "symcomm/symcomm.h"
#include "tune/output.h"
#include "tune/tune.h"

#ifndef SYMCOMM_TUNE_VERSION
#define SYMCOMM_TUNE_VERSION "unknown"
#endif

namespace {

using namespace symcomm;

std::string read_text(const std::string& path, bool* exists) {
  std::ifstream in(path, std::ios::binary);
  *exists = static_cast<bool>(in);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}

// The file replaced whole (a temporary beside it, renamed over it): a reader never sees half of it.
void write_text(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error(fmt::format("cannot write {}", tmp));
  }
  std::filesystem::rename(tmp, path);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof(buf) - 1) == 0 ? std::string(buf) : std::string("unknown");
}

int run(int argc, char** argv) {
  CLI::App app{"symcomm-tune: measures the selector's paths and writes a tuning file (run under symcomm-run)"};
  std::string backend, out, collectives, dtype, min_b = "4K", max_b, mode = "graph";
  tune::TuneOptions o;
  double step = 2.0, tolerance = tune::DeriveOptions{}.tolerance;
  bool rederive = false;
  app.add_option("--backend", backend, "host | cuda (required unless --rederive)")
      ->check(CLI::IsMember({"host", "cuda"}));
  app.add_flag("--rederive", rederive,
               "measure nothing: derive every entry of --out again from its stored measurements (no symcomm-run)");
  app.add_option("--out", out, "tuning file to write (its entries for other world sizes or devices are kept)")
      ->required();
  app.add_option("-c,--collective", collectives,
                 "comma-separated (default: host all_reduce; cuda all_reduce,all_gather,reduce_scatter)");
  app.add_option("-b,--min-bytes", min_b, "smallest size (K/M/G suffixes; the bytes the selector compares)");
  app.add_option("-e,--max-bytes", max_b, "largest size (default: host 4M, cuda 256M)");
  app.add_option("-f,--step-factor", step, "size multiplier between steps");
  app.add_option("-d,--dtype", dtype, "element type (default float32 on host, bfloat16 on cuda)");
  app.add_option("--mode", mode, "cuda: graph | eager (how the paths are timed)")
      ->check(CLI::IsMember({"graph", "eager"}));
  app.add_option("-w,--warmup", o.warmup, "untimed calls per measurement");
  app.add_option("-n,--iters", o.iters, "most timed calls per batch (fewer for large sizes)");
  app.add_option("--batches", o.batches, "batches per measurement; the median batch is kept");
  app.add_option("--tolerance", tolerance, "relative difference counted as a tie (noise)");
  CLI11_PARSE(app, argc, argv);
  if (rederive) {
    bool exists = false;
    const std::string text = read_text(out, &exists);
    if (!exists) throw std::runtime_error(fmt::format("cannot read {}", out));
    write_text(out, tune::rederive(text, out, {.tolerance = tolerance}));
    std::printf("# derived again: %s\n", out.c_str());
    return 0;
  }
  if (backend.empty()) {
    std::fprintf(stderr, "symcomm-tune: --backend is required\n");
    return 2;
  }

  const bool cuda = backend == "cuda";
  o.backend = cuda ? BackendKind::kCuda : BackendKind::kHost;
  o.graph = mode == "graph";
  const auto dt = parse_dtype(dtype.empty() ? (cuda ? "bfloat16" : "float32") : dtype);
  if (!dt) {
    std::fprintf(stderr, "symcomm-tune: unknown dtype '%s'\n", dtype.c_str());
    return 2;
  }
  o.dtype = *dt;
  std::string unknown;
  o.collectives = bench::parse_collectives(
      collectives.empty() ? (cuda ? "all_reduce,all_gather,reduce_scatter" : "all_reduce") : collectives, &unknown);
  if (!unknown.empty()) {
    std::fprintf(stderr, "symcomm-tune: unknown collective '%s'\n", unknown.c_str());
    return 2;
  }
#if !defined(SYMCOMM_BENCH_CUDA)
  if (cuda) {
    std::fprintf(stderr, "symcomm-tune: built without CUDA\n");
    return 2;
  }
#endif

  tune::TuneContext ctx;
  const Rendezvous rv = Rendezvous::from_env();
  ctx.ranks = rv.ranks;
  const bool root = ctx.ranks.rank == 0;
  // The file is checked before anything is measured: one that is not a tuning file is never overwritten.
  bool exists = false;
  const std::string existing = root ? read_text(out, &exists) : std::string();
  if (root && exists) detail::parse_tuning_file(existing, out);

  bench::BenchOptions sweep;
  sweep.min_bytes = bench::parse_size(min_b);
  sweep.max_bytes = bench::parse_size(max_b.empty() ? (cuda ? "256M" : "4M") : max_b);
  sweep.step_factor = step;
  o.sizes = bench::size_sweep(sweep, 16 * static_cast<size_t>(ctx.ranks.world_size));

  // The measuring communicators start from the SYMCOMM_* settings without a tuning file: they set the
  // thresholds of the paths they force themselves.
  ctx.base = Config::from_env();
  ctx.base.tuning_file.clear();
  std::unique_ptr<StoreServer> server;
  if (root)
    server = StoreServer::start({.host = rv.store_host, .port = rv.store_port, .token = rv.token, .limits = {}});
  ctx.store = Store::connect({.host = rv.store_host,
                              .port = server ? server->port() : rv.store_port,
                              .token = rv.token,
                              .timeout = ctx.base.timeout});

  std::string device(detail::kHostTuningDevice);
  std::vector<tune::Sample> samples;
  if (cuda) {
#if defined(SYMCOMM_BENCH_CUDA)
    samples = tune::tune_cuda(ctx, o, &device);
#endif
  } else {
    samples = tune::tune_host(ctx, o);
  }
  if (root) {
    const tune::Derived derived = tune::derive(o.backend, samples, {.tolerance = tolerance});
    std::printf("# symcomm-tune: %d ranks on '%s', %s, %s\n%s", ctx.ranks.world_size, device.c_str(),
                std::string(to_string(o.dtype)).c_str(), cuda ? mode.c_str() : "eager",
                tune::format_report(derived, samples).c_str());
    std::string command;
    for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
    const tune::Provenance provenance{.date = utc_now(),
                                      .machine = host_name(),
                                      .command = command,
                                      .symcomm_version = SYMCOMM_TUNE_VERSION,
                                      .backend = backend,
                                      .dtype = std::string(to_string(o.dtype)),
                                      .mode = cuda ? mode : "eager"};
    const auto entry = tune::make_entry(ctx.ranks.world_size, device, derived, samples, provenance);
    write_text(out, tune::merge_entry(existing, out, entry));
    std::printf("# written: %s (entry for %d ranks on '%s')\n", out.c_str(), ctx.ranks.world_size, device.c_str());
    std::fflush(stdout);
  }
  // Rank 0 hosts the store: it stays until every other rank is done with it.
  if (root) {
    std::vector<std::string> done;
    for (int r = 1; r < ctx.ranks.world_size; ++r) done.push_back(fmt::format("tune/done/{}", r));
    ctx.store->wait(done);
  } else {
    ctx.store->set(fmt::format("tune/done/{}", ctx.ranks.rank), Bytes{1});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "symcomm-tune: %s\n", e.what());
    return 1;
  }
}
