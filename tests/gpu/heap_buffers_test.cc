// Zero-copy collectives reach peers' copies of the caller's symmetric buffer: the peer's copy of the *same*
// allocation at the *same* offset (Communicator::alloc). A rank that passes another heap buffer than its
// peers (another allocation, or another offset in one) cannot be served that way, since its peers would read
// and write the wrong place. Every path that goes zero-copy therefore folds the buffer's place in the heap
// into the op header the ranks compare (NOTE [heap keys]): different places are kMismatch on every rank, never
// wrong elements. Cases: the staged two-shot all-reduce pulling (zero-copy input) and pushing (to peers'
// outputs), the direct all-gather, reduce-scatter and broadcast, the copy-engine all-gather, and a grouped
// all-reduce (the multi-tensor kernel). A last case passes the same buffer everywhere and must be exact.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {
namespace {

using testing::RankEnv;

enum class Op { kAllReducePull, kAllReducePush, kAllGather, kReduceScatter, kBroadcast, kCopyEngineGather, kGroup };

struct HeapCase {
  const char* name;
  Op op;
  size_t count;  ///< elements per rank (float32)
};

const HeapCase kHeapCases[] = {
    {"all_reduce_two_shot_pull", Op::kAllReducePull, size_t{1} << 20},  // 4 MB: below the push threshold
    {"all_reduce_two_shot_push", Op::kAllReducePush, size_t{4} << 20},  // 16 MB: pushes to peers' outputs
    {"all_gather_direct", Op::kAllGather, size_t{1} << 18},             // 1 MB blocks: above the LL sizes
    {"reduce_scatter_direct", Op::kReduceScatter, size_t{1} << 19},     // 1 MB output blocks: above LL
    {"broadcast_direct", Op::kBroadcast, size_t{1} << 20},
    {"all_gather_copy_engine", Op::kCopyEngineGather, size_t{1} << 18},
    {"group_all_reduce", Op::kGroup, size_t{1} << 18},
};

/// Runs `c` on `buf` (this rank's choice of heap buffer, room for count * world floats).
void issue(Communicator& comm, const HeapCase& c, float* buf, cudaStream_t s) {
  const int world = comm.world_size(), me = comm.rank();
  const CollOptions o{.stream = s};
  switch (c.op) {
    case Op::kAllReducePull:
    case Op::kAllReducePush:
      comm.all_reduce(buf, buf, c.count, DataType::kFloat32, ReduceOp::kSum,
                      {.stream = s, .algorithm = Algorithm::kTwoShot});
      break;
    case Op::kAllGather:
      comm.all_gather(buf + me * c.count, buf, c.count, DataType::kFloat32,
                      {.stream = s, .algorithm = Algorithm::kDirect});
      break;
    case Op::kReduceScatter:
      comm.reduce_scatter(buf, buf + world * c.count, c.count / 2, DataType::kFloat32, ReduceOp::kSum,
                          {.stream = s, .algorithm = Algorithm::kDirect});
      break;
    case Op::kBroadcast:
      comm.broadcast(buf, buf, c.count, DataType::kFloat32, 0, {.stream = s, .algorithm = Algorithm::kDirect});
      break;
    case Op::kCopyEngineGather:
      comm.all_gather(buf + me * c.count, buf, c.count, DataType::kFloat32,
                      {.stream = s, .algorithm = Algorithm::kCopyEngine});
      break;
    case Op::kGroup: {
      CollectiveGroup g(comm);
      comm.all_reduce(buf, buf, c.count / 2, DataType::kFloat32, ReduceOp::kSum, o);
      comm.all_reduce(buf + c.count / 2, buf + c.count / 2, c.count / 2, DataType::kFloat32, ReduceOp::kSum, o);
      break;
    }
  }
}

void PrintTo(const HeapCase& c, std::ostream* os) { *os << c.name; }

/// A communicator on this rank's GPU without NCCL, with room in its heap for two buffers of the largest case.
std::unique_ptr<Communicator> make_comm(RankEnv& env) {
  EXPECT_EQ(cudaSetDevice(rank_device(env.info.local_rank)), cudaSuccess);
  CommOptions o = cuda_comm_options_without_nccl(env.config);
  o.config->heap_bytes = size_t{256} << 20;
  // The two-shot and direct cases pull from or push into the heap: not the LL128 kernels, which reach no peer
  // buffer (16 bytes: a value of its own, which measured_cuda_tuning keeps at every world size).
  o.config->tuning.cuda_ll128_two_shot_max_bytes = 16;
  o.config->tuning.cuda_ll128_gather_max_bytes = 16;
  o.config->tuning.cuda_ll128_reduce_scatter_max_bytes = 16;
  // The pulling two-shot below 8 MB, the pushing one above, at every world size (the compiled-in 3+-rank
  // threshold is lower).
  o.config->tuning.cuda_two_shot_push_min_bytes = (size_t{8} << 20) - 16;
  return env.make_comm(o);
}

class GpuHeapBuffers : public ::testing::TestWithParam<HeapCase> {};

// Rank 0 passes allocation A, the others allocation B (both made by every rank): kMismatch everywhere.
TEST_P(GpuHeapBuffers, DifferentHeapBuffersOnDifferentRanksAreAMismatch) {
  const HeapCase c = GetParam();
  const int world = testing::gpu_test_world();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::expect_success(world, [&c, world](RankEnv& env) {
    auto comm = make_comm(env);
    const size_t bytes = (world + 1) * c.count * sizeof(float);
    auto* a = static_cast<float*>(comm->alloc(bytes));
    auto* b = static_cast<float*>(comm->alloc(bytes));
    float* mine = comm->rank() == 0 ? a : b;
    std::vector<float> host(bytes / sizeof(float));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>((i % 251) + comm->rank());
    ASSERT_EQ(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ErrorCode got = ErrorCode::kInternal;
    std::string what = "no error";
    try {
      issue(*comm, c, mine, s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      comm->check();
    } catch (const Error& e) {
      got = e.code();
      what = e.what();
    }
    EXPECT_EQ(got, ErrorCode::kMismatch) << c.name << " on rank " << comm->rank() << ": " << what;
    // No rank leaves before every rank has its error: a peer still classifying would see the departure and
    // report kPeerDead instead (seen on the copy-engine case).
    testing::store_barrier(*env.store, "heap/done", world);
    cudaStreamDestroy(s);
  });
}

// The same buffer on every rank: the zero-copy path runs and is exact (so the cases above do reach it).
TEST_P(GpuHeapBuffers, TheSameHeapBufferOnEveryRankIsExact) {
  const HeapCase c = GetParam();
  const int world = testing::gpu_test_world();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  testing::expect_success(world, [&c, world](RankEnv& env) {
    auto comm = make_comm(env);
    const int me = comm->rank();
    const size_t elems = (world + 1) * c.count;
    auto* buf = static_cast<float*>(comm->alloc(elems * sizeof(float)));
    std::vector<float> host(elems);
    auto value = [](int r, size_t i) { return static_cast<float>((i % 251) + 1000 * r); };
    for (size_t i = 0; i < elems; ++i) host[i] = value(me, i);
    ASSERT_EQ(cudaMemcpy(buf, host.data(), elems * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    issue(*comm, c, buf, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    comm->check();
    ASSERT_EQ(cudaMemcpy(host.data(), buf, elems * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    size_t wrong = 0, first = elems;
    auto expect = [&](size_t i, float want) {
      if (host[i] != want && wrong++ == 0) first = i;
    };
    auto sum = [&](size_t i) {
      float t = 0;
      for (int r = 0; r < world; ++r) t += value(r, i);
      return t;
    };
    switch (c.op) {
      case Op::kAllReducePull:
      case Op::kAllReducePush:
      case Op::kGroup:
        for (size_t i = 0; i < c.count; ++i) expect(i, sum(i));
        break;
      case Op::kAllGather:
      case Op::kCopyEngineGather:
        for (int r = 0; r < world; ++r) {
          for (size_t i = 0; i < c.count; ++i) expect(r * c.count + i, value(r, r * c.count + i));
        }
        break;
      case Op::kReduceScatter:
        for (size_t i = 0; i < c.count / 2; ++i) expect(world * c.count + i, sum(me * (c.count / 2) + i));
        break;
      case Op::kBroadcast:
        for (size_t i = 0; i < c.count; ++i) expect(i, value(0, i));
        break;
    }
    EXPECT_EQ(wrong, 0u) << c.name << ": first wrong element " << first;
    cudaStreamDestroy(s);
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuHeapBuffers, ::testing::ValuesIn(kHeapCases),
                         [](const ::testing::TestParamInfo<HeapCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace symcomm::gputest
