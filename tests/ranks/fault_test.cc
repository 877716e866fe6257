// Faults on the host backend: dead, late and missing ranks, abort, bad arguments, cross-rank mismatches,
// store death, and leaks over many create/destroy cycles. Every expectation can fail: errors must carry
// the right code and name the right rank, within the stated time.

#include <dirent.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <system_error>
#include <thread>

#include "base/deadline.h"
#include "bootstrap/peer_mesh.h"
#include "harness/expect_error.h"
#include "harness/process_counts.h"
#include "harness/rank_harness.h"

namespace symcomm::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count();
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

enum class DeathKind { kSigkill, kSigterm, kSigsegv, kExit0, kExit1 };

void die(DeathKind how) {
  switch (how) {
    case DeathKind::kSigkill: ::raise(SIGKILL); break;
    case DeathKind::kSigterm: ::raise(SIGTERM); break;
    case DeathKind::kSigsegv:
      ::signal(SIGSEGV, SIG_DFL);
      ::raise(SIGSEGV);
      break;
    case DeathKind::kExit0: std::fflush(nullptr); ::_exit(0);
    case DeathKind::kExit1: std::fflush(nullptr); ::_exit(1);
  }
  ::_exit(99);
}

enum class Phase { kBarrier, kAllReduce, kRendezvous, kDestroy };

struct DeathCase {
  Phase phase;
  DeathKind how;
};

class RankDeath : public ::testing::TestWithParam<DeathCase> {};

