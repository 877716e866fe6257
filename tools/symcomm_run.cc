// symcomm-run: starts N local ranks of a program, in the manner of `torchrun --standalone`.
//
//   symcomm-run -n N [--master-port P] [--no-prefix] [--timeout SECONDS] [--] program args...
//   symcomm-run --help-env
//
// NOTE [launcher behaviour]
// - Each rank gets the launcher's environment plus RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (= N),
//   MASTER_ADDR=127.0.0.1, MASTER_PORT (a port found free by binding port 0 on loopback, or --master-port),
//   SYMCOMM_TOKEN (32 random hex digits, shared by the ranks of this job) and NCCL_NVLS_ENABLE=0,
//   TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 (NVLink multicast stays off). Stdin is
//   /dev/null: ranks run in their own process groups, where reading the terminal would stop them.
// - Every rank runs under a guardian process (NOTE [launcher death]) that leads the rank's own process group, so
//   that the rank and everything it started can be signalled together, and that kills that group if the
//   launcher dies without being able to (SIGKILL). The launcher knows each rank by its guardian's pid, which is
//   also the group's id; the guardian exits as the rank did (the same code, or killed by the same signal).
// - stdout/stderr of each rank go through pipes; each line is written to the launcher's stdout/stderr as
//   "[rank K] line" (a partial last line is completed at EOF). --no-prefix lets ranks write to the
//   launcher's stdout/stderr directly.
// - The first rank to exit non-zero or be killed by a signal makes the launcher print one line to stderr
//   naming it, send SIGTERM to the other ranks' process groups, SIGKILL them after kGracePeriod, and exit
//   with that rank's exit code (128 + signal number if it was killed). All ranks exiting 0 gives 0.
// - --timeout S: after S seconds the ranks are terminated the same way and the launcher exits 124. S must be
//   a finite number in (0, kMaxTimeoutS]; anything else is a usage error before any rank starts (1e10 s
//   would overflow steady_clock's nanoseconds into a deadline in the past: an instant exit 124).
// - SIGINT/SIGTERM/SIGHUP received by the launcher are forwarded to every rank's process group (SIGKILL
//   follows after kGracePeriod); the launcher then exits with 128 + that signal unless a rank failed first.
// - The launcher reaps every rank before it exits; output still held open by background processes of the
//   ranks is read for at most kDrainTime after the last rank exited.
//
// NOTE [launcher death]
// A launcher killed by SIGKILL can tell no one. PR_SET_PDEATHSIG on each rank kills the rank's own process
// only: what it started (a shell script's python, `sleep 1000 &`) would be orphaned and outlive the job. So
// the launcher forks a guardian per rank, and the guardian forks and execs the rank:
//   launcher ── guardian (leads the rank's process group, never execs) ── rank ── what the rank starts
// - The guardian learns of the launcher's death from the lifeline: a pipe whose write end only the launcher
//   holds (the guardians close their copies first thing; the ranks never get it: O_CLOEXEC). The launcher
//   never writes to it, so POLLHUP on the read end means the launcher is gone, however it died, even before
//   the guardian started (PR_SET_PDEATHSIG would need a getppid() check for that race, and fires when the
//   parent *thread* ends).
// - Then the guardian sends SIGKILL to the rank and to its own process group (itself included). SIGKILL
//   directly, not SIGTERM and a grace period: whoever killed the launcher with SIGKILL chose a hard stop
//   (often after a SIGTERM, which the launcher has already forwarded to the groups and which gave the ranks
//   their chance to clean up), nobody reads the ranks' output any more, and a rank ignoring SIGTERM would
//   outlive the job by the grace period. The rank's own PR_SET_PDEATHSIG is SIGKILL as well.
// - Signals from the launcher go to the group, so they reach the guardian as well: it keeps SIGINT, SIGTERM
//   and SIGHUP blocked (inherited from the launcher) and so ignores them; SIGKILL (the grace period's end)
//   kills it with the rank, as it should. A signal that reached the group after the guardian created it but
//   before it forked the rank is pending in the guardian only: the rank waits on a pipe until the guardian
//   has passed such signals on (to the rank, which still blocks them, so one sent to both arrives once).
// - The guardian waits for the rank (SIGCHLD through a signalfd), exits with its code, or re-raises the
//   signal that killed it (no core dump of the guardian), so the launcher's exit codes stay 128 + signal.
// - Descriptors: the guardian closes what the launcher opened (signalfd, lifeline write end, other ranks'
//   pipes) and, once the rank is forked, its own copies of the rank's output pipes, so that EOF on the rank's
//   output comes when the rank (and what it started) closes them; the rank gets stdin, stdout and stderr and
//   whatever the launcher itself inherited.
// - Limits: processes that leave the rank's process group (setsid, setpgid) escape; a
//   guardian killed by SIGKILL at the same time as the launcher leaves the rank's children behind (the rank
//   itself still has PR_SET_PDEATHSIG). A guardian killed alone is a failed rank to the launcher, which then
//   kills that rank's group. Guardians are named symcomm-guard (ps, `killall symcomm-run`), but share the
//   launcher's command line (`pkill -f`). Only a cgroup would hold every descendant for sure.

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "symcomm/config.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kGracePeriod = std::chrono::seconds(5);
constexpr auto kDrainTime = std::chrono::seconds(1);
constexpr size_t kMaxLine = 64 * 1024;  // a longer line without newline is emitted in pieces
constexpr int kTimeoutExit = 124;
constexpr double kMaxTimeoutS = 1e6;  // ~11.6 days: beyond any job, far within steady_clock's ~292 years

