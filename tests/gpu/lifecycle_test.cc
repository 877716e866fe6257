// Leaks over many lifetimes of a CUDA-backend communicator (the GPU twin of the host test
// Lifecycle.ThousandCreateDestroyAndAbortCyclesLeakNothing): open fds, threads, memory mappings, free GPU
// memory and the store's keys are back at their starting values after N create/destroy and create/abort
// cycles, and were above them while a communicator lived (so that the counting can fail).
//
// Every creation also creates the backend's NCCL communicator (CudaBackend::init_nccl runs in the
// constructor: eager, whatever the collectives), and every fourth cycle runs its all-reduce through NCCL
// (Algorithm::kNccl), so NCCL's per-communicator resources are counted too.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "harness/process_counts.h"
#include "harness/rank_harness.h"
#include "symcomm/memory.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

constexpr size_t kMiB = size_t{1} << 20;

/// Cycles of the tests: SYMCOMM_TEST_LIFECYCLE_CYCLES (1000 for the reliability requirement's full count, fewer under
/// compute-sanitizer), default 100 for the 2-rank eager test: a cycle takes ~0.95 s on 2 x H200 (most of it
/// ncclCommAbort in the destroy, which waits out NCCL's 500 ms service-thread polls), so 1000 would hold the
/// GPU suite for ~16 minutes. With SYMCOMM_NCCL=lazy only the cycles that use NCCL pay for it.
int lifecycle_cycles(int default_cycles) {
  const char* v = std::getenv("SYMCOMM_TEST_LIFECYCLE_CYCLES");
  if (v == nullptr || *v == '\0') return default_cycles;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 1 && n <= 1000000 ? static_cast<int>(n) : -1;
}

// NOTE [cuda mappings] The CUDA heap shares memory as cuMem allocations exported as POSIX fds (NOTE [cuda
// heap]); each fd is closed once imported, and cuMemMap places the memory in the GPU's page tables inside the
// driver's unified address reservation, so symmetric memory makes no entry of its own in /proc/self/maps
// (unlike the host backend's memfd:symcomm segments). Nor does pinned host memory: on 2 x H200 (driver
// 580.159.04, NCCL 2.28) the mappings of /dev/nvidia* stay at 34 and there are none of /dev/shm or memfd
// while a communicator lives, and the whole map grows by 3 (two anonymous mappings, one of a file). So the
// whole map is counted: a mapping leaked per cycle (a stack, a library, a pinned or shared region) shows as
// hundreds after 1000 cycles.

struct Resources {
  int fds = 0, threads = 0, maps = 0;
  size_t free_gpu = 0;  ///< bytes free on this rank's GPU (the whole device: every context and pool on it)
  CudaMemoryUse mine;   ///< what symcomm holds for it in this process (exact: its own ledger)
};

Resources resources() {
  Resources r;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) ADD_FAILURE() << "cudaGetDevice failed";
  r.mine = cuda_memory_use(device);
  r.fds = testing::count_dir("/proc/self/fd");
  r.threads = testing::count_dir("/proc/self/task");
  r.maps = testing::count_maps();  // NOTE [cuda mappings]
  size_t total = 0;
  if (cudaMemGetInfo(&r.free_gpu, &total) != cudaSuccess) ADD_FAILURE() << "cudaMemGetInfo failed";
  return r;
}

