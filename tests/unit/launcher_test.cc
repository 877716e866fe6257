// Runs the built symcomm-run (path in $SYMCOMM_RUN, set by ctest) on small /bin/sh commands.

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct RunResult {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
  double seconds = 0;
};

// Runs the launcher with args, capturing stdout and stderr; kills it after `limit`. With sig set, sends `sig`
// to the launcher once signal_after has passed since the start and `ready` (if given) returns true. The
// launcher starts with descriptors 0, 1 and 2 only, so that any other descriptor of a rank is its doing.
RunResult run_launcher(const std::vector<std::string>& args, std::chrono::milliseconds limit = 10s,
                       std::chrono::milliseconds signal_after = 0ms, int sig = 0,
                       const std::function<bool()>& ready = {}) {
  RunResult res;
  const char* launcher = std::getenv("SYMCOMM_RUN");
  std::vector<std::string> all = {launcher};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2], err[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  auto start = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::close_range(3, ~0U, 0);
    ::execv(argv[0], argv.data());
    ::_exit(126);
  }
  ::close(out[1]);
  ::close(err[1]);
  std::vector<pollfd> fds = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[] = {&res.out, &res.err};
  bool signalled = false;
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    auto elapsed = Clock::now() - start;
    if (sig != 0 && !signalled && elapsed >= signal_after && (!ready || ready())) {
      ::kill(pid, sig);
      signalled = true;
    }
    if (elapsed > limit) {
      ADD_FAILURE() << "launcher still running after " << limit.count() << " ms; killing it";
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  res.status = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  return res;
}

RunResult run_sh(int n, const std::string& script, std::vector<std::string> options = {}) {
  options.insert(options.begin(), {"-n", std::to_string(n)});
  options.insert(options.end(), {"--", "/bin/sh", "-c", script});
  return run_launcher(options);
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("SYMCOMM_RUN") == nullptr) {
      GTEST_SKIP() << "SYMCOMM_RUN (path of symcomm-run) is not set; ctest sets it";
    }
  }
};

TEST_F(LauncherTest, EveryRankSeesItsEnvironment) {
  RunResult r = run_sh(3,
                       "echo \"R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE A=$MASTER_ADDR P=$MASTER_PORT "
                       "T=$SYMCOMM_TOKEN N=$NCCL_NVLS_ENABLE$TORCH_SYMM_MEM_DISABLE_MULTICAST$NVSHMEM_DISABLE_NVLS\"");
  ASSERT_EQ(r.status, 0) << r.err;
  std::regex line(R"(\[rank (\d)\] R=(\d) W=3 L=(\d) LW=3 A=127\.0\.0\.1 P=(\d+) T=([0-9a-f]{32}) N=011)");
  std::set<std::string> ports, tokens, ranks;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_EQ(m[1], m[3]);
    EXPECT_NE(m[4], "0");
    ranks.insert(m[1]);
    ports.insert(m[4]);
    tokens.insert(m[5]);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2"}));
  EXPECT_EQ(ports.size(), 1u);
  EXPECT_EQ(tokens.size(), 1u);
  RunResult fixed = run_sh(1, "echo $MASTER_PORT", {"--master-port", "23456"});
  EXPECT_EQ(fixed.out, "[rank 0] 23456\n");
}

// The lines of one rank, in order, without their prefix (ranks' lines may interleave).
std::vector<std::string> lines_of(const std::string& text, int rank) {
  std::string prefix = "[rank " + std::to_string(rank) + "] ";
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l.starts_with(prefix)) out.push_back(l.substr(prefix.size()));
  }
  return out;
}

TEST_F(LauncherTest, PrefixesEveryLineWithTheRank) {
  RunResult r = run_sh(2, "echo one; echo two; echo oops >&2; printf tail");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.back(), '\n');  // partial last lines are completed at EOF
  for (int rank : {0, 1}) {
    EXPECT_EQ(lines_of(r.out, rank), (std::vector<std::string>{"one", "two", "tail"})) << r.out;
    EXPECT_EQ(lines_of(r.err, rank), (std::vector<std::string>{"oops"})) << r.err;
  }
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 6) << r.out;  // every line carries a prefix
  RunResult raw = run_sh(1, "echo plain", {"--no-prefix"});
  EXPECT_EQ(raw.out, "plain\n");
}

TEST_F(LauncherTest, FailingRankKillsItsSiblings) {
  std::string pid_file = "/tmp/symcomm_launcher_test_" + std::to_string(::getpid());
  RunResult r = run_sh(2, "if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; echo $$ > " + pid_file + "; sleep 1000");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("code 3"), std::string::npos) << r.err;
  std::ifstream f(pid_file);
  pid_t sibling = 0;
  ASSERT_TRUE(f >> sibling);
  ::unlink(pid_file.c_str());
  EXPECT_NE(::kill(sibling, 0), 0) << "rank 0 (pid " << sibling << ") is still alive";
}