struct Options {
  int nproc = 0;
  int master_port = 0;
  bool no_prefix = false;
  double timeout_s = 0;
  std::vector<std::string> command;
};

// One output stream of a rank: the read end of its pipe and the unfinished last line.
struct Stream {
  int fd = -1;
  int to = STDOUT_FILENO;
  std::string partial;
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  Stream out, err;
};

[[noreturn]] void die(const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the launcher's own output is gone (EPIPE): nothing useful left to do
    s.remove_prefix(static_cast<size_t>(n));
  }
}

void note(const std::string& line) { write_all(STDERR_FILENO, "symcomm-run: " + line + "\n"); }

int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    die("binding a free loopback port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string random_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno != EINTR) die("getrandom");
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

int exit_code_of(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

class Launcher {
 public:
  explicit Launcher(Options o) : o_(std::move(o)), ranks_(static_cast<size_t>(o_.nproc)) {}
  int run();

 private:
  std::vector<std::string> environment(int rank, int port, const std::string& token) const;
  void spawn(int rank, const std::vector<std::string>& env);
  [[noreturn]] void guard(char* const* argv, char* const* envp, int out, int err) const;
  [[noreturn]] void exec_rank(char* const* argv, char* const* envp, int out, int err, int go, pid_t guardian) const;
  void on_signal();
  void reap();
  bool read_stream(int rank, Stream& s);
  void emit(int rank, Stream& s, std::string_view chunk, bool eof);
  void terminate(int sig);
  void check_deadlines(Clock::time_point now);
  int poll_timeout_ms(Clock::time_point now) const;
  bool any_running() const;

  Options o_;
  std::vector<Rank> ranks_;
  sigset_t old_mask_{};
  int signal_fd_ = -1;
  int lifeline_[2] = {-1, -1};  // NOTE [launcher death]: the write end stays open until the launcher exits
  bool terminating_ = false;
  std::optional<int> failure_;  // wait status of the first failed rank
  int forwarded_signal_ = 0;
  bool timed_out_ = false;
  std::optional<Clock::time_point> timeout_at_, kill_at_, drain_until_;
};

std::vector<std::string> Launcher::environment(int rank, int port, const std::string& token) const {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(o_.nproc)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc)},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(port)},
      {"SYMCOMM_TOKEN", token},
      {"NCCL_NVLS_ENABLE", "0"},
      {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
      {"NVSHMEM_DISABLE_NVLS", "1"},
  };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = std::any_of(ours.begin(), ours.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : ours) env.push_back(name + "=" + value);
  return env;
}

