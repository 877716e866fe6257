// Table-driven tests of the pure selection function select_algorithm() (src/algos/select.cc).
//
// Each row is one (capabilities, request, tuning) triple and the exact outcome: the algorithm, or the error
// code thrown. A property test then feeds random requests and checks invariants that hold for every input.

#include "algos/select.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "symcomm/error.h"

namespace symcomm::detail {
namespace {

constexpr size_t kHostOneShotMax = Tuning{}.host_one_shot_max_bytes;
constexpr size_t kCudaOneShotMax = Tuning{}.cuda_one_shot_max_bytes;
constexpr size_t kHuge = size_t{1} << 40;

// An algorithm value outside the enum (casting an integer does not make it valid).
constexpr Algorithm kBogusAlgorithm = static_cast<Algorithm>(6);
constexpr Algorithm kBogusAlgorithm2 = static_cast<Algorithm>(200);

using Outcome = std::variant<Algorithm, ErrorCode>;

std::string describe(const Outcome& o) {
  if (const Algorithm* a = std::get_if<Algorithm>(&o)) return std::string(to_string(*a));
  return "error: " + std::string(to_string(std::get<ErrorCode>(o)));
}

Outcome run_select(const SelectRequest& request, const Capabilities& caps, const Tuning& tuning) {
  try {
    return select_algorithm(request, caps, tuning);
  } catch (const Error& e) {
    return e.code();
  }
}

Capabilities host(int world_size) { return Capabilities{.backend = BackendKind::kHost, .world_size = world_size}; }

struct CudaCaps {
  int world_size = 2;
  bool full_nvlink = true;
  bool nccl_available = true;
  bool copy_engine = false;
};

Capabilities cuda(CudaCaps c) {
  return Capabilities{.backend = BackendKind::kCuda,
                      .world_size = c.world_size,
                      .full_nvlink = c.full_nvlink,
                      .nccl_available = c.nccl_available,
                      .copy_engine = c.copy_engine};
}

SelectRequest all_reduce(size_t bytes, Algorithm forced = Algorithm::kAuto) {
  return SelectRequest{.kind = Collective::kAllReduce, .bytes = bytes, .forced = forced};
}

SelectRequest coll(Collective kind, size_t bytes, Algorithm forced = Algorithm::kAuto,
                   Contention contention = Contention::kAuto) {
  return SelectRequest{.kind = kind, .bytes = bytes, .forced = forced, .contention = contention};
}

struct Row {
  const char* name;
  Capabilities caps;
  SelectRequest request;
  Tuning tuning;
  Outcome expected;
};

void check_rows(const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    EXPECT_EQ(describe(run_select(row.request, row.caps, row.tuning)), describe(row.expected)) << row.name;
  }
}

constexpr Collective kNonAllReduce[] = {Collective::kAllGather, Collective::kReduceScatter, Collective::kBroadcast,
                                        Collective::kAllToAll};

TEST(Select, HostTable) {
  using enum Algorithm;
  const Tuning t{};
  check_rows({
      // All-reduce thresholds: one-shot up to and including host_one_shot_max_bytes.
      {"host ar 0 bytes", host(4), all_reduce(0), t, kOneShot},
      {"host ar 1 byte", host(4), all_reduce(1), t, kOneShot},
      {"host ar == one-shot max", host(4), all_reduce(kHostOneShotMax), t, kOneShot},
      {"host ar one-shot max + 1", host(4), all_reduce(kHostOneShotMax + 1), t, kTwoShot},
      {"host ar huge", host(4), all_reduce(kHuge), t, kTwoShot},
      {"host ar world 2 boundary", host(2), all_reduce(kHostOneShotMax), t, kOneShot},
      {"host ar world 64 boundary+1", host(64), all_reduce(kHostOneShotMax + 1), t, kTwoShot},
      // Tuning overrides move the boundary.
      {"host ar tuned == 1000", host(4), all_reduce(1000), Tuning{.host_one_shot_max_bytes = 1000}, kOneShot},
      {"host ar tuned 1001", host(4), all_reduce(1001), Tuning{.host_one_shot_max_bytes = 1000}, kTwoShot},
      {"host ar tuned 0: 0 bytes", host(4), all_reduce(0), Tuning{.host_one_shot_max_bytes = 0}, kOneShot},
      {"host ar tuned 0: 1 byte", host(4), all_reduce(1), Tuning{.host_one_shot_max_bytes = 0}, kTwoShot},
      {"host ar tuned max", host(4), all_reduce(SIZE_MAX), Tuning{.host_one_shot_max_bytes = SIZE_MAX}, kOneShot},
      // CUDA thresholds do not affect the host.
      {"host ar ignores cuda tuning", host(4), all_reduce(100),
       Tuning{.cuda_one_shot_max_bytes = 0, .cuda_two_shot_max_bytes = 0, .cuda_nccl_min_bytes = 0}, kOneShot},
      // World size 1: a local copy, whatever the size.
      {"host world 1 ar small", host(1), all_reduce(0), t, kDirect},
      {"host world 1 ar huge", host(1), all_reduce(kHuge), t, kDirect},
      {"host world 1 all_gather", host(1), coll(Collective::kAllGather, 10), t, kDirect},
      {"host world 1 ar forced direct", host(1), all_reduce(10, kDirect), t, kDirect},
      {"host world 1 ar forced one_shot", host(1), all_reduce(10, kOneShot), t, kOneShot},
      {"host world 1 ar forced two_shot", host(1), all_reduce(10, kTwoShot), t, kTwoShot},
      {"host world 1 forced nccl", host(1), all_reduce(10, kNccl), t, ErrorCode::kInvalidArgument},
      // Barrier.
      {"host barrier", host(4), coll(Collective::kBarrier, 0), t, kDirect},
      {"host barrier forced direct", host(4), coll(Collective::kBarrier, 0, kDirect), t, kDirect},
      {"host barrier forced one_shot", host(4), coll(Collective::kBarrier, 0, kOneShot), t,
       ErrorCode::kInvalidArgument},
      {"host barrier forced nccl", host(4), coll(Collective::kBarrier, 0, kNccl), t, ErrorCode::kInvalidArgument},
      // Forced all-reduce algorithms override the threshold in both directions.
      {"host ar forced two_shot small", host(4), all_reduce(8, kTwoShot), t, kTwoShot},
      {"host ar forced one_shot huge", host(4), all_reduce(kHuge, kOneShot), t, kOneShot},
      {"host ar forced direct", host(4), all_reduce(8, kDirect), t, ErrorCode::kInvalidArgument},
      // Forced algorithms that need CUDA.
      {"host ar forced nccl", host(4), all_reduce(8, kNccl), t, ErrorCode::kInvalidArgument},
      {"host ar forced copy_engine", host(4), all_reduce(8, kCopyEngine), t, ErrorCode::kInvalidArgument},
      {"host all_gather forced copy_engine", host(4), coll(Collective::kAllGather, 8, kCopyEngine), t,
       ErrorCode::kInvalidArgument},
      {"host all_gather forced nccl", host(4), coll(Collective::kAllGather, 8, kNccl), t, ErrorCode::kInvalidArgument},
      // One-shot/two-shot are all-reduce algorithms only.
      {"host all_gather forced one_shot", host(4), coll(Collective::kAllGather, 8, kOneShot), t,
       ErrorCode::kInvalidArgument},
      {"host reduce_scatter forced two_shot", host(4), coll(Collective::kReduceScatter, 8, kTwoShot), t,
       ErrorCode::kInvalidArgument},
      {"host broadcast forced one_shot", host(4), coll(Collective::kBroadcast, 8, kOneShot), t,
       ErrorCode::kInvalidArgument},
      {"host all_to_all forced direct", host(4), coll(Collective::kAllToAll, 8, kDirect), t, kDirect},
      // Contention has no effect on the host (no copy engine).
      {"host all_gather low contention", host(4), coll(Collective::kAllGather, 8, kAuto, Contention::kLow), t, kDirect},
      // Invalid enum values are rejected before anything else, even where nothing would be chosen.
      {"host ar invalid algorithm 6", host(4), all_reduce(8, kBogusAlgorithm), t, ErrorCode::kInvalidArgument},
      {"host ar invalid algorithm 200", host(4), all_reduce(8, kBogusAlgorithm2), t, ErrorCode::kInvalidArgument},
      {"host world 1 invalid algorithm", host(1), all_reduce(8, kBogusAlgorithm), t, ErrorCode::kInvalidArgument},
      {"host barrier invalid algorithm", host(4), coll(Collective::kBarrier, 0, kBogusAlgorithm2), t,
       ErrorCode::kInvalidArgument},
  });
}

TEST(Select, HostNonAllReduceCollectivesAreDirect) {
  for (Collective c : kNonAllReduce) {
    for (size_t bytes : {size_t{0}, size_t{1}, kHostOneShotMax, kHostOneShotMax + 1, kHuge}) {
      SCOPED_TRACE(fmt::format("{} {} bytes", to_string(c), bytes));
      EXPECT_EQ(describe(run_select(coll(c, bytes), host(8), Tuning{})), "direct");
      EXPECT_EQ(describe(run_select(coll(c, bytes, Algorithm::kDirect), host(8), Tuning{})), "direct");
    }
  }
}

TEST(Select, CudaTable) {
  using enum Algorithm;
  // These rows leave the small non-reducing collectives to symcomm (CudaSmallDirectCollectivesGoToNcclWhenTuned
  // covers that threshold).
  const Tuning t{.cuda_direct_nccl_max_bytes = 0};
  // one-shot up to 1 KiB, two-shot up to 4 KiB, NCCL beyond.
  const Tuning small{.cuda_one_shot_max_bytes = 1024, .cuda_two_shot_max_bytes = 4096, .cuda_direct_nccl_max_bytes = 0};
  // one-shot up to 1 KiB, NCCL from 8 KiB on for every collective.
  const Tuning nccl8k{.cuda_one_shot_max_bytes = 1024, .cuda_nccl_min_bytes = 8192, .cuda_direct_nccl_max_bytes = 0};
  const Capabilities nvl = cuda({});                                 // NVLink + NCCL, no copy engine
  const Capabilities nvl_no_nccl = cuda({.nccl_available = false});  // NVLink only
  const Capabilities pcie = cuda({.full_nvlink = false});            // NCCL only
  const Capabilities nothing = cuda({.full_nvlink = false, .nccl_available = false});
  const Capabilities ce = cuda({.copy_engine = true});  // NVLink + NCCL + copy engine
  const Capabilities ce_no_nccl = cuda({.nccl_available = false, .copy_engine = true});
  check_rows({
      // All-reduce default thresholds.
      {"cuda ar 0 bytes", nvl, all_reduce(0), t, kOneShot},
      {"cuda ar == one-shot max", nvl, all_reduce(kCudaOneShotMax), t, kOneShot},
      {"cuda ar one-shot max + 1", nvl, all_reduce(kCudaOneShotMax + 1), t, kTwoShot},
      {"cuda ar huge (defaults never pick nccl)", nvl, all_reduce(kHuge), t, kTwoShot},
      {"cuda ar host threshold is ignored", nvl, all_reduce(kHostOneShotMax + 1), t, kOneShot},
      // Tuned one-shot / two-shot / NCCL boundaries.
      {"cuda ar tuned == one-shot max", nvl, all_reduce(1024), small, kOneShot},
      {"cuda ar tuned one-shot max + 1", nvl, all_reduce(1025), small, kTwoShot},
      {"cuda ar tuned == two-shot max", nvl, all_reduce(4096), small, kTwoShot},
      {"cuda ar tuned two-shot max + 1", nvl, all_reduce(4097), small, kNccl},
      {"cuda ar tuned two-shot max + 1, no nccl", nvl_no_nccl, all_reduce(4097), small, kTwoShot},
      {"cuda ar nccl min - 1", nvl, all_reduce(8191), nccl8k, kTwoShot},
      {"cuda ar one-shot below nccl min", nvl, all_reduce(1024), nccl8k, kOneShot},
      {"cuda ar == nccl min", nvl, all_reduce(8192), nccl8k, kNccl},
      {"cuda ar nccl min 0", nvl, all_reduce(0), Tuning{.cuda_nccl_min_bytes = 0}, kNccl},
      {"cuda all_gather nccl min - 1", nvl, coll(Collective::kAllGather, 8191), nccl8k, kDirect},
      {"cuda all_gather == nccl min", nvl, coll(Collective::kAllGather, 8192), nccl8k, kNccl},
      {"cuda all_to_all == nccl min", nvl, coll(Collective::kAllToAll, 8192), nccl8k, kNccl},
      {"cuda barrier ignores nccl min", nvl, coll(Collective::kBarrier, 0),
       Tuning{.cuda_nccl_min_bytes = 0, .cuda_direct_nccl_max_bytes = 0}, kDirect},
      // Non-all-reduce collectives.
      {"cuda all_gather", nvl, coll(Collective::kAllGather, kHuge), t, kDirect},
      {"cuda reduce_scatter", nvl, coll(Collective::kReduceScatter, 100), t, kDirect},
      {"cuda broadcast", nvl, coll(Collective::kBroadcast, 100), t, kDirect},
      {"cuda all_to_all", nvl, coll(Collective::kAllToAll, 100), t, kDirect},
      {"cuda barrier", nvl, coll(Collective::kBarrier, 0), t, kDirect},
      // No NVLink: NCCL if it exists, otherwise nothing can run the collective.
      {"cuda no nvlink ar small", pcie, all_reduce(8), t, kNccl},
      {"cuda no nvlink ar huge", pcie, all_reduce(kHuge), t, kNccl},
      {"cuda no nvlink all_gather", pcie, coll(Collective::kAllGather, 8), t, kNccl},
      {"cuda no nvlink broadcast low contention", cuda({.full_nvlink = false, .copy_engine = true}),
       coll(Collective::kBroadcast, 8, kAuto, Contention::kLow), t, kNccl},
      {"cuda no nvlink no nccl ar", nothing, all_reduce(8), t, ErrorCode::kUnsupported},
      {"cuda no nvlink no nccl reduce_scatter", nothing, coll(Collective::kReduceScatter, 8), t,
       ErrorCode::kUnsupported},
      // World size 1: a local copy even without NVLink or NCCL.
      {"cuda world 1 ar", cuda({.world_size = 1, .full_nvlink = false, .nccl_available = false}), all_reduce(kHuge), t,
       kDirect},
      {"cuda world 1 all_gather", cuda({.world_size = 1}), coll(Collective::kAllGather, 8), nccl8k, kDirect},
      // Contention: low picks the copy engine where it exists and the collective has a copy-engine path.
      {"cuda all_gather low ce", ce, coll(Collective::kAllGather, 8, kAuto, Contention::kLow), t, kCopyEngine},
      {"cuda reduce_scatter low ce", ce, coll(Collective::kReduceScatter, 8, kAuto, Contention::kLow), t, kCopyEngine},
      {"cuda all_to_all low ce", ce, coll(Collective::kAllToAll, 8, kAuto, Contention::kLow), t, kCopyEngine},
      {"cuda broadcast low ce", ce, coll(Collective::kBroadcast, 8, kAuto, Contention::kLow), t, kCopyEngine},
      {"cuda broadcast low ce no nccl", ce_no_nccl, coll(Collective::kBroadcast, kHuge, kAuto, Contention::kLow), t,
       kCopyEngine},
      {"cuda ar low ce", ce, SelectRequest{.bytes = 8, .contention = Contention::kLow}, t, kOneShot},
      {"cuda barrier low ce", ce, coll(Collective::kBarrier, 0, kAuto, Contention::kLow), t, kDirect},
      {"cuda all_gather low, no ce", nvl, coll(Collective::kAllGather, 8, kAuto, Contention::kLow), t, kDirect},
      {"cuda all_gather throughput ce", ce, coll(Collective::kAllGather, 8, kAuto, Contention::kThroughput), t,
       kDirect},
      {"cuda all_gather auto contention ce", ce, coll(Collective::kAllGather, 8), t, kDirect},
      // Low contention wins over the NCCL size preference: NCCL's kernels would hold SMs beside the compute.
      {"cuda all_gather low ce >= nccl min", ce, coll(Collective::kAllGather, 8192, kAuto, Contention::kLow), nccl8k,
       kCopyEngine},
      {"cuda all_gather throughput >= nccl min", ce, coll(Collective::kAllGather, 8192, kAuto, Contention::kThroughput),
       nccl8k, kNccl},
      {"cuda all_reduce low has no copy engine", ce, coll(Collective::kAllReduce, 64, kAuto, Contention::kLow), t,
       kOneShot},
      // Forced algorithms.
      {"cuda forced one_shot huge", nvl, all_reduce(kHuge, kOneShot), t, kOneShot},
      {"cuda forced two_shot small", nvl, all_reduce(8, kTwoShot), t, kTwoShot},
      {"cuda forced one_shot no nvlink", pcie, all_reduce(8, kOneShot), t, ErrorCode::kUnsupported},
      {"cuda forced two_shot no nvlink", pcie, all_reduce(8, kTwoShot), t, ErrorCode::kUnsupported},
      {"cuda forced one_shot all_gather", nvl, coll(Collective::kAllGather, 8, kOneShot), t,
       ErrorCode::kInvalidArgument},
      {"cuda forced one_shot all_gather no nvlink", pcie, coll(Collective::kAllGather, 8, kOneShot), t,
       ErrorCode::kInvalidArgument},
      {"cuda forced two_shot reduce_scatter", nvl, coll(Collective::kReduceScatter, 8, kTwoShot), t,
       ErrorCode::kInvalidArgument},
      {"cuda forced direct all_gather", nvl, coll(Collective::kAllGather, 8, kDirect), t, kDirect},
      {"cuda forced direct all_gather no nvlink", pcie, coll(Collective::kAllGather, 8, kDirect), t,
       ErrorCode::kUnsupported},
      {"cuda forced direct ar", nvl, all_reduce(8, kDirect), t, ErrorCode::kInvalidArgument},
      {"cuda forced copy_engine all_gather", ce, coll(Collective::kAllGather, 8, kCopyEngine), t, kCopyEngine},
      {"cuda forced copy_engine all_to_all no ce", nvl, coll(Collective::kAllToAll, 8, kCopyEngine), t,
       ErrorCode::kUnsupported},
      {"cuda forced copy_engine ar", ce, all_reduce(8, kCopyEngine), t, ErrorCode::kInvalidArgument},
      {"cuda forced copy_engine barrier", ce, coll(Collective::kBarrier, 0, kCopyEngine), t,
       ErrorCode::kInvalidArgument},
      {"cuda forced nccl ar", nvl, all_reduce(8, kNccl), t, kNccl},
      {"cuda forced nccl all_gather no nvlink", pcie, coll(Collective::kAllGather, 8, kNccl), t, kNccl},
      {"cuda forced nccl without nccl", nvl_no_nccl, all_reduce(8, kNccl), t, ErrorCode::kUnsupported},
      {"cuda forced nccl world 1", cuda({.world_size = 1}), all_reduce(8, kNccl), t, kNccl},
      {"cuda forced invalid algorithm", nvl, all_reduce(8, kBogusAlgorithm), t, ErrorCode::kInvalidArgument},
      {"cuda forced invalid algorithm world 1", cuda({.world_size = 1}), all_reduce(8, kBogusAlgorithm2), t,
       ErrorCode::kInvalidArgument},
  });
}

// Tuning::cuda_direct_nccl_max_bytes: by default (0, measured) symcomm's kernels run the small gather-style
// collectives and reduce-scatter; set, those up to it go to NCCL when it exists, unless low contention is asked
// for or they are empty; all-reduce and barrier never do.
TEST(Select, CudaSmallDirectCollectivesGoToNcclWhenTuned) {
  using enum Algorithm;
  const Tuning t{.cuda_direct_nccl_max_bytes = 512 << 10};
  const size_t max = t.cuda_direct_nccl_max_bytes;
  const Capabilities nvl = cuda({});
  const Capabilities nvl_no_nccl = cuda({.nccl_available = false});
  const Capabilities ce = cuda({.copy_engine = true});
  check_rows({
      {"cuda all_gather small, default tuning", nvl, coll(Collective::kAllGather, 8), Tuning{}, kDirect},
      {"cuda reduce_scatter 4 KB, default tuning", nvl, coll(Collective::kReduceScatter, 4096), Tuning{}, kDirect},
      {"cuda all_gather empty", nvl, coll(Collective::kAllGather, 0), t, kDirect},
      {"cuda all_gather == direct nccl max", nvl, coll(Collective::kAllGather, max), t, kNccl},
      {"cuda all_gather direct nccl max + 1", nvl, coll(Collective::kAllGather, max + 1), t, kDirect},
      {"cuda reduce_scatter small", nvl, coll(Collective::kReduceScatter, 8), t, kNccl},
      {"cuda broadcast small", nvl, coll(Collective::kBroadcast, 8), t, kNccl},
      {"cuda all_to_all small", nvl, coll(Collective::kAllToAll, 8), t, kNccl},
      {"cuda all_gather small no nccl", nvl_no_nccl, coll(Collective::kAllGather, 8), t, kDirect},
      {"cuda all_gather small low ce", ce, coll(Collective::kAllGather, 8, kAuto, Contention::kLow), t, kCopyEngine},
      {"cuda all_gather small low no ce", nvl, coll(Collective::kAllGather, 8, kAuto, Contention::kLow), t, kDirect},
      {"cuda all_reduce small stays", nvl, all_reduce(8), t, kOneShot},
      {"cuda barrier stays", nvl, coll(Collective::kBarrier, 0), t, kDirect},
  });
}

// NOTE [measured CUDA thresholds]: the values compiled in for a world size (measured_cuda_tuning) replace the
// fields left at their 2-rank default: the 4-rank measurements at 3 and 4 ranks, their extrapolation from 5 on;
// fields set by the user are kept.
TEST(Select, CudaThresholdsFollowTheWorldSize) {
  using enum Algorithm;
  const Capabilities two = cuda({.world_size = 2}), four = cuda({.world_size = 4}), eight = cuda({.world_size = 8});
  const Tuning t2 = measured_cuda_tuning(Tuning{}, 2), t3 = measured_cuda_tuning(Tuning{}, 3),
               t4 = measured_cuda_tuning(Tuning{}, 4), t8 = measured_cuda_tuning(Tuning{}, 8);
  const Tuning user = measured_cuda_tuning(Tuning{.cuda_one_shot_max_bytes = 8 << 10}, 4);
  check_rows({
      {"2 ranks 64 KiB one-shot", two, all_reduce(64 << 10), t2, kOneShot},
      {"4 ranks 362 KiB one-shot", four, all_reduce(362 << 10), t4, kOneShot},
      {"4 ranks 362 KiB + 1 two-shot", four, all_reduce((362 << 10) + 1), t4, kTwoShot},
      {"3 ranks 362 KiB one-shot", cuda({.world_size = 3}), all_reduce(362 << 10), t3, kOneShot},
      {"8 ranks 128 KiB one-shot", eight, all_reduce(128 << 10), t8, kOneShot},
      {"8 ranks 128 KiB + 1 two-shot", eight, all_reduce((128 << 10) + 1), t8, kTwoShot},
      {"2 ranks 256 MiB two-shot", two, all_reduce(size_t{256} << 20), t2, kTwoShot},
      {"4 ranks 256 MiB two-shot", four, all_reduce(size_t{256} << 20), t4, kTwoShot},
      {"3 ranks 1 GiB two-shot", cuda({.world_size = 3}), all_reduce(size_t{1} << 30), t3, kTwoShot},
      {"4 ranks all-gather 1 GiB direct", four, coll(Collective::kAllGather, size_t{1} << 30), t4, kDirect},
      {"8 ranks 64 MiB - 1 two-shot", eight, all_reduce((size_t{64} << 20) - 1), t8, kTwoShot},
      {"8 ranks 64 MiB nccl", eight, all_reduce(size_t{64} << 20), t8, kNccl},
      {"8 ranks reduce-scatter 64 MiB - 1 direct", eight, coll(Collective::kReduceScatter, (size_t{64} << 20) - 1), t8,
       kDirect},
      {"8 ranks reduce-scatter 64 MiB nccl", eight, coll(Collective::kReduceScatter, size_t{64} << 20), t8, kNccl},
      {"4 ranks user one-shot max kept", four, all_reduce(16 << 10), user, kTwoShot},
  });
}

// NOTE [tuning precedence]: a communicator resolves its Tuning once, at creation; select() uses the Tuning it
// is given as it is at every world size, so a value equal to a 2-rank default (set explicitly, or by a tuning
// file) is not replaced by the compiled-in value for more ranks.
TEST(Select, TuningIsUsedAsGivenAtEveryWorldSize) {
  using enum Algorithm;
  const Tuning t{};
  check_rows({
      {"4 ranks 64 KiB, 2-rank default one-shot max", cuda({.world_size = 4}), all_reduce(64 << 10), t, kOneShot},
      {"8 ranks 4 MiB, 2-rank default one-shot max", cuda({.world_size = 8}), all_reduce(4 << 20), t, kOneShot},
      {"4 ranks 256 MiB, NCCL never", cuda({.world_size = 4}), all_reduce(size_t{256} << 20), t, kTwoShot},
  });
}

// The LL128 two-shot serves no size at 2 ranks (NOTE [measured CUDA thresholds]): off there, on from 3 ranks, a
// threshold set by the user kept.
TEST(Select, LL128TwoShotDefaultIsForThreeRanksOrMore) {
  const Tuning t{};
  EXPECT_EQ(t.cuda_ll128_two_shot_max_bytes, 0u);
  EXPECT_EQ(measured_cuda_tuning(t, 2).cuda_ll128_two_shot_max_bytes, 0u);
  EXPECT_EQ(measured_cuda_tuning(t, 3).cuda_ll128_two_shot_max_bytes, size_t{2896} << 10);
  EXPECT_EQ(measured_cuda_tuning(t, 8).cuda_ll128_two_shot_max_bytes, size_t{2896} << 10);
  // Above the one-shot's range at 4 ranks: the two-shot algorithm takes the sizes between.
  EXPECT_GT(measured_cuda_tuning(t, 4).cuda_ll128_two_shot_max_bytes,
            measured_cuda_tuning(t, 4).cuda_one_shot_max_bytes);
  Tuning user{};
  user.cuda_ll128_two_shot_max_bytes = 1 << 20;
  EXPECT_EQ(measured_cuda_tuning(user, 4).cuda_ll128_two_shot_max_bytes, size_t{1} << 20);
}

// The push-to-output two-shot takes over where the LL128 two-shot ends from 3 ranks on (NOTE [measured CUDA
// thresholds]); at 2 ranks its 2-rank default stays; a threshold set by the user is kept.
TEST(Select, PushToOutputFollowsTheLL128TwoShotFromThreeRanks) {
  const Tuning t{};
  EXPECT_EQ(measured_cuda_tuning(t, 2).cuda_two_shot_push_min_bytes, t.cuda_two_shot_push_min_bytes);
  EXPECT_NE(t.cuda_two_shot_push_min_bytes, SIZE_MAX);
  for (int n : {3, 4, 8}) {
    const Tuning m = measured_cuda_tuning(t, n);
    EXPECT_EQ(m.cuda_two_shot_push_min_bytes, m.cuda_ll128_two_shot_max_bytes) << n;
  }
  Tuning user{};
  user.cuda_two_shot_push_min_bytes = 1 << 20;
  EXPECT_EQ(measured_cuda_tuning(user, 4).cuda_two_shot_push_min_bytes, size_t{1} << 20);
}

// NOTE [cuda_nccl_min_bytes without NCCL]
// cuda_nccl_min_bytes says when NCCL is preferred; it cannot make a collective impossible that the NVLink
// kernels can run, just as cuda_two_shot_max_bytes falls back to two-shot when NCCL is absent.
TEST(Select, CudaNcclThresholdWithoutNcclFallsBackToKernels) {
  using enum Algorithm;
  const Tuning nccl8k{.cuda_nccl_min_bytes = 8192};
  const Capabilities nvl_no_nccl = cuda({.nccl_available = false});
  check_rows({
      // Without NCCL the kernels are chosen by size as usual: 8 KiB is one-shot.
      {"cuda ar >= nccl min, no nccl", nvl_no_nccl, all_reduce(8192), nccl8k, kOneShot},
      {"cuda all_gather >= nccl min, no nccl", nvl_no_nccl, coll(Collective::kAllGather, 8192), nccl8k, kDirect},
  });
}

// Random requests: the outcome is deterministic, never kAuto, and consistent with the request.
// A topology that leaves pairs unlinked (Capabilities::restricted_links) on GPUs that reach each other: all-reduce,
// all-gather and reduce-scatter keep the asked-for symcomm algorithm (checked as usual; the path runs the schedule),
// go to NCCL where it is asked for or no schedule serves them, and are refused where NCCL is missing then; the
// size thresholds do not send them to NCCL; the other collectives select as without a topology.
TEST(Select, RestrictedLinksKeepTheirSchedules) {
  using enum Algorithm;
  const auto bit = [](Collective c) { return 1u << static_cast<int>(c); };
  const uint32_t all = bit(Collective::kAllReduce) | bit(Collective::kAllGather) | bit(Collective::kReduceScatter);
  const auto restricted = [](Capabilities c, uint32_t schedules) {
    c.restricted_links = true;
    c.schedules = schedules;
    return c;
  };
  const Capabilities sched = restricted(cuda({.world_size = 8, .copy_engine = true}), all);
  const Capabilities sched_no_nccl = restricted(cuda({.world_size = 8, .nccl_available = false}), all);
  const Capabilities gathers_only =
      restricted(cuda({.world_size = 4, .nccl_available = false}), all & ~bit(Collective::kAllReduce));
  const Capabilities none = restricted(cuda({.world_size = 4}), 0);
  const Capabilities none_no_nccl = restricted(cuda({.world_size = 4, .nccl_available = false}), 0);
  const Capabilities unreachable = restricted(cuda({.world_size = 8, .full_nvlink = false}), all);
  const Tuning nccl8k{.cuda_nccl_min_bytes = 8192, .cuda_direct_nccl_max_bytes = size_t{1} << 20};
  check_rows({
      {"ar auto", sched, all_reduce(4096), Tuning{}, kTwoShot},
      {"ar huge, nccl threshold", sched, all_reduce(kHuge), nccl8k, kTwoShot},
      {"ar forced one-shot", sched, all_reduce(kHuge, kOneShot), Tuning{}, kOneShot},
      {"ar forced direct", sched, all_reduce(64, kDirect), Tuning{}, ErrorCode::kInvalidArgument},
      {"ar forced copy engine", sched, all_reduce(64, kCopyEngine), Tuning{}, ErrorCode::kInvalidArgument},
      {"ar forced nccl", sched, all_reduce(64, kNccl), Tuning{}, kNccl},
      {"ar forced nccl, none", sched_no_nccl, all_reduce(64, kNccl), Tuning{}, ErrorCode::kUnsupported},
      {"ag auto below the nccl bound", sched, coll(Collective::kAllGather, 4096), nccl8k, kDirect},
      {"ag low contention", sched, coll(Collective::kAllGather, 4096, kAuto, Contention::kLow), Tuning{}, kDirect},
      {"ag forced copy engine", sched, coll(Collective::kAllGather, 4096, kCopyEngine), Tuning{}, kCopyEngine},
      {"rs forced two-shot", sched, coll(Collective::kReduceScatter, 64, kTwoShot), Tuning{},
       ErrorCode::kInvalidArgument},
      {"rs huge", sched_no_nccl, coll(Collective::kReduceScatter, kHuge), Tuning{}, kDirect},
      {"ar without a schedule, no nccl", gathers_only, all_reduce(64), Tuning{}, ErrorCode::kUnsupported},
      {"ag of the same", gathers_only, coll(Collective::kAllGather, 64), Tuning{}, kDirect},
      {"ar without any schedule", none, all_reduce(64), Tuning{}, kNccl},
      {"ar without any schedule, forced two-shot", none, all_reduce(64, kTwoShot), Tuning{}, ErrorCode::kUnsupported},
      {"rs without any schedule", none, coll(Collective::kReduceScatter, 64), Tuning{}, kNccl},
      {"rs without any schedule, no nccl", none_no_nccl, coll(Collective::kReduceScatter, 64), Tuning{},
       ErrorCode::kUnsupported},
      {"broadcast keeps its algorithm", sched, coll(Collective::kBroadcast, 4096), Tuning{}, kDirect},
      {"broadcast low contention", sched, coll(Collective::kBroadcast, 4096, kAuto, Contention::kLow), Tuning{},
       kCopyEngine},
      {"all-to-all over the nccl bound", sched, coll(Collective::kAllToAll, 1 << 20), nccl8k, kNccl},
      {"barrier", none_no_nccl, coll(Collective::kBarrier, 0), Tuning{}, kDirect},
      {"gpus that do not reach each other", unreachable, all_reduce(64), Tuning{}, kNccl},
  });
}

TEST(Select, PropertiesOfRandomRequests) {
  std::mt19937_64 rng(12345);
  auto pick = [&](uint64_t n) { return static_cast<uint64_t>(rng() % n); };
  const size_t interesting[] = {
      0,     1,       255, 1024, 4096, kHostOneShotMax, kHostOneShotMax + 1, kCudaOneShotMax, kCudaOneShotMax + 1,
      kHuge, SIZE_MAX};
  auto random_size = [&]() -> size_t {
    if (pick(2) == 0) return interesting[pick(std::size(interesting))];
    return static_cast<size_t>(rng() >> pick(64));
  };
  int returned = 0, threw = 0;
  for (int i = 0; i < 50000; ++i) {
    Capabilities caps{.backend = pick(2) ? BackendKind::kCuda : BackendKind::kHost,
                      .world_size = static_cast<int>(1 + pick(kMaxRanks)),
                      .full_nvlink = pick(2) == 1,
                      .nccl_available = pick(2) == 1,
                      .copy_engine = pick(2) == 1,
                      .restricted_links = pick(4) == 0,
                      .schedules = static_cast<uint32_t>(pick(64))};
    // Forced values include one past the last enumerator and a far-out value.
    const Algorithm forced_choices[] = {
        Algorithm::kAuto,   Algorithm::kAuto,       Algorithm::kAuto, Algorithm::kOneShot, Algorithm::kTwoShot,
        Algorithm::kDirect, Algorithm::kCopyEngine, Algorithm::kNccl, kBogusAlgorithm,     kBogusAlgorithm2};
    SelectRequest r{.kind = static_cast<Collective>(pick(kNumCollectives)),
                    .dtype = static_cast<DataType>(pick(kNumDataTypes)),
                    .op = static_cast<ReduceOp>(pick(kNumReduceOps)),
                    .bytes = random_size(),
                    .forced = forced_choices[pick(std::size(forced_choices))],
                    .contention = static_cast<Contention>(pick(3))};
    Tuning t{.host_one_shot_max_bytes = random_size(),
             .cuda_one_shot_max_bytes = random_size(),
             .cuda_two_shot_max_bytes = random_size(),
             .cuda_nccl_min_bytes = random_size()};
    std::string what =
        fmt::format("case {}: backend={} world={} nvlink={} nccl={} ce={} kind={} bytes={} forced={} contention={}", i,
                    to_string(caps.backend), caps.world_size, caps.full_nvlink, caps.nccl_available, caps.copy_engine,
                    to_string(r.kind), r.bytes, static_cast<int>(r.forced), to_string(r.contention));

    Outcome first = run_select(r, caps, t);
    Outcome second = run_select(r, caps, t);
    ASSERT_EQ(describe(first), describe(second)) << what;

    if (const ErrorCode* code = std::get_if<ErrorCode>(&first)) {
      ++threw;
      ASSERT_TRUE(*code == ErrorCode::kInvalidArgument || *code == ErrorCode::kUnsupported) << what;
      // Only a forced algorithm or a CUDA topology without any usable path may fail.
      ASSERT_TRUE(r.forced != Algorithm::kAuto || (caps.backend == BackendKind::kCuda && !caps.nccl_available)) << what;
      continue;
    }
    ++returned;
    Algorithm a = std::get<Algorithm>(first);
    ASSERT_NE(a, Algorithm::kAuto) << what;
    ASSERT_TRUE(is_valid(a)) << what;
    ASSERT_TRUE(is_valid(r.forced)) << what;  // invalid values always throw
    if (r.forced != Algorithm::kAuto) {
      ASSERT_EQ(a, r.forced) << what;
    }
    if (caps.backend == BackendKind::kHost) {
      ASSERT_TRUE(a != Algorithm::kNccl && a != Algorithm::kCopyEngine) << what;
    }
    if (r.forced == Algorithm::kAuto) {
      if (a == Algorithm::kOneShot || a == Algorithm::kTwoShot) {
        ASSERT_EQ(r.kind, Collective::kAllReduce) << what;
      }
      if (a == Algorithm::kNccl) {
        ASSERT_TRUE(caps.nccl_available) << what;
      }
      if (a == Algorithm::kCopyEngine) {
        ASSERT_TRUE(caps.copy_engine && r.contention == Contention::kLow) << what;
      }
      // Restricted links: a schedule serves these collectives unless none exists (then NCCL).
      const bool schedulable =
          r.kind == Collective::kAllReduce || r.kind == Collective::kAllGather || r.kind == Collective::kReduceScatter;
      if (caps.backend == BackendKind::kCuda && caps.restricted_links && caps.full_nvlink && schedulable &&
          caps.world_size > 1 && r.forced != Algorithm::kNccl) {
        ASSERT_EQ(a == Algorithm::kNccl, ((caps.schedules >> static_cast<int>(r.kind)) & 1u) == 0) << what;
      }
      // A barrier signals directly on the host and over NVLink; a CUDA barrier without NVLink uses NCCL.
      bool direct_barrier = r.kind == Collective::kBarrier && (caps.backend == BackendKind::kHost || caps.full_nvlink);
      if (caps.world_size == 1 || direct_barrier) {
        ASSERT_EQ(a, Algorithm::kDirect) << what;
      }
    }
  }
  // The generator reaches both outcomes often enough for the checks above to mean something.
  EXPECT_GT(returned, 10000);
  EXPECT_GT(threw, 5000);
}

}  // namespace
}  // namespace symcomm::detail
