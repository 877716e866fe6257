// Tests of the ledger behind symcomm::cuda_memory_use() (src/base/memory_ledger.cc): counts per device and
// kind, taken back exactly, a device never used reads zero, taking back more than recorded clamps at zero
// (and is logged, not thrown: teardown calls it), and threads adding and removing at once lose nothing. The
// GPU tests (GpuMemoryUse, GpuLifecycle, GpuFailure) check the sites that feed it against the driver.

#include "base/memory_ledger.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace symcomm {
inline void PrintTo(const CudaMemoryUse& use, std::ostream* os) { *os << to_string(use); }
}  // namespace symcomm

namespace symcomm::detail {
namespace {

// Devices far above any real ordinal, so that nothing else in this process touches their counts.
constexpr int kDevA = 1000, kDevB = 1001, kDevC = 1002, kDevThreads = 1003;

TEST(MemoryLedger, CountsPerDeviceAndKindAndTakesBackExactly) {
  EXPECT_EQ(cuda_memory_use(kDevA), CudaMemoryUse{});
  ledger_add(kDevA, MemoryKind::kDevice, 3 << 20);
  ledger_add(kDevA, MemoryKind::kPeerMapped, 6 << 20);
  ledger_add(kDevA, MemoryKind::kPinnedHost, 4096);
  ledger_add(kDevB, MemoryKind::kDevice, 7);
  EXPECT_EQ(cuda_memory_use(kDevA),
            (CudaMemoryUse{
                .device_bytes = 3 << 20, .peer_mapped_bytes = 6 << 20, .pinned_host_bytes = 4096, .allocations = 3}));
  EXPECT_EQ(cuda_memory_use(kDevB), (CudaMemoryUse{.device_bytes = 7, .allocations = 1}));
  ledger_remove(kDevA, MemoryKind::kPeerMapped, 6 << 20);
  EXPECT_EQ(cuda_memory_use(kDevA),
            (CudaMemoryUse{.device_bytes = 3 << 20, .pinned_host_bytes = 4096, .allocations = 2}));
  ledger_remove(kDevA, MemoryKind::kDevice, 3 << 20);
  ledger_remove(kDevA, MemoryKind::kPinnedHost, 4096);
  ledger_remove(kDevB, MemoryKind::kDevice, 7);
  EXPECT_EQ(cuda_memory_use(kDevA), CudaMemoryUse{});
  EXPECT_EQ(cuda_memory_use(kDevB), CudaMemoryUse{});
}

TEST(MemoryLedger, TakingBackMoreThanRecordedClampsAtZero) {
  ledger_add(kDevC, MemoryKind::kDevice, 100);
  ledger_remove(kDevC, MemoryKind::kDevice, 300);  // a bug in the caller: logged
  EXPECT_EQ(cuda_memory_use(kDevC), CudaMemoryUse{});
  ledger_remove(kDevC, MemoryKind::kPinnedHost, 1);  // nothing recorded at all
  EXPECT_EQ(cuda_memory_use(kDevC), CudaMemoryUse{});
}

TEST(MemoryLedger, ReadersAreAskedAtEveryQueryAndCountAsOneAllocationWhileNotZero) {
  constexpr int kDev = 1004;
  const int pool_a = 0, pool_b = 0, pool_c = 0;  // reader keys: any distinct addresses
  size_t reserve_a = 32 << 20;
  ledger_add(kDev, MemoryKind::kDevice, 10);
  ledger_set_reader(&pool_a, kDev, MemoryKind::kDevice, [&reserve_a] { return reserve_a; });
  ledger_set_reader(&pool_b, kDev, MemoryKind::kPeerMapped, [] { return size_t{5}; });
  ledger_set_reader(&pool_c, kDevA, MemoryKind::kDevice, [] { return size_t{7}; });  // another device's
  EXPECT_EQ(cuda_memory_use(kDev),
            (CudaMemoryUse{.device_bytes = 10 + (32 << 20), .peer_mapped_bytes = 5, .allocations = 3}));
  reserve_a = 64 << 20;  // read again at the next query
  EXPECT_EQ(cuda_memory_use(kDev).device_bytes, 10u + (64 << 20));
  reserve_a = 0;  // nothing reserved: no allocation either
  EXPECT_EQ(cuda_memory_use(kDev), (CudaMemoryUse{.device_bytes = 10, .peer_mapped_bytes = 5, .allocations = 2}));
  ledger_set_reader(&pool_b, kDev, MemoryKind::kPeerMapped, [] { return size_t{6}; });  // replaces
  EXPECT_EQ(cuda_memory_use(kDev).peer_mapped_bytes, 6u);
  for (const int* key : {&pool_a, &pool_b, &pool_c})
    ledger_set_reader(key, key == &pool_c ? kDevA : kDev, MemoryKind::kDevice, nullptr);
  ledger_remove(kDev, MemoryKind::kDevice, 10);
  EXPECT_EQ(cuda_memory_use(kDev), CudaMemoryUse{});
  EXPECT_EQ(cuda_memory_use(kDevA), CudaMemoryUse{});
}

TEST(MemoryLedger, ThreadsAddingAndRemovingAtOnceLoseNothing) {
  constexpr int kThreads = 8, kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      const MemoryKind kind = t % 2 ? MemoryKind::kDevice : MemoryKind::kPeerMapped;
      for (int i = 0; i < kRounds; ++i) {
        ledger_add(kDevThreads, kind, static_cast<size_t>(t + 1));
        if (i % 2) ledger_remove(kDevThreads, kind, static_cast<size_t>(t + 1));
      }
    });
  }
  for (auto& th : threads) th.join();
  // Each thread keeps kRounds / 2 of its additions of t + 1 bytes: odd t in device_bytes, even t peer-mapped.
  size_t device = 0, peer = 0;
  for (int t = 0; t < kThreads; ++t) (t % 2 ? device : peer) += static_cast<size_t>(kRounds / 2) * (t + 1);
  EXPECT_EQ(cuda_memory_use(kDevThreads),
            (CudaMemoryUse{.device_bytes = device, .peer_mapped_bytes = peer, .allocations = kThreads * kRounds / 2}));
}

}  // namespace
}  // namespace symcomm::detail
