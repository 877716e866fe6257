#include "bootstrap/store_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

// NOTE [store semantics]
// - max_total_bytes bounds the sum of key and value sizes held. A set/add/compare_set that would pass it is
//   refused with a kError response and changes nothing; the connection stays usable.
// - add keeps the value as decimal text (as PyTorch's TCPStore does) so get_string() reads it. Adding to a
//   value that is not a decimal int64, or an overflowing add, is a kError.
// - compare_set: a missing key matches an empty expected value; the response carries the value held after
//   the call (empty if the key is still missing).
// - get/wait on missing keys are parked until every key is set (set, add or compare_set) or the timeout in
//   the request passes: kTimeout with the missing keys, comma-separated, as message.

// NOTE [watched key]
// A parked get/wait is registered under one key only, its watched key: one it misses. When that key is set,
// wake() looks for another missing key, starting after the watched one and wrapping around; if there is
// none the request completes, otherwise that key becomes the watched one. So the request is always
// registered under a key that was missing when it was chosen, and it cannot complete before that key is set
// and wake() looks again; removes need no bookkeeping. Registering under every missing key at once would
// lose the request when a key is set, removed and set again: wait({A, B}); set A (the request stays under
// B only); remove A; set B (A missing again, but the first wake dropped the request from A's list); set A:
// nothing wakes it and it times out with both keys present. Searching from the watched
// key on makes keys set in the order they are listed cost O(1) each.

namespace symcomm::detail {
namespace {

constexpr auto kMaxWait = std::chrono::hours(24 * 365);  // clamps timeouts so deadlines cannot overflow

Response ok(int64_t number = 0, Bytes value = {}) { return {ResponseStatus::kOk, number, std::move(value), {}}; }
Response error(std::string message) { return {ResponseStatus::kError, 0, {}, std::move(message)}; }

}  // namespace

std::optional<Response> StoreTable::execute(uint64_t conn, Request r, Clock::time_point now) {
  static const std::string kNoKey;
  const std::string& key = r.keys.empty() ? kNoKey : r.keys[0];
  switch (r.type) {
    case RequestType::kSet: return set(r);
    case RequestType::kGet:
    case RequestType::kWait: return start_wait(conn, std::move(r), now);
    case RequestType::kTryGet:
      if (const Bytes* v = find(key)) return ok(0, *v);
      return Response{ResponseStatus::kNotFound, 0, {}, {}};
    case RequestType::kAdd: return add(key, r.number);
    case RequestType::kCompareSet: return compare_set(r);
    case RequestType::kCheck: return ok(find(key) != nullptr);
    case RequestType::kRemove: return ok(erase(key));
    case RequestType::kNumKeys: return ok(static_cast<int64_t>(map_.size()));
    case RequestType::kHello: break;
  }
  return error(fmt::format("unexpected request {}", to_string(r.type)));
}

std::vector<std::pair<uint64_t, Response>> StoreTable::take_ready() {
  std::vector<std::pair<uint64_t, Response>> out;
  out.swap(ready_);
  return out;
}

void StoreTable::expire(Clock::time_point now) {
  std::vector<uint64_t> late;
  for (const auto& [conn, p] : parked_) {
    if (p.deadline <= now) late.push_back(conn);
  }
  for (uint64_t conn : late) {
    Parked p = std::move(parked_.at(conn));
    parked_.erase(conn);
    unregister(conn, p);
    std::string keys = fmt::format("{}", fmt::join(missing(p.request), ", "));
    ready_.emplace_back(conn, Response{ResponseStatus::kTimeout, 0, {}, std::move(keys)});
  }
}

StoreTable::Clock::time_point StoreTable::next_deadline() const {
  auto next = Clock::time_point::max();
  for (const auto& [conn, p] : parked_) next = std::min(next, p.deadline);
  return next;
}

void StoreTable::cancel(uint64_t conn) {
  auto it = parked_.find(conn);
  if (it == parked_.end()) return;
  unregister(conn, it->second);
  parked_.erase(it);
}

const Bytes* StoreTable::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

bool StoreTable::put(const std::string& key, Bytes value) {
  const Bytes* old = find(key);
  size_t next = total_ - (old ? key.size() + old->size() : 0) + key.size() + value.size();
  if (next > limits_.max_total_bytes) return false;
  map_[key] = std::move(value);
  total_ = next;
  wake(key);
  return true;
}

bool StoreTable::erase(const std::string& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  total_ -= key.size() + it->second.size();
  map_.erase(it);
  return true;
}

std::string StoreTable::limit_error(std::string_view op, const std::string& key) const {
  return fmt::format("{}('{}') refused: the store would hold more than max_total_bytes={} bytes", op, key,
                     limits_.max_total_bytes);
}

Response StoreTable::set(const Request& r) {
  if (!put(r.keys[0], r.value)) return error(limit_error("set", r.keys[0]));
  return ok();
}

Response StoreTable::add(const std::string& key, int64_t delta) {
  int64_t current = 0;
  if (const Bytes* v = find(key)) {
    const char* first = reinterpret_cast<const char*>(v->data());
    auto [end, ec] = std::from_chars(first, first + v->size(), current);
    if (v->empty() || ec != std::errc() || end != first + v->size()) {
      return error(fmt::format("add('{}'): the value held is not a decimal 64-bit integer", key));
    }
  }
  int64_t next = 0;
  if (__builtin_add_overflow(current, delta, &next)) {
    return error(fmt::format("add('{}', {}) overflows the value {}", key, delta, current));
  }
  std::string text = std::to_string(next);
  if (!put(key, Bytes(text.begin(), text.end()))) return error(limit_error("add", key));
  return ok(next);
}

Response StoreTable::compare_set(const Request& r) {
  const std::string& key = r.keys[0];
  const Bytes* current = find(key);
  bool match = current ? *current == r.value : r.value.empty();
  if (!match) return ok(0, current ? *current : Bytes{});
  if (!put(key, r.value2)) return error(limit_error("compare_set", key));
  return ok(0, r.value2);
}

std::optional<Response> StoreTable::start_wait(uint64_t conn, Request r, Clock::time_point now) {
  size_t watched = next_missing(r, 0);
  if (watched == r.keys.size()) return wait_result(r);
  cancel(conn);  // the server sends one request at a time; be safe if that ever changes
  waiters_[r.keys[watched]].push_back(conn);
  auto timeout = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(r.number), kMaxWait);
  parked_[conn] = Parked{std::move(r), now + timeout, watched};
  return std::nullopt;
}