TEST_F(LauncherTest, RankKilledBySignalGives128PlusSignal) {
  RunResult r = run_sh(2, "if [ $RANK = 1 ]; then kill -9 $$; fi; sleep 1000");
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("signal 9"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, TimeoutKillsEverythingAndExits124) {
  RunResult r = run_sh(2, "sleep 1000", {"--timeout", "0.3"});
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_LT(r.seconds, 3.0);
}

// A rank's failure before the timeout keeps its own exit status: the timeout must not fire during the SIGTERM
// grace period (rank 1 ignores SIGTERM) and exit 124. The launcher waits in poll() meanwhile, not spinning at
// 100% CPU through the grace period once a deadline has passed.
TEST_F(LauncherTest, AFailureBeforeTheTimeoutKeepsItsExitCodeAndTheLauncherDoesNotSpin) {
  rusage before{};
  ::getrusage(RUSAGE_CHILDREN, &before);
  RunResult r = run_sh(2, "if [ $RANK = 0 ]; then sleep 0.3; exit 7; fi; trap '' TERM; sleep 30", {"--timeout", "1"});
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_EQ(r.err.find("timed out"), std::string::npos) << r.err;
  rusage after{};
  ::getrusage(RUSAGE_CHILDREN, &after);
  auto cpu_s = [](const rusage& u) {
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  EXPECT_LT(cpu_s(after) - cpu_s(before), 0.5)
      << "CPU seconds of the launcher and its ranks over " << r.seconds << " s of grace period";
}

// --timeout is bounded (NOTE [launcher behaviour]): a value whose deadline steady_clock cannot hold (1e10 s,
// inf) would overflow into a deadline in the past and exit 124 at once, and nan would mean no timeout; all
// are usage errors.
TEST_F(LauncherTest, TimeoutOutOfRangeIsAUsageError) {
  for (const char* bad : {"1e10", "inf", "nan", "1000001", "0", "-1", "5s"}) {
    RunResult r = run_sh(1, "echo ran", {"--timeout", bad});
    EXPECT_NE(r.status, 0) << "--timeout " << bad;
    EXPECT_NE(r.status, 124) << "--timeout " << bad;
    EXPECT_NE(r.err.find("--timeout"), std::string::npos) << "--timeout " << bad << ": " << r.err;
    EXPECT_EQ(r.out, "") << "--timeout " << bad;  // no rank was started
  }
  RunResult longest = run_sh(1, "echo ran", {"--timeout", "1e6"});
  EXPECT_EQ(longest.status, 0) << longest.err;
  EXPECT_EQ(longest.out, "[rank 0] ran\n");
}

TEST_F(LauncherTest, ForwardsSigtermToTheRanks) {
  RunResult r = run_launcher({"-n", "2", "/bin/sh", "-c", "echo started; sleep 1000"}, 10s, 300ms, SIGTERM);
  EXPECT_EQ(r.status, 128 + SIGTERM) << r.err;
  EXPECT_LT(r.seconds, 4.0);
}

TEST_F(LauncherTest, AllRanksSucceedAndHelpEnv) {
  EXPECT_EQ(run_sh(4, "exit 0").status, 0);
  RunResult help = run_launcher({"--help-env"});
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("SYMCOMM_TIMEOUT_MS"), std::string::npos) << help.out;
  EXPECT_NE(run_launcher({"-n", "1"}).status, 0);  // no program
}

// A fresh directory under /tmp for the files the ranks write, removed with them.
class ScratchDir {
 public:
  ScratchDir() {
    char name[] = "/tmp/symcomm_launcher_test_XXXXXX";
    if (::mkdtemp(name) != nullptr) path_ = name;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  // A shell command that writes `what` (expanded by the rank's shell) to <dir>/<name>.$RANK, complete or not at all.
  std::string record(const std::string& what, const std::string& name) const {
    std::string tmp = path_ + "/tmp.$RANK";
    return "echo " + what + " > " + tmp + " && mv " + tmp + " " + path_ + "/" + name + ".$RANK";
  }
  std::optional<pid_t> pid(const std::string& name, int rank) const {
    std::ifstream f(path_ + "/" + name + "." + std::to_string(rank));
    pid_t pid = 0;
    if (f >> pid && pid > 0) return pid;
    return std::nullopt;
  }

 private:
  std::string path_;
};

// State and start time (clock ticks after boot) of a process, from /proc/<pid>/stat; nullopt once it is gone.
struct ProcState {
  char state = '?';
  unsigned long long start = 0;
};

std::optional<ProcState> proc_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return std::nullopt;
  size_t paren = stat.rfind(')');  // the command name (field 2) may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 > stat.size()) return std::nullopt;
  std::istringstream fields(stat.substr(paren + 2));
  ProcState p;
  std::string skip;
  fields >> p.state;
  for (int field = 4; field < 22; ++field) fields >> skip;
  fields >> p.start;  // field 22 (proc(5))
  return p;
}

// Whether the process that started at `start` still runs: gone, a zombie, or another process under a reused pid
// all count as not running (an orphan's zombie waits for whatever reaps orphans here).
bool still_runs(pid_t pid, unsigned long long start) {
  std::optional<ProcState> p = proc_state(pid);
  return p && p->start == start && p->state != 'Z' && p->state != 'X';
}

// NOTE [launcher death] in tools/symcomm_run.cc. Each rank's shell starts a sleep in its process group; the
// launcher is then signalled. Both SIGTERM and SIGKILL must reach the whole group of every rank: with
// PR_SET_PDEATHSIG alone a SIGKILL kills each rank's own process only, and the sleeps outlive the job.
TEST_F(LauncherTest, LauncherKilledOrTerminatedLeavesNoProcessOfARankBehind) {
  for (int sig : {SIGTERM, SIGKILL}) {
    SCOPED_TRACE(strsignal(sig));
    ScratchDir dir;
    ASSERT_FALSE(dir.path().empty());
    std::vector<std::pair<pid_t, unsigned long long>> sleeps;  // pid, start time
    auto started = [&] {
      sleeps.clear();
      for (int rank : {0, 1}) {
        std::optional<pid_t> pid = dir.pid("sleep", rank);
        std::optional<ProcState> p = pid ? proc_state(*pid) : std::nullopt;
        if (!p) return false;
        sleeps.emplace_back(*pid, p->start);
      }
      return true;
    };
    RunResult r =
        run_launcher({"-n", "2", "--", "/bin/sh", "-c", "sleep 300 & " + dir.record("$!", "sleep") + "; wait"}, 10s,
                     0ms, sig, started);
    EXPECT_EQ(r.status, 128 + sig) << r.err;
    ASSERT_EQ(sleeps.size(), 2u) << "the ranks did not start their sleeps: " << r.err;
    auto any_runs = [&] {
      return std::any_of(sleeps.begin(), sleeps.end(), [](const auto& s) { return still_runs(s.first, s.second); });
    };
    for (auto give_up = Clock::now() + 5s; any_runs() && Clock::now() < give_up;) std::this_thread::sleep_for(20ms);
    for (const auto& [pid, start] : sleeps) {
      bool runs = still_runs(pid, start);
      EXPECT_FALSE(runs) << "a rank's child (pid " << pid << ") outlived the launcher by 5 s";
      if (runs) ::kill(pid, SIGKILL);  // leave nothing behind
    }
  }
}

// A SIGTERM that the launcher forwards while a guardian has made its rank's process group but not yet forked the
// rank reaches the guardian only; the guardian passes it on (NOTE [launcher death]). Without that, a run now and
// then waits for the SIGKILL at the end of the 5 s grace period (this test then fails in 3 of 3 sets of 20
// runs). The signal is sent 0-9 ms after the start, while the ranks are being started.
TEST_F(LauncherTest, SigtermWhileTheRanksStartReachesEveryRank) {
  for (int run = 0; run < 20; ++run) {
    auto wait_a_little = [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(run % 10));
      return true;
    };
    RunResult r = run_launcher({"-n", "8", "--", "/bin/sh", "-c", "sleep 100"}, 10s, 0ms, SIGTERM, wait_a_little);
    EXPECT_EQ(r.status, 128 + SIGTERM) << "run " << run << ": " << r.err;
    EXPECT_LT(r.seconds, 3.0) << "run " << run << ": " << r.err;
  }
}