void Launcher::spawn(int rank, const std::vector<std::string>& env) {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (!o_.no_prefix && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)) die("pipe2");
  std::vector<char*> argv, envp;
  for (const std::string& a : o_.command) argv.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  // Descriptors of the launcher that the guardian closes (NOTE [launcher death]).
  std::vector<int> launcher_fds = {signal_fd_, lifeline_[1], out[0], err[0]};
  for (const Rank& r : ranks_) {
    for (const Stream* s : {&r.out, &r.err}) launcher_fds.push_back(s->fd);
  }
  pid_t pid = ::fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    for (int fd : launcher_fds) {
      if (fd >= 0) ::close(fd);
    }
    guard(argv.data(), envp.data(), out[1], err[1]);
  }
  ::setpgid(pid, pid);  // also here, so that the group exists before the guardian gets to run
  Rank& r = ranks_[static_cast<size_t>(rank)];
  r.pid = pid;
  r.running = true;
  if (!o_.no_prefix) {
    ::close(out[1]);
    ::close(err[1]);
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    r.out = {out[0], STDOUT_FILENO, {}};
    r.err = {err[0], STDERR_FILENO, {}};
  }
}

// The launcher is single-threaded, so formatting after fork is safe.
[[noreturn]] void guardian_failed(const char* what) {
  write_all(STDERR_FILENO, fmt::format("symcomm-run: rank guardian: {}: {}\n", what, std::strerror(errno)));
  ::kill(0, SIGKILL);  // the rank's process group, the guardian included; the launcher sees a failed rank
  ::_exit(127);
}

// The guardian of one rank (NOTE [launcher death]), in the child of fork(): makes the rank's process group,
// forks and execs the rank in it, kills the group if the launcher dies, and exits as the rank did. SIGINT,
// SIGTERM, SIGHUP and SIGCHLD stay blocked, as fork left them.
void Launcher::guard(char* const* argv, char* const* envp, int out, int err) const {
  ::setpgid(0, 0);
  ::prctl(PR_SET_NAME, "symcomm-guard");
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int child_fd = ::signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  if (child_fd < 0) guardian_failed("signalfd");
  int go[2] = {-1, -1};
  if (::pipe2(go, O_CLOEXEC) != 0) guardian_failed("pipe2");
  pid_t guardian = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) guardian_failed("fork");
  if (pid == 0) {
    ::close(go[1]);
    exec_rank(argv, envp, out, err, go[0], guardian);
  }
  ::close(go[0]);
  sigset_t pending;
  ::sigpending(&pending);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    if (sigismember(&pending, sig)) ::kill(pid, sig);  // sent to the group before the rank was in it
  }
  ::close(go[1]);
  if (out >= 0) ::close(out);
  if (err >= 0) ::close(err);

  pollfd fds[2] = {{lifeline_[0], POLLIN, 0}, {child_fd, POLLIN, 0}};
  int status = 0;
  for (pid_t done; (done = ::waitpid(pid, &status, WNOHANG)) != pid;) {
    if (done < 0 && errno != EINTR) guardian_failed("waitpid");
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) guardian_failed("poll");
    if (fds[0].revents != 0) {  // the launcher is gone
      ::kill(pid, SIGKILL);     // in case the rank left the group
      ::kill(0, SIGKILL);
    }
    signalfd_siginfo info{};
    while (::read(child_fd, &info, sizeof(info)) == sizeof(info)) {
    }
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // the rank dumped its core if it was to
    ::signal(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
    ::raise(sig);
    ::_exit(128 + sig);  // not reached: the rank was killed by it, so its default action kills
  }
  ::_exit(WEXITSTATUS(status));
}