// A rank dies while the others are (a) in a barrier, (b) in an all-reduce, (c) creating the communicator,
// or (d) destroying it. In (a)-(c) every survivor gets kPeerDead naming it within about a second (the op
// deadline is 30 s) and later calls fail the same way; in every case the survivors destroy cleanly.
TEST_P(RankDeath, SurvivorsGetPeerDeadNamingTheRankWithinASecond) {
  const int n = 3, victim = 2;
  HarnessOptions opts;
  opts.config.timeout = 30s;
  opts.may_fail = {victim};
  const DeathCase dc = GetParam();
  expect_success(
      n,
      [&](RankEnv& env) {
        const bool me_victim = env.info.rank == victim;
        auto mark_and_die = [&] {
          env.store->set("killed_at", std::to_string(now_ns()));
          die(dc.how);
        };
        if (dc.phase == Phase::kRendezvous) {
          if (me_victim) {
            // White-box: what a rank publishes first when it joins (NOTE [death during rendezvous]), then death.
            env.store->set("symcomm/rdv/pid/2", std::to_string(::getpid()));
            std::this_thread::sleep_for(200ms);
            mark_and_die();
          }
          CommOptions named;
          named.name = "rdv";
          Error e = expect_error(ErrorCode::kPeerDead, [&] { env.make_comm(named); });
          EXPECT_TRUE(contains(e.ranks(), victim)) << e.what();
          int64_t killed = std::stoll(env.store->get_string("killed_at"));
          EXPECT_LT(now_ns() - killed, 1'000'000'000);
          return;
        }
        auto comm = env.make_comm();
        std::vector<float> in(1 << 16, 1.0f), out(1 << 16);
        for (int it = 0; it < 5; ++it)
          comm->all_reduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
        if (dc.phase == Phase::kDestroy) {
          if (me_victim) mark_and_die();
          env.store->get("killed_at");
          auto t0 = SteadyClock::now();
          comm.reset();  // local: must not wait for the dead rank
          EXPECT_LT(SteadyClock::now() - t0, 1s);
          return;
        }
        if (me_victim) {
          std::this_thread::sleep_for(200ms);  // let the survivors enter the next collective
          mark_and_die();
        }
        Error e = expect_error(ErrorCode::kPeerDead, [&] {
          if (dc.phase == Phase::kBarrier) {
            comm->barrier();
          } else {
            comm->all_reduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
          }
        });
        int64_t detected = now_ns();
        EXPECT_TRUE(contains(e.ranks(), victim)) << e.what();
        EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
        int64_t killed = std::stoll(env.store->get_string("killed_at"));
        EXPECT_LT(detected - killed, 1'000'000'000) << "detection took " << (detected - killed) / 1e6 << " ms";
        expect_error(ErrorCode::kPeerDead, [&] { comm->barrier(); });  // sticky
      },
      opts);
}

std::vector<DeathCase> death_cases() {
  std::vector<DeathCase> out;
  for (Phase p : {Phase::kBarrier, Phase::kAllReduce, Phase::kRendezvous, Phase::kDestroy}) {
    for (DeathKind d :
         {DeathKind::kSigkill, DeathKind::kSigterm, DeathKind::kSigsegv, DeathKind::kExit0, DeathKind::kExit1}) {
      out.push_back({p, d});
    }
  }
  return out;
}

std::string death_name(const ::testing::TestParamInfo<DeathCase>& info) {
  static const char* const kPhases[] = {"barrier", "all_reduce", "rendezvous", "destroy"};
  static const char* const kHows[] = {"sigkill", "sigterm", "sigsegv", "exit0", "exit1"};
  return std::string(kPhases[static_cast<int>(info.param.phase)]) + "_" + kHows[static_cast<int>(info.param.how)];
}

INSTANTIATE_TEST_SUITE_P(AllWays, RankDeath, ::testing::ValuesIn(death_cases()), death_name);

// The peer mesh (what the CUDA backend's heap, capability agreements and NCCL's creation wait on) names a
// dead peer in the error's ranks(), not only in its message: a receive that waits for the victim and a send to
// it both get kPeerDead with ranks() == {victim}, the receive within a second of the death.
TEST(Faults, PeerMeshNamesTheDeadRankInSendAndReceive) {
  const int n = 3, victim = 2;
  HarnessOptions opts;
  opts.may_fail = {victim};
  expect_success(
      n,
      [&](RankEnv& env) {
        auto mesh = detail::PeerMesh::create(*env.store, "meshdeath", env.info, env.job_id, detail::Deadline(20s));
        store_barrier(*env.store, "meshdeath/up", n);
        if (env.info.rank == victim) {
          std::this_thread::sleep_for(200ms);  // the survivors are waiting by then
          env.store->set("killed_at", std::to_string(now_ns()));
          die(DeathKind::kSigkill);
        }
        Error e =
            expect_error(ErrorCode::kPeerDead, [&] { mesh->receive(victim, 77, detail::Deadline(20s), nullptr); });
        const int64_t detected = now_ns();
        EXPECT_EQ(e.ranks(), std::vector<int>{victim}) << e.what();
        EXPECT_LT(detected - std::stoll(env.store->get_string("killed_at")), 1'000'000'000);
        e = expect_error(ErrorCode::kPeerDead, [&] { mesh->send(victim, 77, {1, 2, 3}); });
        EXPECT_EQ(e.ranks(), std::vector<int>{victim}) << e.what();
        mesh->send(1 - env.info.rank, 78, {4});  // the survivors still talk
        EXPECT_EQ(mesh->receive(1 - env.info.rank, 78, detail::Deadline(20s), nullptr).payload,
                  std::vector<uint8_t>{4});
      },
      opts);
}

// NOTE [goodbye at exit] in src/bootstrap/peer_mesh.cc: a rank that exits normally with its mesh still open is seen
// by its peers as having left, not died (a receive that waits for it still fails naming it), and a forked child of a
// rank that exits normally says nothing on its parent's mesh.
TEST(Faults, PeerMeshSeesARankThatExitsWithItOpenLeave) {
  const int n = 3, leaver = 2;
  HarnessOptions opts;
  opts.may_fail = {leaver};  // it leaves by exit(), not through the harness
  expect_success(
      n,
      [&](RankEnv& env) {
        auto mesh = detail::PeerMesh::create(*env.store, "meshexit", env.info, env.job_id, detail::Deadline(20s));
        if (env.info.rank == 1) {
          std::fflush(nullptr);
          const pid_t child = ::fork();
          if (child == 0) std::exit(0);  // runs the exit handlers with the parent's mesh open
          int status = 0;
          ASSERT_EQ(::waitpid(child, &status, 0), child);
        }
        store_barrier(*env.store, "meshexit/up", n);
        if (env.info.rank == leaver) {
          (void)mesh.release();  // never closed
          std::fflush(nullptr);
          std::exit(0);
        }
        const auto until = SteadyClock::now() + 10s;
        while (((mesh->left_mask() | mesh->dead_mask()) >> leaver & 1) == 0 && SteadyClock::now() < until) {
          std::this_thread::sleep_for(1ms);
        }
        EXPECT_EQ(mesh->left_mask(), uint64_t{1} << leaver);
        EXPECT_EQ(mesh->dead_mask(), 0u);
        Error e =
            expect_error(ErrorCode::kPeerDead, [&] { mesh->receive(leaver, 77, detail::Deadline(20s), nullptr); });
        EXPECT_EQ(e.ranks(), std::vector<int>{leaver}) << e.what();
        mesh->send(1 - env.info.rank, 78, {4});  // rank 1's child left its mesh alone
        EXPECT_EQ(mesh->receive(1 - env.info.rank, 78, detail::Deadline(20s), nullptr).payload,
                  std::vector<uint8_t>{4});
      },
      opts);
}

/// True once every thread of the process has exited, and so its descriptors (its listening socket among them)
/// are closed: the pid is gone, or its main thread is a zombie and /proc/<pid>/task lists no other thread. The
/// main thread alone says too little: in a process killed by SIGKILL it can show 'Z' while its other threads
/// (here the thread that raised the signal, and TSan's background thread) are still exiting, and the
/// descriptors, which the threads share, are closed when the last of them exits. An exiting thread leaves
/// /proc/<pid>/task after it has let go of the descriptors.
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream stat(dir + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  size_t paren = line.rfind(')');
  const bool zombie =
      paren != std::string::npos && paren + 2 < line.size() && (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
  return zombie && count_dir((dir + "/task").c_str()) <= 3;  // ".", ".." and the main thread
}

// NOTE [death during rendezvous] in src/bootstrap/peer_mesh.cc: a peer that dies after publishing its mesh key
// leaves the key and no listener, so connecting to it is refused; the survivor must get kPeerDead from the
// peer's pid within a few liveness polls, not retry until the deadline and get kTimeout. Harness ranks 1 and 2
// form a mesh of two (harness rank 0 only hosts the store) so that the order is fixed: the victim (mesh rank 0)
// publishes its key and is gone, every thread of it (process_gone()), before the survivor (mesh rank 1) starts
// connecting to it. Were the survivor to connect while the victim's last threads exit, the listener would still
// take the connection; NOTE [mesh hellos] makes that kPeerDead too (the acceptance never comes).
TEST(Faults, PeerMeshConnectToARankThatDiedAfterPublishingGetsPeerDead) {
  HarnessOptions opts;
  opts.may_fail = {1};
  opts.timeout = 60s;
  expect_success(
      3,
      [&](RankEnv& env) {
        if (env.info.rank == 0) return;  // the harness keeps the store up until the others end
        RankInfo mesh_ranks{
            .rank = env.info.rank - 1, .world_size = 2, .local_rank = env.info.rank - 1, .local_world_size = 2};
        if (mesh_ranks.rank == 0) {
          std::thread([&] {
            // White-box: the mesh key is published once the rank listens (peer_mesh.cc's mesh_key()). A poll, not
            // a wait: the store connection is shared with the creation, which must be able to publish.
            while (!env.store->check("meshgone/mesh/0")) std::this_thread::sleep_for(1ms);
            env.store->set("victim_pid", std::to_string(::getpid()));
            die(DeathKind::kSigkill);
          }).detach();
          detail::PeerMesh::create(*env.store, "meshgone", mesh_ranks, env.job_id, detail::Deadline(20s));
          ADD_FAILURE() << "the victim's mesh creation returned";
          return;
        }
        const pid_t victim = std::stoi(env.store->get_string("victim_pid"));
        while (!process_gone(victim)) std::this_thread::sleep_for(1ms);
        auto t0 = SteadyClock::now();
        Error e = expect_error(ErrorCode::kPeerDead, [&] {
          detail::PeerMesh::create(*env.store, "meshgone", mesh_ranks, env.job_id, detail::Deadline(20s));
        });
        auto took = SteadyClock::now() - t0;
        EXPECT_EQ(e.ranks(), std::vector<int>{0}) << e.what();  // mesh rank 0: harness rank 1
        EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
        EXPECT_LT(took, 1500ms) << std::chrono::duration<double>(took).count() << " s";
      },
      opts);
}

// NOTE [mesh hellos] in src/bootstrap/peer_mesh.cc: a connecting rank counts a lower rank as connected only
// once that rank has accepted its hello. Harness rank 0 plays mesh rank 0 by hand: it listens on mesh rank 0's
// socket and publishes its pid and mesh keys as the creation does, accepts mesh rank 1's connection, reads the
// whole hello and closes that connection without accepting it, and lives on (its listener open) until rank 1 has
// its answer, so no liveness check can tell. Mesh rank 1's creation must fail with kPeerDead naming rank 0 well
// before its 20 s deadline; without the acceptance it returns a mesh whose only peer is gone.
TEST(Faults, PeerMeshCreationFailsWhenTheLowerRankClosesWithoutAccepting) {
  HarnessOptions opts;
  opts.timeout = 60s;
  const std::string prefix = "unaccepted";
  expect_success(
      2,
      [&](RankEnv& env) {
        const std::string token = "mesh-token-" + env.job_id;  // this job's sockets only
        if (env.info.rank == 0) {
          // White-box, as peer_mesh.cc's connect_all(): bind mesh_socket_name() in the abstract namespace, listen,
          // publish "<prefix>/pid/<rank>" and "<prefix>/mesh/<rank>" (each the pid). A hello frame is a 16-byte
          // header (magic "SYMC", tag 1, payload length 68, no descriptors) and a 68-byte payload.
          const std::string name = detail::mesh_socket_name(token, prefix, 0);
          const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
          ASSERT_GE(listener, 0) << std::strerror(errno);
          sockaddr_un a{};
          a.sun_family = AF_UNIX;
          std::memcpy(a.sun_path + 1, name.data(), name.size());
          const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
          ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), len), 0) << std::strerror(errno);
          ASSERT_EQ(::listen(listener, 2), 0) << std::strerror(errno);
          env.store->set(prefix + "/pid/0", std::to_string(::getpid()));
          env.store->set(prefix + "/mesh/0", std::to_string(::getpid()));
          const int s = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
          ASSERT_GE(s, 0) << std::strerror(errno);
          uint32_t hello[4 + 68 / 4];
          ASSERT_EQ(::recv(s, hello, sizeof(hello), MSG_WAITALL), static_cast<ssize_t>(sizeof(hello)));
          EXPECT_EQ(hello[0], 0x53594d43u);
          EXPECT_EQ(hello[1], 1u);
          EXPECT_EQ(hello[2], 68u);
          EXPECT_EQ(hello[4], 1u) << "the hello names mesh rank 1";
          ::close(s);
          store_barrier(*env.store, prefix + "/answered", 2);
          ::close(listener);
          return;
        }
        const auto t0 = SteadyClock::now();
        Error e = expect_error(ErrorCode::kPeerDead, [&] {
          detail::PeerMesh::create(*env.store, prefix, env.info, token, detail::Deadline(20s));
        });
        const auto took = SteadyClock::now() - t0;
        EXPECT_EQ(e.ranks(), std::vector<int>{0}) << e.what();
        EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
        EXPECT_LT(took, 5s) << std::chrono::duration<double>(took).count() << " s";
        store_barrier(*env.store, prefix + "/answered", 2);
      },
      opts);
}

/// Connects to an abstract-namespace Unix socket, as any process on the node could; -1 on failure.
int connect_abstract(const std::string& name) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), len) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

