// symcomm_nccl_conformance: libsymcomm_nccl (the NCCL drop-in library, src/nccl_shim) against the real NCCL through
// the NCCL API, one process per GPU. Each process opens both libraries itself (dlopen, RTLD_LOCAL), creates one
// communicator from each and runs every case on both with the same inputs in separate buffers: all-reduce,
// all-gather, reduce-scatter, ncclBroadcast (root 0 and N-1) and ncclBcast, over 10 dtypes, 5 ops, in place and out
// of place, element counts 0, 1, 7, 1023, 4099 and powers of two of bytes from 4 KiB to --max-bytes, plus a few
// collectives alone in a group. The outputs are compared bit for bit, except floating-point sum, avg and prod on
// more than 2 ranks (their rounding depends on the order of the arithmetic): those are compared with a float64 host
// reference within a tolerance. The real NCCL's output is checked against the host reference too, which keeps the
// test itself honest.
//
//   symcomm_nccl_conformance --shim LIBSYMCOMM_NCCL_SO --real REAL_LIBNCCL_SO_2 [--ranks N] [--max-bytes B]
//                            [--threads T] [--graph] [--quick] [--timeout S]
//
//   --ranks N      processes, one per GPU (default: the visible GPUs)
//   --max-bytes B  the largest count argument in bytes; K, M and G suffixes are binary (default 256M)
//   --threads T    with T > 1, then T threads per process, each on a pair of communicators of its own, run
//                  all-reduce sum float32 and bf16, taking turns case by case in the same order on every rank
//   --graph        each case also captured on the drop-in library into a CUDA graph, replayed 3 times
//   --quick        counts 0, 1, 1023 and 64 KiB, 1 MiB, 16 MiB; float32, bf16, int32; sum and max
//   --timeout S    every rank is killed after S seconds (default 300)
//   --share-gpus   ranks share the visible GPUs round-robin (rank r on GPU r mod G): each rank presents its own
//                  NCCL host (NCCL_HOSTID), so NCCL accepts ranks on one GPU and links them through its network
//                  transport on loopback, and symcomm runs as ranks sharing GPUs (SYMCOMM_SHARED_GPU=1); for
//                  correctness on fewer GPUs than ranks, not speed
//   --one-process  one process drives every GPU (as nccl-tests -g N does): the communicators of each library
//                  are created in one group, and each case's calls for every GPU are issued in one group
//   --kill         instead of the cases: after one all-reduce on each library the last rank SIGKILLs itself; every
//                  other rank runs 16 MiB all-reduces on the drop-in library until a call or
//                  ncclCommGetAsyncError reports the failure, which must come within 2 s, then ncclCommAbort must
//                  return and the stream drain within 10 s each (the dead-peer path of NCCL programs, also over
//                  fake nodes); needs 2+ ranks
//   --agreement    instead of the cases: creations that must end forward-only on every rank (an id without
//                  the stamp on one rank, one rank in another symcomm rendezvous, an unreachable store) and
//                  ones that must be served; run with SYMCOMM_NCCL_SHIM=native-only
//
// SYMCOMM_NCCL_SHIM (forward | auto | native-only) selects what the drop-in library runs itself. The program sets
// SYMCOMM_NCCL_REAL_LIBRARY to --real where it is unset, and NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
// NVSHMEM_DISABLE_NVLS=1. It links the CUDA runtime, not libnccl; nccl.h gives it the types only.
//
// Processes: the parent forks the ranks before any CUDA or NCCL call and only waits for them (without --ranks it
// counts the GPUs in a child process of its own); rank 0 asks both libraries for a unique id and writes the pair to
// the other ranks through pipes. Inputs are pseudo-random per rank and case (splitmix64), repeat with a period of
// kInputPeriod elements so that the host reference stays small, and are made on the host and tiled on the device.
// Outputs are poisoned (0xA5) before every call. stderr: one line per case from rank 0, one per failing case from
// every rank (the first mismatches with their index, value and expected value); stdout: "conformance: rank R cases C
// wrong_elements W" per rank and the verdict. Exit status: 0 every rank ran every case with no wrong element; 1 a
// wrong element, a failed CUDA or NCCL call, a rank that crashed or the timeout; 2 usage.

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "id_stamp.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr unsigned char kPoison = 0xA5;
// Inputs repeat every kInputPeriod elements (a prime: no power-of-two chunk of an output lines up with it).
constexpr size_t kInputPeriod = 262139;
constexpr int kGraphReplays = 3;
constexpr int kThreadRounds = 4;          // times each thread runs its case list
constexpr int kThreadCaseBase = 1 << 24;  // case indices of the threads' cases (inputs unlike the main ones)
constexpr size_t kShownMismatches = 4;    // mismatches printed per comparison
constexpr int kExitWrong = 1;             // a rank ran every case and found a wrong element
constexpr int kExitError = 2;             // a rank stopped at a failed call; the others cannot finish

// ---------------------------------------------------------------------------------------------------------
// Options

struct Options {
  std::string shim;
  std::string real;
  int ranks = 0;  // 0: the visible GPUs
  size_t max_bytes = size_t{256} << 20;
  int threads = 1;
  bool graph = false;
  bool quick = false;
  bool agreement = false;
  bool one_process = false;
  bool share_gpus = false;
  bool kill = false;
  int timeout_s = 300;
};

void print_usage(FILE* to) {
  std::fprintf(to,
               "usage: symcomm_nccl_conformance --shim LIBSYMCOMM_NCCL_SO --real REAL_LIBNCCL_SO_2 [--ranks N]\n"
               "                                [--max-bytes B] [--threads T] [--graph] [--quick] [--timeout S]\n"
               "                                [--agreement] [--one-process] [--share-gpus]\n");
}

// Digits with an optional K, M or G suffix (powers of 1024).
bool parse_bytes(const char* text, size_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text) return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  if (shift != 0) ++end;
  if (*end != '\0' || v > (~0ULL >> shift)) return false;
  *out = static_cast<size_t>(v << shift);
  return true;
}

bool parse_int(const char* text, int min, int* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > 1 << 20) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    bool ok = true;
    if (arg == "--graph") {
      o.graph = true;
    } else if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--agreement") {
      o.agreement = true;
    } else if (arg == "--one-process") {
      o.one_process = true;
    } else if (arg == "--share-gpus") {
      o.share_gpus = true;
    } else if (arg == "--kill") {
      o.kill = true;
    } else if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      std::exit(0);
    } else if (!has_value) {
      ok = false;
    } else if (arg == "--shim") {
      o.shim = argv[++i];
    } else if (arg == "--real") {
      o.real = argv[++i];
    } else if (arg == "--ranks") {
      ok = parse_int(argv[++i], 1, &o.ranks);
    } else if (arg == "--max-bytes") {
      ok = parse_bytes(argv[++i], &o.max_bytes);
    } else if (arg == "--threads") {
      ok = parse_int(argv[++i], 1, &o.threads);
    } else if (arg == "--timeout") {
      ok = parse_int(argv[++i], 1, &o.timeout_s);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "conformance: bad argument '%s'\n", arg.c_str());
      return false;
    }
  }
  if (o.shim.empty() || o.real.empty()) {
    std::fprintf(stderr, "conformance: --shim and --real are required\n");
    return false;
  }
  if (o.kill && (o.one_process || o.agreement || o.ranks == 1)) {
    std::fprintf(stderr, "conformance: --kill needs 2+ ranks, a process each, and no --agreement\n");
    return false;
  }
  if (o.share_gpus && o.one_process) {
    std::fprintf(stderr, "conformance: --share-gpus needs a process per rank (not --one-process)\n");
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// The two libraries

struct NcclApi {
  const char* name = "";  // in messages
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRank) CommInitRank = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclBcast) Bcast = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
};

template <class F>
bool resolve(void* handle, const std::string& path, const char* symbol, F& fn) {
  fn = reinterpret_cast<F>(dlsym(handle, symbol));
  if (fn == nullptr) std::fprintf(stderr, "conformance: %s exports no %s\n", path.c_str(), symbol);
  return fn != nullptr;
}

// Opens `path` on its own (RTLD_LOCAL) and takes every function the program calls from that library.
bool load_api(const std::string& path, const char* name, NcclApi& api) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    std::fprintf(stderr, "conformance: cannot open %s: %s\n", path.c_str(), e != nullptr ? e : "dlopen failed");
    return false;
  }
  api.name = name;
  bool ok = resolve(h, path, "ncclGetUniqueId", api.GetUniqueId);
  ok = resolve(h, path, "ncclCommInitRank", api.CommInitRank) && ok;
  ok = resolve(h, path, "ncclCommDestroy", api.CommDestroy) && ok;
  ok = resolve(h, path, "ncclCommAbort", api.CommAbort) && ok;
  ok = resolve(h, path, "ncclAllReduce", api.AllReduce) && ok;
  ok = resolve(h, path, "ncclAllGather", api.AllGather) && ok;
  ok = resolve(h, path, "ncclReduceScatter", api.ReduceScatter) && ok;
  ok = resolve(h, path, "ncclBroadcast", api.Broadcast) && ok;
  ok = resolve(h, path, "ncclBcast", api.Bcast) && ok;
  ok = resolve(h, path, "ncclGroupStart", api.GroupStart) && ok;
  ok = resolve(h, path, "ncclGroupEnd", api.GroupEnd) && ok;
  ok = resolve(h, path, "ncclGetErrorString", api.GetErrorString) && ok;
  ok = resolve(h, path, "ncclGetLastError", api.GetLastError) && ok;
  ok = resolve(h, path, "ncclCommGetAsyncError", api.CommGetAsyncError) && ok;
  return ok;
}