// The rank, in the guardian's child: waits until the guardian has passed on early signals (EOF on go), then
// restores what the launcher changed and execs the command.
void Launcher::exec_rank(char* const* argv, char* const* envp, int out, int err, int go, pid_t guardian) const {
  char byte;
  while (::read(go, &byte, 1) < 0 && errno == EINTR) {
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a guardian killed with the launcher takes at least the rank with it
  if (::getppid() != guardian) ::_exit(127);
  ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
  if (null_fd > STDIN_FILENO) ::close(null_fd);  // every rank inherited it as an extra descriptor
  if (out >= 0) {
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
  }
  ::execvpe(argv[0], argv, envp);
  // The launcher is single-threaded, so formatting after fork is safe.
  write_all(STDERR_FILENO, fmt::format("symcomm-run: cannot execute {}: {}\n", argv[0], std::strerror(errno)));
  ::_exit(127);
}

void Launcher::emit(int rank, Stream& s, std::string_view chunk, bool eof) {
  std::string prefix = fmt::format("[rank {}] ", rank);
  std::string text;
  size_t start = 0;
  for (size_t nl; (nl = chunk.find('\n', start)) != std::string_view::npos; start = nl + 1) {
    text += prefix + s.partial;
    text.append(chunk.substr(start, nl + 1 - start));
    s.partial.clear();
  }
  s.partial.append(chunk.substr(start));
  if (!s.partial.empty() && (eof || s.partial.size() >= kMaxLine)) {
    text += prefix + s.partial + "\n";
    s.partial.clear();
  }
  write_all(s.to, text);  // one write per chunk keeps lines of different ranks apart
}

bool Launcher::read_stream(int rank, Stream& s) {
  char buf[16 * 1024];
  ssize_t n = ::read(s.fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return false;
  if (n <= 0) {
    emit(rank, s, {}, true);
    ::close(s.fd);
    s.fd = -1;
    return false;
  }
  emit(rank, s, std::string_view(buf, static_cast<size_t>(n)), false);
  return true;
}

void Launcher::terminate(int sig) {
  for (const Rank& r : ranks_) {
    if (r.running) ::kill(-r.pid, sig);
  }
  if (!terminating_) kill_at_ = Clock::now() + kGracePeriod;
  terminating_ = true;
}

void Launcher::reap() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (size_t k = 0; k < ranks_.size(); ++k) {
      Rank& r = ranks_[k];
      if (r.pid != pid || !r.running) continue;
      r.running = false;
      // Print what the rank wrote before it exited ahead of the launcher's own line about it.
      for (Stream* s : {&r.out, &r.err}) {
        for (int i = 0; i < 64 && s->fd >= 0 && read_stream(static_cast<int>(k), *s); ++i) {
        }
      }
      bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (failed && !terminating_) {
        failure_ = status;
        note(fmt::format("rank {} (pid {}) {}; terminating the other ranks", k, pid, describe_status(status)));
        terminate(SIGTERM);
      }
      // The job is being torn down: leftovers of this rank's group go too.
      if (terminating_) ::kill(-pid, SIGKILL);
    }
  }
  if (!any_running() && !drain_until_) drain_until_ = Clock::now() + kDrainTime;
}

void Launcher::on_signal() {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reaped below in any case
    note(fmt::format("received signal {} ({}); forwarding it to the ranks", sig, strsignal(sig)));
    if (forwarded_signal_ == 0) forwarded_signal_ = sig;
    terminate(sig);
  }
  reap();
}

// Each deadline is cleared once it has passed, so that poll() waits again instead of returning at once (which
// would spin the launcher at 100% CPU through the SIGTERM grace period after a timeout). The timeout only
// counts while ranks run and nothing else ended the job: a rank that failed first, or ranks that all finished
// and whose output is being drained, keep their own exit status (124 overrides neither).
void Launcher::check_deadlines(Clock::time_point now) {
  if (timeout_at_ && now >= *timeout_at_) {
    timeout_at_.reset();
    if (any_running() && !failure_ && forwarded_signal_ == 0) {
      timed_out_ = true;
      note(fmt::format("timed out after {} s; terminating the ranks", o_.timeout_s));
      terminate(SIGTERM);
    }
  }
  if (kill_at_ && now >= *kill_at_) {
    kill_at_.reset();
    if (any_running()) {
      note("ranks still running after SIGTERM; sending SIGKILL");
      terminate(SIGKILL);
    }
  }
}

int Launcher::poll_timeout_ms(Clock::time_point now) const {
  auto next = Clock::time_point::max();
  for (const auto& t : {timeout_at_, kill_at_, drain_until_}) {
    if (t) next = std::min(next, *t);
  }
  if (next == Clock::time_point::max()) return -1;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

bool Launcher::any_running() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
}

