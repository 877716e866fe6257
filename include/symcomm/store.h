#pragma once
/// \file store.h
/// The rendezvous key-value store: a small TCP server hosted by one process (rank 0) and a client used by
/// every rank. The server binds the address it is given (loopback by default), requires the job's token
/// in the first message of every connection, bounds key, value and total sizes, and closes only the
/// offending connection on malformed input. All client calls are bounded by a timeout.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace symcomm {

using Bytes = std::vector<uint8_t>;

struct StoreLimits {
  size_t max_key_bytes = 1024;
  size_t max_value_bytes = 1 << 20;
  size_t max_total_bytes = 64 << 20;  ///< keys + values held by the server
  int max_connections = 1024;
};

struct StoreServerOptions {
  std::string host = "127.0.0.1";  ///< address to bind; "0.0.0.0" must be asked for explicitly
  uint16_t port = 0;               ///< 0 picks a free port (see StoreServer::port())
  std::string token;               ///< clients must present it; must not be empty
  StoreLimits limits;
};

/// A running store server; stops (and closes every connection) when destroyed.
class StoreServer {
 public:
  /// Binds, listens and starts serving on a background thread. Throws Error(kStore) if it cannot bind.
  static std::unique_ptr<StoreServer> start(const StoreServerOptions& options);
  virtual ~StoreServer() = default;
  /// The port actually bound.
  virtual uint16_t port() const = 0;
  /// Stop serving now; idempotent.
  virtual void stop() = 0;
};

struct StoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;
  /// Bound of every call, connecting included (the server may not be up yet: connect retries until then).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// connect() also retries, until the timeout, a server that refuses this token (by default a refusal throws at
  /// once): the server on the port may still be an earlier one that is shutting down
  /// (NOTE [rendezvous generations] in src/core/communicator.cc).
  bool retry_refused = false;
};

/// Client of a StoreServer. Thread-safe (calls are serialised over one connection).
/// Every method throws Error(kStore) on connection or protocol failure (server gone, bad token, limit
/// exceeded) and Error(kTimeout) when its deadline passes.
/// Limits: a key or value over the server's StoreLimits is refused and the server closes the connection;
/// a write that would pass max_total_bytes is refused and changes nothing. Both throw Error(kStore). After a
/// failed call the next call reconnects once (no retry loop); a request is never resent.
class Store {
 public:
  static std::unique_ptr<Store> connect(const StoreOptions& options);
  virtual ~Store() = default;

  virtual void set(std::string_view key, const Bytes& value) = 0;
  /// Waits until the key exists (up to the timeout), then returns its value.
  virtual Bytes get(std::string_view key) = 0;
  /// Value if the key exists now, without waiting.
  virtual std::optional<Bytes> try_get(std::string_view key) = 0;
  /// Atomically adds delta to the 64-bit integer stored at key (missing = 0) and returns the new value.
  /// The value is kept as decimal text (get_string() reads it); a value that is not a decimal int64, or an
  /// overflow, throws Error(kStore).
  virtual int64_t add(std::string_view key, int64_t delta) = 0;
  /// If the key's value equals expected (a missing key equals an empty expected), replaces it with desired.
  /// Returns the value held after the call.
  virtual Bytes compare_set(std::string_view key, const Bytes& expected, const Bytes& desired) = 0;
  /// Waits until every key exists. Throws Error(kTimeout) naming the missing keys.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  /// True if the key exists now.
  virtual bool check(std::string_view key) = 0;
  /// Removes the key; returns whether it existed.
  virtual bool remove(std::string_view key) = 0;
  /// Number of keys held.
  virtual int64_t num_keys() = 0;

  /// Convenience: string values.
  void set(std::string_view key, std::string_view value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(std::string_view key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }
};

}  // namespace symcomm
