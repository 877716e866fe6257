#pragma once
// The GPU collective matrix's machinery, shared by the GPU tests that sweep cases: a Case (collective, dtype, op,
// count, in place, misalignment, algorithm, root), a Runner that runs one on guarded, poisoned buffers and compares
// every output element with the value computed on the host, and sweep(), which runs a list of cases on both buffer
// kinds (cudaMalloc and the symmetric heap) on every rank and counts the kernel paths they took.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "harness/rank_harness.h"

namespace symcomm::gputest {

using testing::RankEnv;

struct Case {
  Collective kind;
  DataType dt;
  ReduceOp op = ReduceOp::kSum;
  size_t count;
  bool in_place;
  size_t offset;  ///< bytes past the 256-byte guard (0: 16-byte aligned)
  Algorithm algo = Algorithm::kAuto;
  int root = 0;
  std::string describe() const {
    return std::string(to_string(kind)) + " " + std::string(to_string(dt)) + " " + std::string(to_string(op)) +
           " count=" + std::to_string(count) + (in_place ? " in-place" : " out-of-place") +
           " offset=" + std::to_string(offset) + " algo=" + std::string(to_string(algo)) +
           " root=" + std::to_string(root);
  }
};

/// Elements of one rank's input and output for case c at world size n.
struct CaseElems {
  size_t in, out;
};
inline CaseElems case_elems(const Case& c, size_t n) {
  const bool a2a = c.kind == Collective::kAllToAll;
  return {.in = c.kind == Collective::kReduceScatter || a2a ? n * c.count : c.count,
          .out = c.kind == Collective::kAllGather || a2a ? n * c.count : c.count};
}

/// The bytes of one element, most significant first (little-endian memory), as hex digits.
inline std::string hex_bytes(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t k = n; k-- > 0;) {
    s += kDigits[p[k] >> 4];
    s += kDigits[p[k] & 15];
  }
  return s;
}

/// Issues case c on `comm` (a Communicator, or a communicator with the same collectives) with per-call options `o`.
template <class Comm, class Options>
void issue_case(Comm& comm, const Case& c, const void* in, void* out, const Options& o) {
  switch (c.kind) {
    case Collective::kAllReduce: comm.all_reduce(in, out, c.count, c.dt, c.op, o); break;
    case Collective::kAllGather: comm.all_gather(in, out, c.count, c.dt, o); break;
    case Collective::kReduceScatter: comm.reduce_scatter(in, out, c.count, c.dt, c.op, o); break;
    case Collective::kBroadcast: comm.broadcast(in, out, c.count, c.dt, c.root, o); break;
    case Collective::kAllToAll: comm.all_to_all(in, out, c.count, c.dt, o); break;
    case Collective::kBarrier: comm.barrier(o); break;
  }
}

/// "" where `got` holds the output of case c on rank `me` of `n` with inputs of `seed` (values computed on the host,
/// independently of the kernels), else the first element that differs.
inline std::string first_difference(const Case& c, const std::vector<uint8_t>& got, uint64_t seed, int n, int me) {
  const size_t es = dtype_size(c.dt), out_elems = case_elems(c, n).out;
  std::vector<uint8_t> w(es);
  for (size_t i = 0; i < out_elems; ++i) {
    switch (c.kind) {
      case Collective::kAllReduce: expected_reduce(c.dt, c.op, seed, n, i, w.data()); break;
      case Collective::kReduceScatter: expected_reduce(c.dt, c.op, seed, n, me * c.count + i, w.data()); break;
      case Collective::kAllGather:
        encode(c.dt, input_value(c.dt, c.op, seed, i / c.count, i % c.count), w.data());
        break;
      case Collective::kBroadcast: encode(c.dt, input_value(c.dt, c.op, seed, c.root, i), w.data()); break;
      case Collective::kAllToAll:
        encode(c.dt, input_value(c.dt, c.op, seed, i / c.count, me * c.count + i % c.count), w.data());
        break;
      case Collective::kBarrier: break;
    }
    if (std::memcmp(got.data() + i * es, w.data(), es) != 0) {
      return "element " + std::to_string(i) + " of " + std::to_string(out_elems) + " differs (got 0x" +
             hex_bytes(got.data() + i * es, es) + ", want 0x" + hex_bytes(w.data(), es) + ")";
    }
  }
  return "";
}

class Runner {
 public:
  Runner(Communicator& comm, BufKind kind, size_t capacity)
      : comm_(comm), kind_(kind), in_(comm, kind, capacity), out_(comm, kind, capacity) {
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  }
  ~Runner() { cudaStreamDestroy(stream_); }