// ---------------------------------------------------------------------------------------------------------
// Element types

struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, Bf16>;

double to_double(Half h) {
  const int exponent = (h.bits >> 10) & 0x1f;
  const int mantissa = h.bits & 0x3ff;
  double v;
  if (exponent == 0) {
    v = std::ldexp(mantissa, -24);
  } else if (exponent == 0x1f) {
    v = mantissa == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(mantissa + 1024, exponent - 25);
  }
  return (h.bits & 0x8000) != 0 ? -v : v;
}

double to_double(Bf16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <class T>
requires std::is_arithmetic_v<T>
double to_double(T v) { return static_cast<double>(v); }

// IEEE binary16 nearest to `v` (ties to even); finite `v` only.
uint16_t half_bits(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (a == 0) return sign;
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exponent = e - 1 + 15;
  if (exponent <= 0) {  // subnormal; rounding up to 1024 gives the smallest normal's encoding
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  double mantissa = std::nearbyint((2 * m - 1) * 1024);
  if (mantissa == 1024) {
    mantissa = 0;
    ++exponent;
  }
  if (exponent >= 0x1f) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(exponent << 10) | static_cast<uint16_t>(mantissa);
}

// bfloat16 nearest to `f` (ties to even).
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{half_bits(v)};
  } else if constexpr (std::is_same_v<T, Bf16>) {
    return Bf16{bf16_bits(static_cast<float>(v))};
  } else {
    return static_cast<T>(v);
  }
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// Calls f(std::type_identity<T>{}) with T the host type of `t`.
template <class F>
decltype(auto) with_type(ncclDataType_t t, F&& f) {
  switch (t) {
    case ncclInt8: return f(std::type_identity<int8_t>{});
    case ncclUint8: return f(std::type_identity<uint8_t>{});
    case ncclInt32: return f(std::type_identity<int32_t>{});
    case ncclUint32: return f(std::type_identity<uint32_t>{});
    case ncclInt64: return f(std::type_identity<int64_t>{});
    case ncclUint64: return f(std::type_identity<uint64_t>{});
    case ncclFloat16: return f(std::type_identity<Half>{});
    case ncclFloat32: return f(std::type_identity<float>{});
    case ncclFloat64: return f(std::type_identity<double>{});
    case ncclBfloat16: return f(std::type_identity<Bf16>{});
    default: break;
  }
  std::fprintf(stderr, "conformance: dtype %d has no host type here\n", static_cast<int>(t));
  std::abort();
}

size_t element_size(ncclDataType_t t) {
  return with_type(t, [](auto tag) { return sizeof(typename decltype(tag)::type); });
}

bool is_float(ncclDataType_t t) {
  return with_type(t, [](auto tag) { return kIsFloat<typename decltype(tag)::type>; });
}

// The relative error per rank allowed where the order of floating-point arithmetic may differ.
double relative_tolerance(ncclDataType_t t) {
  switch (t) {
    case ncclBfloat16: return 1e-2;
    case ncclFloat16: return 2e-3;
    case ncclFloat32: return 1e-5;
    case ncclFloat64: return 1e-12;
    default: return 0;
  }
}

const char* dtype_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "float16";
    case ncclFloat32: return "float32";
    case ncclFloat64: return "float64";
    case ncclBfloat16: return "bfloat16";
    default: return "?";
  }
}

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "?";
  }
}

std::string format_element(ncclDataType_t t, const uint8_t* p) {
  return with_type(t, [p](auto tag) {
    using T = typename decltype(tag)::type;
    char text[80];
    if constexpr (kIsFloat<T>) {
      uint64_t bits = 0;
      std::memcpy(&bits, p, sizeof(T));
      std::snprintf(text, sizeof text, "%.17g (0x%0*llx)", to_double(load<T>(p)), static_cast<int>(2 * sizeof(T)),
                    static_cast<unsigned long long>(bits));
    } else if constexpr (std::is_signed_v<T>) {
      std::snprintf(text, sizeof text, "%lld", static_cast<long long>(load<T>(p)));
    } else {
      std::snprintf(text, sizeof text, "%llu", static_cast<unsigned long long>(load<T>(p)));
    }
    return std::string(text);
  });
}

// ---------------------------------------------------------------------------------------------------------
// Cases

enum class Coll { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kBcast };

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::kAllReduce: return "all_reduce";
    case Coll::kAllGather: return "all_gather";
    case Coll::kReduceScatter: return "reduce_scatter";
    case Coll::kBroadcast: return "broadcast";
    case Coll::kBcast: return "bcast";
  }
  return "?";
}

bool is_reduction(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduceScatter; }

struct Case {
  int index = 0;  // the same on every rank; seeds the inputs
  Coll coll = Coll::kAllReduce;
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;  // reductions only
  bool in_place = false;
  bool grouped = false;  // issued between ncclGroupStart and ncclGroupEnd
  size_t count = 0;      // NCCL's count argument (all-gather: per rank; reduce-scatter: recvcount)
  int root = 0;          // broadcasts only
};

std::string describe(const Case& c) {
  std::string s = "case " + std::to_string(c.index) + " " + coll_name(c.coll) + " " + dtype_name(c.dtype);
  if (is_reduction(c.coll)) s += std::string(" ") + op_name(c.op);
  if (c.coll == Coll::kBroadcast || c.coll == Coll::kBcast) s += " root " + std::to_string(c.root);
  s += c.in_place ? " in-place" : " out-of-place";
  if (c.grouped) s += " grouped";
  s += " count " + std::to_string(c.count);
  return s;
}

// Counts of `esize`-byte elements: the fixed ones, then powers of two of bytes, none above max_bytes.
std::vector<size_t> counts_for(const Options& o, size_t esize) {
  std::vector<size_t> counts;
  const auto add = [&](size_t count) {
    if (count == 0 || count * esize <= o.max_bytes) counts.push_back(count);
  };
  if (o.quick) {
    for (size_t count : {0, 1, 1023}) add(count);
    for (size_t bytes : {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20}) add(bytes / esize);
  } else {
    for (size_t count : {0, 1, 7, 1023, 4096 + 3}) add(count);
    for (size_t bytes = 4096; bytes <= o.max_bytes; bytes *= 2) add(bytes / esize);
  }
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

std::vector<ncclDataType_t> dtypes_for(const Options& o) {
  if (o.quick) return {ncclFloat32, ncclBfloat16, ncclInt32};
  return {ncclInt8,   ncclUint8,   ncclInt32,   ncclUint32,  ncclInt64,
          ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};
}

std::vector<ncclRedOp_t> ops_for(const Options& o, ncclDataType_t t) {
  if (o.quick) return {ncclSum, ncclMax};
  if (is_float(t)) return {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  return {ncclSum, ncclProd, ncclMax, ncclMin};
}

std::vector<int> roots_for(int nranks) {
  if (nranks == 1) return {0};
  return {0, nranks - 1};
}

// The main case list; the same on every rank.
std::vector<Case> build_cases(const Options& o, int nranks) {
  std::vector<Case> cases;
  const auto add = [&](Case c) {
    c.index = static_cast<int>(cases.size());
    cases.push_back(c);
  };
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kBroadcast, Coll::kBcast}) {
    for (ncclDataType_t dtype : dtypes_for(o)) {
      for (size_t count : counts_for(o, element_size(dtype))) {
        Case c;
        c.coll = coll;
        c.dtype = dtype;
        c.count = count;
        for (bool in_place : {false, true}) {
          c.in_place = in_place;
          if (coll == Coll::kBcast && !in_place) continue;
          if (is_reduction(coll)) {
            for (ncclRedOp_t op : ops_for(o, dtype)) {
              c.op = op;
              add(c);
            }
          } else if (coll == Coll::kAllGather) {
            add(c);
          } else {
            for (int root : roots_for(nranks)) {
              c.root = root;
              add(c);
            }
          }
        }
      }
    }
  }
  // A single collective inside a group of its own.
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather}) {
    for (ncclDataType_t dtype : {ncclFloat32, ncclBfloat16}) {
      for (size_t bytes : {size_t{4092}, size_t{1} << 20}) {
        if (bytes > o.max_bytes) continue;
        Case c;
        c.coll = coll;
        c.dtype = dtype;
        c.grouped = true;
        c.count = bytes / element_size(dtype);
        add(c);
      }
    }
  }
  return cases;
}