/// True if the peer closed fd within `limit` (what was sent to it, if anything, is read and discarded).
bool closed_by_peer(int fd, std::chrono::milliseconds limit) {
  auto until = SteadyClock::now() + limit;
  while (SteadyClock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) continue;
    char buf[256];
    if (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0) return true;
  }
  return false;
}

// NOTE [mesh hellos] in src/bootstrap/peer_mesh.cc: anyone on the node can connect to a rank's mesh socket (its
// name is in /proc/net/unix). Strangers that connect before the real peer (silent; half a hello; a header
// announcing 1 GiB; a whole hello with a wrong token; junk) must not hold up the creation: it completes as soon
// as the peer has connected, the peer's connection is the one adopted (messages go both ways), and every stranger
// is disconnected. A rank that read each hello with blocking reads would hang for ever on the half hello.
TEST(Faults, PeerMeshCreationCompletesDespiteStrangersOnItsSocket) {
  HarnessOptions opts;
  opts.timeout = 40s;  // a hang fails the test here, not at the harness's default 120 s
  const std::string prefix = "strangers";
  expect_success(
      2,
      [&](RankEnv& env) {
        const std::string token = "mesh-token-" + env.job_id;  // this job's sockets only
        if (env.info.rank == 0) {
          auto mesh = detail::PeerMesh::create(*env.store, prefix, env.info, token, detail::Deadline(10s));
          const int64_t created = now_ns();
          EXPECT_LT(created - std::stoll(env.store->get_string("joining_at")), 1'000'000'000);
          EXPECT_EQ(mesh->receive(1, 5, detail::Deadline(10s), nullptr).payload, std::vector<uint8_t>{1});
          mesh->send(1, 6, {2});
          store_barrier(*env.store, "strangers/done", 2);
          return;
        }
        // White-box: the mesh key is published once rank 0 listens (mesh_key()); the frame header is four u32
        // (magic "SYMC", tag 1 = hello, payload length, descriptor count) and a hello's payload is 68 bytes.
        while (!env.store->check(prefix + "/mesh/0")) std::this_thread::sleep_for(1ms);
        const std::string name = detail::mesh_socket_name(token, prefix, 0);
        auto header = [](uint32_t len) {
          const uint32_t h[4] = {0x53594d43, 1, len, 0};
          return std::string(reinterpret_cast<const char*>(h), sizeof(h));
        };
        std::string wrong_token_hello(68, '\0');
        wrong_token_hello[0] = 1;  // rank 1
        std::memcpy(wrong_token_hello.data() + 4, "wrong", 5);
        const std::vector<std::string> sends = {
            "",                                   // silent
            header(68) + std::string(10, 'x'),    // half a hello, then nothing
            header(1u << 30),                     // a hello announcing 1 GiB
            header(68) + wrong_token_hello,       // a whole hello with a wrong token
            "GET / HTTP/1.0\r\nHost: x\r\n\r\n",  // junk
        };
        std::vector<int> strangers;
        for (const std::string& bytes : sends) {
          int fd = connect_abstract(name);
          ASSERT_GE(fd, 0) << std::strerror(errno);
          ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
          strangers.push_back(fd);
        }
        std::this_thread::sleep_for(200ms);  // rank 0 has accepted them by now
        env.store->set("joining_at", std::to_string(now_ns()));
        auto mesh = detail::PeerMesh::create(*env.store, prefix, env.info, token, detail::Deadline(10s));
        mesh->send(0, 5, {1});
        EXPECT_EQ(mesh->receive(0, 6, detail::Deadline(10s), nullptr).payload, std::vector<uint8_t>{2});
        for (size_t i = 0; i < strangers.size(); ++i) {
          EXPECT_TRUE(closed_by_peer(strangers[i], 2s)) << "stranger " << i << " still connected";
          ::close(strangers[i]);
        }
        store_barrier(*env.store, "strangers/done", 2);
      },
      opts);
}

TEST(Faults, RankThatNeverArrivesTimesOutNamingIt) {
  HarnessOptions opts;
  opts.config.timeout = 1s;
  expect_success(
      3,
      [&](RankEnv& env) {
        auto comm = env.make_comm();
        if (env.info.rank == 2) {
          std::this_thread::sleep_for(2500ms);  // never calls the collective
          return;
        }
        int32_t x = 1, y = 0;
        auto t0 = SteadyClock::now();
        Error e =
            expect_error(ErrorCode::kTimeout, [&] { comm->all_reduce(&x, &y, 1, DataType::kInt32, ReduceOp::kSum); });
        auto took = SteadyClock::now() - t0;
        EXPECT_EQ(e.ranks(), std::vector<int>{2}) << e.what();
        EXPECT_GE(took, 900ms);
        EXPECT_LT(took, 2500ms);
      },
      opts);
}

TEST(Faults, CreationGivesUpOnARankThatNeverComesAtTheMeetTimeout) {
  HarnessOptions opts;
  opts.config.timeout = 60s;  // the collectives' bound: the meeting must not wait for it
  expect_success(
      3,
      [&](RankEnv& env) {
        if (env.info.rank == 2) {
          std::this_thread::sleep_for(3s);  // alive, but never creates the communicator
          return;
        }
        CommOptions o;
        o.meet_timeout = 1s;
        const auto t0 = SteadyClock::now();
        Error e = expect_error(ErrorCode::kTimeout, [&] { env.make_comm(o); });
        const auto took = SteadyClock::now() - t0;
        EXPECT_GE(took, 900ms) << e.what();
        EXPECT_LT(took, 10s) << e.what();
      },
      opts);
}

TEST(Faults, LateRankStillCompletesCorrectly) {
  expect_success(3, [&](RankEnv& env) {
    auto comm = env.make_comm();
    if (env.info.rank == 1) std::this_thread::sleep_for(100ms);
    std::vector<int64_t> in(1000), out(1000, -7);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int64_t>(i) * (env.info.rank + 1);
    comm->all_reduce(in.data(), out.data(), in.size(), DataType::kInt64, ReduceOp::kSum);
    for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], static_cast<int64_t>(i) * 6);
  });
}

