#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tune/tune.h"

namespace symcomm::tune {

int iters_for(const TuneOptions& o, size_t bytes) {
  const size_t budget = size_t{64} << 20;  // payload bytes per batch
  const size_t it = std::max<size_t>(2, budget / std::max<size_t>(bytes, 1));
  return static_cast<int>(std::min<size_t>(it, static_cast<size_t>(std::max(o.iters, 2))));
}

std::unique_ptr<Communicator> TuneContext::make_comm(const std::string& name, const Config& config,
                                                     BackendKind backend) const {
  CommOptions o;
  o.backend = backend;
  o.config = config;
  o.name = name;
  return Communicator::create(store, ranks, o);
}

long long TuneContext::sum_wrong(const std::string& key, long long wrong) const {
  if (ranks.world_size == 1) return wrong;
  const auto key_of = [&](int r) { return fmt::format("{}/{}", key, r); };
  int64_t mine = wrong;
  Bytes value(sizeof(mine));
  std::memcpy(value.data(), &mine, sizeof(mine));
  if (ranks.rank != 0) {
    store->set(key_of(ranks.rank), value);
    return wrong;
  }
  std::vector<std::string> keys;
  for (int r = 1; r < ranks.world_size; ++r) keys.push_back(key_of(r));
  store->wait(keys);
  long long total = std::max<long long>(wrong, 0);
  bool unverified = wrong < 0;
  for (const std::string& k : keys) {
    const Bytes b = store->get(k);
    int64_t theirs = 0;
    if (b.size() == sizeof(theirs)) std::memcpy(&theirs, b.data(), sizeof(theirs));
    unverified = unverified || theirs < 0;
    total += std::max<int64_t>(theirs, 0);
    store->remove(k);
  }
  return total > 0 ? total : (unverified ? -1 : 0);
}

void TuneContext::store_barrier(const std::string& key) const {
  std::vector<std::string> keys;
  for (int r = 0; r < ranks.world_size; ++r) keys.push_back(fmt::format("{}/{}", key, r));
  store->set(keys[static_cast<size_t>(ranks.rank)], Bytes{1});
  store->wait(keys);
}

Progress::Progress(bool root, std::vector<PlanItem> plan)
    : root_(root), plan_(std::move(plan)), start_(std::chrono::steady_clock::now()) {
  if (!root_) return;
  double total = 0;
  for (const PlanItem& p : plan_) total += p.estimate_s;
  std::fprintf(stderr, "symcomm-tune: %zu measurements, estimated %.1f s in all\n", plan_.size(), total);
  std::fflush(stderr);
}

void Progress::done(size_t index, const Sample& sample) {
  if (!root_ || index >= plan_.size()) return;
  estimated_done_ += plan_[index].estimate_s;
  double left = 0;
  for (size_t k = index + 1; k < plan_.size(); ++k) left += plan_[k].estimate_s;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double scale = estimated_done_ > 0 ? elapsed / estimated_done_ : 1.0;
  const std::string result = sample.time_us > 0 ? fmt::format("{:.2f} us", sample.time_us) : std::string("not run");
  std::fprintf(stderr, "symcomm-tune: [%zu/%zu] %s %s %zu B: %s%s (%.0f s elapsed, about %.0f s left)\n", index + 1,
               plan_.size(), sample.collective.c_str(), sample.path.c_str(), sample.bytes, result.c_str(),
               sample.wrong > 0 ? fmt::format(", {} WRONG elements", sample.wrong).c_str() : "", elapsed, left * scale);
  std::fflush(stderr);
}

}  // namespace symcomm::tune