// Thread `thread`'s list (--threads): all-reduce sum float32 and bf16 at three sizes, kThreadRounds times.
std::vector<Case> thread_cases(const Options& o, int thread) {
  std::vector<Case> cases;
  for (int round = 0; round < kThreadRounds; ++round) {
    for (ncclDataType_t dtype : {ncclFloat32, ncclBfloat16}) {
      const size_t esize = element_size(dtype);
      for (size_t count : {size_t{1023}, (size_t{1} << 20) / esize, (size_t{16} << 20) / esize}) {
        if (count * esize > o.max_bytes) continue;
        Case c;
        c.index = kThreadCaseBase + thread * 1000 + static_cast<int>(cases.size());
        c.dtype = dtype;
        c.count = count;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------------------------------------
// Inputs and the host reference

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

// What a case's inputs are made of.
enum class Values {
  kBits,     // random bits: copies, and integer sum, min and max (sums wrap the same in any order)
  kSmall,    // floats: multiples of 1/16 in [-2, 2]
  kProduct,  // prod: floats +-{0.5, 0.75, ..., 2}; signed {-1, 1, 2}; unsigned {1, 2}
};

Values values_for(const Case& c) {
  if (!is_reduction(c.coll)) return Values::kBits;
  if (c.op == ncclProd) return Values::kProduct;
  return is_float(c.dtype) ? Values::kSmall : Values::kBits;
}

template <class T>
T make_value(uint64_t x, Values kind) {
  if (kind == Values::kBits) return load<T>(reinterpret_cast<const uint8_t*>(&x));
  if constexpr (kIsFloat<T>) {
    if (kind == Values::kSmall) return from_double<T>(static_cast<double>(static_cast<int>(x % 65) - 32) / 16);
    const double m = static_cast<double>(2 + x % 7) / 4;
    return from_double<T>(((x >> 32) & 1) != 0 ? -m : m);
  } else if constexpr (std::is_signed_v<T>) {
    constexpr T kSet[] = {-1, 1, 2};
    return kSet[x % 3];
  } else {
    return static_cast<T>(1 + x % 2);
  }
}

// Elements of this rank's input: all-gather, broadcast: count; reduce-scatter: nranks * count.
size_t input_elems(const Case& c, int nranks) {
  return c.coll == Coll::kReduceScatter ? c.count * static_cast<size_t>(nranks) : c.count;
}

size_t period_of(const Case& c, int nranks) { return std::min(input_elems(c, nranks), kInputPeriod); }

// Rank `rank`'s input over one period: element i of its input is element i % period of this table.
std::vector<uint8_t> make_table(const Case& c, int rank, int nranks) {
  return with_type(c.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const size_t period = period_of(c, nranks);
    std::vector<uint8_t> table(period * sizeof(T));
    SplitMix64 rng{(static_cast<uint64_t>(c.index) << 20) ^ static_cast<uint64_t>(rank) ^ 0x5ca1ab1e00000000ULL};
    const Values kind = values_for(c);
    for (size_t i = 0; i < period; ++i) store(table.data() + i * sizeof(T), make_value<T>(rng.next(), kind));
    return table;
  });
}

// The expected elements over one period. Exact: `bits`; tolerant (floating-point sum, avg, prod): the float64
// result `value` and `magnitude`, the size the rounding errors are relative to.
struct Reference {
  size_t period = 0;
  bool tolerant = false;
  std::vector<uint8_t> bits;
  std::vector<double> value;
  std::vector<double> magnitude;
};

template <class T>
T combine_ints(ncclRedOp_t op, T a, T b) {
  switch (op) {
    case ncclSum: return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    case ncclProd: return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case ncclMax: return std::max(a, b);
    default: return std::min(a, b);
  }
}

template <class T>
Reference reduce_exact(ncclRedOp_t op, const std::vector<std::vector<uint8_t>>& tables, size_t period) {
  Reference ref;
  ref.period = period;
  ref.bits.resize(period * sizeof(T));
  for (size_t i = 0; i < period; ++i) {
    T acc = load<T>(tables[0].data() + i * sizeof(T));
    for (size_t r = 1; r < tables.size(); ++r) {
      const T v = load<T>(tables[r].data() + i * sizeof(T));
      if constexpr (kIsFloat<T>) {
        if (op == ncclMax ? to_double(v) > to_double(acc) : to_double(v) < to_double(acc)) acc = v;
      } else {
        acc = combine_ints(op, acc, v);
      }
    }
    store(ref.bits.data() + i * sizeof(T), acc);
  }
  return ref;
}

template <class T>
Reference reduce_tolerant(ncclRedOp_t op, const std::vector<std::vector<uint8_t>>& tables, size_t period) {
  Reference ref;
  ref.period = period;
  ref.tolerant = true;
  ref.value.resize(period);
  ref.magnitude.resize(period);
  const double n = static_cast<double>(tables.size());
  for (size_t i = 0; i < period; ++i) {
    double acc = op == ncclProd ? 1 : 0;
    double magnitude = 0;
    for (const std::vector<uint8_t>& table : tables) {
      const double x = to_double(load<T>(table.data() + i * sizeof(T)));
      if (op == ncclProd) {
        acc *= x;
      } else {
        acc += x;
        magnitude += std::fabs(x);
      }
    }
    if (op == ncclProd) magnitude = std::fabs(acc);
    if (op == ncclAvg) {
      acc /= n;
      magnitude /= n;
    }
    ref.value[i] = acc;
    ref.magnitude[i] = magnitude;
  }
  return ref;
}

Reference reduce(const Case& c, const std::vector<std::vector<uint8_t>>& tables, size_t period) {
  return with_type(c.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool order_matters = kIsFloat<T> && (c.op == ncclSum || c.op == ncclAvg || c.op == ncclProd);
    return order_matters ? reduce_tolerant<T>(c.op, tables, period) : reduce_exact<T>(c.op, tables, period);
  });
}

Reference copy_of(const std::vector<uint8_t>& table, size_t period) {
  Reference ref;
  ref.period = period;
  ref.bits = table;
  return ref;
}

// Output elements [begin, begin + elems) are expected to be elements offset, offset + 1, ... of refs[ref].
struct Segment {
  size_t begin = 0;
  size_t elems = 0;
  size_t ref = 0;
  size_t offset = 0;
};

struct CaseData {
  std::vector<uint8_t> input;  // this rank's table
  std::vector<Reference> refs;
  std::vector<Segment> segments;
  bool tolerant = false;  // the reduction's rounding depends on the order of the arithmetic
};

CaseData case_data(const Case& c, int rank, int nranks) {
  CaseData d;
  const size_t period = period_of(c, nranks);
  if (c.coll == Coll::kBroadcast || c.coll == Coll::kBcast) {
    d.input = make_table(c, rank, nranks);
    d.refs.push_back(copy_of(make_table(c, c.root, nranks), period));
    d.segments.push_back({0, c.count, 0, 0});
    return d;
  }
  std::vector<std::vector<uint8_t>> tables;
  for (int r = 0; r < nranks; ++r) tables.push_back(make_table(c, r, nranks));
  d.input = tables[rank];
  if (c.coll == Coll::kAllGather) {
    for (int r = 0; r < nranks; ++r) {
      d.refs.push_back(copy_of(tables[r], period));
      d.segments.push_back({static_cast<size_t>(r) * c.count, c.count, static_cast<size_t>(r), 0});
    }
    return d;
  }
  d.refs.push_back(reduce(c, tables, period));
  d.tolerant = d.refs[0].tolerant;
  const size_t offset = c.coll == Coll::kReduceScatter ? static_cast<size_t>(rank) * c.count : 0;
  d.segments.push_back({0, c.count, 0, offset});
  return d;
}

// ---------------------------------------------------------------------------------------------------------
// Comparisons

struct Mismatches {
  size_t count = 0;
  std::vector<std::string> first;  // "[index] got X expected Y", the first kShownMismatches

  // Counts one mismatch; got() and expected() give its values' text, asked for the first few only.
  template <class Got, class Expected>
  void add(size_t index, Got got, Expected expected) {
    if (count++ < kShownMismatches) {
      first.push_back("[" + std::to_string(index) + "] got " + got() + " expected " + expected());
    }
  }
};

// Each element of `got` bit for bit against the same element of `want`.
void compare_bits(ncclDataType_t t, const uint8_t* got, const uint8_t* want, size_t elems, Mismatches& mm) {
  const size_t es = element_size(t);
  if (std::memcmp(got, want, elems * es) == 0) return;
  for (size_t i = 0; i < elems; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) != 0) {
      mm.add(
          i, [&] { return format_element(t, got + i * es); }, [&] { return format_element(t, want + i * es); });
    }
  }
}

