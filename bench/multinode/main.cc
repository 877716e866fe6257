// symcomm-multinode-bench: times the flat and the hierarchical path of a MultiNodeCommunicator (symcomm/multinode.h)
// side by side, size by size, under mpirun; derives the `min_bytes` thresholds at which the hierarchical path wins,
// and checks the alpha-beta cost model of docs/design/multinode.md: it fits the model's intra- and inter-node links
// to the node all-reduce and to the inter-node MPI all-reduce of one shard, and prints the model's prediction of
// both all-reduce paths beside the measured times.
//
//   mpirun -np 4 symcomm-multinode-bench --fake-node-size 2 [--min-bytes 1K --max-bytes 16M] [--json out.jsonl]
//   symcomm-multinode-bench --model 3,150,10,40 [--model-node-size 8]   the model's table for given links

#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "algos/node_plan.h"
#include "bench.h"
#include "node_rows.h"
#include "symcomm/multinode.h"

namespace {

using namespace symcomm;
using Clock = std::chrono::steady_clock;

// Per-call time (µs) of `fn`: the median over batches of the slowest rank's mean of one batch.
double time_us(MPI_Comm comm, int iters, int batches, int warmup, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> per_batch;
  for (int b = 0; b < batches; ++b) {
    MPI_Barrier(comm);
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) fn();
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters, slowest = 0;
    MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    per_batch.push_back(slowest);
  }
  return bench::median(per_batch);
}

// Line t = a + b * x through the points, least squares of the relative error (weights 1/t^2), so the small sizes
// set the intercept (latency) and the large ones the slope (bandwidth).
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& t) {
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = t[i] > 0 ? 1 / (t[i] * t[i]) : 0;
    sw += w;
    sx += w * x[i];
    st += w * t[i];
    sxx += w * x[i] * x[i];
    sxt += w * x[i] * t[i];
  }
  const double den = sw * sxx - sx * sx;
  const double b = den > 0 ? (sw * sxt - sx * st) / den : 0;
  return {sw > 0 ? (st - b * sx) / sw : 0, b};
}

// --model: the model's all-reduce at 2-64 nodes of `node_size` ranks for the given links, no ranks needed: per
// node count, the sizes (powers of 2 from 1 KB to 4 GB) at which the hierarchical path is predicted faster, and
// flat / hierarchical at four sizes.
void print_model(const std::vector<double>& links, int node_size) {
  detail::NodeModel m;
  m.node_size = node_size;
  m.intra = {.latency_us = links[0], .bandwidth_GBps = links[1]};
  m.inter = {.latency_us = links[2], .bandwidth_GBps = links[3]};
  fmt::print("# model: {} ranks per node; intra {} us/step, {} GB/s per rank; inter {} us/step, {} GB/s per rank\n",
             node_size, links[0], links[1], links[2], links[3]);
  fmt::print(
      "| nodes | ranks | hierarchical faster | flat/hier 64 KB | 1 MB | 64 MB | 1 GB "
      "|\n|---|---|---|---|---|---|---|\n");
  for (int nodes = 2; nodes <= 64; nodes *= 2) {
    m.num_nodes = nodes;
    double lo = -1, hi = -1;  // the first and last size at which hierarchical wins
    for (double b = 1 << 10; b <= 4.0 * (1 << 30); b *= 2) {
      if (detail::model_hierarchical_all_reduce_us(m, b) >= detail::model_flat_all_reduce_us(m, b)) continue;
      if (lo < 0) lo = b;
      hi = b;
    }
    const auto ratio = [&](double b) {
      return detail::model_flat_all_reduce_us(m, b) / detail::model_hierarchical_all_reduce_us(m, b);
    };
    const auto size = [](double b) {
      return b >= (1 << 30)   ? fmt::format("{} GB", b / (1 << 30))
             : b >= (1 << 20) ? fmt::format("{} MB", b / (1 << 20))
                              : fmt::format("{} KB", b / (1 << 10));
    };
    const std::string at = lo < 0 ? std::string("none") : (lo > (1 << 10) ? size(lo) + " to " : "up to ") + size(hi);
    fmt::print("| {} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", nodes, nodes * node_size, at, ratio(64 << 10),
               ratio(1 << 20), ratio(64 << 20), ratio(1 << 30));
  }
}

