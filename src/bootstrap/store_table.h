#pragma once
// The store's state and request semantics, without sockets: the key-value table with its max_total_bytes
// accounting, and the get/wait requests parked until their keys are set. The server
// (tcp_store_server.cc) feeds it decoded requests and sends back the responses it produces.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bootstrap/store_wire.h"

namespace symcomm::detail {

class StoreTable {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StoreTable(const StoreLimits& limits) : limits_(limits) {}

  /// Runs a request (not a hello) sent on connection `conn`. Returns its response, or nullopt when the
  /// request (get or wait on missing keys) is parked; its response then comes out of take_ready() once the
  /// keys are set or its timeout (request.number ms from now) passes. One parked request per connection.
  std::optional<Response> execute(uint64_t conn, Request request, Clock::time_point now);

  /// Responses of parked requests completed (keys set) or timed out since the last call.
  std::vector<std::pair<uint64_t, Response>> take_ready();
  /// Times out parked requests whose deadline is at or before now.
  void expire(Clock::time_point now);
  /// Earliest deadline of a parked request (Clock::time_point::max() if none).
  Clock::time_point next_deadline() const;
  /// Forgets the connection's parked request (connection closed).
  void cancel(uint64_t conn);

  size_t num_keys() const { return map_.size(); }
  size_t total_bytes() const { return total_; }

 private:
  struct Parked {
    Request request;
    Clock::time_point deadline;
    size_t watched = 0;  // index in request.keys of the one missing key it is registered under
  };

  const Bytes* find(const std::string& key) const;
  bool put(const std::string& key, Bytes value);
  bool erase(const std::string& key);
  Response set(const Request& r);
  Response add(const std::string& key, int64_t delta);
  Response compare_set(const Request& r);
  std::optional<Response> start_wait(uint64_t conn, Request r, Clock::time_point now);
  std::vector<std::string> missing(const Request& r) const;
  size_t next_missing(const Request& r, size_t from) const;
  Response wait_result(const Request& r) const;
  void unregister(uint64_t conn, const Parked& p);
  void wake(const std::string& key);
  std::string limit_error(std::string_view op, const std::string& key) const;

  StoreLimits limits_;
  std::unordered_map<std::string, Bytes> map_;
  size_t total_ = 0;                                                // bytes of keys + values held
  std::unordered_map<uint64_t, Parked> parked_;                     // connection -> its parked request
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;  // watched key -> parked connections
  std::vector<std::pair<uint64_t, Response>> ready_;
};

}  // namespace symcomm::detail
