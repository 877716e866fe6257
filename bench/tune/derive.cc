#include "tune/derive.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/tuning_file.h"

namespace symcomm::tune {

// NOTE [threshold derivation]
// The selector's thresholds cut the sizes into consecutive ranges, one path per range, in a fixed order (a
// chain): a CUDA all-reduce goes LL up to cuda_ll_max_bytes, LL128 up to cuda_ll128_max_bytes, the staged
// one-shot up to cuda_one_shot_max_bytes, the LL128 two-shot up to cuda_ll128_two_shot_max_bytes (0 when it serves
// no size), two-shot pulling below cuda_two_shot_push_min_bytes and pushing from it, NCCL above cuda_two_shot_max_bytes
// or from cuda_nccl_min_bytes; the gathers (all-gather, reduce-scatter, all-to-all, broadcast) go NCCL up to
// cuda_direct_nccl_max_bytes, LL up to cuda_ll_gather_max_bytes, LL128 up to cuda_ll128_gather_max_bytes
// (reduce-scatter: cuda_ll128_reduce_scatter_max_bytes; 0 when it serves no size), the direct kernels, NCCL from
// cuda_nccl_min_bytes; the
// host all-reduce goes one-shot up to host_one_shot_max_bytes, two-shot above. So the choice is a monotone segmentation
// of the measured sizes: each size goes to one path, and a later size never to an earlier path of the chain.
// - Loss: at each size, a path's relative loss against the fastest valid path of that collective there
//   (time / fastest - 1), summed over the chain's collectives (a threshold such as cuda_ll_gather_max_bytes is
//   shared by all of them). Relative, so that the small sizes, where times are microseconds, count as much as
//   the large ones.
// - Noise and ties: times are medians over batches; a loss within the tolerance (3% by default) counts as 0,
//   since the run-to-run spread of one path is about that large. Among segmentations of equal counted loss the
//   one with fewer non-empty ranges wins (a path is not given a range for a gain within noise), then the one
//   with the lower raw loss, then the first found (earlier paths first). Since the segmentation is monotone, a
//   single noisy size can at most move a boundary, never insert a range in the middle of another path's.
// - A path that cannot serve a size (beyond the LL buffers, refused, or with a wrong result: disqualified and
//   reported) has an infinite loss there; sizes where no collective has a valid time are left out.
// - A boundary between measured sizes a < b becomes the geometric mean of a and b (the sizes between were not
//   measured); a path that serves the largest measured size keeps serving larger ones ("up to" thresholds
//   become their field's maximum, "from" thresholds of paths not reached stay SIZE_MAX), and one that serves
//   the smallest serves smaller ones.
// - cuda_nccl_min_bytes is shared by the all-reduce and the gathers (compared with their different byte
//   measures, as select() does): each candidate value is tried with the gathers' NCCL range starting there
//   and the all-reduce's covering everything from there, and the candidate of least total loss is kept; the
//   all-reduce can still switch to NCCL earlier through cuda_two_shot_max_bytes.
// - The gathers' LL128 bounds: the chain is segmented with all its collectives; then, within the sizes it gives
//   LL128 and the direct kernels together, reduce-scatter and the other gathers each hand over from LL128 to the
//   direct kernels where their own loss is least (the direct reduce-scatter reads the peers, the direct
//   all-gather writes them, and the two cross over at different sizes). The report shows the two apart.

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint64_t kNoMax = UINT64_MAX;

struct Cost {
  double loss = kInf;
  int segments = 0;
  double raw = kInf;
};

bool better(const Cost& a, const Cost& b) {
  if (a.loss != b.loss) return a.loss < b.loss;
  if (a.segments != b.segments) return a.segments < b.segments;
  return a.raw < b.raw;
}

Cost cost_of(const Segmentation& s) { return {s.feasible ? s.loss : kInf, s.segments, s.raw_loss}; }

Cost add(const Cost& a, const Cost& b) { return {a.loss + b.loss, a.segments + b.segments, a.raw + b.raw}; }

// A chain's losses per path and size (NOTE [threshold derivation]).
struct ChainCosts {
  std::vector<size_t> sizes;
  std::vector<std::vector<double>> counted, raw;  // [path][size]
};

bool valid(const Sample& s) { return s.time_us > 0 && s.wrong <= 0; }

ChainCosts chain_costs(const Chain& chain, const std::vector<Sample>& samples, double tolerance) {
  std::map<std::tuple<std::string, std::string, size_t>, double> time;  // (collective, path, bytes)
  std::set<size_t> all_sizes;
  for (const Sample& s : samples) {
    const bool in_chain =
        std::find(chain.collectives.begin(), chain.collectives.end(), s.collective) != chain.collectives.end() &&
        std::find(chain.paths.begin(), chain.paths.end(), s.path) != chain.paths.end();
    if (!in_chain || !valid(s)) continue;
    time[{s.collective, s.path, s.bytes}] = s.time_us;
    all_sizes.insert(s.bytes);
  }
  ChainCosts out;
  const size_t paths = chain.paths.size();
  for (size_t bytes : all_sizes) {
    std::vector<double> counted(paths, 0), raw(paths, 0);
    for (const std::string& c : chain.collectives) {
      std::vector<double> t(paths, kInf);
      double best = kInf;
      for (size_t p = 0; p < paths; ++p) {
        const auto it = time.find({c, chain.paths[p], bytes});
        if (it != time.end()) t[p] = it->second;
        best = std::min(best, t[p]);
      }
      if (best == kInf) continue;  // this collective was not measured at this size
      for (size_t p = 0; p < paths; ++p) {
        const double loss = t[p] / best - 1;  // infinity where the path has no valid time
        counted[p] += loss > tolerance ? loss : 0;
        raw[p] += loss;
      }
    }
    if (std::all_of(counted.begin(), counted.end(), [](double x) { return x == kInf; })) continue;
    out.sizes.push_back(bytes);
    if (out.counted.empty()) out.counted.resize(paths), out.raw.resize(paths);
    for (size_t p = 0; p < paths; ++p) {
      out.counted[p].push_back(counted[p]);
      out.raw[p].push_back(raw[p]);
    }
  }
  if (out.counted.empty()) out.counted.resize(paths), out.raw.resize(paths);
  return out;
}

// Threshold values from a segmentation's boundaries (NOTE [threshold derivation]).
size_t between(size_t a, size_t b) {
  const auto m = static_cast<size_t>(std::floor(std::sqrt(static_cast<double>(a) * static_cast<double>(b))));
  return std::clamp(m, a, b - 1);
}

/// "Up to x" for a range ending before size index `end`.
size_t up_to(const std::vector<size_t>& sizes, size_t end, uint64_t max) {
  if (end == 0) return 0;
  if (end >= sizes.size()) return static_cast<size_t>(max);
  return static_cast<size_t>(std::min<uint64_t>(max, between(sizes[end - 1], sizes[end])));
}

/// "From x on" for a range starting at size index `start`.
size_t from(const std::vector<size_t>& sizes, size_t start) {
  if (start == 0) return 0;
  if (start >= sizes.size()) return SIZE_MAX;
  return between(sizes[start - 1], sizes[start]) + 1;
}

size_t start_of(const Segmentation& s, size_t path) { return path == 0 ? 0 : s.ends[path - 1]; }

std::optional<size_t> index_of(const Chain& c, const std::string& path, size_t occurrence = 0) {
  for (size_t i = 0; i < c.paths.size(); ++i) {
    if (c.paths[i] == path && occurrence-- == 0) return i;
  }
  return std::nullopt;
}

bool measured(const std::vector<Sample>& samples, const std::vector<std::string>& collectives,
              const std::string& path) {
  return std::any_of(samples.begin(), samples.end(), [&](const Sample& s) {
    return (path.empty() || s.path == path) &&
           std::find(collectives.begin(), collectives.end(), s.collective) != collectives.end();
  });
}

// Sizes at or above `x` may only be served by the chain's last path; with `exact`, sizes below it not by it.
ChainCosts constrained(ChainCosts c, size_t x, bool exact) {
  const size_t last = c.counted.size() - 1;
  for (size_t k = 0; k < c.sizes.size(); ++k) {
    for (size_t p = 0; p < c.counted.size(); ++p) {
      if ((c.sizes[k] >= x && p != last) || (exact && c.sizes[k] < x && p == last)) {
        c.counted[p][k] = kInf;
        c.raw[p][k] = kInf;
      }
    }
  }
  return c;
}

ChainResult result_of(const Chain& chain, const ChainCosts& costs, const Segmentation& seg) {
  ChainResult r{.chain = chain, .sizes = costs.sizes, .chosen = {}};
  for (size_t k = 0; k < costs.sizes.size(); ++k) {
    size_t p = 0;
    while (p + 1 < seg.ends.size() && seg.ends[p] <= k) ++p;
    r.chosen.push_back(static_cast<int>(p));
  }
  return r;
}

// Where LL128 hands over to the direct kernels for the collectives of `part` (a subset of the gathers chain), as
// an index into `sizes` (the whole chain's) in [begin, end): LL128 serves [begin, e), the direct kernels [e, end).
// The least counted loss wins, then fewer ranges, then the lower raw loss, then the smaller e.
size_t ll128_end(const ChainCosts& part, const std::vector<size_t>& sizes, size_t begin, size_t end, size_t ll128) {
  std::map<size_t, size_t> at;  // size -> index in part
  for (size_t k = 0; k < part.sizes.size(); ++k) at[part.sizes[k]] = k;
  auto cost = [&](size_t path, size_t k) {
    const auto it = at.find(sizes[k]);
    return it == at.end() ? Cost{0, 0, 0} : Cost{part.counted[path][it->second], 0, part.raw[path][it->second]};
  };
  size_t best_e = begin;
  Cost best;
  for (size_t e = begin; e <= end; ++e) {
    Cost c{0, (e > begin ? 1 : 0) + (end > e ? 1 : 0), 0};
    for (size_t k = begin; k < end; ++k) c = add(c, cost(k < e ? ll128 : ll128 + 1, k));
    if (better(c, best)) best = c, best_e = e;
  }
  return best_e;
}

void set_field(std::map<std::string, size_t>& fields, const char* name, size_t value) { fields[name] = value; }

uint64_t field_max(const char* name) {
  const detail::TuningField* f = detail::find_tuning_field(name);
  return f != nullptr ? f->max : kNoMax;
}

}  // namespace

