// Store: the client of tcp_store_server.cc over one TCP connection (wire format: store_wire.h).
//
// NOTE [store client deadlines and reconnection]
// - Every call runs under a deadline (options.timeout, or wait()'s own timeout) enforced with poll() on a
//   non-blocking socket. get and wait send their timeout to the server, which parks them and answers
//   kTimeout naming the missing keys when it passes; the client waits kReplyGrace longer than its own
//   deadline for that answer, then gives up by itself (a silent server).
// - A call that fails half-way (timeout, reset, kFatal) leaves the stream in an unknown state, so the
//   connection is dropped. The next call opens a new one with a single attempt (no retry loop: a server
//   that went away should fail fast); a request is never resent, since add() is not idempotent.
// - connect() retries until options.timeout because the server may not be up yet; a refusal by the server
//   itself (wrong token) is not retried unless options.retry_refused (an earlier server on a reused port).

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <mutex>
#include <string>
#include <thread>

#include "base/check.h"
#include "bootstrap/store_wire.h"

namespace symcomm {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Request;
using detail::RequestType;
using detail::Response;
using detail::ResponseStatus;
using std::chrono::milliseconds;

constexpr auto kReplyGrace = milliseconds(250);
constexpr auto kRetryFirst = milliseconds(10);
constexpr auto kRetryMax = milliseconds(500);
// Sanity bound on values in responses (the server enforces the real limit); not allocated up front.
constexpr size_t kMaxResponseValue = size_t{1} << 30;
constexpr size_t kReadChunk = 64 * 1024;

enum class Io { kOk, kTimeout, kClosed };
struct IoResult {
  Io status = Io::kOk;
  std::string detail;  // why, for kClosed
};

IoResult closed(std::string why) { return {Io::kClosed, std::move(why)}; }

// Waits until fd is ready for events or the deadline passes (false). Errors surface in the next I/O call.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX)));
    if (n > 0) return true;
    if (n == 0 && left <= 0) return false;
    if (n < 0 && errno != EINTR) return true;
  }
}

IoResult send_all(int fd, std::span<const uint8_t> data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline)) return {Io::kTimeout, {}};
    } else if (n < 0 && errno != EINTR) {
      return closed(std::strerror(errno));
    }
  }
  return {};
}

// Reads until the reader holds a whole frame, and decodes it.
IoResult recv_response(int fd, detail::FrameReader& reader, Clock::time_point deadline, Response* out) {
  while (true) {
    std::span<const uint8_t> payload;
    auto status = reader.next(&payload);
    if (status == detail::FrameReader::Status::kOversized) return closed("response larger than accepted");
    if (status == detail::FrameReader::Status::kFrame) {
      auto decoded = detail::decode_response(payload, kMaxResponseValue);
      if (!decoded.message) return closed("malformed response: " + decoded.error);
      *out = std::move(*decoded.message);
      return {};
    }
    std::span<uint8_t> room = reader.prepare(kReadChunk);
    ssize_t n = ::recv(fd, room.data(), room.size(), 0);
    reader.commit(n > 0 ? static_cast<size_t>(n) : 0);
    if (n == 0) return closed("connection closed by the server");
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLIN, deadline)) return {Io::kTimeout, {}};
    } else if (n < 0 && errno != EINTR) {
      return closed(std::strerror(errno));
    }
  }
}

// Opens a non-blocking TCP connection to one of host:port's addresses; -1 and *why on failure.
int connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *why = gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      socklen_t len = sizeof(err);
      err = wait_ready(fd, POLLOUT, deadline) ? 0 : ETIMEDOUT;
      if (err == 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      *why = std::strerror(err);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

std::string describe_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::vector<std::string> shown(keys.begin(),
                                 keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), kShown)));
  std::string more = keys.size() > kShown ? fmt::format(", ... ({} keys)", keys.size()) : "";
  return fmt::format("'{}'{}", fmt::join(shown, "', '"), more);
}

class TcpStore final : public Store {
 public:
  explicit TcpStore(const StoreOptions& o)
      : options_(o),
        endpoint_(fmt::format("{}:{}", o.host, o.port)),
        reader_(detail::max_response_payload(kMaxResponseValue)) {}
  ~TcpStore() override { disconnect(); }

  /// First connection: retried until the timeout, since the server may not be up yet.
  void open_with_retry() {
    auto deadline = Clock::now() + options_.timeout;
    auto pause = kRetryFirst;
    std::string why;
    while (!try_open(deadline, &why)) {
      auto now = Clock::now();
      SYMCOMM_CHECK(now < deadline, kTimeout, "could not connect to the store at {} within {} ms: {}", endpoint_,
                    options_.timeout.count(), why);
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
      pause = std::min<milliseconds>(pause * 2, kRetryMax);
    }
  }