// A segment of `out` bit for bit against its exact reference.
void compare_exact(ncclDataType_t t, const uint8_t* out, const Segment& s, const Reference& ref, Mismatches& mm) {
  const size_t es = element_size(t);
  size_t pos = s.offset % ref.period;
  for (size_t j = 0; j < s.elems;) {
    const size_t run = std::min(ref.period - pos, s.elems - j);
    const uint8_t* got = out + (s.begin + j) * es;
    const uint8_t* want = ref.bits.data() + pos * es;
    if (std::memcmp(got, want, run * es) != 0) {
      for (size_t k = 0; k < run; ++k) {
        if (std::memcmp(got + k * es, want + k * es, es) != 0) {
          mm.add(
              s.begin + j + k, [&] { return format_element(t, got + k * es); },
              [&] { return format_element(t, want + k * es); });
        }
      }
    }
    j += run;
    pos = 0;
  }
}

// A segment of `out` against its float64 reference: |got - value| <= rtol * nranks * magnitude.
template <class T>
void compare_tolerant(ncclDataType_t t, const uint8_t* out, const Segment& s, const Reference& ref, double scale,
                      Mismatches& mm) {
  size_t g = s.offset % ref.period;
  for (size_t j = 0; j < s.elems; ++j) {
    const size_t index = s.begin + j;
    const double got = to_double(load<T>(out + index * sizeof(T)));
    const double tolerance = scale * ref.magnitude[g];
    if (!(std::fabs(got - ref.value[g]) <= tolerance)) {
      const double want = ref.value[g];
      mm.add(
          index, [&] { return format_element(t, out + index * sizeof(T)); },
          [&] {
            char text[80];
            std::snprintf(text, sizeof text, "%.17g +- %.3g", want, tolerance);
            return std::string(text);
          });
    }
    if (++g == ref.period) g = 0;
  }
}

// `out` (the whole output of this rank) against the host reference.
Mismatches against_reference(const Case& c, const CaseData& d, const uint8_t* out, int nranks) {
  Mismatches mm;
  const double scale = relative_tolerance(c.dtype) * nranks;
  for (const Segment& s : d.segments) {
    if (s.elems == 0) continue;
    const Reference& ref = d.refs[s.ref];
    if (!ref.tolerant) {
      compare_exact(c.dtype, out, s, ref, mm);
      continue;
    }
    with_type(c.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kIsFloat<T>) compare_tolerant<T>(c.dtype, out, s, ref, scale, mm);
    });
  }
  return mm;
}

// ---------------------------------------------------------------------------------------------------------
// Lanes: a stream and one communicator of each library, with their buffers

struct Buffers {
  char* send = nullptr;
  char* recv = nullptr;
};

struct Side {
  const NcclApi* api = nullptr;
  ncclComm_t comm = nullptr;
  Buffers buf;
};

struct Lane {
  std::string tag;  // "rank R" or "rank R thread T", in messages
  int rank = 0;
  int nranks = 0;
  int device = 0;  // the lane's GPU
  cudaStream_t stream = nullptr;
  Side real;
  Side shim;
  std::unique_ptr<uint8_t[]> out_real;  // host copies of the outputs
  std::unique_ptr<uint8_t[]> out_shim;
  size_t cases = 0;
  size_t wrong = 0;
  bool failed = false;  // a CUDA or NCCL call failed
};

// An NCCL result with the side it came from, for the message.
struct NcclCall {
  ncclResult_t result;
  const Side* side;
};

NcclCall on(const Side& side, ncclResult_t result) { return {result, &side}; }

bool succeeded(const Lane& lane, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "conformance: %s: %s failed: %s (%s)\n", lane.tag.c_str(), what, cudaGetErrorName(e),
               cudaGetErrorString(e));
  return false;
}

bool succeeded(const Lane& lane, NcclCall call, const char* what) {
  if (call.result == ncclSuccess) return true;
  const NcclApi& api = *call.side->api;
  const char* last = api.GetLastError(call.side->comm);
  std::fprintf(stderr, "conformance: %s: %s failed in the %s library: %s (%d); last error: %s\n", lane.tag.c_str(),
               what, api.name, api.GetErrorString(call.result), static_cast<int>(call.result),
               last != nullptr ? last : "(none)");
  return false;
}