int Launcher::run() {
  // Signals are taken through a signalfd so that the poll loop sees them; children restore the mask.
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, sig);
  if (::sigprocmask(SIG_BLOCK, &mask, &old_mask_) != 0) die("sigprocmask");
  signal_fd_ = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd_ < 0) die("signalfd");
  ::signal(SIGPIPE, SIG_IGN);

  if (::pipe2(lifeline_, O_CLOEXEC) != 0) die("pipe2");  // NOTE [launcher death]

  int port = o_.master_port != 0 ? o_.master_port : free_loopback_port();
  std::string token = random_token();
  try {
    for (int k = 0; k < o_.nproc; ++k) spawn(k, environment(k, port, token));
  } catch (...) {
    terminate(SIGKILL);  // leave no rank behind when a later one cannot start
    for (Rank& r : ranks_) {
      if (r.running) ::waitpid(r.pid, nullptr, 0);
    }
    throw;
  }
  ::close(lifeline_[0]);  // the guardians have theirs
  lifeline_[0] = -1;
  if (o_.timeout_s > 0) {
    timeout_at_ =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.timeout_s));
  }

  while (true) {
    auto now = Clock::now();
    check_deadlines(now);
    std::vector<pollfd> fds = {{signal_fd_, POLLIN, 0}};
    std::vector<std::pair<int, Stream*>> streams;
    for (size_t k = 0; k < ranks_.size(); ++k) {
      for (Stream* s : {&ranks_[k].out, &ranks_[k].err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.emplace_back(static_cast<int>(k), s);
      }
    }
    bool drained = drain_until_ && (streams.empty() || now >= *drain_until_);
    if (!any_running() && drained) break;
    if (::poll(fds.data(), fds.size(), poll_timeout_ms(now)) < 0 && errno != EINTR) die("poll");
    if (fds[0].revents != 0) on_signal();
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(streams[i - 1].first, *streams[i - 1].second);
    }
  }
  for (Rank& r : ranks_) {
    for (Stream* s : {&r.out, &r.err}) {
      if (s->fd >= 0) emit(static_cast<int>(&r - ranks_.data()), *s, {}, true);
    }
  }
  if (timed_out_) return kTimeoutExit;
  if (failure_) return exit_code_of(*failure_);
  return forwarded_signal_ != 0 ? 128 + forwarded_signal_ : 0;
}

// Accepts a finite number of seconds in (0, kMaxTimeoutS]; CLI::PositiveNumber let nan, 1e10 and more through.
CLI::Validator timeout_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        double s = std::strtod(text.c_str(), &end);
        bool whole = !text.empty() && end == text.c_str() + text.size();
        if (whole && s > 0 && s <= kMaxTimeoutS) return {};  // false for nan
        return fmt::format("'{}' is not a number of seconds in (0, {:g}]", text, kMaxTimeoutS);
      },
      fmt::format("SECONDS in (0, {:g}]", kMaxTimeoutS));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool help_env = false;
  CLI::App app{"symcomm-run: start N local ranks of a program (see the launcher NOTE in tools/symcomm_run.cc)"};
  app.add_option("-n,--nproc", o.nproc, "number of ranks to start")->check(CLI::Range(1, 4096));
  app.add_option("--master-port", o.master_port, "MASTER_PORT for the ranks (default: a free port)")
      ->check(CLI::Range(1, 65535));
  app.add_flag("--no-prefix", o.no_prefix, "let ranks write to stdout/stderr directly, without [rank K]");
  app.add_option("--timeout", o.timeout_s, "kill all ranks after this many seconds and exit 124")
      ->check(timeout_validator());
  app.add_flag("--help-env", help_env, "print the SYMCOMM_* environment variables and exit");
  app.prefix_command();  // everything from the program name (or after --) belongs to the program
  CLI11_PARSE(app, argc, argv);
  if (help_env) {
    std::cout << symcomm::Config::env_help();
    return 0;
  }
  o.command = app.remaining();
  bool after_dashdash = !o.command.empty() && o.command.front() == "--";
  if (after_dashdash) o.command.erase(o.command.begin());
  if (!after_dashdash && !o.command.empty() && o.command.front().starts_with("-")) {
    std::cerr << "symcomm-run: unknown option " << o.command.front() << "\n" << app.help();
    return 2;
  }
  if (o.nproc < 1 || o.command.empty()) {
    std::cerr << "symcomm-run: need -n N and a program to run\n" << app.help();
    return 2;
  }
  try {
    return Launcher(std::move(o)).run();
  } catch (const std::exception& e) {
    note(e.what());
    return 1;
  }
}
