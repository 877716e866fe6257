// StoreServer: one background thread multiplexing a listening socket, an eventfd (stop) and non-blocking
// client connections with poll().
//
// NOTE [store server behaviour]
// - Every connection must open with a hello carrying the token (compared in constant time). A wrong token,
//   a frame whose header announces more than max_request_payload(limits) bytes (before the hello: more than
//   a hello can hold, max_hello_payload()), or a payload that does not decode (junk, oversized key/value,
//   unknown type) gets one kFatal response naming the reason; then the
//   server stops reading requests, shuts its side down and closes the socket after the peer closes or
//   kLingerTimeout (lingering avoids a TCP reset destroying the error message). Only that connection is
//   affected.
// - Request semantics (limits, add, parked get/wait) live in StoreTable (store_table.cc). A connection
//   handles one request at a time, in order: while it is parked or its output is not yet flushed, later
//   frames stay buffered, and a peer that buffers more than one maximal frame beyond that is dropped.
// - Before its hello a connection buffers at most one hello (~64 KiB) plus one read, not one maximal request
//   (~3 MiB with the default limits). Measured on a 2-core CPU machine with the default limits: 1000
//   strangers that each announce a maximal frame and never finish it would hold 1785 MiB of the server's RSS
//   for kHelloTimeout if a maximal request were buffered; with this bound the worst case (each sends all but
//   one byte of a maximal hello) holds 129 MiB.
// - A connection that has not said hello within kHelloTimeout is dropped; authenticated idle connections
//   are kept (ranks hold their store connection for the life of a job). At most max_connections are open;
//   one more is told so (kFatal) and closed.
// - Peer EOF drops the connection and anything it had pending.

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "base/logging.h"
#include "bootstrap/store_table.h"
#include "bootstrap/store_wire.h"

namespace symcomm {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Request;
using detail::RequestType;
using detail::Response;
using detail::ResponseStatus;

constexpr auto kHelloTimeout = std::chrono::seconds(10);
constexpr auto kLingerTimeout = std::chrono::seconds(2);
constexpr auto kAcceptPause = std::chrono::milliseconds(100);  // after EMFILE, instead of spinning
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxReadsPerEvent = 32;  // fairness: at most 2 MiB from one connection per poll round

struct Connection {
  enum class State { kHello, kReady, kParked, kClosing, kDead };
  Connection(int f, uint64_t i, std::string p) : fd(f), id(i), peer(std::move(p)), in(detail::max_hello_payload()) {}
  ~Connection() { ::close(fd); }

  int fd;
  uint64_t id;
  std::string peer;
  State state = State::kHello;
  detail::FrameReader in;
  Bytes out;
  size_t out_pos = 0;
  Clock::time_point deadline;  // hello or linger deadline (states kHello, kClosing)
};

std::string peer_name(const sockaddr_storage& a) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), sizeof(a), host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return fmt::format("{}:{}", host, serv);
}

// Binds exactly host:port (numeric service; the host may be a name or a literal address).
int open_listener(const std::string& host, uint16_t port, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  SYMCOMM_CHECK(rc == 0, kStore, "store server cannot resolve {}:{}: {}", host, port, gai_strerror(rc));
  std::string last = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, backlog) == 0) {
      freeaddrinfo(res);
      return fd;
    }
    last = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(res);
  SYMCOMM_THROW(kStore, "store server cannot bind {}:{}: {}", host, port, last);
}

uint16_t bound_port(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  SYMCOMM_CHECK_SYS(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), "getsockname");
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

