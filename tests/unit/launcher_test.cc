// Runs the built symcomm-run (path in $SYMCOMM_RUN, set by ctest) on small /bin/sh commands.

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
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct RunResult {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
  double seconds = 0;
};

// Runs the launcher with args, capturing stdout and stderr; kills it after `limit`. With signal_after set,
// sends `sig` to the launcher that long after the start.
RunResult run_launcher(const std::vector<std::string>& args, std::chrono::milliseconds limit = 10s,
                       std::chrono::milliseconds signal_after = 0ms, int sig = 0) {
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
    if (sig != 0 && !signalled && elapsed >= signal_after) {
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

// A rank's failure before the timeout keeps its own exit status: the timeout used to fire during the SIGTERM
// grace period (rank 1 ignores SIGTERM) and exit 124. The launcher waits in poll() meanwhile: it used to spin
// at 100% CPU through the grace period once a deadline had passed.
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
// inf) used to overflow into a deadline in the past and exit 124 at once; nan used to mean no timeout.
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

}  // namespace
