#include "harness/rank_harness.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#if defined(SYMCOMM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace symcomm::testing {
namespace {

// Shared between the parent and the forked ranks (MAP_SHARED | MAP_ANONYMOUS, created before fork).
struct SharedPage {
  std::atomic<int> store_port;
  std::atomic<int> others_done;  ///< set by the parent once every rank but 0 has ended
};

constexpr const char* kToken = "rank-harness-token";

[[noreturn]] void child_main(int rank, int world_size, SharedPage* page, const std::function<void(RankEnv&)>& body,
                             const HarnessOptions& options) {
  int code = 0;
  try {
    std::unique_ptr<StoreServer> server;
    if (rank == 0) {
      server = StoreServer::start(StoreServerOptions{.host = "127.0.0.1", .port = 0, .token = kToken, .limits = {}});
      page->store_port.store(server->port());
    }
    while (page->store_port.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    RankEnv env;
    env.info = RankInfo{rank, world_size, rank, world_size};
    env.config = options.config;
    env.job_id = std::to_string(::getppid()) + "." + std::to_string(page->store_port.load());
    env.store = Store::connect(StoreOptions{.host = "127.0.0.1",
                                            .port = static_cast<uint16_t>(page->store_port.load()),
                                            .token = kToken,
                                            .timeout = std::chrono::seconds(30)});
    body(env);
    if (::testing::Test::HasFailure()) code = 1;
    if (rank == 0) {
      // Keep the store up until every other rank has ended (they may still use it).
      auto until = std::chrono::steady_clock::now() + options.timeout;
      while (page->others_done.load() == 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] uncaught exception: %s\n", rank, e.what());
    code = 2;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}

}  // namespace

int timeout_scale() {
  const char* v = std::getenv("SYMCOMM_TEST_TIMEOUT_SCALE");
  if (v == nullptr || *v == '\0') return 1;
  char* end = nullptr;
  const long k = std::strtol(v, &end, 10);
  if (*end != '\0' || k < 1 || k > 1000) {
    std::fprintf(stderr, "SYMCOMM_TEST_TIMEOUT_SCALE=%s: expected an integer in [1, 1000]\n", v);
    std::abort();
  }
  return static_cast<int>(k);
}

Config HarnessOptions::default_test_config() {
  Config c;
  c.timeout = std::chrono::seconds(3) * timeout_scale();
  c.heap_bytes = 64 << 20;
  c.scratch_bytes = 1 << 20;  // small, so that "large" test counts run several rounds
  c.cuda_scratch_bytes = 1 << 20;
  c.shared_gpu = Config::from_env().shared_gpu;  // gpu_test_world()
  return c;
}

std::unique_ptr<Communicator> RankEnv::make_comm(CommOptions options) {
  if (!options.config) options.config = config;
  return Communicator::create(store, info, options);
}

namespace {

// The text an fd's file holds (read from offset 0).
std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t got = ::pread(fd, buf, sizeof buf, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    text.append(buf, static_cast<size_t>(got));
    at += got;
  }
  return text;
}

// A directory for the job's operation records (RankEnv::config.trace_dir), removed with its files at the end.
struct JobTraceDir {
  std::string path;
  JobTraceDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/symcomm-test-trace-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error(std::string("mkdtemp ") + pattern + ": " + std::strerror(errno));
    }
    path = pattern;
  }
  ~JobTraceDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  JobTraceDir(const JobTraceDir&) = delete;
  JobTraceDir& operator=(const JobTraceDir&) = delete;
};

}  // namespace

std::vector<RankOutcome> run_ranks(int world_size, const std::function<void(RankEnv&)>& body,
                                   const HarnessOptions& options) {
  std::optional<JobTraceDir> trace_dir;
  const HarnessOptions* opts = &options;
  HarnessOptions with_trace_dir;
  if (options.config.trace_dir.empty()) {
    trace_dir.emplace();
    with_trace_dir = options;
    with_trace_dir.config.trace_dir = trace_dir->path;
    opts = &with_trace_dir;
  }
  // One memory file per rank for its stderr (close-on-exec: the ranks do not exec).
  std::vector<int> captured(options.capture_stderr ? world_size : 0, -1);
  for (int& fd : captured) {
    fd = ::memfd_create("rank-stderr", MFD_CLOEXEC);
    if (fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  }
  void* mem = ::mmap(nullptr, sizeof(SharedPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error("mmap failed");
  auto* page = new (mem) SharedPage{};
  if (world_size == 1) page->others_done.store(1);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(world_size);
  std::vector<RankOutcome> out(world_size);
  for (int r = 0; r < world_size; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      if (!captured.empty()) ::dup2(captured[r], STDERR_FILENO);
      for (int fd : captured) ::close(fd);
      child_main(r, world_size, page, body, *opts);
    }
    pids[r] = pid;
    out[r].pid = pid;
  }
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  int alive = world_size;
  while (alive > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < world_size; ++r) {
        if (pids[r] != pid) continue;
        out[r].rank = r;
        out[r].exited = WIFEXITED(status);
        out[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        out[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        pids[r] = -1;
        --alive;
      }
      bool others = true;
      for (int r = 1; r < world_size; ++r) others = others && pids[r] == -1;
      if (others) page->others_done.store(1);
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (pids[r] > 0) {
          ::kill(pids[r], SIGKILL);
          out[r].timed_out = true;
        }
      }
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::munmap(mem, sizeof(SharedPage));
  for (int r = 0; r < static_cast<int>(captured.size()); ++r) {
    out[r].stderr_text = read_all(captured[r]);
    ::close(captured[r]);
  }
  return out;
}

std::vector<RankOutcome> expect_success(int world_size, const std::function<void(RankEnv&)>& body,
                                        const HarnessOptions& options) {
  auto out = run_ranks(world_size, body, options);
  for (const RankOutcome& o : out) {
    bool excused = std::find(options.may_fail.begin(), options.may_fail.end(), o.rank) != options.may_fail.end();
    if (excused) continue;
    EXPECT_FALSE(o.timed_out) << "rank " << o.rank << " of " << world_size << " timed out (killed by the harness)";
    EXPECT_TRUE(o.exited && o.exit_code == 0)
        << "rank " << o.rank << " of " << world_size << " failed: exit code " << o.exit_code << ", signal " << o.signal
        << (options.capture_stderr ? " (its output above and its stderr below say why)\n" + o.stderr_text
                                   : std::string(" (its output above says why)"));
  }
  return out;
}

void store_barrier(Store& store, const std::string& key, int world_size) {
  store.add(key, 1);
  while (store.add(key, 0) < world_size) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void wait_until_checked(RankEnv& env, const std::string& key, const std::function<bool(int)>& checked) {
  const int me = env.info.rank, world = env.info.world_size;
  if (checked(me)) env.store->set(fmt::format("{}/done/{}", key, me), "1");
  for (int r = 0; r < world; ++r) {
    if (checked(r)) env.store->get(fmt::format("{}/done/{}", key, r));
  }
}

int count_gpus_in_child() {
#if defined(SYMCOMM_HAVE_CUDA)
  pid_t pid = ::fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    ::_exit(n > 100 ? 100 : n);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
#else
  return 0;
#endif
}

int gpu_test_world() {
  const int gpus = count_gpus_in_child();
  const char* world = std::getenv("SYMCOMM_TEST_WORLD");
  if (gpus < 1 || !world || !Config::from_env().shared_gpu) return gpus;
  const int n = std::atoi(world);
  return n >= 1 ? n : gpus;
}

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace symcomm::testing