TEST(Faults, AbortFromAnotherThreadWakesAWaitingCollective) {
  HarnessOptions opts;
  opts.config.timeout = 30s;
  expect_success(
      2,
      [&](RankEnv& env) {
        auto comm = env.make_comm();
        if (env.info.rank == 1) {
          std::this_thread::sleep_for(1500ms);  // rank 0 waits for us in vain until it aborts
          return;
        }
        std::thread aborter([&] {
          std::this_thread::sleep_for(200ms);
          comm->abort();
          comm->abort();  // idempotent
        });
        float x = 1, y = 0;
        auto t0 = SteadyClock::now();
        expect_error(ErrorCode::kAborted, [&] { comm->all_reduce(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum); });
        EXPECT_LT(SteadyClock::now() - t0, 1s);
        aborter.join();
        EXPECT_TRUE(comm->is_aborted());
        expect_error(ErrorCode::kAborted, [&] { comm->barrier(); });
      },
      opts);
}

TEST(Faults, InvalidArgumentsThrowAtOnceAndLeaveTheCommunicatorUsable) {
  expect_success(2, [&](RankEnv& env) {
    auto comm = env.make_comm();
    float buf[4] = {1, 2, 3, 4}, out[8];
    auto bad = [&](auto fn) { expect_error(ErrorCode::kInvalidArgument, fn); };
    bad([&] { comm->all_reduce(nullptr, out, 4, DataType::kFloat32, ReduceOp::kSum); });
    bad([&] { comm->all_reduce(buf, nullptr, 4, DataType::kFloat32, ReduceOp::kSum); });
    bad([&] { comm->all_reduce(buf, out, 4, static_cast<DataType>(99), ReduceOp::kSum); });
    bad([&] { comm->all_reduce(buf, out, 4, DataType::kFloat32, static_cast<ReduceOp>(42)); });
    bad([&] { comm->all_reduce(buf, out, SIZE_MAX / 2, DataType::kFloat32, ReduceOp::kSum); });
    bad([&] { comm->all_gather(buf, out, SIZE_MAX / 4, DataType::kFloat64); });
    bad([&] { comm->broadcast(buf, out, 4, DataType::kFloat32, 2); });
    bad([&] { comm->broadcast(buf, out, 4, DataType::kFloat32, -1); });
    bad([&] { comm->all_reduce(buf, out, 4, DataType::kFloat32, ReduceOp::kSum, {.algorithm = Algorithm::kNccl}); });
    bad([&] { comm->all_gather(buf, out, 4, DataType::kFloat32, {.algorithm = Algorithm::kOneShot}); });
    bad([&] {
      comm->all_reduce(buf, out, 4, DataType::kFloat32, ReduceOp::kSum, {.algorithm = static_cast<Algorithm>(77)});
    });
    bad([&] { comm->free(buf); });
    bad([&] { comm->peer_ptr(buf, 1); });
    bad([&] { comm->alloc(size_t{1} << 40); });
    // Still usable, and still in step with the other rank.
    comm->all_reduce(buf, out, 4, DataType::kFloat32, ReduceOp::kSum);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 2 * buf[i]);
    // Count 0 is valid and does nothing.
    comm->all_reduce(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum);
  });
}

// NOTE [refused on one rank]: in debug mode a call that one rank's own checks refuse is refused on every rank in
// the same call, the refusing rank with its own error, the others with kInvalidArgument naming it and giving its
// reason, long before the deadline; nothing runs, and every communicator stays usable and in step. Outside debug
// mode the peers wait for that rank until their deadline (kTimeout naming it), as with NCCL.
TEST(Faults, DebugChecksRefuseOnEveryRankWhatOneRankRefuses) {
  for (bool debug : {true, false}) {
    SCOPED_TRACE(fmt::format("debug checks {}", debug));
    HarnessOptions opts;
    opts.config.timeout = 2s;
    opts.config.debug_checks = debug;
    expect_success(
        2,
        [&](RankEnv& env) {
          auto comm = env.make_comm();
          const int me = env.info.rank;
          float in[8], out[8];
          for (int i = 0; i < 8; ++i) in[i] = static_cast<float>(i + me);
          const auto t0 = std::chrono::steady_clock::now();
          const auto seconds = [&] {
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          };
          // Rank 1, the root, passes no input.
          const auto call = [&] { comm->broadcast(me == 1 ? nullptr : in, out, 8, DataType::kFloat32, 1); };
          if (me == 1 || debug) {
            const Error e = expect_error(ErrorCode::kInvalidArgument, call);
            EXPECT_LT(seconds(), 1.0) << "refused in the call, not at the deadline: " << e.what();
            EXPECT_NE(std::string(e.what()).find("broadcast: the root's input pointer is null"), std::string::npos)
                << e.what();
            if (me == 0) {
              EXPECT_EQ(e.ranks(), std::vector<int>{1}) << e.what();
            }
          } else {
            const Error e = expect_error(ErrorCode::kTimeout, call);
            EXPECT_EQ(e.ranks(), std::vector<int>{1}) << e.what();
          }
          if (!debug) {
            // Rank 1 stays until rank 0 has timed out (a communicator destroyed earlier reads as a departure).
            // The timeout failed rank 0's communicator: that is what the debug mode avoids.
            if (me == 0) env.store->set("refused/timed_out", "1");
            if (me == 1) env.store->get("refused/timed_out");
            return;
          }
          // An algorithm forced on one rank that this collective has not.
          const Error e = expect_error(ErrorCode::kInvalidArgument, [&] {
            comm->all_gather(in, out, 4, DataType::kFloat32,
                             {.algorithm = me == 0 ? Algorithm::kOneShot : Algorithm::kAuto});
          });
          if (me == 1) {
            EXPECT_EQ(e.ranks(), std::vector<int>{0}) << e.what();
          }
          // Usable and in step on both ranks.
          comm->all_reduce(in, out, 8, DataType::kFloat32, ReduceOp::kSum);
          for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], static_cast<float>(2 * i + 1)) << i;
        },
        opts);
  }
}