// A rank holds stdin, stdout and stderr only: nothing the launcher opened (its signalfd, the other ranks' pipes,
// the lifeline of NOTE [launcher death]) leaks into it.
TEST_F(LauncherTest, RankHoldsOnlyStdinStdoutAndStderr) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  constexpr int kRanks = 3;
  std::vector<std::set<std::string>> fds;
  const std::set<std::string> standard = {"0", "1", "2"};
  // Read once every rank's shell has become its sleep and holds the three standard descriptors only. A process
  // named sleep may still be starting: its loader and setlocale() open files (as descriptor 3) and close them. A
  // descriptor inherited from the launcher stays, so the launcher is never signalled, the run fails at its limit,
  // and `fds` holds the last reading.
  auto all_sleeping = [&] {
    fds.clear();
    bool settled = true;
    for (int rank = 0; rank < kRanks; ++rank) {
      std::optional<pid_t> pid = dir.pid("rank", rank);
      if (!pid) return false;
      std::string proc = "/proc/" + std::to_string(*pid);
      std::string comm;
      if (!std::getline(std::ifstream(proc + "/comm"), comm) || comm != "sleep") return false;
      std::set<std::string> names;
      if (DIR* d = ::opendir((proc + "/fd").c_str())) {
        while (dirent* e = ::readdir(d)) {
          if (e->d_name[0] != '.') names.insert(e->d_name);
        }
        ::closedir(d);
      }
      settled = settled && names == standard;
      fds.push_back(names);
    }
    return settled;
  };
  RunResult r = run_launcher(
      {"-n", std::to_string(kRanks), "--", "/bin/sh", "-c", dir.record("$$", "rank") + " && exec sleep 300"}, 10s, 0ms,
      SIGTERM, all_sleeping);
  EXPECT_EQ(r.status, 128 + SIGTERM) << r.err;
  ASSERT_EQ(fds.size(), static_cast<size_t>(kRanks)) << r.err;
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_EQ(fds[rank], standard) << "rank " << rank;
  }
}

}  // namespace
