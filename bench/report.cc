#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "bench.h"

namespace symcomm::bench {

double bus_factor(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce: return n > 1 ? 2.0 * (n - 1) / n : 1.0;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return n > 1 ? static_cast<double>(n - 1) / n : 1.0;
    default: return 1.0;
  }
}

void fill_bandwidth(Measurement& m, Collective c) {
  if (m.time_us <= 0) return;
  m.algbw_gbps = static_cast<double>(m.bytes) / (m.time_us * 1e3);
  m.busbw_gbps = m.algbw_gbps * bus_factor(c, m.world_size);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

size_t parse_size(const std::string& s) {
  size_t mult = 1;
  std::string digits = s;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k': mult = 1 << 10; break;
      case 'M':
      case 'm': mult = 1 << 20; break;
      case 'G':
      case 'g': mult = size_t{1} << 30; break;
      default: break;
    }
    if (mult != 1) digits.pop_back();
  }
  return static_cast<size_t>(std::stoull(digits)) * mult;
}

std::vector<Collective> parse_collectives(const std::string& list, std::string* unknown) {
  std::vector<Collective> out;
  std::string rest = list == "all" ? "all_reduce,all_gather,reduce_scatter,broadcast,all_to_all" : list;
  for (size_t pos = 0; pos <= rest.size();) {
    size_t comma = rest.find(',', pos);
    std::string name = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    auto c = parse_collective(name);
    if (!c || *c == Collective::kBarrier) {
      *unknown = name;
      return {};
    }
    out.push_back(*c);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::vector<size_t> size_sweep(const BenchOptions& o, size_t align) {
  std::vector<size_t> out;
  double f = std::max(o.step_factor, 1.01);
  for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes) * 1.0001; b *= f) {
    size_t s = static_cast<size_t>(b) / align * align;
    if (s == 0) s = align;
    if (out.empty() || out.back() != s) out.push_back(s);
  }
  return out;
}

Reporter::Reporter(bool is_root, const std::string& json_path) : root_(is_root) {
  if (root_ && !json_path.empty()) {
    json_ = std::fopen(json_path.c_str(), "w");
    if (!json_) std::fprintf(stderr, "symcomm-bench: cannot open %s for writing\n", json_path.c_str());
  }
}

Reporter::~Reporter() {
  if (json_) std::fclose(json_);
}

void Reporter::header(const std::string& title) {
  if (!root_) return;
  std::printf("#\n# %s\n#\n", title.c_str());
  std::printf("# %-14s %-6s %-15s %-11s %-5s %-8s %-4s %12s %12s %10s %10s %10s %6s\n", "collective", "backend", "impl",
              "algo", "mode", "dtype", "op", "bytes", "count", "time(us)", "algbw", "busbw", "wrong");
  std::fflush(stdout);
}

long long wrong_on_all_ranks(Communicator& comm, long long wrong) {
  if (comm.world_size() == 1) return wrong;
  int64_t v[2] = {std::max<long long>(wrong, 0), wrong < 0 ? 1 : 0};
  if (comm.backend() == BackendKind::kCuda) {
#if defined(SYMCOMM_BENCH_CUDA)
    cuda_sum_int64(comm, v, 2);
#endif
  } else {
    comm.all_reduce(v, v, 2, DataType::kInt64, ReduceOp::kSum);
  }
  return v[1] > 0 ? -1 : v[0];
}

void Reporter::add(const Measurement& measured) {
  Measurement m = measured;
  if (wrong_sum_) m.wrong = wrong_sum_(m.wrong);
  all_.push_back(m);
  if (!root_) return;
  std::printf("  %-14s %-6s %-15s %-11s %-5s %-8s %-4s %12zu %12zu %10.2f %10.2f %10.2f %6lld\n", m.collective.c_str(),
              m.backend.c_str(), m.impl.c_str(), m.algo.c_str(), m.mode.c_str(), m.dtype.c_str(), m.op.c_str(), m.bytes,
              m.count, m.time_us, m.algbw_gbps, m.busbw_gbps, m.wrong);
  std::fflush(stdout);
  if (json_) {
    nlohmann::json j = {{"collective", m.collective},
                        {"backend", m.backend},
                        {"impl", m.impl},
                        {"algo", m.algo},
                        {"mode", m.mode},
                        {"dtype", m.dtype},
                        {"op", m.op},
                        {"bytes", m.bytes},
                        {"count", m.count},
                        {"world_size", m.world_size},
                        {"time_us", m.time_us},
                        {"algbw_gbps", m.algbw_gbps},
                        {"busbw_gbps", m.busbw_gbps},
                        {"wrong", m.wrong}};
    if (!m.extra_json.empty()) {
      nlohmann::json extra = nlohmann::json::parse("{" + m.extra_json + "}");
      j.update(extra);
    }
    std::fprintf(json_, "%s\n", j.dump().c_str());
    std::fflush(json_);
  }
}

void Reporter::print_ratios(const std::string& baseline_impl) {
  if (!root_) return;
  using Key = std::tuple<std::string, std::string, size_t>;  // collective, mode, bytes
  std::map<Key, double> sym, base;
  for (const Measurement& m : all_) {
    Key k{m.collective, m.mode, m.bytes};
    if (m.impl == "symcomm") sym[k] = m.time_us;
    if (m.impl == baseline_impl) base[k] = m.time_us;
  }
  if (base.empty()) return;
  std::printf("#\n# time ratio symcomm / %s (below 1: symcomm faster; speed-up = 1 / ratio)\n", baseline_impl.c_str());
  std::printf("# %-14s %-5s %12s %12s %12s %8s %8s\n", "collective", "mode", "bytes", "symcomm(us)",
              (baseline_impl + "(us)").c_str(), "ratio", "speedup");
  for (const auto& [k, t] : sym) {
    auto it = base.find(k);
    if (it == base.end() || it->second <= 0 || t <= 0) continue;
    std::printf("  %-14s %-5s %12zu %12.2f %12.2f %8.3f %8.2f\n", std::get<0>(k).c_str(), std::get<1>(k).c_str(),
                std::get<2>(k), t, it->second, t / it->second, it->second / t);
  }
  std::fflush(stdout);
}

}  // namespace symcomm::bench