struct MismatchCase {
  const char* name;
  std::function<void(Communicator&, int rank)> issue;
  const char* field;  ///< what the debug check must name
};

std::vector<MismatchCase> mismatch_cases() {
  static float in[64], out[64 * 8];
  return {
      {"count", [](Communicator& c, int r) { c.all_reduce(in, out, 10 + r, DataType::kFloat32, ReduceOp::kSum); },
       "count"},
      {"dtype",
       [](Communicator& c, int r) {
         c.all_reduce(in, out, 8, r ? DataType::kInt32 : DataType::kFloat32, ReduceOp::kSum);
       },
       "dtype"},
      {"op",
       [](Communicator& c, int r) {
         c.all_reduce(in, out, 8, DataType::kFloat32, r ? ReduceOp::kMax : ReduceOp::kSum);
       },
       "op"},
      {"collective",
       [](Communicator& c, int r) {
         if (r)
           c.all_gather(in, out, 8, DataType::kFloat32);
         else
           c.all_reduce(in, out, 8, DataType::kFloat32, ReduceOp::kSum);
       },
       "collective"},
      {"root", [](Communicator& c, int r) { c.broadcast(in, out, 8, DataType::kFloat32, r); }, "root"},
      // NOTE [step variant]: a one-shot and a two-shot number their steps alike; this finished with wrong
      // elements and no error (at counts of 3+ rounds) or hung.
      {"algorithm",
       [](Communicator& c, int r) {
         c.all_reduce(in, out, 64, DataType::kFloat32, ReduceOp::kSum,
                      {.algorithm = r ? Algorithm::kTwoShot : Algorithm::kOneShot});
       },
       "algorithm"},
      {"skipped",
       [](Communicator& c, int r) {
         if (r == 0) c.all_reduce(in, out, 8, DataType::kFloat32, ReduceOp::kSum);
         c.barrier();
       },
       "collective"},
  };
}

// Normal mode: the per-step header check catches the mismatch on every rank (no hang, no corruption).
// Debug mode: the arguments are compared before launch and the error names the field and the ranks.
TEST(Faults, CrossRankMismatchIsReportedNotAHang) {
  for (bool debug : {false, true}) {
    for (const MismatchCase& mc : mismatch_cases()) {
      SCOPED_TRACE(fmt::format("{} (debug checks {})", mc.name, debug));
      HarnessOptions opts;
      opts.config.timeout = 2s;
      opts.config.debug_checks = debug;
      expect_success(
          2,
          [&](RankEnv& env) {
            auto comm = env.make_comm();
            Error e = expect_error(ErrorCode::kMismatch, [&] { mc.issue(*comm, env.info.rank); });
            EXPECT_TRUE(contains(e.ranks(), 1 - env.info.rank)) << e.what();
            if (debug) {
              EXPECT_NE(std::string(e.what()).find(mc.field), std::string::npos) << e.what();
            }
          },
          opts);
    }
  }
}