/// In-place int32 all-reduce of 1024 elements on device memory with `algo`; checks the exact sum.
void all_reduce_exact(Communicator& comm, int32_t* dev, int cycle, Algorithm algo) {
  const int world = comm.world_size();
  constexpr size_t kCount = 1024;
  const int me = comm.rank();
  std::vector<int32_t> host(kCount);
  for (size_t j = 0; j < kCount; ++j) host[j] = cycle + static_cast<int32_t>(j) + me;
  ASSERT_EQ(cudaMemcpy(dev, host.data(), kCount * 4, cudaMemcpyHostToDevice), cudaSuccess);
  comm.all_reduce(dev, dev, kCount, DataType::kInt32, ReduceOp::kSum, {.algorithm = algo});
  // One rank has nothing to choose: select() gives it the direct (local) copy.
  const Algorithm auto_algo = world == 1 ? Algorithm::kDirect : Algorithm::kOneShot;
  EXPECT_EQ(comm.last_algorithm(), algo == Algorithm::kAuto ? auto_algo : algo);
  // A blocking copy on the legacy default stream, which the collective was enqueued on.
  ASSERT_EQ(cudaMemcpy(host.data(), dev, kCount * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  comm.check();
  size_t wrong = 0;
  // sum over r of (cycle + j + r) = world * (cycle + j) + world * (world - 1) / 2
  for (size_t j = 0; j < kCount; ++j) {
    wrong += host[j] != world * (cycle + static_cast<int32_t>(j)) + world * (world - 1) / 2;
  }
  ASSERT_EQ(wrong, 0u) << "cycle " << cycle << ", " << to_string(algo);
}

/// Create/destroy and create/abort cycles at world size `world` (ranks on GPUs 0 .. world-1) with NCCL created
/// as `nccl` says, then the counts are compared with those after a warm-up communicator.
void cycles_leak_nothing(const int world, const NcclInit nccl, const int default_cycles) {
  const int cycles = lifecycle_cycles(default_cycles);
  ASSERT_GT(cycles, 0) << "SYMCOMM_TEST_LIFECYCLE_CYCLES must be an integer in [1, 1000000]";
  testing::HarnessOptions opt;
  // A cycle takes 0.95-0.97 s on 2 x H200 (20-40 cycles, this test's printout: create 35-47 ms, destroy
  // 880-890 ms); twice that per cycle is left, so only a hang reaches the limit.
  opt.timeout = (std::chrono::seconds(120) + cycles * std::chrono::seconds(2)) * testing::timeout_scale();
  testing::expect_success(
      world,
      [cycles, world, nccl](RankEnv& env) {
        auto options = [&env, nccl](const std::string& name) {
          CommOptions o = cuda_comm_options();
          o.config = env.config;
          o.config->nccl = nccl;
          o.name = name;
          return o;
        };
        const int me = env.info.rank;
        // Without NCCL (SYMCOMM_NCCL=off, or ranks sharing a GPU: Config::shared_gpu) its cycles run symcomm's
        // kernel.
        const Algorithm via_nccl = ranks_share_gpus() || nccl == NcclInit::kOff ? Algorithm::kAuto : Algorithm::kNccl;
        ASSERT_EQ(cudaSetDevice(rank_device(env.info.local_rank)), cudaSuccess);  // the communicators' device
        int32_t* dev = nullptr;
        ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), 1024 * 4), cudaSuccess);
        // First-use state is not a leak: the CUDA context, lazily loaded kernels (symcomm's and NCCL's),
        // NCCL's process-wide initialisation, logging and thread-local state.
        {
          auto warm = env.make_comm(options("warm"));
          ASSERT_NO_FATAL_FAILURE(all_reduce_exact(*warm, dev, -1, Algorithm::kAuto));
          ASSERT_NO_FATAL_FAILURE(all_reduce_exact(*warm, dev, -2, via_nccl));
        }
        // The peer maps our heap allocations until it destroys its communicator: count once both have.
        testing::store_barrier(*env.store, "lifecycle/warm", world);
        Resources before = resources();
        before.threads = testing::count_threads_stable();  // NOTE [thread counts]
        const int64_t keys_before = env.store->num_keys();
        // Ranks sharing a GPU see each other's device memory: none may start a cycle while another counts.
        testing::store_barrier(*env.store, "lifecycle/before", world);

        using Clock = std::chrono::steady_clock;
        const auto t0 = Clock::now();
        Clock::duration creating{}, destroying{};
        for (int i = 0; i < cycles; ++i) {
          const auto c0 = Clock::now();
          auto comm = env.make_comm(options(fmt::format("life{}", i)));
          creating += Clock::now() - c0;
          if (i % 2) {
            comm->abort();
            EXPECT_TRUE(comm->is_aborted());
          } else {  // alternately symcomm's kernel (the LL all-reduce) and NCCL
            ASSERT_NO_FATAL_FAILURE(all_reduce_exact(*comm, dev, i, i % 4 == 0 ? Algorithm::kAuto : via_nccl));
          }
          if (i == 0) {
            // While a communicator lives every count is up: mesh sockets and NCCL's, the mesh and copy-engine
            // watchdogs and NCCL's proxy threads (and their stacks), and at least the LL buffer (2 parities x 2
            // sources x 2 MB) in device memory. Otherwise the counting below proves nothing. A single rank has
            // no peers (no mesh sockets or peer mappings; what NCCL starts for one rank is its own business), so
            // there only the sum of the host counts and its heap in device memory must have risen.
            const Resources alive = resources();
            if (world > 1) {
              EXPECT_GT(alive.fds, before.fds);
              EXPECT_GT(alive.threads, before.threads);
              EXPECT_GT(alive.maps, before.maps);
            } else {
              EXPECT_GT(alive.fds + alive.threads + alive.maps, before.fds + before.threads + before.maps);
            }
            EXPECT_GE(before.free_gpu - std::min(before.free_gpu, alive.free_gpu), (world > 1 ? 8 : 2) * kMiB);
            // symcomm's own count: at least the LL buffer and the pad, and each peer's of them mapped.
            EXPECT_GE(alive.mine.device_bytes, before.mine.device_bytes + 8 * kMiB) << to_string(alive.mine);
            EXPECT_GE(alive.mine.peer_mapped_bytes, before.mine.peer_mapped_bytes + (world - 1) * 8 * kMiB)
                << to_string(alive.mine);
            EXPECT_GT(alive.mine.pinned_host_bytes, before.mine.pinned_host_bytes) << to_string(alive.mine);
            if (me == 0) {
              std::printf(
                  "GpuLifecycle (%d ranks): with one communicator alive: fds %d -> %d, threads %d -> %d, mappings "
                  "%d -> %d, free GPU memory %.1f -> %.1f MiB; symcomm's own: %s\n",
                  world, before.fds, alive.fds, before.threads, alive.threads, before.maps, alive.maps,
                  before.free_gpu / double(kMiB), alive.free_gpu / double(kMiB), to_string(alive.mine).c_str());
            }
          }
          const auto d0 = Clock::now();
          comm.reset();
          destroying += Clock::now() - d0;
        }
        auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
        const double seconds = secs(Clock::now() - t0);
        testing::store_barrier(*env.store, "lifecycle/cycles_done", world);
        Resources after = resources();
        after.threads = testing::count_threads_settled(before.threads);
        EXPECT_EQ(after.fds, before.fds);
        EXPECT_LE(after.threads, before.threads);
        // A few mappings may appear once after the warm-up (allocator arenas, cached thread stacks); a leak per
        // cycle is far more.
        EXPECT_LE(after.maps, before.maps + 4) << "mappings " << before.maps << " before, " << after.maps << " after";
        // Device memory comes in 2 MiB pages; the driver keeps a little for itself (page-table pages of the
        // freed virtual ranges, internal pools), which is not ours. A leak of even 2 KiB per cycle exceeds this
        // bound after 1000 cycles; one heap page per cycle (the smallest symcomm allocation) after one. Ranks
        // sharing a GPU (SYMCOMM_SHARED_GPU=1) read the free memory of the whole device, every rank's context
        // included, and these pools move with all of them: at 4 and 8 ranks on one H200 the device has
        // 2-10 MiB more free after the cycles than before, so there a page per rank is allowed
        // each way (100 cycles leaking one page each would still exceed it 12-fold at 8 ranks).
        const size_t slack = 2 * kMiB * (ranks_share_gpus() ? world : 1);
        EXPECT_LE(before.free_gpu, after.free_gpu + slack)
            << "free GPU memory " << before.free_gpu / double(kMiB) << " MiB before, " << after.free_gpu / double(kMiB)
            << " MiB after " << cycles << " cycles";
        EXPECT_LE(after.free_gpu, before.free_gpu + slack);
        // What symcomm itself holds is counted exactly, whoever else shares the device: back to the byte.
        EXPECT_EQ(after.mine, before.mine)
            << "before: " << to_string(before.mine) << "; after " << cycles << " cycles: " << to_string(after.mine);
        // Communicators remove their rendezvous keys: the store does not grow with every cycle (the two
        // barriers since the first count add one key each).
        const int64_t keys_after = env.store->num_keys();
        EXPECT_LE(keys_after, keys_before + 4)
            << "the store grew by " << keys_after - keys_before << " keys over " << cycles
            << " communicators; the last one's NCCL id key is "
            << (env.store->check(fmt::format("symcomm/life{}/cuda/nccl_id", cycles - 1)) ? "still there" : "gone");
        if (me == 0) {
          std::printf(
              "GpuLifecycle (%d ranks, NCCL %s): %d cycles in %.1f s: %.1f ms per cycle (create %.1f ms, destroy "
              "%.1f ms, the rest all-reduce or abort)\n",
              world,
              nccl == NcclInit::kLazy  ? "lazy"
              : nccl == NcclInit::kOff ? "off"
                                       : "eager",
              cycles, seconds, 1e3 * seconds / cycles, 1e3 * secs(creating) / cycles, 1e3 * secs(destroying) / cycles);
        }
        cudaFree(dev);
        // Rank 0 hosts the harness's store server, whose connection from rank 1 (an fd and a thread) is part of
        // rank 0's counts: rank 1 must not exit, closing it, before rank 0 has counted.
        testing::store_barrier(*env.store, "lifecycle/counted", world);
      },
      opt);
}