  /// Runs one case; returns an empty string or what went wrong.
  std::string run(const Case& c, uint64_t seed) {
    const int n = comm_.world_size(), me = comm_.rank();
    const size_t es = dtype_size(c.dt);
    const CaseElems elems = case_elems(c, n);
    const size_t in_elems = elems.in, out_elems = elems.out;
    char* out = out_.prepare(c.offset, out_elems * es, kPoisonByte);
    const char* in = nullptr;
    std::vector<uint8_t> input =
        make_input(c.dt, c.op, seed, c.kind == Collective::kBroadcast ? c.root : me, 0, in_elems);
    if (c.in_place) {
      char* dst = out;
      if (c.kind == Collective::kAllGather) dst = out + me * c.count * es;
      if (c.kind == Collective::kReduceScatter) {
        // out = in + rank*count: the input spans the whole region, the output is this rank's block.
        char* base = out_.prepare(c.offset, in_elems * es, kPoisonByte);
        out = base + me * c.count * es;
        dst = base;
      }
      if (c.kind != Collective::kBroadcast || me == c.root) {
        cudaMemcpy(dst, input.data(), input.size(), cudaMemcpyHostToDevice);
      }
      in = dst;
    } else {
      char* p = in_.prepare(c.offset, in_elems * es, 0);
      cudaMemcpy(p, input.data(), input.size(), cudaMemcpyHostToDevice);
      in = p;
    }
    // cudaMemcpy from pageable memory may return before its DMA lands; the collective runs on another stream.
    cudaDeviceSynchronize();
    CollOptions o{.stream = stream_, .algorithm = c.algo};
    try {
      issue_case(comm_, c, in, out, o);
    } catch (const std::exception& e) {
      return std::string("threw: ") + e.what();
    }
    if (c.count > 0) path_ = comm_.last_path();
    if (cudaStreamSynchronize(stream_) != cudaSuccess)
      return std::string("stream: ") + cudaGetErrorString(cudaGetLastError());
    bool guards = false;
    const size_t out_bytes = out_elems * es;
    // For reduce-scatter in place the guards are around the whole input region.
    std::vector<uint8_t> got;
    if (c.in_place && c.kind == Collective::kReduceScatter) {
      std::vector<uint8_t> all = out_.read(out - me * c.count * es, in_elems * es, &guards);
      got.assign(all.begin() + me * c.count * es, all.begin() + (me + 1) * c.count * es);
    } else {
      got = out_.read(out, out_bytes, &guards);
    }
    if (!guards) return "guard bytes around the output were overwritten";
    return first_difference(c, got, seed, n, me);
  }

  /// The kernel path of the last case with a payload (Communicator::last_path()).
  KernelPath path() const { return path_; }

 private:
  Communicator& comm_;
  KernelPath path_ = KernelPath::kNone;
  BufKind kind_;
  GuardedBuffer in_, out_;
  cudaStream_t stream_ = nullptr;
};

// How many cases with a payload ran on each kernel path.
using PathCounts = std::map<KernelPath, int>;

// Expects `paths` to hold each of `seen` and none of `unseen`.
inline void expect_paths(const PathCounts& paths, std::initializer_list<KernelPath> seen,
                         std::initializer_list<KernelPath> unseen = {}) {
  for (KernelPath p : seen) EXPECT_GT(paths.count(p), 0u) << "no case ran on path " << to_string(p);
  for (KernelPath p : unseen) EXPECT_EQ(paths.count(p), 0u) << "a case ran on path " << to_string(p);
}

// Sweeps `cases` on each of `kinds` (default both buffer kinds), on every rank, and fails with the first few
// mismatches. Returns how many cases ran on each kernel path.
// Buffers are sized from the cases and the world size (the region one case needs: its larger side plus the
// misalignment offset), and the heap grows to hold both of them when a tweak or the default leaves it short: a
// fixed factor sized for 2 ranks runs out of heap at 4 and 8 ranks (ranks sharing one GPU).
inline PathCounts sweep(RankEnv& env, const std::vector<Case>& cases, const std::function<void(Config&)>& tweak = {},
                        std::initializer_list<BufKind> kinds = {BufKind::kDevice, BufKind::kSymmetric}) {
  const size_t world = env.info.world_size;
  size_t cap = 0;
  for (const Case& c : cases) {
    const CaseElems e = case_elems(c, world);
    cap = std::max(cap, std::max(e.in, e.out) * dtype_size(c.dt) + c.offset + 64);
  }
  CommOptions copts = cuda_comm_options();
  copts.config = env.config;
  if (tweak) tweak(*copts.config);
  const size_t need = 2 * (cap + 4 * kGuard + 4096);
  copts.config->heap_bytes = std::max(copts.config->heap_bytes, need + (size_t{64} << 20));
  auto comm = env.make_comm(copts);
  int failures = 0;
  PathCounts paths;
  for (BufKind kind : kinds) {
    Runner runner(*comm, kind, cap);
    uint64_t seed = 1;
    for (const Case& c : cases) {
      std::string err = runner.run(c, seed++);
      if (c.count > 0) ++paths[runner.path()];
      if (!err.empty() && ++failures <= 20) {
        ADD_FAILURE() << "rank " << comm->rank() << " " << name(kind) << " " << c.describe() << ": " << err;
      }
    }
  }
  EXPECT_EQ(failures, 0);
  comm->barrier();
  cudaDeviceSynchronize();
  return paths;
}

inline int gpus() { return testing::gpu_test_world(); }

inline std::vector<Case> reduction_cases(Collective kind, std::vector<Algorithm> algos) {
  std::vector<Case> v;
  for (Algorithm a : algos)
    for (DataType dt : kAllDtypes)
      for (ReduceOp op : kAllOps)
        for (size_t count : kCounts)
          for (bool ip : {false, true})
            for (size_t off : {size_t{0}, dtype_size(dt)}) v.push_back({kind, dt, op, count, ip, off, a});
  return v;
}

inline std::vector<Case> move_cases(Collective kind, int world, Algorithm algo = Algorithm::kAuto) {
  std::vector<Case> v;
  for (DataType dt : kAllDtypes)
    for (size_t count : kCounts)
      for (bool ip : {false, true})
        for (size_t off : {size_t{0}, dtype_size(dt)})
          for (int root = 0; root < (kind == Collective::kBroadcast ? world : 1); ++root) {
            v.push_back({kind, dt, ReduceOp::kSum, count, ip, off, algo, root});
          }
  return v;
}

}  // namespace symcomm::gputest