Segmentation best_segmentation(const std::vector<std::vector<double>>& counted,
                               const std::vector<std::vector<double>>& raw) {
  const size_t paths = counted.size();
  const size_t sizes = paths == 0 ? 0 : counted[0].size();
  Segmentation out;
  out.ends.assign(paths, sizes);
  if (paths == 0 || sizes == 0) {
    out.feasible = paths > 0;
    return out;
  }
  // g[k][p]: the best cost of sizes 0..k with size k served by path p; prev[k][p]: the path of size k - 1.
  std::vector<std::vector<Cost>> g(sizes, std::vector<Cost>(paths));
  std::vector<std::vector<size_t>> prev(sizes, std::vector<size_t>(paths, 0));
  for (size_t p = 0; p < paths; ++p) g[0][p] = {counted[p][0], 1, raw[p][0]};
  for (size_t k = 1; k < sizes; ++k) {
    for (size_t p = 0; p < paths; ++p) {
      Cost best = g[k - 1][p];  // size k - 1 on the same path: no new range
      size_t from_path = p;
      for (size_t q = 0; q < p; ++q) {
        Cost c = g[k - 1][q];
        c.segments += 1;
        if (better(c, best)) {
          best = c;
          from_path = q;
        }
      }
      g[k][p] = {best.loss + counted[p][k], best.segments, best.raw + raw[p][k]};
      prev[k][p] = from_path;
    }
  }
  size_t last = 0;
  for (size_t p = 1; p < paths; ++p) {
    if (better(g[sizes - 1][p], g[sizes - 1][last])) last = p;
  }
  const Cost& total = g[sizes - 1][last];
  out.loss = total.loss;
  out.segments = total.segments;
  out.raw_loss = total.raw;
  out.feasible = total.loss != kInf;
  std::vector<size_t> path_of(sizes);
  for (size_t k = sizes, p = last; k-- > 0;) {
    path_of[k] = p;
    p = prev[k][p];
  }
  for (size_t i = 0; i < paths; ++i) {
    out.ends[i] = static_cast<size_t>(std::count_if(path_of.begin(), path_of.end(), [i](size_t p) { return p <= i; }));
  }
  return out;
}

