// symcomm-multinode-cuda-bench: times the flat path (the whole job on NCCL) and the hierarchical path (symcomm in each
// node, NCCL between) of a CudaMultiNodeCommunicator (symcomm/multinode_cuda.h) side by side, size by size, and
// prints the `min_bytes` thresholds at which the hierarchical path wins (docs/design/multinode.md). One process per
// GPU, under the launcher (or torchrun's variables); fake nodes split one machine's GPUs.
//
//   symcomm-run -n 4 -- symcomm-multinode-cuda-bench --fake-node-size 2 [-b 4K -e 64M] [--json out.jsonl]

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench.h"
#include "node_rows.h"
#include "symcomm/multinode_cuda.h"
#include "symcomm/store.h"

namespace {

using namespace symcomm;
using Clock = std::chrono::steady_clock;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

int run(int argc, char** argv) {
  CLI::App app{"symcomm-multinode-cuda-bench: flat against hierarchical paths of a CUDA multi-node communicator"};
  bench::NodeBenchOptions o;
  o.min_b = "4K";
  o.max_b = "64M";
  o.warmup = 3;
  o.collectives = "all_reduce,all_gather,reduce_scatter,broadcast";
  bench::add_node_bench_options(app, o, "all_reduce, all_gather, reduce_scatter, broadcast");
  CLI11_PARSE(app, argc, argv);
  o.min_bytes = bench::parse_size(o.min_b);
  o.max_bytes = bench::parse_size(o.max_b);

  // The job's store: rank 0 serves it where the rendezvous names it.
  const Rendezvous rv = Rendezvous::from_env();
  const int me = rv.ranks.rank;
  std::unique_ptr<StoreServer> server;
  if (me == 0)
    server = StoreServer::start({.host = rv.store_host, .port = rv.store_port, .token = rv.token, .limits = {}});
  std::shared_ptr<Store> store(Store::connect({.host = rv.store_host, .port = rv.store_port, .token = rv.token}));
  std::string bad;
  const auto colls = bench::parse_node_collectives(o.collectives, &bad);
  if (!colls || std::find(colls->begin(), colls->end(), Collective::kBarrier) != colls->end()) {
    if (me == 0) std::fprintf(stderr, "collective '%s': none to time here\n", bad.empty() ? "barrier" : bad.c_str());
    return 2;
  }

  MultiNodeOptions mo;
  mo.node.backend = BackendKind::kCuda;
  mo.fake_node_size = o.node_size;
  mo.fake_round_robin = o.round_robin;
  auto comm = CudaMultiNodeCommunicator::create(store, rv.ranks, mo);
  const int w = comm->world_size(), n_nodes = comm->num_nodes(), l = comm->local_world_size();
  if (n_nodes < 2 || l < 2 || w % n_nodes != 0) {
    if (me == 0) std::fprintf(stderr, "%d ranks on %d nodes: no hierarchical path to time\n", w, n_nodes);
    return 2;
  }
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  const size_t cap = o.max_bytes * static_cast<size_t>(w) + 64;
  void *in = nullptr, *out = nullptr;
  cuda_check(cudaMalloc(&in, cap), "cudaMalloc");
  cuda_check(cudaMalloc(&out, cap), "cudaMalloc");
  cuda_check(cudaMemset(in, 0, cap), "cudaMemset");

  const auto call = [&](Collective c, size_t bytes, Hierarchy h) {
    const NodeCollOptions co{.hierarchy = h, .stream = s};
    const size_t count = c == Collective::kAllGather || c == Collective::kReduceScatter
                             ? bytes / sizeof(float) / static_cast<size_t>(w)
                             : bytes / sizeof(float);
    switch (c) {
      case Collective::kAllReduce: comm->all_reduce(in, out, count, DataType::kFloat32, ReduceOp::kSum, co); break;
      case Collective::kAllGather: comm->all_gather(in, out, count, DataType::kFloat32, co); break;
      case Collective::kReduceScatter:
        comm->reduce_scatter(in, out, count, DataType::kFloat32, ReduceOp::kSum, co);
        break;
      case Collective::kBroadcast: comm->broadcast(in, out, count, DataType::kFloat32, 0, co); break;
      case Collective::kBarrier:
      case Collective::kAllToAll: break;
    }
  };
  // Per-call time (µs) of one batch of `iters` calls, the ranks started together by a barrier and the stream drained.
  const auto batch_us = [&](int iters, const std::function<void()>& fn) {
    comm->barrier({.hierarchy = Hierarchy::kFlat, .stream = s});
    cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) fn();
    cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
  };

  std::vector<bench::NodeRow> rows;
  if (me == 0) {
    fmt::print("# {} ranks, {} nodes x {} ({}), float32 sum, median of {} batches (rank 0); times per call in us\n", w,
               n_nodes, l, o.node_size > 0 ? (o.round_robin ? "fake, round-robin" : "fake, consecutive") : "real",
               o.batches);
    fmt::print("{:>15} {:>10} {:>12} {:>12} {:>8}\n", "collective", "bytes", "flat", "hierarchical", "flat/hier");
  }
  for (Collective c : *colls) {
    const size_t unit = (c == Collective::kAllGather || c == Collective::kReduceScatter ? w : 1) * sizeof(float);
    for (size_t b = o.min_bytes; b <= o.max_bytes; b *= o.step) {
      const size_t bytes = std::max(unit, b / unit * unit);
      const int iters = bench::node_bench_iters(bytes);
      for (int k = 0; k < o.warmup; ++k) {
        call(c, bytes, Hierarchy::kFlat);
        call(c, bytes, Hierarchy::kHierarchical);
      }
      // Alternating batches of the two paths share the machine's noise.
      std::vector<double> flat, hier;
      for (int k = 0; k < o.batches; ++k) {
        flat.push_back(batch_us(iters, [&] { call(c, bytes, Hierarchy::kFlat); }));
        hier.push_back(batch_us(iters, [&] { call(c, bytes, Hierarchy::kHierarchical); }));
      }
      const bench::NodeRow r{c, bytes, bench::median(flat), bench::median(hier)};
      rows.push_back(r);
      if (me == 0) {
        fmt::print("{:>15} {:>10} {:>12.1f} {:>12.1f} {:>8.2f}\n", to_string(c), bytes, r.flat_us, r.hier_us,
                   r.flat_us / r.hier_us);
      }
    }
  }
  comm->check();
  const std::string measured = bench::measured_thresholds(rows, *colls);
  if (me == 0) fmt::print("# measured thresholds (MultiNodeOptions::min_bytes): {}\n", measured);
  if (me == 0 && !o.json_path.empty()) {
    std::ofstream js(o.json_path);
    for (const bench::NodeRow& r : rows) {
      js << bench::node_row_json("multinode_cuda", r, w, n_nodes, l, o.round_robin, measured).dump() << "\n";
    }
  }
  comm->barrier({.hierarchy = Hierarchy::kFlat, .stream = s});
  cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  comm.reset();
  cudaFree(in);
  cudaFree(out);
  cudaStreamDestroy(s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "symcomm-multinode-cuda-bench: %s\n", e.what());
    return 1;
  }
}
