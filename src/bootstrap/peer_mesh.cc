#include "bootstrap/peer_mesh.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "base/check.h"
#include "base/hash.h"
#include "base/logging.h"

namespace symcomm::detail {
namespace {

constexpr uint32_t kMagic = 0x53594d43;  // "SYMC"
// The mesh's own frames. A hello and its acceptance are read only during the creation, a bye only by the
// watchdog; kTagAccepted lies far from the callers' tags, which are small numbers.
constexpr uint32_t kTagHello = 1;
constexpr uint32_t kTagBye = 2;
constexpr uint32_t kTagAccepted = 0xffff0001;  // header only: no payload, no descriptors
constexpr uint32_t kMaxFds = 16;
constexpr uint32_t kMaxPayload = 1 << 20;

struct FrameHeader {
  uint32_t magic;
  uint32_t tag;
  uint32_t len;
  uint32_t nfds;
};

struct Hello {
  int32_t rank;
  char token[64];
};

sockaddr_un abstract_address(const std::string& token, const std::string& prefix, int rank, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = mesh_socket_name(token, prefix, rank);
  addr.sun_path[0] = '\0';  // abstract namespace: nothing on the file system, gone with the socket
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

/// Reads exactly n bytes (blocking); false on EOF or error.
bool read_full(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t got = ::recv(fd, p, n, 0);
    if (got == 0) return false;
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

/// Appends the descriptors passed with a received message (SCM_RIGHTS) to *fds; the caller owns them.
void collect_fds(msghdr& msg, std::vector<int>* fds) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const int* passed = reinterpret_cast<const int*>(CMSG_DATA(c));
      fds->insert(fds->end(), passed, passed + n);
    }
  }
}

/// Reads one frame. Returns false on EOF/error/garbage (the connection is then considered lost).
bool read_frame(int fd, MeshMessage* out) {
  FrameHeader h{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  iovec iov{&h, sizeof(h)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got <= 0) return false;
  collect_fds(msg, &out->fds);
  auto fail = [&] {
    for (int f : out->fds) ::close(f);
    out->fds.clear();
    return false;
  };
  if (static_cast<size_t>(got) < sizeof(h) && !read_full(fd, reinterpret_cast<uint8_t*>(&h) + got, sizeof(h) - got)) {
    return fail();
  }
  if (h.magic != kMagic || h.len > kMaxPayload || h.nfds > kMaxFds || h.nfds != out->fds.size()) return fail();
  out->tag = h.tag;
  out->payload.resize(h.len);
  if (h.len > 0 && !read_full(fd, out->payload.data(), h.len)) return fail();
  return true;
}

/// Sends one frame; false if the peer is gone.
bool write_frame(int fd, uint32_t tag, const std::vector<uint8_t>& payload, const std::vector<int>& fds) {
  FrameHeader h{kMagic, tag, static_cast<uint32_t>(payload.size()), static_cast<uint32_t>(fds.size())};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  iovec iov[2] = {{&h, sizeof(h)}, {const_cast<uint8_t*>(payload.data()), payload.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = payload.empty() ? 1 : 2;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  size_t total = sizeof(h) + payload.size(), sent = 0;
  while (sent < total) {
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    sent += static_cast<size_t>(n);
    if (sent >= total) break;
    // Partial write: continue with the remaining bytes, without the descriptors (already sent).
    msg.msg_control = nullptr;
    msg.msg_controllen = 0;
    size_t skip = sent;
    int k = 0;
    while (skip >= iov[k].iov_len) skip -= iov[k++].iov_len;
    iov[k].iov_base = static_cast<uint8_t*>(iov[k].iov_base) + skip;
    iov[k].iov_len -= skip;
    msg.msg_iov = &iov[k];
    msg.msg_iovlen = static_cast<size_t>((payload.empty() ? 1 : 2) - k);
  }
  return true;
}

// NOTE [mesh hellos]
// Handshake. Rank p connects to the listening socket of every lower rank and writes a hello (its rank and the
// token) into each connection; then it waits until every lower rank has answered with an acceptance frame
// (kTagAccepted, a header with no payload and no descriptors), and only then accepts the connections of the
// higher ranks, answering each hello it adopts with an acceptance as soon as it has read it. A connect() that
// succeeds and a hello that is written prove nothing about the peer: a listening socket takes connections into
// its backlog until it is closed, and a process's descriptors are closed only when its last thread exits (in a
// multi-threaded process killed by SIGKILL the main thread can show as a zombie while the others still exit);
// such a connection is then closed unread. So the connecting rank counts a peer as connected only once its
// acceptance has arrived; a peer that closes the connection first (it died, or dropped the hello) or sends
// anything else is kPeerDead naming it; one that stays silent is kTimeout naming it at the deadline; and the
// wait checks the peer's pid every kLivenessPoll (NOTE [death during rendezvous]). No wait cycle: a rank waits
// for acceptances from lower ranks only, rank 0 waits for none, and a rank that has all its acceptances answers
// every higher rank's hello without waiting for anything else, so by induction on the rank every live rank gets
// its acceptances. Rank p writes all its hellos before it waits for any acceptance, so the lower ranks accept it
// in whatever order they get there.
// Exact reads. Every read during the creation takes exactly the bytes of the frame it expects (a hello on the
// accepting side, an acceptance on the connecting side) and never more: a peer's next frames, which it may send
// as soon as its own creation has returned, stay in the socket for the watchdog.
// Strangers. Any process on the node can connect to a rank's listening socket: its abstract name is listed in
// /proc/net/unix. So the connections a rank accepts during the creation are served side by side, none of them
// trusted: each is read without blocking (poll, MSG_DONTWAIT) until its hello frame is complete, and a
// connection is dropped, alone, when it comes from another user (SO_PEERCRED), sends anything but a hello of a
// missing higher rank with the token (descriptors, another tag or length, a bad rank or token), closes (also
// when the acceptance cannot be written to it), or has not completed its hello kHelloTimeout after it was
// accepted (a peer writes its hello as soon as its connect returns; the timeout only frees a stranger's
// descriptor), or when kMaxPendingHellos newer connections are waiting. A rank whose connection was dropped is
// still missing: the creation keeps its deadline and its liveness checks for it.
constexpr auto kHelloTimeout = std::chrono::seconds(5);
constexpr size_t kMaxPendingHellos = 64;

/// An accepted connection whose hello is not complete yet (owns fd until it is adopted or dropped).
struct PendingHello {
  int fd = -1;
  Clock::time_point give_up;
  std::array<uint8_t, sizeof(FrameHeader) + sizeof(Hello)> bytes{};
  size_t got = 0;
};

enum class ExactRead { kPartial, kComplete, kBad };

/// Reads what has arrived of the first `want` bytes of a handshake frame into buf[*got, want), without blocking
/// and without reading past them. kBad: the connection closed or failed, or descriptors came (a hello and an
/// acceptance carry none).
ExactRead read_exact(int fd, uint8_t* buf, size_t want, size_t* got) {
  while (*got < want) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    iovec iov{buf + *got, want - *got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ExactRead::kPartial;
    std::vector<int> fds;
    if (n > 0) collect_fds(msg, &fds);
    for (int f : fds) ::close(f);
    if (n <= 0 || !fds.empty() || (msg.msg_flags & MSG_CTRUNC)) return ExactRead::kBad;
    *got += static_cast<size_t>(n);
  }
  return ExactRead::kComplete;
}

bool header_is(const uint8_t* bytes, uint32_t tag, uint32_t len) {
  FrameHeader h{};
  std::memcpy(&h, bytes, sizeof(h));
  return h.magic == kMagic && h.tag == tag && h.len == len && h.nfds == 0;
}

/// Reads what has arrived of the hello frame, without blocking and without reading past it; a wrong header is
/// kBad before the payload arrives.
ExactRead read_hello(PendingHello& c) {
  if (c.got < sizeof(FrameHeader)) {
    ExactRead r = read_exact(c.fd, c.bytes.data(), sizeof(FrameHeader), &c.got);
    if (r != ExactRead::kComplete) return r;
    if (!header_is(c.bytes.data(), kTagHello, sizeof(Hello))) return ExactRead::kBad;
  }
  return read_exact(c.fd, c.bytes.data(), c.bytes.size(), &c.got);
}

// NOTE [death during rendezvous]
// Before the mesh exists there is no socket to watch, so every rank first publishes its pid under
// "<prefix>/pid/<rank>"; a rank waiting for a peer (its mesh key, its connection, its acceptance) checks in
// kLivenessPoll slices whether that pid still runs (all ranks share one node). A peer that dies after publishing
// is reported as dead within about 0.1 s instead of at the deadline; one that dies before publishing looks late
// and times out. Waiting for a peer's connection includes connecting to it: a peer that died after publishing
// its mesh key leaves the key behind and its listener gone, so every connect is refused, and only the pid tells
// that retry loop that the peer is dead rather than late.
constexpr auto kLivenessPoll = std::chrono::milliseconds(100);

bool pid_alive(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return errno != ENOENT;
  char state = '?';
  int ignored = std::fscanf(f, "%*d (%*[^)]) %c", &state);
  (void)ignored;
  std::fclose(f);
  return state != 'Z' && state != 'X';  // a zombie is dead, just not reaped yet
}

std::string pid_key(const std::string& prefix, int rank) { return fmt::format("{}/pid/{}", prefix, rank); }
/// Published by a rank once it listens for the mesh connections of higher ranks.
std::string mesh_key(const std::string& prefix, int rank) { return fmt::format("{}/mesh/{}", prefix, rank); }

/// Throws kPeerDead if `peer` published its pid and that process is gone.
void check_peer_alive(Store& store, const std::string& prefix, int me, int peer) {
  std::optional<Bytes> v = store.try_get(pid_key(prefix, peer));
  if (!v) return;
  int pid = std::atoi(std::string(v->begin(), v->end()).c_str());
  if (pid > 0 && !pid_alive(pid)) {
    throw Error(ErrorCode::kPeerDead, fmt::format("rank {}: rank {} (pid {}) died during rendezvous", me, peer, pid),
                __FILE__, __LINE__, {peer});
  }
}

/// Waits for a peer's key, in slices, watching the peer's process.
void wait_peer_key(Store& store, const std::string& prefix, const std::string& key, int me, int peer,
                   Deadline deadline) {
  while (true) {
    try {
      store.wait({key}, kLivenessPoll);
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
    }
    check_peer_alive(store, prefix, me, peer);
    if (deadline.expired()) {
      throw Error(ErrorCode::kTimeout, fmt::format("rank {}: rank {} did not join the communicator", me, peer),
                  __FILE__, __LINE__, {peer});
    }
  }
}

class PeerMeshImpl;

// NOTE [goodbye at exit]
// A process that exits normally (exit(), a return from main, the end of a Python program) while a mesh is still
// open -- a leaked communicator, or one held by an object nobody frees before exit, such as a torch autograd graph
// holding its process group -- never runs the mesh's destructor. Its peers would see its sockets close without
// goodbye and count it as dead: a warning on every survivor, and every collective still running there fails, also
// one whose data from it has already arrived. An exit handler therefore says goodbye on every mesh still open, so
// the peers count the rank as left and only their waits for it fail. It never blocks: the goodbye is sent with
// MSG_DONTWAIT (a peer whose socket buffer is full is not reading and sees a death, as before), a socket another
// thread is sending on is skipped, and so is the whole list if another thread holds it for long. A forked child
// says nothing on its parent's meshes. _exit(), a signal or a crash send nothing: those are deaths.
struct OpenMeshes {
  std::mutex mu;
  std::vector<PeerMeshImpl*> meshes;
};
// Never destroyed: the exit handler may run after the static destructors.
OpenMeshes& open_meshes() {
  static auto* open = new OpenMeshes;
  return *open;
}
void say_goodbye_at_exit();

class PeerMeshImpl final : public PeerMesh {
 public:
  PeerMeshImpl(const RankInfo& ranks) : ranks_(ranks), socks_(ranks.world_size, -1), pids_(ranks.world_size, 0) {
    inbox_.resize(ranks.world_size);
    for (int i = 0; i < ranks.world_size; ++i) send_mu_.push_back(std::make_unique<std::mutex>());
    pids_[ranks.rank] = ::getpid();
  }
  ~PeerMeshImpl() override { close(); }

  void connect_all(Store& store, const std::string& prefix, const std::string& token, Deadline deadline);

  void send(int peer, uint32_t tag, const std::vector<uint8_t>& payload, const std::vector<int>& fds) override {
    SYMCOMM_CHECK(peer >= 0 && peer < ranks_.world_size && peer != ranks_.rank, kInternal, "bad mesh peer {}", peer);
    SYMCOMM_CHECK(fds.size() <= kMaxFds && payload.size() <= kMaxPayload, kInternal, "mesh message too large");
    std::lock_guard lock(*send_mu_[peer]);
    uint64_t bit = uint64_t{1} << peer;
    if (((dead_.load() | left_.load()) & bit) || !write_frame(socks_[peer], tag, payload, fds)) {
      throw Error(
          ErrorCode::kPeerDead,
          fmt::format("rank {}: cannot send to rank {} (pid {}): it died or left", ranks_.rank, peer, pids_[peer]),
          __FILE__, __LINE__, {peer});
    }
  }

  MeshMessage receive(int peer, uint32_t tag, Deadline deadline, const std::atomic<bool>* abort_flag) override {
    std::unique_lock lock(inbox_mu_);
    uint64_t bit = uint64_t{1} << peer;
    while (true) {
      auto& q = inbox_[peer];
      for (auto it = q.begin(); it != q.end(); ++it) {
        if (it->tag == tag) {
          MeshMessage m = std::move(*it);
          q.erase(it);
          return m;
        }
      }
      if ((dead_.load() | left_.load()) & bit) {
        throw Error(ErrorCode::kPeerDead,
                    fmt::format("rank {}: rank {} (pid {}) died or left while this rank waited for it", ranks_.rank,
                                peer, pids_[peer]),
                    __FILE__, __LINE__, {peer});
      }
      if (abort_flag && abort_flag->load()) SYMCOMM_THROW(kAborted, "rank {}: aborted", ranks_.rank);
      if (deadline.expired()) {
        throw Error(ErrorCode::kTimeout,
                    fmt::format("rank {}: no message from rank {} before the deadline", ranks_.rank, peer), __FILE__,
                    __LINE__, {peer});
      }
      inbox_cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
  }

  uint64_t dead_mask() const override { return dead_.load(std::memory_order_acquire); }
  uint64_t left_mask() const override { return left_.load(std::memory_order_acquire); }
  const std::vector<int>& pids() const override { return pids_; }

  void on_peer_lost(std::function<void(int, bool)> callback) override {
    std::lock_guard lock(cb_mu_);
    callbacks_.push_back(std::move(callback));
  }

  void close() override {
    if (closed_.exchange(true)) return;
    delist();  // before the sockets close: the exit handler holds the list while it writes on them
    for (int p = 0; p < ranks_.world_size; ++p) {
      if (socks_[p] < 0) continue;
      std::lock_guard lock(*send_mu_[p]);
      write_frame(socks_[p], kTagBye, {}, {});  // best effort: the peer may be gone already
    }
    if (wake_fd_ >= 0) {
      uint64_t one = 1;
      ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
      (void)ignored;
    }
    if (watchdog_.joinable()) watchdog_.join();
    for (int& s : socks_) {
      if (s >= 0) ::close(s);
      s = -1;
    }
    if (wake_fd_ >= 0) ::close(wake_fd_);
    wake_fd_ = -1;
    std::lock_guard lock(inbox_mu_);
    for (auto& q : inbox_) {
      for (auto& m : q) {
        for (int f : m.fds) ::close(f);
      }
      q.clear();
    }
  }

  void start_watchdog() {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
    SYMCOMM_CHECK_SYS(wake_fd_, "eventfd");
    watchdog_ = std::thread([this] { watch(); });
  }

  /// Puts the mesh on the list the exit handler says goodbye on (NOTE [goodbye at exit]).
  void enlist() {
    static std::once_flag registered;
    std::call_once(registered, [] { std::atexit(say_goodbye_at_exit); });
    OpenMeshes& open = open_meshes();
    std::lock_guard lock(open.mu);
    open.meshes.push_back(this);
  }

  /// The exit handler's goodbye: one frame header per peer, never blocking.
  void goodbye_at_exit() {
    if (::getpid() != pids_[ranks_.rank]) return;  // a forked child: the mesh is its parent's
    const FrameHeader bye{kMagic, kTagBye, 0, 0};
    for (int p = 0; p < ranks_.world_size; ++p) {
      if (socks_[p] < 0) continue;
      std::unique_lock lock(*send_mu_[p], std::try_to_lock);
      if (!lock.owns_lock()) continue;
      ssize_t ignored = ::send(socks_[p], &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)ignored;
    }
  }

 private:
  void delist() {
    OpenMeshes& open = open_meshes();
    std::lock_guard lock(open.mu);
    std::erase(open.meshes, this);
  }
  void watch();
  void lost(int peer, bool died);
  void connect_lower(Store& store, const std::string& prefix, const std::string& token, Deadline deadline);
  void await_acceptances(Store& store, const std::string& prefix, Deadline deadline);
  void accept_higher(Store& store, const std::string& prefix, int listener, const std::string& token,
                     Deadline deadline);
  bool accept_one(int listener, std::vector<PendingHello>& pending);
  bool adopt(const PendingHello& c, const std::string& token, std::string_view* why);

  RankInfo ranks_;
  std::vector<int> socks_;
  std::vector<int> pids_;
  std::vector<std::unique_ptr<std::mutex>> send_mu_;
  std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::vector<std::deque<MeshMessage>> inbox_;
  std::atomic<uint64_t> dead_{0}, left_{0};
  std::mutex cb_mu_;
  std::vector<std::function<void(int, bool)>> callbacks_;
  int wake_fd_ = -1;
  std::thread watchdog_;
  std::atomic<bool> closed_{false};
};

void say_goodbye_at_exit() {
  OpenMeshes& open = open_meshes();
  std::unique_lock lock(open.mu, std::defer_lock);
  for (int i = 0; i < 100 && !lock.try_lock(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!lock.owns_lock()) return;
  for (PeerMeshImpl* mesh : open.meshes) mesh->goodbye_at_exit();
}

void PeerMeshImpl::lost(int peer, bool died) {
  uint64_t bit = uint64_t{1} << peer;
  (died ? dead_ : left_).fetch_or(bit, std::memory_order_acq_rel);
  if (died) {
    SYMCOMM_LOG_WARN("rank {}: rank {} (pid {}) died: its connection closed without goodbye", ranks_.rank, peer,
                     pids_[peer]);
  } else {
    SYMCOMM_LOG_DEBUG("rank {}: rank {} left", ranks_.rank, peer);
  }
  {
    std::lock_guard lock(cb_mu_);
    for (auto& cb : callbacks_) cb(peer, died);
  }
  std::lock_guard lock(inbox_mu_);
  inbox_cv_.notify_all();
}

void PeerMeshImpl::watch() {
  std::vector<bool> open(ranks_.world_size, false);
  for (int p = 0; p < ranks_.world_size; ++p) open[p] = socks_[p] >= 0;
  while (true) {
    std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}};
    std::vector<int> who{-1};
    for (int p = 0; p < ranks_.world_size; ++p) {
      if (open[p]) {
        fds.push_back({socks_[p], POLLIN, 0});
        who.push_back(p);
      }
    }
    int rc = ::poll(fds.data(), fds.size(), -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      SYMCOMM_LOG_ERROR("mesh watchdog: poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[0].revents) return;  // close() asked us to stop
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      int p = who[i];
      MeshMessage m;
      if (!read_frame(socks_[p], &m)) {
        open[p] = false;
        lost(p, true);
      } else if (m.tag == kTagBye) {
        open[p] = false;
        lost(p, false);
      } else {
        std::lock_guard lock(inbox_mu_);
        inbox_[p].push_back(std::move(m));
        inbox_cv_.notify_all();
      }
    }
  }
}

void PeerMeshImpl::connect_all(Store& store, const std::string& prefix, const std::string& token, Deadline deadline) {
  const int me = ranks_.rank, n = ranks_.world_size;
  int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  SYMCOMM_CHECK_SYS(listener, "socket(AF_UNIX)");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{listener};
  socklen_t len;
  sockaddr_un addr = abstract_address(token, prefix, me, &len);
  SYMCOMM_CHECK_SYS(::bind(listener, reinterpret_cast<sockaddr*>(&addr), len), "bind(abstract unix socket)");
  SYMCOMM_CHECK_SYS(::listen(listener, n), "listen");
  store.set(pid_key(prefix, me), std::to_string(::getpid()));
  std::string my_key = mesh_key(prefix, me);
  store.set(my_key, std::to_string(::getpid()));

  connect_lower(store, prefix, token, deadline);  // NOTE [mesh hellos]
  await_acceptances(store, prefix, deadline);
  accept_higher(store, prefix, listener, token, deadline);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    ucred cred{};
    socklen_t cl = sizeof(cred);
    if (::getsockopt(socks_[p], SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) pids_[p] = cred.pid;
  }
  // Every higher rank read the mesh key before connecting, lower ranks never read it; once this rank is
  // connected to everyone, nobody waits for it any more, so its pid key is not needed either.
  store.remove(my_key);
  store.remove(pid_key(prefix, me));
}

void PeerMeshImpl::connect_lower(Store& store, const std::string& prefix, const std::string& token, Deadline deadline) {
  const int me = ranks_.rank;
  socklen_t len;
  Hello hello{};
  hello.rank = me;
  std::strncpy(hello.token, token.c_str(), sizeof(hello.token) - 1);
  std::vector<uint8_t> hello_bytes(sizeof(hello));
  std::memcpy(hello_bytes.data(), &hello, sizeof(hello));
  for (int p = 0; p < me; ++p) {
    // p is listening once its key exists.
    wait_peer_key(store, prefix, mesh_key(prefix, p), me, p, deadline);
    int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    SYMCOMM_CHECK_SYS(s, "socket(AF_UNIX)");
    socks_[p] = s;
    sockaddr_un peer_addr = abstract_address(token, prefix, p, &len);
    auto next_check = Clock::now();  // a refusal this late means p's listener is gone: ask at once
    while (::connect(s, reinterpret_cast<sockaddr*>(&peer_addr), len) != 0) {
      SYMCOMM_CHECK(errno == EINTR || errno == ECONNREFUSED || errno == EAGAIN, kSystem,
                    "connect to rank {} failed: {}", p, std::strerror(errno));
      if (Clock::now() >= next_check) {  // NOTE [death during rendezvous]
        check_peer_alive(store, prefix, me, p);
        next_check = Clock::now() + kLivenessPoll;
      }
      if (deadline.expired()) {
        throw Error(ErrorCode::kTimeout, fmt::format("rank {}: could not connect to rank {}", me, p), __FILE__,
                    __LINE__, {p});
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!write_frame(s, kTagHello, hello_bytes, {})) {
      throw Error(ErrorCode::kPeerDead, fmt::format("rank {}: rank {} closed the connection", me, p), __FILE__,
                  __LINE__, {p});
    }
  }
}

// NOTE [mesh hellos]
void PeerMeshImpl::await_acceptances(Store& store, const std::string& prefix, Deadline deadline) {
  const int me = ranks_.rank;
  struct Awaited {
    int peer;
    std::array<uint8_t, sizeof(FrameHeader)> bytes{};
    size_t got = 0;
  };
  std::vector<Awaited> awaited;
  for (int p = 0; p < me; ++p) awaited.push_back({.peer = p});
  auto next_check = Clock::now() + kLivenessPoll;
  while (!awaited.empty()) {
    std::vector<pollfd> fds;
    for (const Awaited& a : awaited) fds.push_back({socks_[a.peer], POLLIN, 0});
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::min(deadline.at(), next_check) - Clock::now()).count();
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(ms, 0, kLivenessPoll.count())));
    if (rc < 0 && errno != EINTR) SYMCOMM_CHECK_SYS(rc, "poll");
    for (size_t i = awaited.size(); i-- > 0;) {  // backwards: erases
      if (rc <= 0 || fds[i].revents == 0) continue;
      Awaited& a = awaited[i];
      ExactRead r = read_exact(socks_[a.peer], a.bytes.data(), a.bytes.size(), &a.got);
      if (r == ExactRead::kPartial) continue;
      if (r == ExactRead::kBad || !header_is(a.bytes.data(), kTagAccepted, 0)) {
        throw Error(ErrorCode::kPeerDead,
                    fmt::format("rank {}: rank {} {} before accepting this rank (it died or dropped this rank's hello)",
                                me, a.peer, r == ExactRead::kBad ? "closed the connection" : "sent another frame"),
                    __FILE__, __LINE__, {a.peer});
      }
      awaited.erase(awaited.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (awaited.empty()) break;
    if (Clock::now() >= next_check) {  // NOTE [death during rendezvous]
      for (const Awaited& a : awaited) check_peer_alive(store, prefix, me, a.peer);
      next_check = Clock::now() + kLivenessPoll;
    }
    if (deadline.expired()) {
      std::vector<int> absent;
      for (const Awaited& a : awaited) absent.push_back(a.peer);
      throw Error(ErrorCode::kTimeout,
                  fmt::format("rank {}: ranks {} did not accept this rank's connection before the deadline", me,
                              fmt::join(absent, ", ")),
                  __FILE__, __LINE__, absent);
    }
  }
}

// NOTE [mesh hellos]
void PeerMeshImpl::accept_higher(Store& store, const std::string& prefix, int listener, const std::string& token,
                                 Deadline deadline) {
  const int me = ranks_.rank, n = ranks_.world_size;
  std::vector<PendingHello> pending;
  struct CloseAll {
    std::vector<PendingHello>& pending;
    ~CloseAll() {
      for (PendingHello& c : pending) ::close(c.fd);
    }
  } close_all{pending};
  auto missing = [&] {
    std::vector<int> out;
    for (int p = me + 1; p < n; ++p) {
      if (socks_[p] < 0) out.push_back(p);
    }
    return out;
  };
  auto drop = [&](size_t i, std::string_view why) {
    SYMCOMM_LOG_WARN("rank {}: dropped a connection to its mesh socket: {}", me, why);
    ::close(pending[i].fd);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };
  // Reads what arrived of pending[i]'s hello; true if the connection was adopted or dropped (erased).
  auto serve = [&](size_t i) {
    ExactRead r = read_hello(pending[i]);
    if (r == ExactRead::kPartial) return false;
    std::string_view why = "not a hello, or closed";
    if (r == ExactRead::kComplete && adopt(pending[i], token, &why)) {
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));  // its fd is in socks_ now
    } else {
      drop(i, why);
    }
    return true;
  };
  auto next_check = Clock::now() + kLivenessPoll;
  while (!missing().empty()) {
    std::vector<pollfd> fds{{listener, POLLIN, 0}};
    Clock::time_point wake = std::min(deadline.at(), next_check);
    for (const PendingHello& c : pending) {
      fds.push_back({c.fd, POLLIN, 0});
      wake = std::min(wake, c.give_up);
    }
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(ms, 0, 1000)));
    if (rc < 0 && errno != EINTR) SYMCOMM_CHECK_SYS(rc, "poll");
    const auto now = Clock::now();
    for (size_t i = pending.size(); i-- > 0;) {  // backwards: serve() and drop() erase
      if (rc > 0 && fds[i + 1].revents != 0 && serve(i)) continue;
      if (now >= pending[i].give_up) drop(i, fmt::format("no hello within {} s", kHelloTimeout.count()));
    }
    if (rc > 0 && fds[0].revents != 0 && accept_one(listener, pending)) {
      serve(pending.size() - 1);  // a peer's hello is usually there already
      if (pending.size() > kMaxPendingHellos) drop(0, "too many connections without a hello");
    }
    std::vector<int> absent = missing();
    if (absent.empty()) break;
    if (now >= next_check) {
      for (int p : absent) check_peer_alive(store, prefix, me, p);
      next_check = Clock::now() + kLivenessPoll;
    }
    if (deadline.expired()) {
      throw Error(ErrorCode::kTimeout,
                  fmt::format("rank {}: ranks {} did not connect before the deadline", me, fmt::join(absent, ", ")),
                  __FILE__, __LINE__, absent);
    }
  }
}

/// Accepts one connection into `pending`; false if there was none or it was dropped at once.
bool PeerMeshImpl::accept_one(int listener, std::vector<PendingHello>& pending) {
  int s = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (s < 0 && (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  SYMCOMM_CHECK_SYS(s, "accept");
  ucred cred{};
  socklen_t cl = sizeof(cred);
  if (::getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != ::geteuid()) {
    SYMCOMM_LOG_WARN("rank {}: dropped a connection to its mesh socket from uid {} (pid {})", ranks_.rank,
                     static_cast<long>(cred.uid), cred.pid);
    ::close(s);
    return false;
  }
  pending.push_back(PendingHello{.fd = s, .give_up = Clock::now() + kHelloTimeout});
  return true;
}

/// Takes a complete hello's connection as the mesh socket of the rank it names, if that is right, and accepts
/// it (NOTE [mesh hellos]); otherwise sets *why.
bool PeerMeshImpl::adopt(const PendingHello& c, const std::string& token, std::string_view* why) {
  Hello h{};
  std::memcpy(&h, c.bytes.data() + sizeof(FrameHeader), sizeof(h));
  h.token[sizeof(h.token) - 1] = '\0';
  if (h.rank <= ranks_.rank || h.rank >= ranks_.world_size || socks_[h.rank] >= 0 || token != h.token) {
    *why = "a hello of no missing rank, or a wrong token";
    return false;
  }
  if (!write_frame(c.fd, kTagAccepted, {}, {})) {
    *why = "closed before its hello was accepted";
    return false;
  }
  socks_[h.rank] = c.fd;
  return true;
}

}  // namespace

std::string mesh_socket_name(const std::string& token, const std::string& prefix, int rank) {
  return fmt::format("symcomm.{:016x}.{}", fnv1a(token + "|" + prefix), rank);
}

std::unique_ptr<PeerMesh> PeerMesh::create(Store& store, const std::string& prefix, const RankInfo& ranks,
                                           const std::string& token, Deadline deadline) {
  auto mesh = std::make_unique<PeerMeshImpl>(ranks);
  try {
    mesh->connect_all(store, prefix, token, deadline);
  } catch (...) {
    // A failed creation takes back what it published (a retry under the same name must not find it); the
    // store itself may be what failed.
    try {
      store.remove(mesh_key(prefix, ranks.rank));
      store.remove(pid_key(prefix, ranks.rank));
    } catch (const Error&) {
    }
    throw;
  }
  mesh->start_watchdog();
  mesh->enlist();
  return mesh;
}

}  // namespace symcomm::detail
