// Counts past 2^31 elements and byte sizes past 4 GiB on the CUDA backend's kernels (the requirement
// "counts 2^31 ± 1"): an index or a byte offset kept in 32 bits anywhere in a kernel, a grid computation or a
// staging loop would wrap and put data in the wrong place. Every output is poisoned first; windows around
// element 2^31 and byte offsets 2^31 and 2^32, the first and last MiB and 4096 scattered elements are compared
// with values computed on the host.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

constexpr size_t kTwo31 = size_t{1} << 31;

/// Element indices to check in an array of `count` elements of `es` bytes: windows of 64 Ki elements around
/// element 2^31 and bytes 2^31 and 2^32, the first and last 1 Mi elements, and 4096 scattered ones.
std::vector<std::pair<size_t, size_t>> windows(size_t count, size_t es) {
  std::vector<std::pair<size_t, size_t>> w;  // [first, last)
  auto add = [&](size_t centre, size_t half) {
    const size_t lo = centre > half ? centre - half : 0, hi = std::min(count, centre + half);
    if (lo < hi) w.emplace_back(lo, hi);
  };
  add(kTwo31, 1 << 16);
  add(kTwo31 / es, 1 << 16);
  add((size_t{1} << 32) / es, 1 << 16);
  add(0, 1 << 20);
  add(count, 1 << 20);
  for (size_t k = 0; k < 4096; ++k) add(testing::mix64(k) % count, 1);
  return w;
}

/// Compares the windows of a device array with `want(i, bytes)`; returns the wrong elements (the first few in
/// `first_wrong`).
template <class Want>
size_t count_wrong(const char* dev, size_t count, size_t es, Want want, std::string* first_wrong) {
  size_t wrong = 0;
  std::vector<uint8_t> got, expect(es);
  for (auto [lo, hi] : windows(count, es)) {
    got.resize((hi - lo) * es);
    if (cudaMemcpy(got.data(), dev + lo * es, got.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return count;
    for (size_t i = lo; i < hi; ++i) {
      want(i, expect.data());
      if (std::memcmp(got.data() + (i - lo) * es, expect.data(), es) != 0) {
        if (++wrong <= 3) first_wrong->append(" ").append(std::to_string(i));
      }
    }
  }
  return wrong;
}

Config large_config() {
  Config c = testing::HarnessOptions::default_test_config();
  c.cuda_scratch_bytes = size_t{128} << 20;  // the library's default staging (the tests' 1 MiB: 4096 rounds)
  c.timeout = std::chrono::seconds(60) * testing::timeout_scale();
  return c;
}

enum class Kind { kAllReduceInt8, kAllReduceBf16, kAllGather, kReduceScatter, kBroadcast };

void run_large(RankEnv& env, Kind kind) {
  auto comm = env.make_comm(cuda_comm_options());
  const int me = comm->rank(), n = comm->world_size();
  const bool bf16 = kind == Kind::kAllReduceBf16;
  const DataType dt = bf16 ? DataType::kBFloat16 : DataType::kInt8;
  const size_t es = dtype_size(dt);
  const size_t count = kind == Kind::kAllReduceInt8 ? kTwo31 + 3 : kTwo31 + 1;
  const size_t in_count = kind == Kind::kReduceScatter ? count * n : count;
  const size_t out_count = kind == Kind::kAllGather ? count * n : count;
  char *in = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMalloc(&in, in_count * es), cudaSuccess) << in_count * es << " bytes";
  ASSERT_EQ(cudaMalloc(&out, out_count * es), cudaSuccess) << out_count * es << " bytes";
  fill_input_async(in, dt, ReduceOp::kSum, 3, me, in_count, nullptr);
  ASSERT_EQ(cudaMemset(out, kPoisonByte, out_count * es), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  switch (kind) {
    case Kind::kAllReduceInt8:
    case Kind::kAllReduceBf16:
      what = bf16 ? "all_reduce bf16" : "all_reduce int8";
      comm->all_reduce(in, out, count, dt, ReduceOp::kSum);
      break;
    case Kind::kAllGather:
      what = "all_gather int8";
      comm->all_gather(in, out, count, dt);
      break;
    case Kind::kReduceScatter:
      what = "reduce_scatter int8";
      comm->reduce_scatter(in, out, count, dt, ReduceOp::kSum);
      break;
    case Kind::kBroadcast:
      what = "broadcast int8 from rank 1";
      comm->broadcast(in, out, count, dt, 1 % n);
      break;
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  comm->check();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (me == 0) {
    std::printf("%s of %zu elements (%zu bytes out) at %d ranks: %.3f s (%s)\n", what.c_str(), count, out_count * es, n,
                s, to_string(comm->last_algorithm()).data());
  }
  std::string first;
  size_t wrong = 0;
  switch (kind) {
    case Kind::kAllReduceInt8:
    case Kind::kAllReduceBf16:
      wrong = count_wrong(
          out, count, es, [&](size_t i, void* d) { expected_reduce(dt, ReduceOp::kSum, 3, n, i, d); }, &first);
      break;
    case Kind::kAllGather:
      wrong = count_wrong(
          out, out_count, es,
          [&](size_t i, void* d) {
            encode(dt, input_value(dt, ReduceOp::kSum, 3, static_cast<int>(i / count), i % count), d);
          },
          &first);
      break;
    case Kind::kReduceScatter:
      // Block `me` of every rank's input, reduced: element i of the output is element me*count + i of the inputs.
      wrong = count_wrong(
          out, count, es, [&](size_t i, void* d) { expected_reduce(dt, ReduceOp::kSum, 3, n, me * count + i, d); },
          &first);
      break;
    case Kind::kBroadcast:
      wrong = count_wrong(
          out, count, es, [&](size_t i, void* d) { encode(dt, input_value(dt, ReduceOp::kSum, 3, 1 % n, i), d); },
          &first);
      break;
  }
  EXPECT_EQ(wrong, 0u) << what << " at rank " << me << ": first wrong elements" << first;
  cudaFree(in);
  cudaFree(out);
}

void large_case(Kind kind) {
  testing::HarnessOptions opt;
  opt.config = large_config();
  testing::expect_success(
      testing::gpu_test_world(), [kind](RankEnv& env) { run_large(env, kind); }, opt);
}

TEST(GpuLargeCounts, AllReduceOfTwoToThe31PlusThreeInt8) { large_case(Kind::kAllReduceInt8); }
TEST(GpuLargeCounts, AllReduceOfTwoToThe31PlusOneBf16PastFourGiB) { large_case(Kind::kAllReduceBf16); }
TEST(GpuLargeCounts, AllGatherOfTwoToThe31PlusOneInt8PerRank) { large_case(Kind::kAllGather); }
TEST(GpuLargeCounts, ReduceScatterOfTwoToThe31PlusOneInt8PerRank) { large_case(Kind::kReduceScatter); }
TEST(GpuLargeCounts, BroadcastOfTwoToThe31PlusOneInt8) { large_case(Kind::kBroadcast); }

}  // namespace
}  // namespace symcomm::gputest