  void set(std::string_view key, const Bytes& value) override {
    call({RequestType::kSet, 0, {std::string(key)}, value, {}}, fmt::format("set('{}')", key));
  }
  Bytes get(std::string_view key) override {
    return call_wait(RequestType::kGet, {std::string(key)}, options_.timeout).value;
  }
  std::optional<Bytes> try_get(std::string_view key) override {
    Response r = call({RequestType::kTryGet, 0, {std::string(key)}, {}, {}}, fmt::format("try_get('{}')", key));
    if (r.status == ResponseStatus::kNotFound) return std::nullopt;
    return std::move(r.value);
  }
  int64_t add(std::string_view key, int64_t delta) override {
    return call({RequestType::kAdd, delta, {std::string(key)}, {}, {}}, fmt::format("add('{}')", key)).number;
  }
  Bytes compare_set(std::string_view key, const Bytes& expected, const Bytes& desired) override {
    Request r{RequestType::kCompareSet, 0, {std::string(key)}, expected, desired};
    return call(std::move(r), fmt::format("compare_set('{}')", key)).value;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, options_.timeout); }
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    if (!keys.empty()) call_wait(RequestType::kWait, keys, timeout);
  }
  bool check(std::string_view key) override {
    return call({RequestType::kCheck, 0, {std::string(key)}, {}, {}}, fmt::format("check('{}')", key)).number != 0;
  }
  bool remove(std::string_view key) override {
    return call({RequestType::kRemove, 0, {std::string(key)}, {}, {}}, fmt::format("remove('{}')", key)).number != 0;
  }
  int64_t num_keys() override { return call({RequestType::kNumKeys, 0, {}, {}, {}}, "num_keys()").number; }

 private:
  Response call(Request r, const std::string& what) {
    return exchange(std::move(r), what, Clock::now() + options_.timeout, options_.timeout, false);
  }
  Response call_wait(RequestType type, const std::vector<std::string>& keys, milliseconds timeout) {
    std::string what = fmt::format("{}({})", detail::to_string(type), describe_keys(keys));
    return exchange({type, 0, keys, {}, {}}, what, Clock::now() + timeout, timeout, true);
  }

  Response exchange(Request r, const std::string& what, Clock::time_point deadline, milliseconds timeout, bool parked);
  bool try_open(Clock::time_point deadline, std::string* why);
  [[noreturn]] void fail(const IoResult& io, const std::string& what, milliseconds timeout);
  void disconnect() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    reader_ = detail::FrameReader(detail::max_response_payload(kMaxResponseValue));
  }

  StoreOptions options_;
  std::string endpoint_;
  std::mutex mutex_;  // serialises calls: one request in flight on the connection
  int fd_ = -1;
  detail::FrameReader reader_;
};

// One attempt: TCP connect, then hello. False (with *why) when worth retrying; throws when the server
// refused us (wrong token), since retrying cannot help.
bool TcpStore::try_open(Clock::time_point deadline, std::string* why) {
  disconnect();
  fd_ = connect_tcp(options_.host, options_.port, deadline, why);
  if (fd_ < 0) return false;
  std::string_view token = options_.token;
  Request hello{RequestType::kHello, detail::kStoreProtocolMagic, {}, Bytes(token.begin(), token.end()), {}};
  Response r;
  IoResult io = send_all(fd_, detail::encode_request(hello), deadline);
  if (io.status == Io::kOk) io = recv_response(fd_, reader_, deadline, &r);
  if (io.status != Io::kOk) {
    *why = io.status == Io::kTimeout ? "no answer to hello" : io.detail;
    disconnect();
    return false;
  }
  if (r.status != ResponseStatus::kOk) {
    disconnect();
    if (options_.retry_refused) {
      *why = fmt::format("refused: {} (an earlier server on this port, or another job's)", r.message);
      return false;
    }
    SYMCOMM_THROW(kStore, "the store at {} refused the connection: {}", endpoint_, r.message);
  }
  return true;
}

Response TcpStore::exchange(Request r, const std::string& what, Clock::time_point deadline, milliseconds timeout,
                            bool parked) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string why;
  if (fd_ < 0 && !try_open(deadline, &why)) {
    SYMCOMM_THROW(kStore, "store at {} is unreachable for {}: {}", endpoint_, what, why);
  }
  auto reply_deadline = deadline;
  if (parked) {
    // The server answers kTimeout itself at the deadline; leave its answer time to arrive.
    r.number = std::max<int64_t>(0, std::chrono::ceil<milliseconds>(deadline - Clock::now()).count());
    reply_deadline += kReplyGrace;
  }
  Response out;
  IoResult io = send_all(fd_, detail::encode_request(r), deadline);
  if (io.status == Io::kOk) io = recv_response(fd_, reader_, reply_deadline, &out);
  if (io.status != Io::kOk) fail(io, what, timeout);
  switch (out.status) {
    case ResponseStatus::kOk:
    case ResponseStatus::kNotFound: return out;
    case ResponseStatus::kTimeout:
      SYMCOMM_THROW(kTimeout, "store {}: {} timed out after {} ms; keys not set: {}", endpoint_, what, timeout.count(),
                    out.message);
    case ResponseStatus::kError: SYMCOMM_THROW(kStore, "store {}: {} failed: {}", endpoint_, what, out.message);
    case ResponseStatus::kFatal: break;
  }
  disconnect();
  SYMCOMM_THROW(kStore, "store {} rejected {} and closed the connection: {}", endpoint_, what, out.message);
}

void TcpStore::fail(const IoResult& io, const std::string& what, milliseconds timeout) {
  disconnect();  // the stream may hold half a request or an unread answer
  if (io.status == Io::kTimeout) {
    SYMCOMM_THROW(kTimeout, "store {}: {} timed out after {} ms", endpoint_, what, timeout.count());
  }
  SYMCOMM_THROW(kStore, "store {}: {} failed: {}", endpoint_, what, io.detail);
}

}  // namespace

std::unique_ptr<Store> Store::connect(const StoreOptions& options) {
  SYMCOMM_CHECK_ARG(!options.token.empty(), "StoreOptions::token must not be empty");
  SYMCOMM_CHECK_ARG(options.port != 0, "StoreOptions::port must be set");
  auto store = std::make_unique<TcpStore>(options);
  store->open_with_retry();
  return store;
}

}  // namespace symcomm