std::vector<std::string> StoreTable::missing(const Request& r) const {
  std::vector<std::string> out;
  for (const std::string& k : r.keys) {
    if (find(k) == nullptr) out.push_back(k);
  }
  return out;
}

size_t StoreTable::next_missing(const Request& r, size_t from) const {
  const size_t n = r.keys.size();
  for (size_t i = 0; i < n; ++i) {
    size_t k = (from + i) % n;
    if (find(r.keys[k]) == nullptr) return k;
  }
  return n;
}

Response StoreTable::wait_result(const Request& r) const {
  return r.type == RequestType::kGet ? ok(0, *find(r.keys[0])) : ok();
}

void StoreTable::unregister(uint64_t conn, const Parked& p) {
  auto it = waiters_.find(p.request.keys[p.watched]);
  if (it == waiters_.end()) return;
  std::erase(it->second, conn);
  if (it->second.empty()) waiters_.erase(it);
}

void StoreTable::wake(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<uint64_t> conns = std::move(it->second);
  waiters_.erase(it);
  for (uint64_t conn : conns) {
    auto p = parked_.find(conn);
    if (p == parked_.end()) continue;
    Parked& parked = p->second;
    // NOTE [watched key]: the key just set was the watched one; watch another missing key, if any.
    size_t next = next_missing(parked.request, parked.watched + 1);
    if (next != parked.request.keys.size()) {
      parked.watched = next;
      waiters_[parked.request.keys[next]].push_back(conn);
      continue;
    }
    Request r = std::move(parked.request);
    parked_.erase(p);
    ready_.emplace_back(conn, wait_result(r));
  }
}

}  // namespace symcomm::detail