// NOTE [configuration agreement]: ranks whose settings differ fail at creation with kMismatch naming the
// setting and the ranks with other values; the settings that only concern a rank (log level, timeout, operations
// remembered, trace directory) may differ.
TEST(Faults, RanksWithDifferentSettingsFailAtCreationNamingThem) {
  expect_success(3, [&](RankEnv& env) {
    const int me = env.info.rank;
    {
      Config c = env.config;
      if (me == 2) c.tuning.host_one_shot_max_bytes += 16;
      if (me == 0) c.debug_checks = !c.debug_checks;
      Error e = expect_error(ErrorCode::kMismatch, [&] { env.make_comm({.name = "differ", .config = c}); });
      const std::string what = e.what();
      EXPECT_NE(what.find("SYMCOMM_HOST_ONE_SHOT_MAX_BYTES"), std::string::npos) << what;
      EXPECT_NE(what.find("SYMCOMM_DEBUG_CHECKS"), std::string::npos) << what;
      EXPECT_EQ(what.find("SYMCOMM_HEAP_BYTES"), std::string::npos) << what;  // equal everywhere
      // Rank 0 differs from both others (debug checks), rank 1 from both, rank 2 from both (one-shot size).
      std::vector<int> want;
      for (int p = 0; p < env.info.world_size; ++p) {
        if (p != me) want.push_back(p);
      }
      EXPECT_EQ(e.ranks(), want) << what;
    }
    {
      Config c = env.config;
      if (me == 1) c.tuning.host_one_shot_max_bytes += 16;
      Error e = expect_error(ErrorCode::kMismatch, [&] { env.make_comm({.name = "one-differs", .config = c}); });
      EXPECT_EQ(e.ranks(), me == 1 ? std::vector<int>({0, 2}) : std::vector<int>({1})) << e.what();
    }
    Config c = env.config;
    c.log_level = me == 0 ? LogLevel::kOff : LogLevel::kError;
    c.timeout = env.config.timeout + me * 100ms;
    c.op_history = 8 + me;
    c.trace_dir = env.config.trace_dir + std::string(me, '/');  // other strings, one directory
    auto comm = env.make_comm({.name = "per-rank", .config = c});
    int32_t x = me + 1, y = 0;
    comm->all_reduce(&x, &y, 1, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(y, 6);
  });
}

// The first fatal error is logged once with the last operations, whichever path finds it: also an asynchronous
// collective's timeout, found on the host backend's worker thread, and not again by a later group_end().
TEST(Faults, FirstFatalErrorOfAnAsyncCollectiveIsDumpedOnce) {
  HarnessOptions opts;
  opts.config.timeout = 500ms;
  expect_success(
      2,
      [&](RankEnv& env) {
        Config c = env.config;
        c.log_level = LogLevel::kError;
        CommOptions opts;
        opts.config = c;
        auto comm = env.make_comm(opts);
        if (env.info.rank == 1) {
          env.store->wait({"dump/done"}, 20s);  // never calls: rank 0 times out waiting for it
          return;
        }
        // stderr into a file while the errors happen.
        char path[] = "/tmp/symcomm-dump-XXXXXX";
        const int fd = ::mkstemp(path);
        ASSERT_GE(fd, 0);
        const int saved = ::dup(STDERR_FILENO);
        ::dup2(fd, STDERR_FILENO);
        int32_t x = 1, y = 0;
        auto w = comm->all_reduce_async(&x, &y, 1, DataType::kInt32, ReduceOp::kSum);
        EXPECT_THROW(w->wait(), Error);
        EXPECT_THROW(comm->group_end(), Error);  // no group open: an argument error, nothing logged
        comm->group_start();
        EXPECT_THROW(comm->group_end(), Error);  // the sticky error again: not logged again
        ::dup2(saved, STDERR_FILENO);
        ::close(saved);
        std::string text(static_cast<size_t>(::lseek(fd, 0, SEEK_END)), '\0');
        ASSERT_EQ(::pread(fd, text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
        ::close(fd);
        ::unlink(path);
        size_t dumps = 0;
        for (size_t at = text.find("last operations"); at != std::string::npos;
             at = text.find("last operations", at + 1))
          ++dumps;
        EXPECT_EQ(dumps, 1u) << text;
        EXPECT_NE(text.find("all_reduce dtype=int32"), std::string::npos) << text;
        env.store->set("dump/done", std::string_view("1"));
      },
      opts);
}

// NOTE [op record] in src/backends/comm_context.cc: a rank SIGKILLed while the others are inside a 4-rank
// all-reduce, after more operations than the history keeps (64). Everything a survivor writes to stderr is
// symcomm's: at most 15 lines, naming the dead rank, its pid and a file; that file holds the whole history (64
// op lines, 38-101 in order, the interrupted all-reduce last) with the error, the rank, the pid and the
// communicator.
TEST(Faults, ARankKilledMidAllReduceLeavesAShortLogAndTheFullRecordInAFile) {
  constexpr int n = 4, victim = 2, ops_before = 100, kept = 64;
  constexpr size_t count = 1024;
  char dir[] = "/tmp/symcomm-record-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  struct RemoveAll {
    const char* path;
    ~RemoveAll() { std::filesystem::remove_all(path); }
  } remove_dir{dir};
  HarnessOptions opts;
  opts.config.timeout = 30s;
  opts.config.trace_dir = dir;
  opts.may_fail = {victim};
  opts.capture_stderr = true;
  const std::vector<RankOutcome> outcomes = expect_success(
      n,
      [&](RankEnv& env) {
        const int me = env.info.rank;
        CommOptions named;
        named.name = "record";
        auto comm = env.make_comm(named);
        std::vector<float> in(count, static_cast<float>(me + 1)), out(count);
        for (int it = 0; it < ops_before; ++it) {
          comm->all_reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
          ASSERT_EQ(out[0], 10.0f);  // 1 + 2 + 3 + 4
        }
        if (me == victim) {
          // Dies once every survivor has issued the next all-reduce (recorded, running on its worker thread).
          env.store->wait({"record/in/0", "record/in/1", "record/in/3"}, 30s);
          die(DeathKind::kSigkill);
        }
        auto w = comm->all_reduce_async(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
        env.store->set(fmt::format("record/in/{}", me), std::string_view("1"));
        Error e = expect_error(ErrorCode::kPeerDead, [&] { w->wait(); });
        EXPECT_TRUE(contains(e.ranks(), victim)) << e.what();
      },
      opts);
  const std::string dead = fmt::format("rank {} (pid {})", victim, outcomes[victim].pid);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    SCOPED_TRACE(fmt::format("rank {}", r));
    const std::string& text = outcomes[r].stderr_text;
    EXPECT_LE(std::count(text.begin(), text.end(), '\n'), 15) << text;
    EXPECT_NE(text.find(dead), std::string::npos) << text;
    const std::string path = fmt::format("{}/symcomm-trace-record-rank{}-pid{}.txt", dir, r, outcomes[r].pid);
    EXPECT_NE(text.find("full record: " + path), std::string::npos) << text;
    std::ifstream file(path);
    ASSERT_TRUE(file.good()) << path;
    std::vector<std::string> op_lines;
    std::string all, line;
    while (std::getline(file, line)) {
      all += line + "\n";
      if (line.starts_with("  op ")) op_lines.push_back(line.substr(2));
    }
    EXPECT_NE(all.find("communicator: symcomm/record\n"), std::string::npos) << all;
    EXPECT_NE(all.find(fmt::format("rank: {} of {}\n", r, n)), std::string::npos) << all;
    EXPECT_NE(all.find(fmt::format("pid: {}\n", outcomes[r].pid)), std::string::npos) << all;
    const size_t error_at = all.find("error: ");
    ASSERT_NE(error_at, std::string::npos) << all;
    EXPECT_NE(all.substr(error_at, all.find('\n', error_at) - error_at).find(dead), std::string::npos) << all;
    ASSERT_EQ(op_lines.size(), static_cast<size_t>(kept)) << all;
    for (int i = 0; i < kept; ++i) {
      const int seq = ops_before + 1 - kept + 1 + i;  // 38 ... 101
      const std::string want = fmt::format("op {} all_reduce dtype=float32 op=sum count={} algo=", seq, count);
      EXPECT_TRUE(op_lines[i].starts_with(want)) << op_lines[i] << " (want " << want << "...)";
      const bool done = op_lines[i].ends_with(" done");
      EXPECT_EQ(done, seq <= ops_before) << op_lines[i];
    }
  }
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files += entry.is_regular_file();
  EXPECT_EQ(files, static_cast<size_t>(n - 1)) << "one file per survivor, none from the victim";
}

// Work::wait_for with the largest timeout waits (it overflowed into a deadline in the past and returned false
// at once while the collective still waited for the late rank).
TEST(Faults, WaitForTheLargestTimeoutWaits) {
  expect_success(2, [&](RankEnv& env) {
    auto comm = env.make_comm();
    if (env.info.rank == 1) std::this_thread::sleep_for(200ms);
    int32_t x = env.info.rank + 1, y = 0;
    auto w = comm->all_reduce_async(&x, &y, 1, DataType::kInt32, ReduceOp::kSum);
    EXPECT_TRUE(w->wait_for(std::chrono::milliseconds::max()));
    EXPECT_EQ(y, 3);
  });
}

// While alive, every new thread of this process fails to start: std::thread creates its threads with the
// default attributes (glibc), and a default stack of 2^62 bytes, more than the address space, cannot be mapped
// (pthread_create: EAGAIN), whatever the memory overcommit policy. The previous defaults are restored after.
class NoNewThreads {
 public:
  NoNewThreads() {
    EXPECT_EQ(::pthread_getattr_default_np(&saved_), 0);
    pthread_attr_t huge;
    EXPECT_EQ(::pthread_getattr_default_np(&huge), 0);
    EXPECT_EQ(::pthread_attr_setstacksize(&huge, size_t{1} << 62), 0);
    EXPECT_EQ(::pthread_setattr_default_np(&huge), 0);
    ::pthread_attr_destroy(&huge);
  }
  ~NoNewThreads() {
    EXPECT_EQ(::pthread_setattr_default_np(&saved_), 0);
    ::pthread_attr_destroy(&saved_);
  }
  NoNewThreads(const NoNewThreads&) = delete;
  NoNewThreads& operator=(const NoNewThreads&) = delete;

 private:
  pthread_attr_t saved_;
};

// The host backend's worker thread for the asynchronous collectives cannot be created (NOTE [host worker
// start]): the call throws Error(kSystem), not std::system_error, and queues nothing; the communicator stays
// usable, and once threads can be created again the next call runs, with the peer that never saw the refused
// one, and the refused one never runs (its output stays poisoned; a stale job would also have put the ranks'
// step sequences out of line, and the synchronous all-reduce after it would time out).
TEST(Faults, AWorkerThreadThatCannotStartIsAnErrorAndQueuesNothing) {
  expect_success(2, [&](RankEnv& env) {
    auto comm = env.make_comm();
    const int me = env.info.rank;
    int32_t x = me + 1, y = -1, refused = -1;
    if (me == 0) {
      NoNewThreads no_threads;
      bool thread_started = true;
      try {
        std::thread([] {}).join();
      } catch (const std::system_error&) {
        thread_started = false;
      }
      ASSERT_FALSE(thread_started) << "could not make thread creation fail here";
      for (int attempt = 0; attempt < 2; ++attempt) {
        try {
          comm->all_reduce_async(&x, &refused, 1, DataType::kInt32, ReduceOp::kSum);
          ADD_FAILURE() << "the call succeeded without a worker thread";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kSystem) << e.what();
          EXPECT_NE(e.message().find("worker thread"), std::string::npos) << e.message();
        } catch (const std::exception& e) {
          ADD_FAILURE() << "not a symcomm::Error: " << e.what();
        }
      }
    }
    auto w = comm->all_reduce_async(&x, &y, 1, DataType::kInt32, ReduceOp::kSum);
    ASSERT_TRUE(w->wait_for(20s));
    EXPECT_EQ(y, 3);
    int32_t z = -1;
    comm->all_reduce(&x, &z, 1, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(z, 3);
    EXPECT_EQ(refused, -1);
  });
}

// The same where the thread starts inside group_end_async() (a group without `*_async` calls): an Error(kSystem)
// of the whole group, which, like any kSystem error of a collective, makes the communicator fail; nothing was
// queued, so the group's collective never runs (no std::system_error escapes, no job stays queued).
TEST(Faults, AWorkerThreadThatCannotStartFailsTheAsyncGroupWithAnError) {
  HarnessOptions opts;
  opts.timeout = 30s;  // before the fix the next call waited for ever for the queued job
  expect_success(
      1,
      [&](RankEnv& env) {
        auto comm = env.make_comm();
        int32_t x = 5, refused = -1;
        comm->group_start();
        comm->all_reduce(&x, &refused, 1, DataType::kInt32, ReduceOp::kSum);
        {
          NoNewThreads no_threads;
          try {
            comm->group_end_async();
            ADD_FAILURE() << "the group ran without a worker thread";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kSystem) << e.what();
            EXPECT_NE(e.message().find("worker thread"), std::string::npos) << e.message();
          } catch (const std::exception& e) {
            ADD_FAILURE() << "not a symcomm::Error: " << e.what();
          }
        }
        expect_error(ErrorCode::kSystem, [&] { comm->all_reduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum); });
        comm.reset();  // a queued job would run (and fail) here, or keep the destructor waiting
        EXPECT_EQ(refused, -1);
      },
      opts);
}