// Returns false from the calling function where `expr` (a cudaError_t, or an NcclCall from on()) failed, after
// printing what failed.
#define CHECK(lane, expr)                                \
  do {                                                   \
    if (!succeeded((lane), (expr), #expr)) return false; \
  } while (0)

// Bytes each buffer of a lane must hold for its cases.
struct Capacity {
  size_t send = 256;
  size_t recv = 256;
  size_t output = 256;
};

Capacity capacity_for(const std::vector<Case>& cases, int nranks) {
  Capacity cap;
  for (const Case& c : cases) {
    const size_t n = c.count * element_size(c.dtype);
    const size_t all = n * static_cast<size_t>(nranks);
    size_t send = n, recv = n, output = n;
    if (c.coll == Coll::kAllGather) recv = output = all;
    if (c.coll == Coll::kReduceScatter) send = all;
    cap.send = std::max(cap.send, send);
    cap.recv = std::max(cap.recv, recv);
    cap.output = std::max(cap.output, output);
  }
  return cap;
}

// Where a case's arguments, input, poison and output lie in one side's buffers.
struct Layout {
  void* send = nullptr;   // sendbuff
  void* recv = nullptr;   // recvbuff (ncclBcast: buff)
  char* input = nullptr;  // this rank's input goes here; nullptr: none
  size_t input_elems = 0;
  char* poison = nullptr;  // set to kPoison before the call, before the input is written
  size_t poison_bytes = 0;
  const char* output = nullptr;
  size_t output_elems = 0;
};

Layout layout_of(const Case& c, int rank, int nranks, const Buffers& b) {
  const size_t es = element_size(c.dtype);
  const size_t n = c.count;
  const size_t all = n * static_cast<size_t>(nranks);
  const size_t own = static_cast<size_t>(rank) * n * es;  // this rank's slot in an nranks * count buffer
  Layout l;
  switch (c.coll) {
    case Coll::kAllReduce:
      l.send = c.in_place ? b.recv : b.send;
      l.recv = b.recv;
      l.input = static_cast<char*>(l.send);
      l.input_elems = n;
      if (!c.in_place) {
        l.poison = b.recv;
        l.poison_bytes = n * es;
      }
      l.output = b.recv;
      l.output_elems = n;
      break;
    case Coll::kAllGather:
      l.send = c.in_place ? b.recv + own : b.send;
      l.recv = b.recv;
      l.input = static_cast<char*>(l.send);
      l.input_elems = n;
      l.poison = b.recv;
      l.poison_bytes = all * es;
      l.output = b.recv;
      l.output_elems = all;
      break;
    case Coll::kReduceScatter:
      l.send = b.send;
      l.recv = c.in_place ? b.send + own : b.recv;
      l.input = b.send;
      l.input_elems = all;
      if (!c.in_place) {
        l.poison = b.recv;
        l.poison_bytes = n * es;
      }
      l.output = static_cast<char*>(l.recv);
      l.output_elems = n;
      break;
    case Coll::kBroadcast:
    case Coll::kBcast:
      l.send = c.in_place ? b.recv : b.send;
      l.recv = b.recv;
      if (!c.in_place || rank == c.root) {  // out of place every rank writes its sendbuff; NCCL reads the root's
        l.input = static_cast<char*>(l.send);
        l.input_elems = n;
      }
      if (!c.in_place || rank != c.root) {
        l.poison = b.recv;
        l.poison_bytes = n * es;
      }
      l.output = b.recv;
      l.output_elems = n;
      break;
  }
  return l;
}

// Writes `elems` elements of `table` repeated to device memory `dst`: the table once, then copies of what is
// there, doubling.
bool tile(Lane& lane, char* dst, size_t elems, const std::vector<uint8_t>& table, size_t es) {
  const size_t period = table.size() / es;
  size_t done = std::min(period, elems);
  CHECK(lane, cudaMemcpyAsync(dst, table.data(), done * es, cudaMemcpyHostToDevice, lane.stream));
  while (done < elems) {
    const size_t n = std::min(done, elems - done);
    CHECK(lane, cudaMemcpyAsync(dst + done * es, dst, n * es, cudaMemcpyDeviceToDevice, lane.stream));
    done += n;
  }
  return true;
}

// Poisons the output and writes the input of one side, on the lane's stream.
bool prepare(Lane& lane, const Case& c, const Layout& l, const CaseData& d) {
  if (l.poison_bytes > 0) CHECK(lane, cudaMemsetAsync(l.poison, kPoison, l.poison_bytes, lane.stream));
  if (l.input == nullptr || l.input_elems == 0) return true;
  return tile(lane, l.input, l.input_elems, d.input, element_size(c.dtype));
}

ncclResult_t call(const Side& s, const Case& c, const Layout& l, cudaStream_t stream) {
  const NcclApi& a = *s.api;
  switch (c.coll) {
    case Coll::kAllReduce: return a.AllReduce(l.send, l.recv, c.count, c.dtype, c.op, s.comm, stream);
    case Coll::kAllGather: return a.AllGather(l.send, l.recv, c.count, c.dtype, s.comm, stream);
    case Coll::kReduceScatter: return a.ReduceScatter(l.send, l.recv, c.count, c.dtype, c.op, s.comm, stream);
    case Coll::kBroadcast: return a.Broadcast(l.send, l.recv, c.count, c.dtype, c.root, s.comm, stream);
    case Coll::kBcast: return a.Bcast(l.recv, c.count, c.dtype, c.root, s.comm, stream);
  }
  return ncclInvalidArgument;
}

// The case's call on one side, inside ncclGroupStart/ncclGroupEnd where the case says so.
NcclCall issue(const Side& s, const Case& c, const Layout& l, cudaStream_t stream) {
  if (!c.grouped) return on(s, call(s, c, l, stream));
  const ncclResult_t start = s.api->GroupStart();
  if (start != ncclSuccess) return on(s, start);
  const ncclResult_t r = call(s, c, l, stream);
  const ncclResult_t end = s.api->GroupEnd();
  return on(s, r != ncclSuccess ? r : end);
}

bool fetch(Lane& lane, const Case& c, const Layout& l, uint8_t* host) {
  const size_t bytes = l.output_elems * element_size(c.dtype);
  if (bytes > 0) CHECK(lane, cudaMemcpyAsync(host, l.output, bytes, cudaMemcpyDeviceToHost, lane.stream));
  return true;
}

// Waits for the lane's stream; fails where either communicator reports an asynchronous error.
bool wait(Lane& lane) {
  for (;;) {
    const cudaError_t e = cudaStreamQuery(lane.stream);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return succeeded(lane, e, "cudaStreamQuery(stream)");
    for (const Side* s : {&lane.real, &lane.shim}) {
      ncclResult_t async = ncclSuccess;
      CHECK(lane, on(*s, s->api->CommGetAsyncError(s->comm, &async)));
      CHECK(lane, on(*s, async));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Prints a comparison's mismatches where there are any; returns their number.
size_t report(const Lane& lane, const Case& c, const char* what, const Mismatches& mm) {
  if (mm.count == 0) return 0;
  std::string text = "conformance: " + lane.tag + " " + describe(c) + ": " + what + ": " + std::to_string(mm.count) +
                     " wrong elements";
  for (const std::string& m : mm.first) text += "; " + m;
  std::fprintf(stderr, "%s\n", text.c_str());
  return mm.count;
}

// The drop-in library's output `got` by the rule of the case: bit for bit against the real NCCL's output, or
// within the tolerance against the host reference where the rounding may depend on the order (more than 2
// ranks).
size_t check_drop_in(const Lane& lane, const Case& c, const CaseData& d, const uint8_t* got, const char* when) {
  std::string what = std::string("drop-in") + when;
  if (d.tolerant && lane.nranks > 2) {
    what += " vs host reference (tolerance)";
    return report(lane, c, what.c_str(), against_reference(c, d, got, lane.nranks));
  }
  size_t elems = 0;
  for (const Segment& s : d.segments) elems += s.elems;
  Mismatches mm;
  compare_bits(c.dtype, got, lane.out_real.get(), elems, mm);
  what += " vs real NCCL (bit for bit)";
  return report(lane, c, what.c_str(), mm);
}

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

// The drop-in library's call captured into a CUDA graph and replayed kGraphReplays times, each replay
// checked against the real NCCL's eager output (still in lane.out_real).
bool run_graph(Lane& lane, const Case& c, const CaseData& d, const Layout& l, size_t* wrong) {
  Graph g;
  CHECK(lane, cudaStreamBeginCapture(lane.stream, cudaStreamCaptureModeThreadLocal));
  const NcclCall captured = issue(lane.shim, c, l, lane.stream);
  const cudaError_t ended = cudaStreamEndCapture(lane.stream, &g.graph);
  CHECK(lane, captured);
  CHECK(lane, ended);
  CHECK(lane, cudaGraphInstantiate(&g.exec, g.graph, 0));
  for (int replay = 0; replay < kGraphReplays; ++replay) {
    if (!prepare(lane, c, l, d)) return false;
    CHECK(lane, cudaGraphLaunch(g.exec, lane.stream));
    if (!fetch(lane, c, l, lane.out_shim.get()) || !wait(lane)) return false;
    const std::string when = " graph replay " + std::to_string(replay);
    *wrong += check_drop_in(lane, c, d, lane.out_shim.get(), when.c_str());
  }
  return true;
}

// Runs one case on both libraries and compares; false where a CUDA or NCCL call failed.
bool run_case(Lane& lane, const Case& c, bool graph) {
  const CaseData d = case_data(c, lane.rank, lane.nranks);
  const Layout real = layout_of(c, lane.rank, lane.nranks, lane.real.buf);
  const Layout shim = layout_of(c, lane.rank, lane.nranks, lane.shim.buf);
  if (!prepare(lane, c, real, d) || !prepare(lane, c, shim, d)) return false;
  CHECK(lane, issue(lane.real, c, real, lane.stream));
  CHECK(lane, issue(lane.shim, c, shim, lane.stream));
  if (!fetch(lane, c, real, lane.out_real.get()) || !fetch(lane, c, shim, lane.out_shim.get()) || !wait(lane)) {
    return false;
  }
  size_t wrong =
      report(lane, c, "real NCCL vs host reference", against_reference(c, d, lane.out_real.get(), lane.nranks));
  wrong += check_drop_in(lane, c, d, lane.out_shim.get(), "");
  if (graph && !run_graph(lane, c, d, shim, &wrong)) return false;
  ++lane.cases;
  lane.wrong += wrong;
  if (lane.rank == 0 || wrong > 0) {
    std::fprintf(stderr, "conformance: %s %s: %zu wrong\n", lane.tag.c_str(), describe(c).c_str(), wrong);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// Communicators: ids from rank 0 through pipes

struct IdPair {
  ncclUniqueId real;
  ncclUniqueId shim;
};

// Rank 0 writes each pair of ids to write_fds (one pipe per other rank); the others read them from read_fd.
struct IdChannel {
  std::vector<int> write_fds;
  int read_fd = -1;
};

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool share_ids(Lane& lane, const IdChannel& ch, IdPair& ids) {
  if (lane.rank != 0) {
    if (read_all(ch.read_fd, &ids, sizeof ids)) return true;
    std::fprintf(stderr, "conformance: %s: no unique ids from rank 0\n", lane.tag.c_str());
    return false;
  }
  CHECK(lane, on(lane.real, lane.real.api->GetUniqueId(&ids.real)));
  CHECK(lane, on(lane.shim, lane.shim.api->GetUniqueId(&ids.shim)));
  for (int fd : ch.write_fds) {
    if (!write_all(fd, &ids, sizeof ids)) {
      std::fprintf(stderr, "conformance: %s: cannot send the unique ids: %s\n", lane.tag.c_str(), std::strerror(errno));
      return false;
    }
  }
  return true;
}

// Creates the lane's stream, one communicator of each library (every rank in the same order) and buffers.
bool open_lane(Lane& lane, const IdChannel& ch, const Capacity& cap) {
  CHECK(lane, cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
  IdPair ids{};
  if (!share_ids(lane, ch, ids)) return false;
  CHECK(lane, on(lane.real, lane.real.api->CommInitRank(&lane.real.comm, lane.nranks, ids.real, lane.rank)));
  CHECK(lane, on(lane.shim, lane.shim.api->CommInitRank(&lane.shim.comm, lane.nranks, ids.shim, lane.rank)));
  for (Side* s : {&lane.real, &lane.shim}) {
    CHECK(lane, cudaMalloc(reinterpret_cast<void**>(&s->buf.send), cap.send));
    CHECK(lane, cudaMalloc(reinterpret_cast<void**>(&s->buf.recv), cap.recv));
  }
  lane.out_real.reset(new uint8_t[cap.output]);
  lane.out_shim.reset(new uint8_t[cap.output]);
  return true;
}

// Destroys the lane's communicators (aborts them after a failure: the peers may be gone) and frees the rest.
bool close_lane(Lane& lane) {
  bool ok = true;
  for (Side* s : {&lane.real, &lane.shim}) {
    if (s->comm != nullptr) {
      const ncclResult_t r = lane.failed ? s->api->CommAbort(s->comm) : s->api->CommDestroy(s->comm);
      ok = succeeded(lane, on(*s, r), lane.failed ? "ncclCommAbort" : "ncclCommDestroy") && ok;
      s->comm = nullptr;
    }
    for (char* p : {s->buf.send, s->buf.recv}) {
      if (p != nullptr) ok = succeeded(lane, cudaFree(p), "cudaFree") && ok;
    }
    s->buf = Buffers{};
  }
  if (lane.stream != nullptr) ok = succeeded(lane, cudaStreamDestroy(lane.stream), "cudaStreamDestroy") && ok;
  lane.stream = nullptr;
  return ok;
}

void init_lane(Lane& lane, std::string tag, int rank, int nranks, const NcclApi& real, const NcclApi& shim) {
  lane.tag = std::move(tag);
  lane.rank = rank;
  lane.nranks = nranks;
  lane.device = rank;
  lane.real.api = &real;
  lane.shim.api = &shim;
}

// ---------------------------------------------------------------------------------------------------------
// Ranks

// Round-robin turns of the --threads lanes. NCCL's kernels (and symcomm's) wait on the GPU for their peers, so
// collectives of different communicators must reach the GPU in the same order on every rank, or two of them can
// wait for each other for ever (NCCL's documentation on using several communicators at once): the threads issue
// their calls concurrently from different threads, but take turns, case by case, in the same order on every
// rank.
class Turns {
 public:
  explicit Turns(int n) : n_(n) {}
  void wait(int who) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return turn_ % n_ == who; });
  }
  void pass() {
    {
      std::lock_guard lock(mu_);
      ++turn_;
    }
    cv_.notify_all();
  }

 private:
  int n_;
  long turn_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

void run_lane_cases(Lane& lane, const std::vector<Case>& cases, bool graph, Turns* turns = nullptr, int who = 0) {
  if (!succeeded(lane, cudaSetDevice(lane.device), "cudaSetDevice")) {
    lane.failed = true;
    return;
  }
  for (const Case& c : cases) {
    if (turns != nullptr) turns->wait(who);
    const bool ran = run_case(lane, c, graph);
    if (turns != nullptr) turns->pass();
    if (!ran) {
      lane.failed = true;
      return;
    }
  }
}

// --threads T: T more pairs of communicators, created one after the other here, then T threads at once, each
// on its own pair and stream.
bool run_threads(const Options& o, const Lane& main, const IdChannel& ch, size_t* cases, size_t* wrong) {
  std::vector<Lane> lanes(static_cast<size_t>(o.threads));
  std::vector<std::vector<Case>> lists;
  bool ok = true;
  for (int t = 0; t < o.threads; ++t) {
    Lane& lane = lanes[static_cast<size_t>(t)];
    init_lane(lane, main.tag + " thread " + std::to_string(t), main.rank, main.nranks, *main.real.api, *main.shim.api);
    lane.device = main.device;
    lists.push_back(thread_cases(o, t));
    ok = ok && open_lane(lane, ch, capacity_for(lists.back(), main.nranks));
  }
  if (ok) {
    std::vector<std::thread> threads;
    Turns turns(o.threads);
    for (int t = 0; t < o.threads; ++t) {
      threads.emplace_back(run_lane_cases, std::ref(lanes[static_cast<size_t>(t)]),
                           std::cref(lists[static_cast<size_t>(t)]), o.graph, &turns, t);
    }
    for (std::thread& th : threads) th.join();
  }
  for (Lane& lane : lanes) {
    ok = ok && !lane.failed;
    *cases += lane.cases;
    *wrong += lane.wrong;
  }
  for (Lane& lane : lanes) {
    lane.failed = lane.failed || !ok;
    ok = close_lane(lane) && ok;
  }
  return ok;
}

// ---------------------------------------------------------------------------------------------------------
// --agreement: creations that must end forward-only on every rank (NOTE [drop-in communicators])

enum class Scenario { kServed, kUnstampedOnLastRank, kOtherNonceOnLastRank, kUnreachableStore };

const char* scenario_name(Scenario s) {
  switch (s) {
    case Scenario::kServed: return "every rank with the same stamped id: served";
    case Scenario::kUnstampedOnLastRank: return "the last rank's id without the stamp: forward-only";
    case Scenario::kOtherNonceOnLastRank:
      return "the last rank in another symcomm rendezvous (a missing rank): forward-only";
    case Scenario::kUnreachableStore: return "a stamp naming a port nothing listens on (a timeout): forward-only";
  }
  return "?";
}

// This rank's copy of the shared id, changed as the scenario says.
bool scenario_id(Scenario s, int rank, int nranks, ncclUniqueId* id) {
  const bool last = rank == nranks - 1;
  auto stamp = symcomm::nccl_shim::read_stamp(*id);
  if (!stamp) return false;  // the drop-in library must stamp its ids
  if (s == Scenario::kUnstampedOnLastRank && last) {
    std::memset(id->internal + symcomm::nccl_shim::kStampOffset, 0, symcomm::nccl_shim::kStampBytes);
  } else if (s == Scenario::kOtherNonceOnLastRank && last) {
    stamp->nonce += 1;
  } else if (s == Scenario::kUnreachableStore) {
    stamp->port = 1;  // privileged: no store listens there
  } else {
    return true;
  }
  if (s != Scenario::kUnstampedOnLastRank) {
    std::memset(id->internal + symcomm::nccl_shim::kStampOffset, 0, symcomm::nccl_shim::kStampBytes);
    if (!symcomm::nccl_shim::write_stamp(id, *stamp)) return false;
  }
  return true;
}

// In native-only mode, a collective on a communicator symcomm does not serve fails with ncclInvalidUsage, and
// one on a served communicator runs: so each rank sees which its communicator is, and every rank must see the
// scenario's answer.
bool run_agreement(Lane& lane, const IdChannel& ch) {
  bool all = true;
  float* buf = nullptr;
  CHECK(lane, cudaMalloc(reinterpret_cast<void**>(&buf), sizeof(float)));
  CHECK(lane, cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
  for (Scenario s : {Scenario::kServed, Scenario::kUnstampedOnLastRank, Scenario::kOtherNonceOnLastRank,
                     Scenario::kUnreachableStore, Scenario::kServed}) {
    IdPair ids{};
    if (!share_ids(lane, ch, ids)) return false;
    if (!scenario_id(s, lane.rank, lane.nranks, &ids.shim)) {
      std::fprintf(stderr, "conformance: %s: the drop-in library's id has no valid stamp\n", lane.tag.c_str());
      return false;
    }
    const auto t0 = std::chrono::steady_clock::now();
    ncclComm_t comm = nullptr;
    if (lane.shim.api->CommInitRank(&comm, lane.nranks, ids.shim, lane.rank) != ncclSuccess) {
      std::fprintf(stderr, "conformance: %s: ncclCommInitRank failed (%s)\n", lane.tag.c_str(), scenario_name(s));
      return false;
    }
    const double init_s = seconds_since(t0);
    const ncclResult_t r = lane.shim.api->AllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, lane.stream);
    const bool served = r == ncclSuccess;
    const bool want = s == Scenario::kServed;
    if (served) CHECK(lane, cudaStreamSynchronize(lane.stream));
    if (!served && r != ncclInvalidUsage) {
      std::fprintf(stderr, "conformance: %s: %s: all-reduce returned %d, not ncclInvalidUsage\n", lane.tag.c_str(),
                   scenario_name(s), static_cast<int>(r));
    }
    const bool ok = served == want && (served || r == ncclInvalidUsage);
    all = all && ok;
    std::printf("conformance: rank %d agreement: %s: %s in %.2f s: %s\n", lane.rank, scenario_name(s),
                served ? "served" : "forward-only", init_s, ok ? "ok" : "WRONG");
    std::fflush(stdout);
    if (lane.shim.api->CommDestroy(comm) != ncclSuccess) return false;
  }
  CHECK(lane, cudaStreamDestroy(lane.stream));
  lane.stream = nullptr;
  CHECK(lane, cudaFree(buf));
  return all;
}

// ---------------------------------------------------------------------------------------------------------
// --kill: a rank SIGKILLed between collectives (NOTE [drop-in communicators that span nodes] for the fake nodes)

constexpr double kKillDelayS = 0.3;             // the last rank's sleep between its first all-reduce and its SIGKILL
constexpr double kNamedWithinS = 2.0;           // after the kill, a survivor's call or ncclCommGetAsyncError fails
constexpr double kEndsWithinS = 10.0;           // ncclCommAbort returns, then the stream drains
constexpr size_t kKillElems = size_t{4} << 20;  // float32: 16 MiB

// Polls the stream until it drains or `limit_s` passes; false (printed) past the limit. A failed query counts as
// drained: the abort may end a kernel with an error, and nothing of the stream runs after it.
bool drains(Lane& lane, double limit_s, const char* when) {
  const Clock::time_point t0 = Clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(lane.stream);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) {
      cudaGetLastError();  // a kernel ended by the abort may leave an error; the stream still drained
      return true;
    }
    if (seconds_since(t0) > limit_s) {
      std::fprintf(stderr, "conformance: %s: the stream did not drain within %.0f s %s\n", lane.tag.c_str(), limit_s,
                   when);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Whether the drop-in communicator has reported a failure: the result of a call, or its asynchronous error.
bool reports_failure(const Lane& lane, ncclResult_t call_result) {
  if (call_result != ncclSuccess) return true;
  ncclResult_t async = ncclSuccess;
  const ncclResult_t r = lane.shim.api->CommGetAsyncError(lane.shim.comm, &async);
  return r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress);
}

// The survivor's part: true where the failure is reported in time, the abort returns and the stream drains.
bool survive_kill(Lane& lane) {
  const Clock::time_point t0 = Clock::now();  // the dead rank's kill comes kKillDelayS after this at the earliest
  const double give_up_s = kKillDelayS + kEndsWithinS;
  double named_s = -1;
  while (named_s < 0 && seconds_since(t0) <= give_up_s) {
    const ncclResult_t r = lane.shim.api->AllReduce(lane.shim.buf.send, lane.shim.buf.recv, kKillElems, ncclFloat32,
                                                    ncclSum, lane.shim.comm, lane.stream);
    while (!reports_failure(lane, r) && cudaStreamQuery(lane.stream) == cudaErrorNotReady &&
           seconds_since(t0) < give_up_s) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (reports_failure(lane, r)) named_s = seconds_since(t0);
  }
  const char* last = lane.shim.api->GetLastError(lane.shim.comm);
  std::printf("conformance: %s kill: failure reported after %.2f s (the kill came after %.1f s or later): %s\n",
              lane.tag.c_str(), named_s, kKillDelayS, last != nullptr ? last : "(no text)");
  bool ok = named_s >= 0 && named_s <= kKillDelayS + kNamedWithinS;
  const Clock::time_point a0 = Clock::now();
  const ncclResult_t aborted = lane.shim.api->CommAbort(lane.shim.comm);
  lane.shim.comm = nullptr;
  const double abort_s = seconds_since(a0);
  std::printf("conformance: %s kill: ncclCommAbort returned %d after %.2f s\n", lane.tag.c_str(),
              static_cast<int>(aborted), abort_s);
  ok = ok && aborted == ncclSuccess && abort_s <= kEndsWithinS;
  ok = drains(lane, kEndsWithinS, "after ncclCommAbort") && ok;
  std::fflush(stdout);
  return ok;
}

// Every rank: one all-reduce on each library (the communicators are connected), then the last rank dies.
bool run_kill(Lane& lane, const IdChannel& ch) {
  const size_t bytes = kKillElems * sizeof(float);
  bool ok = open_lane(lane, ch, Capacity{bytes, bytes, 256});
  for (Side* s : {&lane.real, &lane.shim}) {
    ok =
        ok && succeeded(lane, cudaMemsetAsync(s->buf.send, 0, bytes, lane.stream), "cudaMemsetAsync") &&
        succeeded(
            lane,
            on(*s, s->api->AllReduce(s->buf.send, s->buf.recv, kKillElems, ncclFloat32, ncclSum, s->comm, lane.stream)),
            "the first ncclAllReduce");
  }
  ok = ok && wait(lane);
  if (ok && lane.rank == lane.nranks - 1) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kKillDelayS));
    kill(getpid(), SIGKILL);
  }
  ok = ok && survive_kill(lane);
  lane.failed = true;  // the peers' communicators are aborted, not destroyed
  ok = close_lane(lane) && ok;
  std::printf("conformance: rank %d kill: %s\n", lane.rank, ok ? "ok" : "WRONG");
  std::fflush(stdout);
  return ok;
}

// ---------------------------------------------------------------------------------------------------------
// --one-process

// Creates one library's communicators for every lane in one group (one process, several GPUs).
bool init_grouped(std::vector<Lane>& lanes, Side Lane::*side, const ncclUniqueId& id) {
  Lane& first = lanes[0];
  const NcclApi& api = *(first.*side).api;
  CHECK(first, on(first.*side, api.GroupStart()));
  for (Lane& lane : lanes) {
    CHECK(lane, cudaSetDevice(lane.rank));
    CHECK(lane, on(lane.*side, api.CommInitRank(&(lane.*side).comm, lane.nranks, id, lane.rank)));
  }
  CHECK(first, on(first.*side, api.GroupEnd()));
  return true;
}

// One case: every lane's call of one library inside one group, then every lane's comparison.
bool run_case_grouped(std::vector<Lane>& lanes, const Case& c) {
  const int n = static_cast<int>(lanes.size());
  std::vector<CaseData> data;
  std::vector<Layout> real, shim;
  for (Lane& lane : lanes) {
    CHECK(lane, cudaSetDevice(lane.rank));
    data.push_back(case_data(c, lane.rank, n));
    real.push_back(layout_of(c, lane.rank, n, lane.real.buf));
    shim.push_back(layout_of(c, lane.rank, n, lane.shim.buf));
    if (!prepare(lane, c, real.back(), data.back()) || !prepare(lane, c, shim.back(), data.back())) return false;
  }
  for (Side Lane::*side : {&Lane::real, &Lane::shim}) {
    const std::vector<Layout>& layouts = side == &Lane::real ? real : shim;
    const NcclApi& api = *(lanes[0].*side).api;
    CHECK(lanes[0], on(lanes[0].*side, api.GroupStart()));
    for (Lane& lane : lanes) {
      CHECK(lane, cudaSetDevice(lane.rank));
      CHECK(lane, on(lane.*side, call(lane.*side, c, layouts[static_cast<size_t>(lane.rank)], lane.stream)));
    }
    CHECK(lanes[0], on(lanes[0].*side, api.GroupEnd()));
  }
  for (Lane& lane : lanes) {
    const size_t r = static_cast<size_t>(lane.rank);
    CHECK(lane, cudaSetDevice(lane.rank));
    if (!fetch(lane, c, real[r], lane.out_real.get()) || !fetch(lane, c, shim[r], lane.out_shim.get()) || !wait(lane)) {
      return false;
    }
    size_t wrong =
        report(lane, c, "real NCCL vs host reference", against_reference(c, data[r], lane.out_real.get(), n));
    wrong += check_drop_in(lane, c, data[r], lane.out_shim.get(), "");
    ++lane.cases;
    lane.wrong += wrong;
    if (lane.rank == 0 || wrong > 0) {
      std::fprintf(stderr, "conformance: %s %s: %zu wrong\n", lane.tag.c_str(), describe(c).c_str(), wrong);
    }
  }
  return true;
}

// The --one-process child: exit status 0, kExitWrong or kExitError.
int one_process_main(const Options& o, int nranks) {
  signal(SIGPIPE, SIG_IGN);
  NcclApi real;
  NcclApi shim;
  if (!load_api(o.real, "real NCCL", real) || !load_api(o.shim, "drop-in", shim)) return kExitError;
  std::vector<Lane> lanes(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r)
    init_lane(lanes[static_cast<size_t>(r)], "gpu " + std::to_string(r), r, nranks, real, shim);
  const std::vector<Case> cases = build_cases(o, nranks);
  const Capacity cap = capacity_for(cases, nranks);
  IdPair ids{};
  bool ok = succeeded(lanes[0], on(lanes[0].real, real.GetUniqueId(&ids.real)), "ncclGetUniqueId") &&
            succeeded(lanes[0], on(lanes[0].shim, shim.GetUniqueId(&ids.shim)), "ncclGetUniqueId") &&
            init_grouped(lanes, &Lane::real, ids.real) && init_grouped(lanes, &Lane::shim, ids.shim);
  for (Lane& lane : lanes) {
    if (!ok) break;
    ok = succeeded(lane, cudaSetDevice(lane.rank), "cudaSetDevice") &&
         succeeded(lane, cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (Side* s : {&lane.real, &lane.shim}) {
      ok = ok && succeeded(lane, cudaMalloc(reinterpret_cast<void**>(&s->buf.send), cap.send), "cudaMalloc") &&
           succeeded(lane, cudaMalloc(reinterpret_cast<void**>(&s->buf.recv), cap.recv), "cudaMalloc");
    }
    lane.out_real.reset(new uint8_t[cap.output]);
    lane.out_shim.reset(new uint8_t[cap.output]);
  }
  for (size_t i = 0; ok && i < cases.size(); ++i) ok = run_case_grouped(lanes, cases[i]);
  size_t cases_run = 0, wrong = 0;
  for (Lane& lane : lanes) {
    cases_run += lane.cases;
    wrong += lane.wrong;
    lane.failed = !ok;
    cudaSetDevice(lane.rank);
    ok = close_lane(lane) && ok;
  }
  std::printf("conformance: one process, %d GPUs: cases %zu wrong_elements %zu\n", nranks, cases_run, wrong);
  std::fflush(stdout);
  if (!ok) return kExitError;
  return wrong > 0 ? kExitWrong : 0;
}

// One rank's process: exit status 0, kExitWrong or kExitError.
int rank_main(const Options& o, int rank, int nranks, const IdChannel& ch) {
  signal(SIGPIPE, SIG_IGN);
  if (o.share_gpus) {
    // Before either library is loaded: NCCL reads its host id once per process, at its first call.
    setenv("NCCL_HOSTID", ("symcomm-conformance-rank" + std::to_string(rank)).c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    setenv("SYMCOMM_SHARED_GPU", "1", 1);
  }
  NcclApi real;
  NcclApi shim;
  if (!load_api(o.real, "real NCCL", real) || !load_api(o.shim, "drop-in", shim)) return kExitError;
  Lane lane;
  init_lane(lane, "rank " + std::to_string(rank), rank, nranks, real, shim);
  int devices = 0;
  if (!succeeded(lane, cudaGetDeviceCount(&devices), "cudaGetDeviceCount")) return kExitError;
  if (devices < 1 || (rank >= devices && !o.share_gpus)) {
    std::fprintf(stderr, "conformance: %s: only %d GPUs are visible (--share-gpus shares them)\n", lane.tag.c_str(),
                 devices);
    return kExitError;
  }
  lane.device = rank % devices;
  if (!succeeded(lane, cudaSetDevice(lane.device), "cudaSetDevice")) return kExitError;
  if (o.agreement) return run_agreement(lane, ch) ? 0 : kExitWrong;
  if (o.kill) return run_kill(lane, ch) ? 0 : kExitWrong;

  const std::vector<Case> cases = build_cases(o, nranks);
  bool ok = open_lane(lane, ch, capacity_for(cases, nranks));
  for (size_t i = 0; ok && i < cases.size(); ++i) ok = run_case(lane, cases[i], o.graph);
  size_t cases_run = lane.cases;
  size_t wrong = lane.wrong;
  if (ok && o.threads > 1) ok = run_threads(o, lane, ch, &cases_run, &wrong);
  lane.failed = !ok;
  ok = close_lane(lane) && ok;

  std::printf("conformance: rank %d cases %zu wrong_elements %zu\n", rank, cases_run, wrong);
  std::fflush(stdout);
  if (!ok) std::fprintf(stderr, "conformance: rank %d stopped: a CUDA or NCCL call failed\n", rank);
  if (!ok) return kExitError;
  return wrong > 0 ? kExitWrong : 0;
}

// ---------------------------------------------------------------------------------------------------------
// The parent: forks the ranks and waits for them

// The number of visible GPUs, asked in a child process: the parent stays free of CUDA so that it can fork.
int count_gpus() {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    int n = -1;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      std::fprintf(stderr, "conformance: cudaGetDeviceCount failed: %s\n", cudaGetErrorString(e));
      n = -1;
    }
    _exit(write_all(fds[1], &n, sizeof n) ? 0 : 1);
  }
  close(fds[1]);
  int n = -1;
  if (pid < 0 || !read_all(fds[0], &n, sizeof n)) n = -1;
  close(fds[0]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  return n;
}

void close_all(const std::vector<std::array<int, 2>>& pipes) {
  for (const std::array<int, 2>& p : pipes) {
    for (int fd : p) {
      if (fd >= 0) close(fd);
    }
  }
}

// This rank's ends of the pipes (rank 0: every write end; rank r: the read end of pipe r); closes the rest.
IdChannel channel_for(int rank, std::vector<std::array<int, 2>>& pipes) {
  IdChannel ch;
  for (size_t r = 1; r < pipes.size(); ++r) {
    if (rank == 0) {
      ch.write_fds.push_back(pipes[r][1]);
      pipes[r][1] = -1;
    } else if (static_cast<size_t>(rank) == r) {
      ch.read_fd = pipes[r][0];
      pipes[r][0] = -1;
    }
  }
  close_all(pipes);
  return ch;
}

void kill_running(const std::vector<pid_t>& pids, const std::vector<bool>& done) {
  for (size_t r = 0; r < pids.size(); ++r) {
    if (!done[r]) kill(pids[r], SIGKILL);
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "stopped";
}

// Waits for every rank with SIGCHLD blocked (sigtimedwait); kills the others with SIGKILL where one stops at a
// failed call or crashes (they cannot finish without it), and all of them at the timeout. True when all exited 0
// (with `last_killed`, --kill: the last rank must end by SIGKILL instead, and its end stops no other).
bool wait_for_ranks(const std::vector<pid_t>& pids, int timeout_s, const sigset_t& sigchld, bool last_killed) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(timeout_s);
  std::vector<bool> done(pids.size(), false);
  size_t running = pids.size();
  bool all_passed = true;
  bool killed = false;
  while (running > 0) {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      const auto it = std::find(pids.begin(), pids.end(), pid);
      if (it == pids.end()) continue;
      const size_t r = static_cast<size_t>(it - pids.begin());
      done[r] = true;
      --running;
      const bool killed_as_asked =
          last_killed && r + 1 == pids.size() && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      const bool passed =
          last_killed && r + 1 == pids.size() ? killed_as_asked : WIFEXITED(status) && WEXITSTATUS(status) == 0;
      const bool finished =
          killed_as_asked || (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == kExitWrong));
      all_passed = all_passed && passed;
      if (!passed) std::fprintf(stderr, "conformance: rank %zu %s\n", r, describe_status(status).c_str());
      if (!finished && !killed && running > 0) {
        std::fprintf(stderr, "conformance: stopping the other ranks\n");
        kill_running(pids, done);
        killed = true;
      }
    }
    if (pid < 0 && errno == ECHILD) break;
    if (running == 0) break;
    const Clock::duration left = deadline - Clock::now();
    if (left <= Clock::duration::zero() && !killed) {
      std::fprintf(stderr, "conformance: timeout after %d s: killing the %zu ranks still running\n", timeout_s,
                   running);
      kill_running(pids, done);
      killed = true;
      all_passed = false;
    }
    const auto wait_ns = killed ? std::chrono::nanoseconds(std::chrono::seconds(1))
                                : std::chrono::duration_cast<std::chrono::nanoseconds>(left);
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(wait_ns.count() / 1000000000);
    ts.tv_nsec = static_cast<long>(wait_ns.count() % 1000000000);
    sigtimedwait(&sigchld, nullptr, &ts);
  }
  return all_passed;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  Options o;
  if (!parse_args(argc, argv, o)) {
    print_usage(stderr);
    return 2;
  }
  setenv("SYMCOMM_NCCL_REAL_LIBRARY", o.real.c_str(), 0);
  const char* forwarded_to = getenv("SYMCOMM_NCCL_REAL_LIBRARY");
  if (forwarded_to != nullptr && o.real != forwarded_to) {
    std::fprintf(stderr, "conformance: SYMCOMM_NCCL_REAL_LIBRARY=%s: the drop-in library forwards there, not to %s\n",
                 forwarded_to, o.real.c_str());
  }

  const int nranks = o.ranks > 0 ? o.ranks : count_gpus();
  if (nranks < 1) {
    std::fprintf(stderr, "conformance: no GPU visible\n");
    return 1;
  }
  if (o.kill && nranks < 2) {
    std::fprintf(stderr, "conformance: --kill needs 2+ ranks (--ranks, or --share-gpus on one GPU)\n");
    return 2;
  }
  const char* mode = getenv("SYMCOMM_NCCL_SHIM");
  std::printf("conformance: %d ranks, %zu cases per rank, max-bytes %zu, threads %d%s%s, SYMCOMM_NCCL_SHIM=%s\n",
              nranks, build_cases(o, nranks).size(), o.max_bytes, o.threads, o.graph ? ", graph" : "",
              o.quick ? ", quick" : "", mode != nullptr ? mode : "");

  sigset_t sigchld;
  sigset_t old_mask;
  sigemptyset(&sigchld);
  sigaddset(&sigchld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &sigchld, &old_mask);

  std::vector<std::array<int, 2>> pipes(static_cast<size_t>(nranks), std::array<int, 2>{-1, -1});
  for (size_t r = 1; r < pipes.size(); ++r) {
    if (pipe2(pipes[r].data(), O_CLOEXEC) != 0) {
      std::fprintf(stderr, "conformance: pipe: %s\n", std::strerror(errno));
      return 1;
    }
  }
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  const int processes = o.one_process ? 1 : nranks;
  for (int r = 0; r < processes; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      const IdChannel ch = channel_for(r, pipes);
      // exit, not _exit: the drop-in library reports at exit
      std::exit(o.one_process ? one_process_main(o, nranks) : rank_main(o, r, nranks, ch));
    }
    if (pid < 0) {
      std::fprintf(stderr, "conformance: fork: %s\n", std::strerror(errno));
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return 1;
    }
    pids.push_back(pid);
  }
  close_all(pipes);

  const bool passed = wait_for_ranks(pids, o.timeout_s, sigchld, o.kill);
  std::printf("conformance: %s (%d ranks)\n", passed ? "PASS" : "FAIL", nranks);
  return passed ? 0 : 1;
}