// At the GPU suite's world size (testing::gpu_test_world(): the GPUs, or SYMCOMM_TEST_WORLD where ranks share
// a GPU).
TEST(GpuLifecycle, CreateDestroyAndAbortCyclesLeakNothing) {
  cycles_leak_nothing(testing::gpu_test_world(), NcclInit::kEager, 100);
}

// With NCCL created at its first use: a quarter of the cycles create it (their NCCL all-reduce), the others
// never do (an abort, or symcomm's kernel).
TEST(GpuLifecycle, LazyNcclCreateDestroyAndAbortCyclesLeakNothing) {
  cycles_leak_nothing(testing::gpu_test_world(), NcclInit::kLazy, 100);
}

// The same at world size 1 (GPU 0): every per-process resource of the CUDA backend (the heap's cuMem
// allocations, its fd export, pinned host words, streams, the copy engine's watchdog where it exists, NCCL's
// one-rank communicator) without peers. Run on a one-GPU machine too (tests/harness/gpu_main.cc).
TEST(GpuLifecycle, SingleGpuCreateDestroyAndAbortCyclesLeakNothing) { cycles_leak_nothing(1, NcclInit::kEager, 10); }
TEST(GpuLifecycle, SingleGpuLazyNcclCreateDestroyAndAbortCyclesLeakNothing) {
  cycles_leak_nothing(1, NcclInit::kLazy, 40);
}
// Without NCCL in the process at all: NVML is symcomm's own then (NOTE [nvml once] in
// src/backends/cuda/cuda_topology_cuda.cc: loading NVML per communicator would leak an fd per communicator).
TEST(GpuLifecycle, SingleGpuWithoutNcclCreateDestroyAndAbortCyclesLeakNothing) {
  cycles_leak_nothing(1, NcclInit::kOff, 40);
}