int run(int argc, char** argv) {
  CLI::App app{"symcomm-multinode-bench: flat against hierarchical paths of a multi-node communicator (mpirun)"};
  bench::NodeBenchOptions o;
  o.min_b = "1K";
  o.max_b = "16M";
  o.collectives = "all_reduce,all_gather,reduce_scatter,broadcast,barrier";
  bench::add_node_bench_options(app, o, "all_reduce, all_gather, reduce_scatter, broadcast, barrier");
  std::vector<double> model_links;
  int model_node_size = 8;
  app.add_option("--model", model_links,
                 "print the cost model's table for these links and exit: intra_us,intra_GBps,inter_us,inter_GBps")
      ->delimiter(',')
      ->expected(4);
  app.add_option("--model-node-size", model_node_size, "ranks per node of --model")->check(CLI::Range(2, 1024));
  CLI11_PARSE(app, argc, argv);
  if (!model_links.empty()) {
    print_model(model_links, model_node_size);
    return 0;
  }
  o.min_bytes = bench::parse_size(o.min_b);
  o.max_bytes = bench::parse_size(o.max_b);

  MultiNodeOptions mo;
  mo.fake_node_size = o.node_size;
  mo.fake_round_robin = o.round_robin;
  auto comm = MultiNodeCommunicator::create(MPI_COMM_WORLD, mo);
  const int w = comm->world_size(), me = comm->rank(), n_nodes = comm->num_nodes(), l = comm->local_world_size();
  std::string bad;
  const auto parsed = bench::parse_node_collectives(o.collectives, &bad);
  if (!parsed) {
    if (me == 0) std::fprintf(stderr, "no hierarchical path to time for collective '%s'\n", bad.c_str());
    return 2;
  }
  const std::vector<Collective> colls = *parsed;
  std::vector<float> in(o.max_bytes / sizeof(float) + 1, 1.0f), out(in.size() * std::max(1, w));
  const auto call = [&](Collective c, size_t bytes, Hierarchy h) {
    const NodeCollOptions co{h};
    const size_t count = c == Collective::kAllGather || c == Collective::kReduceScatter
                             ? bytes / sizeof(float) / static_cast<size_t>(w)
                             : bytes / sizeof(float);
    switch (c) {
      case Collective::kAllReduce:
        comm->all_reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, co);
        break;
      case Collective::kAllGather: comm->all_gather(in.data(), out.data(), count, DataType::kFloat32, co); break;
      case Collective::kReduceScatter:
        comm->reduce_scatter(out.data(), in.data(), count, DataType::kFloat32, ReduceOp::kSum, co);
        break;
      case Collective::kBroadcast: comm->broadcast(in.data(), out.data(), count, DataType::kFloat32, 0, co); break;
      case Collective::kBarrier: comm->barrier(co); break;
      case Collective::kAllToAll: break;
    }
  };
  const bool can_hier = n_nodes > 1 && l > 1 && comm->inter_node_communicator() != MPI_COMM_NULL;
  if (!can_hier) {
    if (me == 0) std::fprintf(stderr, "%d ranks on %d nodes: no hierarchical path to time\n", w, n_nodes);
    return 2;
  }
  std::vector<bench::NodeRow> rows;
  if (me == 0) {
    fmt::print("# {} ranks, {} nodes x {} ({}), float32 sum, median of {} batches; times per call in us\n", w, n_nodes,
               l, o.node_size > 0 ? (o.round_robin ? "fake, round-robin" : "fake, consecutive") : "real", o.batches);
    fmt::print("{:>15} {:>10} {:>12} {:>12} {:>8}\n", "collective", "bytes", "flat", "hierarchical", "flat/hier");
  }
  for (Collective c : colls) {
    if (c == Collective::kAllToAll) continue;
    const size_t unit = (c == Collective::kAllGather || c == Collective::kReduceScatter ? w : 1) * sizeof(float);
    for (size_t b = o.min_bytes; b <= o.max_bytes; b *= o.step) {
      const size_t bytes = c == Collective::kBarrier ? 0 : std::max(unit, b / unit * unit);
      const int iters = bench::node_bench_iters(bytes);
      bench::NodeRow r{c, bytes, 0, 0};
      // Alternating batches of the two paths share the machine's noise.
      std::vector<double> flat, hier;
      for (int k = 0; k < o.batches; ++k) {
        flat.push_back(
            time_us(MPI_COMM_WORLD, iters, 1, k == 0 ? o.warmup : 0, [&] { call(c, bytes, Hierarchy::kFlat); }));
        hier.push_back(time_us(MPI_COMM_WORLD, iters, 1, k == 0 ? o.warmup : 0,
                               [&] { call(c, bytes, Hierarchy::kHierarchical); }));
      }
      r.flat_us = bench::median(flat);
      r.hier_us = bench::median(hier);
      rows.push_back(r);
      if (me == 0)
        fmt::print("{:>15} {:>10} {:>12.1f} {:>12.1f} {:>8.2f}\n", to_string(c), bytes, r.flat_us, r.hier_us,
                   r.flat_us / r.hier_us);
      if (c == Collective::kBarrier) break;
    }
  }

  // MultiNodeOptions::min_bytes text of the measured collectives only.
  const std::string measured = bench::measured_thresholds(rows, colls);
  if (me == 0) fmt::print("# measured thresholds (MultiNodeOptions::min_bytes): {}\n", measured);

  // The cost model, fitted: the node all-reduce of b bytes is two node stages, 2(L-1) latencies and 2(L-1)/L * b
  // over the intra link; the inter-node all-reduce of a b/L shard is 2(N-1) latencies and 2(N-1)/N * b/L.
  nlohmann::json model_fit;
  std::optional<detail::NodeModel> model;
  std::vector<double> xs, t_node, t_inter;
  const bool fit = std::find(colls.begin(), colls.end(), Collective::kAllReduce) != colls.end();
  if (fit) {
    Communicator& node = comm->node_communicator();
    const MPI_Comm inter = comm->inter_node_communicator();
    for (const bench::NodeRow& r : rows) {
      if (r.c != Collective::kAllReduce) continue;
      const size_t count = r.bytes / sizeof(float), shard = std::max<size_t>(1, count / l);
      const int iters = bench::node_bench_iters(r.bytes);
      xs.push_back(static_cast<double>(r.bytes));
      t_node.push_back(time_us(MPI_COMM_WORLD, iters, o.batches, o.warmup, [&] {
        node.all_reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
      }));
      t_inter.push_back(time_us(MPI_COMM_WORLD, iters, o.batches, o.warmup, [&] {
        MPI_Allreduce(in.data(), out.data(), static_cast<int>(shard), MPI_FLOAT, MPI_SUM, inter);
      }));
    }
    const auto [na, nb] = fit_line(xs, t_node);
    std::vector<double> shard_x;
    for (double x : xs) shard_x.push_back(x / l);
    const auto [ia, ib] = fit_line(shard_x, t_inter);
    detail::NodeModel m;
    m.num_nodes = n_nodes;
    m.node_size = l;
    m.intra = {.latency_us = std::max(0.0, na) / (2.0 * (l - 1)),
               .bandwidth_GBps = nb > 0 ? 2.0 * (l - 1) / l / nb / 1e3 : 0};
    m.inter = {.latency_us = std::max(0.0, ia) / (2.0 * (n_nodes - 1)),
               .bandwidth_GBps = ib > 0 ? 2.0 * (n_nodes - 1) / n_nodes / ib / 1e3 : 0};
    model_fit = {{"intra_latency_us", m.intra.latency_us},
                 {"intra_GBps", m.intra.bandwidth_GBps},
                 {"inter_latency_us", m.inter.latency_us},
                 {"inter_GBps", m.inter.bandwidth_GBps}};
    if (me == 0) {
      fmt::print("# model fitted: intra {:.2f} us/step, {:.2f} GB/s per rank; inter {:.2f} us/step, {:.2f} GB/s\n",
                 m.intra.latency_us, m.intra.bandwidth_GBps, m.inter.latency_us, m.inter.bandwidth_GBps);
      fmt::print("{:>10} {:>10} {:>12} {:>10} {:>12}\n", "bytes", "flat", "model flat", "hier", "model hier");
    }
    for (const bench::NodeRow& r : rows) {
      if (r.c != Collective::kAllReduce || me != 0) continue;
      fmt::print("{:>10} {:>10.1f} {:>12.1f} {:>10.1f} {:>12.1f}\n", r.bytes, r.flat_us,
                 detail::model_flat_all_reduce_us(m, static_cast<double>(r.bytes)), r.hier_us,
                 detail::model_hierarchical_all_reduce_us(m, static_cast<double>(r.bytes)));
    }
    model = m;
  }
  if (me == 0 && !o.json_path.empty()) {
    std::ofstream js(o.json_path);
    for (const bench::NodeRow& r : rows) {
      nlohmann::json j = bench::node_row_json("multinode", r, w, n_nodes, l, o.round_robin, measured);
      if (r.c == Collective::kAllReduce && model) {
        j["model"] = model_fit;
        j["model_flat_us"] = detail::model_flat_all_reduce_us(*model, static_cast<double>(r.bytes));
        j["model_hierarchical_us"] = detail::model_hierarchical_all_reduce_us(*model, static_cast<double>(r.bytes));
      }
      js << j.dump() << "\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "symcomm-multinode-bench: %s\n", e.what());
    rc = 1;
  }
  if (rc == 1) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
  return rc;
}
