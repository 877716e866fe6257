// Failure paths of the CUDA backend: a peer killed while a collective waits for it, abort() from another
// thread, and a peer that never arrives (device deadline). In every case the waiting kernel exits on its own
// (no __trap), the host gets an Error naming the rank, and the GPU still runs fresh work afterwards.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using Clock = std::chrono::steady_clock;
using testing::RankEnv;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// After a failure the context must still run kernels and copies.
void expect_gpu_usable() {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  fill_input_async(p, DataType::kFloat32, ReduceOp::kSum, 7, 0, 1000, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float v = 0;
  ASSERT_EQ(cudaMemcpy(&v, p, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(v, static_cast<float>(input_value(DataType::kFloat32, ReduceOp::kSum, 7, 0, 0)));
  cudaFree(p);
}

TEST(GpuFailure, PeerKilledMidCollective) {
  const int n = testing::count_gpus_in_child();
  testing::HarnessOptions opt;
  opt.config.timeout = std::chrono::seconds(20);  // the deadline must not be what ends the wait
  for (int r = 1; r < n; ++r) opt.may_fail.push_back(r);
  testing::expect_success(
      n,
      [](RankEnv& env) {
        auto comm = env.make_comm(cuda_comm_options());
        void* buf = nullptr;
        ASSERT_EQ(cudaMalloc(&buf, 1 << 20), cudaSuccess);
        comm->all_reduce(buf, buf, 1024, DataType::kFloat32, ReduceOp::kSum);  // both alive: works
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        comm->barrier();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        if (comm->rank() != 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ::kill(::getpid(), SIGKILL);  // dies while rank 0's kernel waits for it
        }
        auto t0 = Clock::now();
        auto work = comm->all_reduce_async(buf, buf, 1 << 16, DataType::kFloat32, ReduceOp::kSum);
        try {
          work->wait();
          ADD_FAILURE() << "the collective with a dead peer completed";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kPeerDead) << e.what();
          EXPECT_FALSE(e.ranks().empty()) << e.what();
          // Every rank but 0 dies; whichever the kernel saw first is named (on 4 GPUs rank 3 died first once).
          for (int r : e.ranks()) EXPECT_TRUE(r >= 1 && r < comm->world_size()) << e.what();
        }
        double waited = seconds_since(t0);
        EXPECT_LT(waited, 0.3 + 1.5) << "kPeerDead took " << waited << " s";
        EXPECT_THROW(comm->check(), Error);
        expect_gpu_usable();
        cudaFree(buf);
      },
      opt);
}

TEST(GpuFailure, AbortFromAnotherThread) {
  const int n = testing::count_gpus_in_child();
  testing::HarnessOptions opt;
  opt.config.timeout = std::chrono::seconds(20);
  testing::expect_success(
      n,
      [](RankEnv& env) {
        auto comm = env.make_comm(cuda_comm_options());
        void* buf = nullptr;
        ASSERT_EQ(cudaMalloc(&buf, 1 << 20), cudaSuccess);
        if (comm->rank() == 0) {
          auto t0 = Clock::now();
          auto work = comm->all_reduce_async(buf, buf, 1024, DataType::kFloat32, ReduceOp::kSum);
          std::thread aborter([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            comm->abort();
          });
          try {
            work->wait();
            ADD_FAILURE() << "the aborted collective completed";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
          }
          aborter.join();
          EXPECT_LT(seconds_since(t0), 1.5);
          EXPECT_TRUE(comm->is_aborted());
          expect_gpu_usable();
          env.store->set("abort_test/done", "1");
        } else {
          env.store->get("abort_test/done");  // never joins the collective
        }
        cudaFree(buf);
      },
      opt);
}

TEST(GpuFailure, DeviceDeadlineNamesTheMissingRank) {
  const int n = testing::count_gpus_in_child();
  testing::HarnessOptions opt;
  opt.config.timeout = std::chrono::seconds(1);
  testing::expect_success(
      n,
      [](RankEnv& env) {
        auto comm = env.make_comm(cuda_comm_options());
        void* buf = nullptr;
        ASSERT_EQ(cudaMalloc(&buf, 1 << 20), cudaSuccess);
        if (comm->rank() == 0) {
          auto t0 = Clock::now();
          comm->barrier();
          cudaError_t err = cudaDeviceSynchronize();
          EXPECT_EQ(err, cudaSuccess) << "the timed-out kernel must exit cleanly";
          try {
            comm->check();
            comm->barrier();
            ADD_FAILURE() << "no timeout reported";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
            ASSERT_FALSE(e.ranks().empty());
            EXPECT_EQ(e.ranks()[0], 1);
          }
          EXPECT_LT(seconds_since(t0), 3.0);
          expect_gpu_usable();
          env.store->set("deadline_test/done", "1");
        } else {
          env.store->get("deadline_test/done");
        }
        cudaFree(buf);
      },
      opt);
}

}  // namespace
}  // namespace symcomm::gputest