class TcpStoreServer final : public StoreServer {
 public:
  TcpStoreServer(const StoreServerOptions& o, int listen_fd, int stop_fd, uint16_t port)
      : options_(o),
        max_payload_(detail::max_request_payload(o.limits)),
        listen_fd_(listen_fd),
        stop_fd_(stop_fd),
        port_(port),
        table_(o.limits) {}
  ~TcpStoreServer() override {
    stop();
    if (!thread_started_) ::close(listen_fd_);  // otherwise the server thread closed it
    ::close(stop_fd_);
  }
  void launch() {
    thread_ = std::thread([this] { run(); });
    thread_started_ = true;
  }
  uint16_t port() const override { return port_; }
  void stop() override {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    if (stopped_) return;
    stopped_ = true;
    uint64_t one = 1;
    ssize_t ignored = ::write(stop_fd_, &one, sizeof(one));
    (void)ignored;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() noexcept;
  bool poll_round();
  int poll_timeout_ms(Clock::time_point now) const;
  void accept_all();
  void on_events(Connection& c, short revents);
  void on_readable(Connection& c);
  void flush(Connection& c);
  void process(Connection& c);
  void handle(Connection& c, Request r);
  void reply(Connection& c, const Response& r);
  void fatal(Connection& c, std::string why);
  void expire(Clock::time_point now);
  void deliver_ready();
  void drain_resumed();

  StoreServerOptions options_;
  size_t max_payload_;
  int listen_fd_;
  int stop_fd_;
  uint16_t port_;
  std::thread thread_;
  bool thread_started_ = false;
  std::mutex stop_mutex_;
  bool stopped_ = false;
  // Everything below is touched by the server thread only.
  detail::StoreTable table_;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;
  uint64_t next_id_ = 1;
  std::vector<uint64_t> resumed_;  // connections that may process buffered frames again
  Clock::time_point accept_paused_until_;
};

void TcpStoreServer::run() noexcept {
  bool running = true;
  while (running) {
    try {
      running = poll_round();
    } catch (const std::exception& e) {
      SYMCOMM_LOG_ERROR("store server on port {}: {}", port_, e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a persistent failure must not spin
    }
  }
  conns_.clear();  // closes every connection: parked clients see EOF at once
  ::close(listen_fd_);
}

bool TcpStoreServer::poll_round() {
  Clock::time_point now = Clock::now();
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  fds.reserve(conns_.size() + 2);
  fds.push_back({stop_fd_, POLLIN, 0});
  fds.push_back({now >= accept_paused_until_ ? listen_fd_ : -1, POLLIN, 0});
  for (auto& [id, c] : conns_) {
    short events = POLLIN;
    if (c->out_pos < c->out.size()) events |= POLLOUT;
    fds.push_back({c->fd, events, 0});
    ids.push_back(id);
  }
  int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(now));
  if (n < 0 && errno != EINTR) SYMCOMM_CHECK_SYS(n, "poll");
  if (fds[0].revents != 0) return false;
  if (fds[1].revents != 0) accept_all();
  for (size_t i = 2; i < fds.size() && n > 0; ++i) {
    if (fds[i].revents == 0) continue;
    Connection& c = *conns_.at(ids[i - 2]);
    if (c.state == Connection::State::kDead) continue;
    try {
      on_events(c, fds[i].revents);
    } catch (const std::exception& e) {
      SYMCOMM_LOG_WARN("store server: dropping connection from {}: {}", c.peer, e.what());
      c.state = Connection::State::kDead;
    }
  }
  expire(Clock::now());
  drain_resumed();
  std::erase_if(conns_, [this](auto& entry) {
    if (entry.second->state != Connection::State::kDead) return false;
    table_.cancel(entry.first);
    return true;
  });
  return true;
}

int TcpStoreServer::poll_timeout_ms(Clock::time_point now) const {
  auto next = table_.next_deadline();
  for (const auto& [id, c] : conns_) {
    if (c->state == Connection::State::kHello || c->state == Connection::State::kClosing) {
      next = std::min(next, c->deadline);
    }
  }
  if (accept_paused_until_ > now) next = std::min(next, accept_paused_until_);
  if (next == Clock::time_point::max()) return -1;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

void TcpStoreServer::accept_all() {
  while (true) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        SYMCOMM_LOG_WARN("store server: accept failed: {}", std::strerror(errno));
        accept_paused_until_ = Clock::now() + kAcceptPause;
      }
      return;
    }
    if (conns_.size() >= static_cast<size_t>(options_.limits.max_connections)) {
      Bytes msg = detail::encode_response({ResponseStatus::kFatal, 0, {}, "too many connections to the store"});
      ssize_t ignored = ::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)ignored;
      ::close(fd);
      SYMCOMM_LOG_WARN("store server: refused a connection (max_connections={})", options_.limits.max_connections);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>(fd, next_id_++, peer_name(addr));
    c->deadline = Clock::now() + kHelloTimeout;
    conns_.emplace(c->id, std::move(c));
  }
}

void TcpStoreServer::on_events(Connection& c, short revents) {
  if (revents & POLLOUT) flush(c);
  if (revents & (POLLIN | POLLHUP | POLLERR)) on_readable(c);
}

void TcpStoreServer::on_readable(Connection& c) {
  using S = Connection::State;
  for (int i = 0; i < kMaxReadsPerEvent; ++i) {
    ssize_t n = 0;
    if (c.state == S::kClosing) {
      uint8_t sink[16 * 1024];  // lingering: input is read only to be discarded
      n = ::recv(c.fd, sink, sizeof(sink), 0);
    } else {
      std::span<uint8_t> room = c.in.prepare(kReadChunk);
      n = ::recv(c.fd, room.data(), room.size(), 0);
      c.in.commit(n > 0 ? static_cast<size_t>(n) : 0);
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      c.state = S::kDead;  // peer closed or reset: nothing left to answer
      return;
    }
    if (n < 0) return;
    if (c.state == S::kClosing) continue;
    // A client that keeps sending while its previous request is unanswered may buffer one frame, no more.
    if (c.in.buffered() > detail::kFrameHeaderBytes + max_payload_ + kReadChunk) {
      return fatal(c, "too much data sent without reading responses");
    }
    process(c);
    if (c.state == S::kDead) return;
  }
}

