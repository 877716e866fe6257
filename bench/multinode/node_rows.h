#pragma once
// What both multi-node benchmarks (main.cc: MPI between the nodes; cuda_main.cc: NCCL) share: their options, the
// collectives they take, one measured size of both paths, and the thresholds the measurements give.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "algos/node_plan.h"
#include "symcomm/types.h"

namespace symcomm::bench {

/// The options of both benchmarks (each sets its own defaults before add_node_bench_options()).
struct NodeBenchOptions {
  int node_size = 2;
  bool round_robin = false;
  std::string min_b, max_b;  ///< as given (K/M/G suffixes); min_bytes, max_bytes once parsed
  size_t min_bytes = 0, max_bytes = 0;
  int step = 4;  ///< size multiplier
  int batches = 7, warmup = 2;
  std::string collectives;
  std::string json_path;
};

/// The options of both benchmarks on `app`; `names` lists the collectives the benchmark takes.
inline void add_node_bench_options(CLI::App& app, NodeBenchOptions& o, const std::string& names) {
  app.add_option("--fake-node-size", o.node_size, "ranks per fake node (0: the real nodes)");
  app.add_flag("--round-robin", o.round_robin, "fake nodes take ranks round-robin");
  app.add_option("-b,--min-bytes", o.min_b, "smallest size (K/M/G suffixes), as the thresholds count bytes");
  app.add_option("-e,--max-bytes", o.max_b, "largest size");
  app.add_option("-f,--step-factor", o.step, "size multiplier between steps")->check(CLI::Range(2, 64));
  app.add_option("-c,--collective", o.collectives, "comma-separated: " + names);
  app.add_option("--batches", o.batches, "timed batches per size and path (median reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--json", o.json_path, "write one JSON object per measurement to this file (rank 0)");
}

/// One size of one collective, both paths (µs per call).
struct NodeRow {
  Collective c;
  size_t bytes;
  double flat_us, hier_us;
};

/// The collectives of a comma-separated list; nullopt (naming the first bad one in `bad`) for an unknown name or one
/// without a hierarchical path (all-to-all).
inline std::optional<std::vector<Collective>> parse_node_collectives(const std::string& list, std::string* bad) {
  std::vector<Collective> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, comma - at);
    at = comma + 1;
    const auto c = parse_collective(name);
    if (!c || *c == Collective::kAllToAll) {
      *bad = name;
      return std::nullopt;
    }
    out.push_back(*c);
  }
  return out;
}

/// MultiNodeOptions::min_bytes text of `colls`: for each, the smallest measured size from which the hierarchical path
/// is faster at every larger measured size ("max": at none).
inline std::string measured_thresholds(const std::vector<NodeRow>& rows, const std::vector<Collective>& colls) {
  std::string text;
  for (Collective c : colls) {
    size_t from = SIZE_MAX;
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
      if (it->c != c) continue;
      if (it->hier_us >= it->flat_us) break;
      from = it->bytes;
    }
    text += fmt::format("{}{}={}", text.empty() ? "" : ",", to_string(c), detail::threshold_text(from));
  }
  return text;
}

/// The JSON line of one row of benchmark `bench` on `nodes` nodes of `node_size` ranks.
inline nlohmann::json node_row_json(const char* bench, const NodeRow& r, int world, int nodes, int node_size,
                                    bool round_robin, const std::string& thresholds) {
  return {{"bench", bench},
          {"collective", to_string(r.c)},
          {"bytes", r.bytes},
          {"world_size", world},
          {"nodes", nodes},
          {"node_size", node_size},
          {"round_robin", round_robin},
          {"flat_us", r.flat_us},
          {"hierarchical_us", r.hier_us},
          {"thresholds", thresholds}};
}

/// Calls per timed batch at `bytes`: about 32 MB moved, between 3 and 200 calls.
inline int node_bench_iters(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((size_t{32} << 20) / std::max<size_t>(bytes, 1), 3, 200));
}

}  // namespace symcomm::bench