TEST(Faults, StoreServerDeathDuringRendezvousFailsFast) {
  HarnessOptions opts;
  opts.config.timeout = 30s;
  opts.may_fail = {0};
  expect_success(
      3,
      [&](RankEnv& env) {
        if (env.info.rank == 0) {
          env.store->wait({"ready/1", "ready/2"});
          ::raise(SIGKILL);  // takes the store server with it
        }
        env.store->set(fmt::format("ready/{}", env.info.rank), std::string_view("1"));
        auto t0 = SteadyClock::now();
        expect_error(ErrorCode::kStore, [&] { env.make_comm(); });
        EXPECT_LT(SteadyClock::now() - t0, 2s);
      },
      opts);
}

TEST(Concurrency, TwoCommunicatorsOverTheSameRanksFromTwoThreads) {
  expect_success(3, [&](RankEnv& env) {
    auto a = env.make_comm();
    auto b = env.make_comm();
    auto work = [&](Communicator& c, int32_t base) {
      std::vector<int32_t> in(4099), out(4099);
      for (int it = 0; it < 300; ++it) {
        for (size_t i = 0; i < in.size(); ++i) in[i] = base + it + static_cast<int32_t>(i) + env.info.rank;
        c.all_reduce(in.data(), out.data(), in.size(), DataType::kInt32, ReduceOp::kSum,
                     {.algorithm = it % 2 ? Algorithm::kOneShot : Algorithm::kTwoShot});
        for (size_t i = 0; i < in.size(); ++i) {
          ASSERT_EQ(out[i], 3 * (base + it + static_cast<int32_t>(i)) + 3) << "iteration " << it;
        }
      }
    };
    std::thread t([&] { work(*b, 1000000); });
    work(*a, 0);
    t.join();
  });
}

// One communicator, two threads per rank issuing collectives in turns (the program orders them alike on
// every rank, as NCCL requires of a communicator shared between threads): no thread affinity, no state kept
// per thread outside groups, results exact; under TSan, no race between the two callers.
TEST(Concurrency, TwoThreadsTakeTurnsOnOneCommunicator) {
  expect_success(3, [&](RankEnv& env) {
    auto comm = env.make_comm();
    const int me = env.info.rank, n = 3;
    std::mutex mu;
    std::condition_variable cv;
    int turn = 0;
    constexpr int kRounds = 60;
    auto thread_body = [&](int who) {
      std::vector<int32_t> in(1031), out(1031 * n), sum(1031);
      for (int j = 0; j < kRounds; ++j) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return turn == 2 * j + who; });
        const int32_t base = who * 100000 + j * 100;
        for (size_t i = 0; i < in.size(); ++i) in[i] = base + static_cast<int32_t>(i) + me;
        std::fill(out.begin(), out.end(), -1);
        std::fill(sum.begin(), sum.end(), -1);
        size_t wrong = 0;
        if (j % 3 == 0) {
          comm->all_gather(in.data(), out.data(), in.size(), DataType::kInt32);
          for (int r = 0; r < n; ++r) {
            for (size_t i = 0; i < in.size(); ++i)
              wrong += out[r * in.size() + i] != base + static_cast<int32_t>(i) + r;
          }
        } else {
          auto work = comm->all_reduce_async(in.data(), sum.data(), in.size(), DataType::kInt32, ReduceOp::kSum,
                                             {.algorithm = j % 3 == 1 ? Algorithm::kOneShot : Algorithm::kTwoShot});
          work->wait();
          for (size_t i = 0; i < in.size(); ++i) wrong += sum[i] != 3 * (base + static_cast<int32_t>(i)) + 3;
        }
        EXPECT_EQ(wrong, 0u) << "thread " << who << " round " << j;
        ++turn;  // also after a wrong result, so that the other thread is not left waiting
        cv.notify_all();
      }
    };
    std::thread other([&] { thread_body(1); });
    thread_body(0);
    other.join();
    EXPECT_EQ(turn, 2 * kRounds);
    comm->barrier();
  });
}

