// main() of symcomm_multinode_tests, one process per rank under mpirun.
//   symcomm_multinode_tests [gtest flags]   every test on every rank; exit 1 on any rank's failure, on every rank
//   symcomm_multinode_tests --kill=V        rank V dies (SIGKILL) in the middle of a loop of hierarchical
//                                           all-reduces; every survivor must fail with kPeerDead naming V and
//                                           prints "survivor <rank>: ok" (tests/multinode/check_kill.sh counts them)
//   symcomm_multinode_tests --kill-idle=V   the same, but the survivors pause 1.5 s before the all-reduce that
//                                           follows the death, so that V's node mates call a node communicator
//                                           that has already seen it die (the error then comes when the call is
//                                           issued)
//   symcomm_multinode_tests --kill-async=V  the same with asynchronous all-reduces, four in flight: the error
//                                           comes from a Work

#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "symcomm/multinode.h"

namespace {

// Ranks other than 0 print only their failures, each line prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name(), r.line_number(), r.summary());
  }

 private:
  int rank_;
};

enum class KillMode { kKill, kIdle, kAsync };

// Survivors leave together: a survivor that left while another still waited to see the victim die would be seen
// dead itself, and named instead of the victim. Each marks its report in SYMCOMM_TEST_KILL_DIR (check_kill.sh makes
// it), then waits, up to 60 s, for the marks of every survivor.
void leave_together(int me, int survivors) {
  const char* dir = std::getenv("SYMCOMM_TEST_KILL_DIR");
  if (dir == nullptr || *dir == '\0') {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return;
  }
  const std::filesystem::path d(dir);
  std::ofstream(d / ("survivor." + std::to_string(me))).put('1');
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    int marks = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(d, ec)) {
      marks += entry.path().filename().string().rfind("survivor.", 0) == 0;
    }
    if (marks >= survivors) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int kill_run(int victim, KillMode mode) {
  using namespace symcomm;
  int me = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MultiNodeOptions o;
  o.fake_node_size = 2;
  Config c;
  c.timeout = std::chrono::seconds(60);
  o.node.config = c;
  auto comm = MultiNodeCommunicator::create(MPI_COMM_WORLD, o);
  std::vector<std::vector<float>> xs(4, std::vector<float>(1 << 16, 1.0f));
  std::deque<std::shared_ptr<Work>> in_flight;
  for (int it = 0; it < 1000000; ++it) {
    if (it == 50 && me == victim) ::kill(::getpid(), SIGKILL);
    if (it == 50 && mode == KillMode::kIdle) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    try {
      std::vector<float>& x = xs[it % xs.size()];
      if (mode == KillMode::kAsync) {
        if (in_flight.size() == xs.size()) {
          in_flight.front()->wait();
          in_flight.pop_front();
        }
        in_flight.push_back(comm->all_reduce_async(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kMax,
                                                   {Hierarchy::kHierarchical}));
      } else {
        comm->all_reduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kMax, {Hierarchy::kHierarchical});
      }
    } catch (const Error& e) {
      const bool named = std::find(e.ranks().begin(), e.ranks().end(), victim) != e.ranks().end();
      std::printf("survivor %d: %s after %d all-reduces: %s\n", me,
                  e.code() == ErrorCode::kPeerDead && named ? "ok" : "WRONG ERROR", it, e.what());
      std::fflush(stdout);
      // The job cannot finalise with a dead rank; the survivors leave without MPI_Finalize, together.
      leave_together(me, world - 1);
      std::_Exit(e.code() == ErrorCode::kPeerDead && named ? 0 : 1);
    }
  }
  std::printf("survivor %d: NO ERROR although rank %d died\n", me, victim);
  std::fflush(stdout);
  std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--kill=", 7) == 0) return kill_run(std::atoi(argv[i] + 7), KillMode::kKill);
    if (std::strncmp(argv[i], "--kill-idle=", 12) == 0) return kill_run(std::atoi(argv[i] + 12), KillMode::kIdle);
    if (std::strncmp(argv[i], "--kill-async=", 13) == 0) return kill_run(std::atoi(argv[i] + 13), KillMode::kAsync);
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && failed) std::fprintf(stderr, "multinode tests: a rank failed (its lines start with [rank k])\n");
  MPI_Finalize();
  return failed;
}