Derived derive(BackendKind backend, const std::vector<Sample>& samples, const DeriveOptions& options) {
  Derived out;
  for (const Sample& s : samples) {
    if (s.wrong > 0) {
      out.disqualified.push_back(
          fmt::format("{} {} at {} bytes: {} wrong elements", s.collective, s.path, s.bytes, s.wrong));
    }
  }
  std::map<std::string, size_t> fields;
  const double tol = options.tolerance;
  if (backend == BackendKind::kHost) {
    const Chain chain{.name = "all_reduce", .collectives = {"all_reduce"}, .paths = {kPathOneShot, kPathTwoShot}};
    if (measured(samples, chain.collectives, "")) {
      const ChainCosts costs = chain_costs(chain, samples, tol);
      const Segmentation seg = best_segmentation(costs.counted, costs.raw);
      if (seg.feasible && !costs.sizes.empty()) {
        set_field(fields, "host_one_shot_max_bytes", up_to(costs.sizes, seg.ends[0], kNoMax));
        out.chains.push_back(result_of(chain, costs, seg));
      }
    }
  } else {
    Chain ar{
        .name = "all_reduce",
        .collectives = {"all_reduce"},
        .paths = {kPathLL, kPathLL128, kPathOneShot, kPathLL128TwoShot, kPathTwoShot, kPathTwoShotPush, kPathNccl}};
    Chain gathers{
        .name = "gathers", .collectives = {}, .paths = {kPathNccl, kPathLL, kPathLL128, kPathDirect, kPathNccl}};
    for (const char* c : {"all_gather", "reduce_scatter", "all_to_all", "broadcast"}) {
      if (measured(samples, {c}, "")) gathers.collectives.push_back(c);
    }
    const bool have_ar = measured(samples, ar.collectives, "");
    const bool have_gathers = !gathers.collectives.empty();
    const bool ar_nccl = have_ar && measured(samples, ar.collectives, kPathNccl);
    const bool gather_nccl = have_gathers && measured(samples, gathers.collectives, kPathNccl);
    if (!ar_nccl) ar.paths.pop_back();
    if (!gather_nccl) gathers.paths = {kPathLL, kPathLL128, kPathDirect};
    const ChainCosts ar_costs = have_ar ? chain_costs(ar, samples, tol) : ChainCosts{};
    const ChainCosts g_costs = have_gathers ? chain_costs(gathers, samples, tol) : ChainCosts{};
    Segmentation ar_seg, g_seg;
    std::optional<size_t> nccl_min;
    if (ar_nccl && gather_nccl) {
      // NOTE [threshold derivation]: one cuda_nccl_min_bytes for both chains; later candidates first.
      Cost best;
      for (size_t b = g_costs.sizes.size() + 1; b-- > 0;) {
        const size_t x = from(g_costs.sizes, b);
        const ChainCosts gc = constrained(g_costs, x, true), arc = constrained(ar_costs, x, false);
        const Segmentation g = best_segmentation(gc.counted, gc.raw), a = best_segmentation(arc.counted, arc.raw);
        const Cost total = add(cost_of(g), cost_of(a));
        if (!g.feasible || !a.feasible || !better(total, best)) continue;
        best = total;
        ar_seg = a;
        g_seg = g;
        nccl_min = x;
      }
    } else {
      if (have_ar) ar_seg = best_segmentation(ar_costs.counted, ar_costs.raw);
      if (have_gathers) g_seg = best_segmentation(g_costs.counted, g_costs.raw);
      if (ar_nccl && ar_seg.feasible) nccl_min = from(ar_costs.sizes, start_of(ar_seg, ar.paths.size() - 1));
      if (gather_nccl && g_seg.feasible) nccl_min = from(g_costs.sizes, start_of(g_seg, gathers.paths.size() - 1));
    }
    if (have_ar && ar_seg.feasible && !ar_costs.sizes.empty()) {
      const std::vector<size_t>& sz = ar_costs.sizes;
      const size_t push = *index_of(ar, kPathTwoShotPush);
      set_field(fields, "cuda_ll_max_bytes",
                up_to(sz, ar_seg.ends[*index_of(ar, kPathLL)], field_max("cuda_ll_max_bytes")));
      set_field(fields, "cuda_ll128_max_bytes",
                up_to(sz, ar_seg.ends[*index_of(ar, kPathLL128)], field_max("cuda_ll128_max_bytes")));
      set_field(fields, "cuda_one_shot_max_bytes", up_to(sz, ar_seg.ends[*index_of(ar, kPathOneShot)], kNoMax));
      const size_t two_ll = *index_of(ar, kPathLL128TwoShot);
      set_field(fields, "cuda_ll128_two_shot_max_bytes",
                ar_seg.ends[two_ll] == start_of(ar_seg, two_ll)
                    ? 0
                    : up_to(sz, ar_seg.ends[two_ll], field_max("cuda_ll128_two_shot_max_bytes")));
      set_field(fields, "cuda_two_shot_push_min_bytes",
                ar_seg.ends[push] == start_of(ar_seg, push) ? SIZE_MAX : from(sz, start_of(ar_seg, push)));
      if (ar_nccl) {
        // NCCL from nccl_min alone where its range starts at or after it; otherwise two-shot ends earlier.
        const size_t a = start_of(ar_seg, ar.paths.size() - 1);
        const bool by_nccl_min = a >= sz.size() || (nccl_min && sz[a] >= *nccl_min);
        set_field(fields, "cuda_two_shot_max_bytes", by_nccl_min ? SIZE_MAX : up_to(sz, a, kNoMax));
      }
      out.chains.push_back(result_of(ar, ar_costs, ar_seg));
    }
    if (have_gathers && g_seg.feasible && !g_costs.sizes.empty()) {
      const std::vector<size_t>& sz = g_costs.sizes;
      if (gather_nccl) set_field(fields, "cuda_direct_nccl_max_bytes", up_to(sz, g_seg.ends[0], kNoMax));
      set_field(fields, "cuda_ll_gather_max_bytes",
                up_to(sz, g_seg.ends[*index_of(gathers, kPathLL)], field_max("cuda_ll_gather_max_bytes")));
      // NOTE [threshold derivation]: the LL128 bound of reduce-scatter and that of the other gathers, each
      // within the sizes the chain gives LL128 and the direct kernels together.
      const size_t ll128 = *index_of(gathers, kPathLL128);
      std::vector<std::string> rs, others;
      for (const std::string& c : gathers.collectives) (c == "reduce_scatter" ? rs : others).push_back(c);
      for (const std::vector<std::string>* group : {&others, &rs}) {
        if (group->empty()) continue;
        Chain part = gathers;
        part.name = group == &rs ? "reduce_scatter" : "gathers";
        part.collectives = *group;
        Segmentation seg = g_seg;
        seg.ends[ll128] =
            ll128_end(chain_costs(part, samples, tol), sz, start_of(g_seg, ll128), g_seg.ends[ll128 + 1], ll128);
        const char* field = group == &rs ? "cuda_ll128_reduce_scatter_max_bytes" : "cuda_ll128_gather_max_bytes";
        set_field(fields, field,
                  seg.ends[ll128] == start_of(seg, ll128) ? 0 : up_to(sz, seg.ends[ll128], field_max(field)));
        out.chains.push_back(result_of(part, g_costs, seg));
      }
    }
    if (nccl_min) set_field(fields, "cuda_nccl_min_bytes", *nccl_min);
  }
  for (const detail::TuningField& f : detail::tuning_fields()) {
    if (const auto it = fields.find(std::string(f.name)); it != fields.end())
      out.fields.emplace_back(it->first, it->second);
  }
  return out;
}