void TcpStoreServer::flush(Connection& c) {
  while (c.out_pos < c.out.size()) {
    ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      c.state = Connection::State::kDead;
      return;
    }
    c.out_pos += static_cast<size_t>(n);
  }
  c.out.clear();
  c.out_pos = 0;
  if (c.state == Connection::State::kClosing) {
    ::shutdown(c.fd, SHUT_WR);  // the peer reads the error, then EOF
  } else {
    resumed_.push_back(c.id);  // frames held back while the output was pending can go on
  }
}

void TcpStoreServer::process(Connection& c) {
  using S = Connection::State;
  while ((c.state == S::kHello || c.state == S::kReady) && c.out_pos == c.out.size()) {
    std::span<const uint8_t> payload;
    size_t announced = 0;
    auto status = c.in.next(&payload, &announced);
    if (status == detail::FrameReader::Status::kNeedMore) return;
    if (status == detail::FrameReader::Status::kOversized) {
      if (c.state == S::kHello) {
        return fatal(c, fmt::format("first frame of {} bytes exceeds the largest hello ({} bytes)", announced,
                                    detail::max_hello_payload()));
      }
      return fatal(c, fmt::format("request of {} bytes exceeds the limit of {} bytes", announced, max_payload_));
    }
    auto decoded = detail::decode_request(payload, options_.limits);
    if (!decoded.message) return fatal(c, "malformed request: " + decoded.error);
    handle(c, std::move(*decoded.message));
  }
}

void TcpStoreServer::handle(Connection& c, Request r) {
  if (c.state == Connection::State::kHello) {
    if (r.type != RequestType::kHello) return fatal(c, "the first message must be a hello");
    std::string_view token(reinterpret_cast<const char*>(r.value.data()), r.value.size());
    if (!detail::constant_time_equal(token, options_.token)) return fatal(c, "wrong token");
    c.state = Connection::State::kReady;
    c.in.set_max_payload(max_payload_);
    return reply(c, Response{});
  }
  if (r.type == RequestType::kHello) return fatal(c, "hello sent twice");
  std::optional<Response> done = table_.execute(c.id, std::move(r), Clock::now());
  if (done) {
    reply(c, *done);
  } else {
    c.state = Connection::State::kParked;
  }
  deliver_ready();  // a set may have completed parked requests
}

void TcpStoreServer::reply(Connection& c, const Response& r) {
  Bytes frame = detail::encode_response(r);
  c.out.insert(c.out.end(), frame.begin(), frame.end());
  flush(c);
}

void TcpStoreServer::fatal(Connection& c, std::string why) {
  SYMCOMM_LOG_WARN("store server: closing connection from {}: {}", c.peer, why);
  table_.cancel(c.id);
  c.state = Connection::State::kClosing;
  c.deadline = Clock::now() + kLingerTimeout;
  reply(c, {ResponseStatus::kFatal, 0, {}, std::move(why)});
}

void TcpStoreServer::expire(Clock::time_point now) {
  table_.expire(now);
  deliver_ready();
  for (auto& [id, c] : conns_) {
    bool waiting = c->state == Connection::State::kHello || c->state == Connection::State::kClosing;
    if (waiting && now >= c->deadline) c->state = Connection::State::kDead;  // no hello in time, or linger over
  }
}

void TcpStoreServer::deliver_ready() {
  for (auto& [id, response] : table_.take_ready()) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->state != Connection::State::kParked) continue;
    it->second->state = Connection::State::kReady;
    reply(*it->second, response);
    resumed_.push_back(id);
  }
}

void TcpStoreServer::drain_resumed() {
  // Processing a connection's frames can complete (and so resume) others; loop until nothing is left.
  while (!resumed_.empty()) {
    std::vector<uint64_t> ids;
    ids.swap(resumed_);
    for (uint64_t id : ids) {
      auto it = conns_.find(id);
      if (it != conns_.end()) process(*it->second);
    }
  }
}

}  // namespace

std::unique_ptr<StoreServer> StoreServer::start(const StoreServerOptions& options) {
  SYMCOMM_CHECK_ARG(!options.token.empty(), "StoreServerOptions::token must not be empty");
  SYMCOMM_CHECK_ARG(options.limits.max_connections > 0, "StoreLimits::max_connections must be positive");
  SYMCOMM_CHECK_ARG(options.limits.max_value_bytes <= UINT32_MAX / 4 && options.limits.max_key_bytes <= UINT32_MAX / 4,
                    "StoreLimits key/value limits must be below 1 GiB");
  int backlog = std::min(options.limits.max_connections, SOMAXCONN);
  int listen_fd = open_listener(options.host, options.port, backlog);
  int stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::unique_ptr<TcpStoreServer> server;
  try {
    SYMCOMM_CHECK_SYS(stop_fd, "eventfd");
    server = std::make_unique<TcpStoreServer>(options, listen_fd, stop_fd, bound_port(listen_fd));
  } catch (...) {
    ::close(listen_fd);
    if (stop_fd >= 0) ::close(stop_fd);
    throw;
  }
  server->launch();
  return server;
}

}  // namespace symcomm