// cuda_memory_use() is exact: a symmetric allocation adds its size rounded up to the heap's granularity to
// device_bytes and the same per peer to peer_mapped_bytes, free() takes both back, and destroying the
// communicator, aborted or not, brings every count back to where it was before it was made. Checked against
// the driver where no other rank shares the GPU: the device's free memory falls by at least the allocation.
TEST(GpuMemoryUse, CountsAllocationsPeerMappingsAndTheirRelease) {
  const int world = testing::gpu_test_world();
  testing::expect_success(world, [world](RankEnv& env) {
    const int device = rank_device(env.info.local_rank);
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);                   // the context, before any count
    CommOptions o = cuda_comm_options_without_nccl(env.config);  // NCCL's memory is not symcomm's
    const CudaMemoryUse none = cuda_memory_use(device);
    for (const bool abort_first : {false, true}) {
      o.name = abort_first ? "memuse_abort" : "memuse";
      auto comm = env.make_comm(o);
      ASSERT_EQ(comm->device(), device);
      const CudaMemoryUse made = cuda_memory_use(device);
      EXPECT_GT(made.device_bytes, none.device_bytes) << to_string(made);
      EXPECT_GT(made.pinned_host_bytes, none.pinned_host_bytes) << to_string(made);
      EXPECT_GT(made.allocations, none.allocations) << to_string(made);
      // Every heap chunk of this rank has one mapped twin per peer; device_bytes also holds the device state
      // (a cudaMalloc of its own), so the peers' share is a multiple of something smaller than it.
      EXPECT_LT(made.peer_mapped_bytes - none.peer_mapped_bytes,
                (world - 1) * (made.device_bytes - none.device_bytes) + 1);
      if (world > 1) {
        EXPECT_GT(made.peer_mapped_bytes, none.peer_mapped_bytes) << to_string(made);
      }

      // Sizes off the granularity on purpose: 5 MiB + 1 and 1 byte.
      for (const size_t bytes : {(size_t{5} << 20) + 1, size_t{1}}) {
        testing::store_barrier(*env.store, fmt::format("{}/before_alloc_{}", o.name, bytes), world);
        size_t free_before = 0, free_after = 0, total = 0;
        ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
        const CudaMemoryUse u0 = cuda_memory_use(device);
        void* p = comm->alloc(bytes);
        const CudaMemoryUse u1 = cuda_memory_use(device);
        ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
        const size_t grew = u1.device_bytes - u0.device_bytes;
        EXPECT_GE(grew, bytes) << to_string(u1);
        EXPECT_LT(grew, bytes + (64 << 20)) << "more than 64 MiB of rounding: " << to_string(u1);
        EXPECT_EQ(grew % (64 << 10), 0u) << "not a whole number of 64 KiB pages: " << grew;
        EXPECT_EQ(u1.peer_mapped_bytes - u0.peer_mapped_bytes, static_cast<size_t>(world - 1) * grew);
        EXPECT_EQ(u1.pinned_host_bytes, u0.pinned_host_bytes);
        EXPECT_EQ(u1.allocations, u0.allocations + static_cast<size_t>(world));
        if (!ranks_share_gpus()) {
          EXPECT_GE(free_before - std::min(free_before, free_after), grew)
              << "the driver reports " << free_before << " -> " << free_after << " bytes free";
        }
        // The same size again rounds the same way.
        void* q = comm->alloc(bytes);
        EXPECT_EQ(cuda_memory_use(device).device_bytes - u1.device_bytes, grew);
        comm->free(q);
        comm->free(p);
        EXPECT_EQ(cuda_memory_use(device), u0) << to_string(cuda_memory_use(device));
      }
      if (abort_first) comm->abort();
      comm.reset();
      EXPECT_EQ(cuda_memory_use(device), none)
          << "after " << (abort_first ? "an aborted" : "a") << " communicator: " << to_string(cuda_memory_use(device))
          << "; before it: " << to_string(none);
    }
  });
}