std::string format_report(const Derived& derived, const std::vector<Sample>& samples) {
  std::map<std::tuple<std::string, std::string, size_t>, const Sample*> by_key;
  for (const Sample& s : samples) by_key[{s.collective, s.path, s.bytes}] = &s;
  std::string out;
  for (const ChainResult& r : derived.chains) {
    std::vector<std::string> paths;  // distinct, in chain order
    for (const std::string& p : r.chain.paths) {
      if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
    }
    for (const std::string& c : r.chain.collectives) {
      out += fmt::format("# {}: time per call (us) of each path; * fastest; the path the table gives each size\n", c);
      out += fmt::format("{:>12}", "bytes");
      for (const std::string& p : paths) out += fmt::format(" {:>14}", p);
      out += fmt::format("  {}\n", "chosen");
      for (size_t k = 0; k < r.sizes.size(); ++k) {
        double best = kInf;
        for (const std::string& p : paths) {
          const auto it = by_key.find({c, p, r.sizes[k]});
          if (it != by_key.end() && valid(*it->second)) best = std::min(best, it->second->time_us);
        }
        out += fmt::format("{:>12}", r.sizes[k]);
        for (const std::string& p : paths) {
          const auto it = by_key.find({c, p, r.sizes[k]});
          std::string cell = "-";
          if (it != by_key.end() && it->second->wrong > 0) {
            cell = "wrong";
          } else if (it != by_key.end() && valid(*it->second)) {
            cell = fmt::format("{:.2f}{}", it->second->time_us, it->second->time_us == best ? "*" : " ");
          }
          out += fmt::format(" {:>14}", cell);
        }
        out += fmt::format("  {}\n", r.chain.paths[static_cast<size_t>(r.chosen[k])]);
      }
    }
  }
  for (const std::string& d : derived.disqualified) out += fmt::format("# disqualified: {}\n", d);
  out += "# derived Tuning fields\n";
  for (const auto& [name, value] : derived.fields) {
    out += value == SIZE_MAX ? fmt::format("  {} = {} (SIZE_MAX)\n", name, value)
                             : fmt::format("  {} = {}\n", name, value);
  }
  return out;
}

}  // namespace symcomm::tune