// Counts past 2^31 (and byte sizes past 4 GiB would be the same code): no 32-bit index anywhere.
TEST(LargeCounts, AllReduceOfTwoToTheThirtyOnePlusThreeInt8) {
  HarnessOptions opts;
  opts.config.heap_bytes = size_t{3} << 30;
  opts.config.timeout = 60s;
  expect_success(
      2,
      [&](RankEnv& env) {
        auto comm = env.make_comm();
        const size_t count = (size_t{1} << 31) + 3;
        auto* buf = static_cast<int8_t*>(comm->alloc(count));
        for (size_t i = 0; i < count; i += 4096) buf[i] = static_cast<int8_t>((i >> 12) % 50 + env.info.rank);
        std::vector<size_t> probes = {0, 1, count / 2, (size_t{1} << 31) - 1, size_t{1} << 31, count - 1};
        for (size_t p : probes) buf[p] = static_cast<int8_t>(p % 50 + env.info.rank);
        comm->all_reduce(buf, buf, count, DataType::kInt8, ReduceOp::kSum);
        for (size_t p : probes) EXPECT_EQ(buf[p], static_cast<int8_t>(2 * (p % 50) + 1)) << "element " << p;
        for (size_t i = 4096; i < count; i += 4096 * 1021) {
          if (std::find(probes.begin(), probes.end(), i) == probes.end()) {
            EXPECT_EQ(buf[i], static_cast<int8_t>(2 * ((i >> 12) % 50) + 1)) << "element " << i;
          }
        }
        comm->free(buf);
      },
      opts);
}

struct ResourceCounts {
  int fds = 0, maps = 0, threads = 0;
  bool operator==(const ResourceCounts&) const = default;
};

int count_symcomm_shm() {
  int n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) n += std::string(e->d_name).find("symcomm") != std::string::npos;
    ::closedir(d);
  }
  return n;
}

ResourceCounts resources() {
  ResourceCounts c;
  c.fds = count_dir("/proc/self/fd");
  c.threads = count_dir("/proc/self/task");
  // Mappings of symcomm's shared segments (all other mappings move with the allocator, more so under ASan).
  c.maps = count_maps("memfd:symcomm");
  return c;
}

TEST(Lifecycle, ThousandCreateDestroyAndAbortCyclesLeakNothing) {
  // symcomm shares memory through memfd, never /dev/shm: nothing of ours may appear there. (Other programs,
  // e.g. an Open MPI job beside the tests, may create entries, so only ours are counted.)
  int shm_before = count_symcomm_shm();
  expect_success(2, [&](RankEnv& env) {
    { auto warm = env.make_comm(); }  // first-use allocations (logging, thread-locals) are not leaks
    ResourceCounts before = resources();
    before.threads = count_threads_stable();  // NOTE [thread counts]
    EXPECT_EQ(before.maps, 0);
    int64_t keys_before = env.store->num_keys();
    for (int i = 0; i < 1000; ++i) {
      auto comm = env.make_comm();
      if (i == 0) {
        EXPECT_EQ(resources().maps, 2) << "own and peer segment mapped while the communicator lives";
      }
      if (i % 2) {
        comm->abort();
      } else {
        int32_t x = i, y = 0;
        comm->all_reduce(&x, &y, 1, DataType::kInt32, ReduceOp::kSum);
        ASSERT_EQ(y, 2 * i);
      }
    }
    ResourceCounts after = resources();
    after.threads = count_threads_settled(before.threads);
    EXPECT_EQ(after.fds, before.fds);
    EXPECT_LE(after.threads, before.threads);
    EXPECT_EQ(after.maps, before.maps);
    // Communicators remove their rendezvous keys: the store does not grow with every cycle.
    EXPECT_LE(env.store->num_keys(), keys_before + 4);
    // Rank 0 hosts the harness's store server, whose connection from rank 1 (an fd and its thread) is part of
    // rank 0's counts: rank 1 must not exit, closing it, before rank 0 has counted (seen once in CI under load:
    // 13 fds after, 14 before).
    store_barrier(*env.store, "lifecycle/counted", env.info.world_size);
  });
  EXPECT_EQ(count_symcomm_shm(), shm_before);
  EXPECT_EQ(shm_before, 0);
}

// Creations that fail leave nothing behind either: 200 that fail in the backend after the mesh is up (the
// ranks' heap sizes differ: kMismatch on both, each already holding the other's segment fd) and 20 that fail
// before it (the ranks name different communicators and time out: rank 0 inside the mesh's creation, rank 1
// waiting for rank 0's nonce). Then fds, threads and segment mappings are back at their counts, the failed
// creations left no store keys (a retry under the same name must not find them), and a communicator works.
TEST(Lifecycle, FailedCreationsLeakNothing) {
  expect_success(2, [&](RankEnv& env) {
    const int me = env.info.rank;
    { auto warm = env.make_comm(); }
    ResourceCounts before = resources();
    before.threads = count_threads_stable();  // NOTE [thread counts]
    const int64_t keys_before = env.store->num_keys();
    for (int i = 0; i < 200; ++i) {
      Config c = env.config;
      c.heap_bytes = (me + 1) * (size_t{1} << 20);
      expect_error(ErrorCode::kMismatch, [&] { env.make_comm({.name = fmt::format("heap{}", i), .config = c}); });
    }
    for (int i = 0; i < 50; ++i) {  // NOTE [configuration agreement]: fails after the mesh, before the heap
      Config c = env.config;
      c.tuning.host_one_shot_max_bytes += me;
      expect_error(ErrorCode::kMismatch, [&] { env.make_comm({.name = fmt::format("tuning{}", i), .config = c}); });
    }
    EXPECT_LE(env.store->num_keys(), keys_before + 4) << "failed creations left store keys";
    for (int i = 0; i < 20; ++i) {
      Config c = env.config;
      c.timeout = 100ms;
      expect_error(ErrorCode::kTimeout, [&] { env.make_comm({.name = fmt::format("name{}-{}", i, me), .config = c}); });
      store_barrier(*env.store, fmt::format("failed/{}", i), env.info.world_size);
    }
    ResourceCounts after = resources();
    after.threads = count_threads_settled(before.threads);
    EXPECT_EQ(after.fds, before.fds);
    EXPECT_LE(after.threads, before.threads);
    EXPECT_EQ(after.maps, before.maps);
    // The failed creations took back what they published (nonce, mesh and pid keys); the barriers add 20.
    EXPECT_LE(env.store->num_keys(), keys_before + 4 + 20) << "failed creations left store keys";
    auto comm = env.make_comm();
    int32_t x = me + 1, y = 0;
    comm->all_reduce(&x, &y, 1, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(y, 3);
    comm.reset();
    store_barrier(*env.store, "failed/counted", env.info.world_size);  // rank 0 hosts the store's server
  });
}

}  // namespace
}  // namespace symcomm::testing