// A symmetric alloc that does not fit in device memory is a clear error on every rank, never a hang (NOTE
// [failed symmetric alloc]): the rank that ran out says so with the request, the driver's free count and what
// symcomm holds; every other rank names the ranks that failed. Nothing stays allocated or mapped, and the
// communicator goes on: the next allocation and an exact all-reduce on it work. First every rank asks for four
// times the device's memory; then, where ranks share a GPU, for 60% of what is free, which one rank gets and
// the others cannot, the case where only some ranks fail.
TEST(GpuMemoryUse, OutOfMemoryIsAClearErrorOnEveryRankAndTheCommunicatorStaysUsable) {
  const int world = testing::gpu_test_world();
  testing::expect_success(world, [world](RankEnv& env) {
    const int device = rank_device(env.info.local_rank);
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    CommOptions o = cuda_comm_options_without_nccl(env.config);
    o.config->heap_bytes = size_t{1} << 40;  // the heap's own bound out of the way: the device's is the one hit
    auto comm = env.make_comm(o);
    const int me = comm->rank();
    size_t free = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
    const CudaMemoryUse before = cuda_memory_use(device);
    std::vector<size_t> sizes = {4 * total};
    if (ranks_share_gpus() && world > 1) {
      testing::store_barrier(*env.store, "oom/free", world);
      // every rank's view of free memory is taken after all have made their communicators
      ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
      sizes.push_back(free / 10 * 6 / 4096 * 4096);
    }
    // Every rank asks for the same size: a collective call. The smallest view of free memory decides it.
    for (size_t i = 1; i < sizes.size(); ++i) {
      env.store->set(fmt::format("oom/size{}/{}", i, me), std::to_string(sizes[i]));
      size_t smallest = sizes[i];
      for (int r = 0; r < world; ++r) {
        smallest = std::min<size_t>(smallest, std::stoull(env.store->get_string(fmt::format("oom/size{}/{}", i, r))));
      }
      sizes[i] = smallest;
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      void* p = nullptr;
      bool threw = false;
      std::string named;  // the ranks this rank's error names
      try {
        p = comm->alloc(sizes[i]);
      } catch (const Error& e) {
        threw = true;
        named = fmt::format("{}", fmt::join(e.ranks(), ","));
        EXPECT_EQ(e.code(), ErrorCode::kCuda) << e.what();
        ASSERT_FALSE(e.ranks().empty()) << e.what();
        const std::string msg = e.what();
        if (std::find(e.ranks().begin(), e.ranks().end(), me) != e.ranks().end()) {
          // this rank ran out itself
          EXPECT_NE(msg.find("out of GPU memory"), std::string::npos) << msg;
          EXPECT_NE(msg.find(std::to_string(sizes[i])), std::string::npos) << msg;
          EXPECT_NE(msg.find("symcomm already holds"), std::string::npos) << msg;
        } else {
          EXPECT_NE(msg.find("could not allocate their part"), std::string::npos) << msg;
        }
      }
      if (i == 0) {
        EXPECT_TRUE(threw) << "an allocation of four times the device's memory succeeded";
      }
      // Where one rank got its part and another did not, all must have thrown.
      env.store->set(fmt::format("oom/threw{}/{}", i, me), threw ? "1" : "0");
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(env.store->get_string(fmt::format("oom/threw{}/{}", i, r)), threw ? "1" : "0")
            << "ranks disagree on whether allocation " << i << " of " << sizes[i] << " bytes failed";
      }
      if (p) comm->free(p);
      EXPECT_EQ(cuda_memory_use(device), before) << "after allocation " << i;
      if (me == 0) {
        std::printf("GpuMemoryUse OOM: alloc of %zu bytes (%zu free of %zu) %s; rank 0's error names rank(s) %s\n",
                    sizes[i], free, total, threw ? "failed on every rank" : "succeeded", named.c_str());
      }
    }
    // Still usable: an allocation and an exact all-reduce in it.
    auto* buf = static_cast<int32_t*>(comm->alloc(4096 * sizeof(int32_t)));
    std::vector<int32_t> host(4096);
    for (size_t j = 0; j < host.size(); ++j) host[j] = static_cast<int32_t>(j) + me;
    ASSERT_EQ(cudaMemcpy(buf, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    comm->all_reduce(buf, buf, host.size(), DataType::kInt32, ReduceOp::kSum);
    ASSERT_EQ(cudaMemcpy(host.data(), buf, host.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    comm->check();
    size_t wrong = 0;
    for (size_t j = 0; j < host.size(); ++j) {
      wrong += host[j] != world * static_cast<int32_t>(j) + world * (world - 1) / 2;
    }
    EXPECT_EQ(wrong, 0u);
    comm->free(buf);
  });
}

// Ranks that ask alloc() for different sizes all get kMismatch naming a rank whose size differs, in the same
// call; nothing stays allocated, and the next (matching) allocation works (NOTE [failed symmetric alloc]: every
// rank reads every peer's message before it decides, so none is left for the next call).
TEST(GpuMemoryUse, MismatchedAllocIsAnErrorOnEveryRankAndTheCommunicatorStaysUsable) {
  const int world = testing::gpu_test_world();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::expect_success(world, [world](RankEnv& env) {
    const int device = rank_device(env.info.local_rank);
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    auto comm = env.make_comm(cuda_comm_options_without_nccl(env.config));
    const int me = comm->rank();
    const CudaMemoryUse before = cuda_memory_use(device);
    // The last rank asks for more (a different heap page count), the others agree with each other.
    const size_t mine = me == world - 1 ? size_t{6} << 20 : size_t{3} << 20;
    try {
      comm->alloc(mine);
      ADD_FAILURE() << "mismatched sizes were allocated";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
      ASSERT_EQ(e.ranks().size(), 1u) << e.what();
      if (me == world - 1) {
        EXPECT_NE(e.ranks()[0], me) << e.what();
      } else {
        EXPECT_EQ(e.ranks()[0], world - 1) << e.what();
      }
    }
    EXPECT_EQ(cuda_memory_use(device), before);
    void* p = comm->alloc(size_t{1} << 20);
    EXPECT_EQ(comm->peer_ptr(p, me), p);
    comm->free(p);
    EXPECT_EQ(cuda_memory_use(device), before);
  });
}

// NOTE [configuration agreement]: the CUDA heap's exchange does not compare heap sizes, so ranks whose
// heaps differ fail at creation, naming the setting. Created, a rank whose smaller heap is full would refuse
// an alloc() on its own while its peers go into their exchange, and every later alloc() would pair different
// allocations.
TEST(GpuMemoryUse, DifferentHeapSizesAreAMismatchAtCreation) {
  const int world = testing::gpu_test_world();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::expect_success(world, [](RankEnv& env) {
    ASSERT_EQ(cudaSetDevice(rank_device(env.info.local_rank)), cudaSuccess);
    Config differs = env.config;
    differs.heap_bytes = (size_t{64} << 20) * (env.info.rank + 1);
    CommOptions o = cuda_comm_options_without_nccl(differs);
    o.name = "heap-sizes-differ";
    try {
      env.make_comm(o);
      ADD_FAILURE() << "ranks with different heap sizes made a communicator";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
      EXPECT_NE(std::string(e.what()).find("SYMCOMM_HEAP_BYTES"), std::string::npos) << e.what();
    }
    CommOptions ok = cuda_comm_options_without_nccl(env.config);
    ok.name = "heap-sizes-agree";
    auto comm = env.make_comm(ok);
    void* p = comm->alloc(size_t{16} << 20);
    comm->free(p);
  });
}

/// The code and named ranks of `e`, checked against a failure that rank `failing` had on its own: that rank
/// throws its own error (`own` in its message), the others one naming it (`theirs` in theirs).
void expect_failure_on_every_rank(const Error& e, int me, int failing, const std::string& own,
                                  const std::string& theirs) {
  const std::string msg = e.what();
  EXPECT_EQ(e.code(), ErrorCode::kCuda) << msg;
  if (me == failing) {
    EXPECT_NE(msg.find(own), std::string::npos) << msg;
  } else {
    EXPECT_EQ(e.ranks(), std::vector<int>{failing}) << msg;
    EXPECT_NE(msg.find(theirs), std::string::npos) << msg;
  }
}

// A rank that cannot set up its copy engine at creation (its staging buffer: out of device memory, injected
// with SYMCOMM_DEBUG_FAULT=ce_setup@1) fails the creation on every rank, the others naming it, and leaks
// nothing; the next communicator (no fault) runs an exact copy-engine all-gather. A set-up after the
// creation's last exchange would fail rank 1 alone, and the others would make a communicator that waits for it.
TEST(GpuMemoryUse, CopyEngineSetUpFailingOnOneRankFailsTheCreationOnEveryRank) {
  const int world = testing::gpu_test_world();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::expect_success(world, [world](RankEnv& env) {
    const int device = rank_device(env.info.local_rank);
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
    const CudaMemoryUse before = cuda_memory_use(device);
    CommOptions o = cuda_comm_options_without_nccl(env.config);
    o.name = "ce-setup-fails";
    ::setenv("SYMCOMM_DEBUG_FAULT", "ce_setup@1", 1);
    try {
      env.make_comm(o);
      ADD_FAILURE() << "the communicator was made although rank 1's copy engine could not be set up";
    } catch (const Error& e) {
      expect_failure_on_every_rank(e, env.info.rank, 1, "staging buffer", "could not set up their copy engine");
    }
    ::unsetenv("SYMCOMM_DEBUG_FAULT");
    EXPECT_EQ(cuda_memory_use(device), before) << "the failed creation left memory behind";
    o.name = "ce-setup-works";
    auto comm = env.make_comm(o);
    const int me = comm->rank();
    constexpr size_t kCount = 1 << 18;
    std::vector<int32_t> host(kCount * world);
    for (size_t j = 0; j < kCount; ++j) host[j] = static_cast<int32_t>(j * 7 + me);
    int32_t *in = nullptr, *out = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&in), kCount * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), kCount * world * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(in, host.data(), kCount * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(out, 0xab, kCount * world * 4), cudaSuccess);
    comm->all_gather(in, out, kCount, DataType::kInt32, {.algorithm = Algorithm::kCopyEngine});
    ASSERT_EQ(cudaMemcpy(host.data(), out, kCount * world * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    comm->check();
    size_t wrong = 0;
    for (int r = 0; r < world; ++r) {
      for (size_t j = 0; j < kCount; ++j) wrong += host[r * kCount + j] != static_cast<int32_t>(j * 7 + r);
    }
    EXPECT_EQ(wrong, 0u);
    cudaFree(in);
    cudaFree(out);
  });
}

// A symmetric alloc whose import of a peer's part fails on one rank (the driver refusing the handle, injected
// with SYMCOMM_DEBUG_FAULT=heap_import@1) after the exchange fails on every rank, the others naming it, leaves
// nothing allocated, and the next alloc() pairs the right parts: an exact all-reduce in it. The failure this
// guards against: rank 1 failing alone (the others returning the allocation) and leaving its peers' messages
// unread.
TEST(GpuMemoryUse, SymmetricAllocFailingToMapOnOneRankFailsOnEveryRank) {
  const int world = testing::gpu_test_world();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::expect_success(world, [world](RankEnv& env) {
    const int device = rank_device(env.info.local_rank);
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    auto comm = env.make_comm(cuda_comm_options_without_nccl(env.config));
    const int me = comm->rank();
    const CudaMemoryUse before = cuda_memory_use(device);
    ::setenv("SYMCOMM_DEBUG_FAULT", "heap_import@1", 1);
    void* p = nullptr;
    try {
      p = comm->alloc(size_t{4} << 20);
      ADD_FAILURE() << "the alloc succeeded on rank " << me << " although rank 1 could not map it";
    } catch (const Error& e) {
      expect_failure_on_every_rank(e, me, 1, "cannot import rank", "could not map the peers' parts");
    }
    ::unsetenv("SYMCOMM_DEBUG_FAULT");
    if (p) comm->free(p);
    EXPECT_EQ(cuda_memory_use(device), before) << "the failed alloc left memory behind";
    auto* buf = static_cast<int32_t*>(comm->alloc(size_t{4} << 20));
    constexpr size_t kCount = 1 << 20;
    std::vector<int32_t> host(kCount);
    for (size_t j = 0; j < kCount; ++j) host[j] = static_cast<int32_t>(j % 1000) * (me + 1);
    ASSERT_EQ(cudaMemcpy(buf, host.data(), kCount * 4, cudaMemcpyHostToDevice), cudaSuccess);
    comm->all_reduce(buf, buf, kCount, DataType::kInt32, ReduceOp::kSum);
    ASSERT_EQ(cudaMemcpy(host.data(), buf, kCount * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    comm->check();
    size_t wrong = 0;
    for (size_t j = 0; j < kCount; ++j) {
      wrong += host[j] != static_cast<int32_t>(j % 1000) * (world * (world + 1) / 2);
    }
    EXPECT_EQ(wrong, 0u);
    comm->free(buf);
    EXPECT_EQ(cuda_memory_use(device), before);
  });
}

/// all_reduce with algorithm `algo` on `s` (non-default stream), expected to throw Error(code); returns its
/// message.
std::string all_reduce_error(Communicator& comm, int32_t* dev, cudaStream_t s, Algorithm algo, ErrorCode code) {
  try {
    comm.all_reduce(dev, dev, 1024, DataType::kInt32, ReduceOp::kSum, {.stream = s, .algorithm = algo});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "all_reduce with " << to_string(algo) << " did not throw";
  return {};
}

// SYMCOMM_NCCL=lazy: NCCL is created by the first collective that runs through it (on every rank at once),
// never inside a CUDA graph capture (a clear kUnsupported, the capture and communicator left usable); once
// created it is captured and replayed like any collective. SYMCOMM_NCCL=off: forcing NCCL is kUnsupported and
// automatic selection uses symcomm's kernels. On as many GPUs as there are, up to 2 (so it runs on one too).
TEST(GpuNcclInit, SingleGpuLazyNcclIsCreatedAtFirstUseButNotInsideACapture) {
  SKIP_WITHOUT_NCCL();
  const int world = std::min(2, testing::gpu_test_world());
  ASSERT_GE(world, 1);
  testing::expect_success(world, [world](RankEnv& env) {
    ASSERT_EQ(cudaSetDevice(rank_device(env.info.local_rank)), cudaSuccess);
    int32_t* dev = nullptr;
    GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&dev), 1024 * 4));
    cudaStream_t s = nullptr;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CommOptions o = cuda_comm_options();
    o.config = env.config;
    o.config->nccl = NcclInit::kLazy;
    auto comm = env.make_comm(o);
    ASSERT_NO_FATAL_FAILURE(all_reduce_exact(*comm, dev, 1, Algorithm::kAuto));  // symcomm's kernel

    GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const std::string msg = all_reduce_error(*comm, dev, s, Algorithm::kNccl, ErrorCode::kUnsupported);
    EXPECT_NE(msg.find("SYMCOMM_NCCL=lazy"), std::string::npos) << msg;
    cudaGraph_t graph = nullptr;
    GPU_CHECK(cudaStreamEndCapture(s, &graph));  // the refusal launched nothing: the capture is still valid
    if (graph) {
      GPU_CHECK(cudaGraphDestroy(graph));
    }
    comm->check();

    ASSERT_NO_FATAL_FAILURE(all_reduce_exact(*comm, dev, 2, Algorithm::kNccl));  // creates NCCL, eagerly
    // Then captured, replayed with new inputs, exact.
    GPU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    comm->all_reduce(dev, dev, 1024, DataType::kInt32, ReduceOp::kSum, {.stream = s, .algorithm = Algorithm::kNccl});
    GPU_CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec = nullptr;
    GPU_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const int me = env.info.rank;
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<int32_t> host(1024);
      for (size_t j = 0; j < host.size(); ++j) host[j] = 100 * rep + static_cast<int32_t>(j) + me;
      GPU_CHECK(cudaMemcpyAsync(dev, host.data(), 1024 * 4, cudaMemcpyHostToDevice, s));
      GPU_CHECK(cudaGraphLaunch(exec, s));
      GPU_CHECK(cudaMemcpyAsync(host.data(), dev, 1024 * 4, cudaMemcpyDeviceToHost, s));
      GPU_CHECK(cudaStreamSynchronize(s));
      size_t wrong = 0;
      for (size_t j = 0; j < host.size(); ++j) {
        wrong += host[j] != world * (100 * rep + static_cast<int32_t>(j)) + world * (world - 1) / 2;
      }
      EXPECT_EQ(wrong, 0u) << "replay " << rep;
    }
    comm->check();
    GPU_CHECK(cudaGraphExecDestroy(exec));
    GPU_CHECK(cudaGraphDestroy(graph));
    comm.reset();

    o.config->nccl = NcclInit::kOff;
    o.name = "nccl_off";
    auto off = env.make_comm(o);
    all_reduce_error(*off, dev, s, Algorithm::kNccl, ErrorCode::kUnsupported);
    ASSERT_NO_FATAL_FAILURE(all_reduce_exact(*off, dev, 3, Algorithm::kAuto));
    off.reset();
    GPU_CHECK(cudaStreamDestroy(s));
    GPU_CHECK(cudaFree(dev));
  });
}

}  // namespace
}  // namespace symcomm::gputest
