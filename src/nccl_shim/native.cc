#include "native.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "algos/node_plan.h"
#include "algos/request.h"
#include "base/cuda_check.h"
#include "base/hash.h"
#include "base/host_process.h"
#include "base/logging.h"
#include "id_stamp.h"
#include "multinode/multinode_cuda_impl.h"
#include "native_plan.h"
#include "shim_config.h"
#include "symcomm/communicator.h"
#include "symcomm/store.h"

namespace symcomm::nccl_shim::native {
namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------------------
// Settings and statistics

const ShimConfig& settings() {
  static const ShimConfig c = read_config();  // NOTE [drop-in environment]
  return c;
}

// Whether the native layer acts: auto or native-only, with readable settings (otherwise every hook forwards,
// and the real library's opening reports a refused setting: real_nccl.cc).
bool active() {
  const ShimConfig& c = settings();
  return (c.mode == Mode::kAuto || c.mode == Mode::kNativeOnly) && c.bad_variable == nullptr;
}

bool strict() { return settings().mode == Mode::kNativeOnly; }

struct Stats {
  std::atomic<uint64_t> calls[2][kNumNativeColls] = {};
  std::atomic<uint64_t> bytes[2][kNumNativeColls] = {};
};
Stats g_stats;

void print_stats() {
  uint64_t c[2] = {}, b[2] = {};
  std::string per;
  for (int i = 0; i < kNumNativeColls; ++i) {
    for (int n = 0; n < 2; ++n) {
      c[n] += g_stats.calls[n][i].load();
      b[n] += g_stats.bytes[n][i].load();
    }
    per += fmt::format(" {} {}/{}", native_coll_name(static_cast<NativeColl>(i)), g_stats.calls[1][i].load(),
                       g_stats.calls[0][i].load());
  }
  std::fprintf(stderr,
               "symcomm_nccl: pid %d mode %s: native %llu calls %llu bytes, forwarded %llu calls %llu bytes "
               "(native/forwarded:%s)\n",
               static_cast<int>(getpid()), mode_name(settings().mode), static_cast<unsigned long long>(c[1]),
               static_cast<unsigned long long>(b[1]), static_cast<unsigned long long>(c[0]),
               static_cast<unsigned long long>(b[0]), per.c_str());
}

void tally(bool native, NativeColl coll, size_t bytes) {
  if (!settings().stats) return;
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(print_stats); });
  g_stats.calls[native][static_cast<int>(coll)].fetch_add(1, std::memory_order_relaxed);
  g_stats.bytes[native][static_cast<int>(coll)].fetch_add(bytes, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------------------
// The store server behind stamped ids: one per process, on a loopback port, started by the first
// ncclGetUniqueId and kept until the process exits (communicators split later still use it).

struct IdServer {
  std::unique_ptr<StoreServer> server;
  std::array<uint8_t, 16> token{};
};

std::string hex(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", p[i]);
  return s;
}

uint64_t random_u64() {
  static std::mutex mu;
  static std::random_device dev;
  std::lock_guard lock(mu);
  return (uint64_t{dev()} << 32) ^ dev();
}

const IdServer* id_server() {
  static std::mutex mu;
  static IdServer* server = nullptr;  // never destroyed: communicators may outlive static destruction
  static bool tried = false;
  std::lock_guard lock(mu);
  if (tried) return server;
  tried = true;
  try {
    auto s = std::make_unique<IdServer>();
    for (size_t i = 0; i < s->token.size(); i += 8) {
      const uint64_t r = random_u64();
      std::memcpy(s->token.data() + i, &r, 8);
    }
    StoreServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.token = hex(s->token.data(), s->token.size());
    s->server = StoreServer::start(o);
    server = s.release();
  } catch (const std::exception& e) {
    SYMCOMM_LOG_WARN(
        "symcomm NCCL drop-in: no store server for symcomm's communicators ({}); communicators "
        "made from this process's ids stay forward-only",
        e.what());
  }
  return server;
}

// ---------------------------------------------------------------------------------------------------------
// Communicators served by symcomm (NOTE [drop-in communicators])

// Served by one symcomm communicator (`sc`, every rank on one node) or by one that spans nodes (`mn`: symcomm in each
// node, the real NCCL between them; NOTE [drop-in communicators that span nodes]).
struct NativeComm {
  ncclComm_t real = nullptr;
  int rank = 0;
  int nranks = 0;
  NativeLimits limits;
  std::shared_ptr<Store> store;
  std::unique_ptr<Communicator> sc;
  std::unique_ptr<CudaMultiNodeCommunicator::Impl> mn;

  void abort() {
    if (sc) sc->abort();
    if (mn) mn->abort();
  }
  void check() const {
    if (sc) sc->check();
    if (mn) mn->check();
  }
};

std::mutex g_registry_mu;
std::atomic<int> g_registry_size{0};
std::unordered_map<ncclComm_t, std::shared_ptr<NativeComm>>& registry() {
  static auto* m = new std::unordered_map<ncclComm_t, std::shared_ptr<NativeComm>>();
  return *m;
}

std::shared_ptr<NativeComm> find(ncclComm_t comm) {
  if (g_registry_size.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard lock(g_registry_mu);
  auto it = registry().find(comm);
  return it == registry().end() ? nullptr : it->second;
}

std::shared_ptr<NativeComm> take(ncclComm_t comm) {
  if (g_registry_size.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard lock(g_registry_mu);
  auto it = registry().find(comm);
  if (it == registry().end()) return nullptr;
  auto nc = std::move(it->second);
  registry().erase(it);
  g_registry_size.fetch_sub(1, std::memory_order_release);
  return nc;
}

void put(std::shared_ptr<NativeComm> nc) {
  std::lock_guard lock(g_registry_mu);
  registry()[nc->real] = std::move(nc);
  g_registry_size.fetch_add(1, std::memory_order_release);
}

NativeLimits resolved_limits(int nranks) {
  NativeLimits l = default_limits(nranks);
  for (int i = 0; i < kNumNativeColls; ++i) {
    if (settings().max_bytes[i] != kUnsetLimit) l.max_bytes[i] = settings().max_bytes[i];
  }
  return l;
}

// The drop-in settings every rank of a communicator must share, hashed (62 bits, so that its negation fits).
int64_t settings_hash(const NativeLimits& l) {
  symcomm::detail::Fnv1a h;
  h.add(static_cast<uint64_t>(settings().mode));
  for (size_t v : l.max_bytes) h.add(v);
  h.add(static_cast<uint64_t>(settings().fake_node_size));
  h.add(std::string_view(settings().node_min_bytes));
  return static_cast<int64_t>(h.value() >> 2);
}

ncclResult_t to_nccl_result(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return ncclInvalidArgument;
    case ErrorCode::kTimeout:
    case ErrorCode::kPeerDead: return ncclRemoteError;
    case ErrorCode::kAborted:
    case ErrorCode::kMismatch:
    case ErrorCode::kUnsupported: return ncclInvalidUsage;
    case ErrorCode::kStore:
    case ErrorCode::kSystem: return ncclSystemError;
    case ErrorCode::kCuda: return ncclUnhandledCudaError;
    case ErrorCode::kInternal: return ncclInternalError;
  }
  return ncclInternalError;
}

// Makes a failure of symcomm's part the thread's last error and returns its NCCL code.
ncclResult_t fail(const NativeComm* nc, ncclResult_t code, std::string_view what) {
  const std::string text = nc != nullptr
                               ? fmt::format("symcomm NCCL drop-in: rank {} of {}: {}", nc->rank, nc->nranks, what)
                               : fmt::format("symcomm NCCL drop-in: {}", what);
  record_text(text.c_str());
  return code;
}

template <class F>
ncclResult_t guarded(const NativeComm* nc, F&& f) noexcept {
  try {
    return f();
  } catch (const Error& e) {
    return fail(nc, to_nccl_result(e.code()), e.what());
  } catch (const std::exception& e) {
    return fail(nc, ncclInternalError, e.what());
  } catch (...) {
    return fail(nc, ncclInternalError, "unknown exception");
  }
}

// ---------------------------------------------------------------------------------------------------------
// Agreement over the real NCCL communicator

int comm_device(ncclComm_t comm) {
  int dev = -1;
  if (forward_call<Target::kCommCuDevice, decltype(&pncclCommCuDevice)>(comm, &dev) != ncclSuccess) return -1;
  return dev;
}

// Waits until a communicator's creation (blocking or not) has finished; its result.
ncclResult_t wait_ready(ncclComm_t comm) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = forward_call<Target::kCommGetAsyncError, decltype(&pncclCommGetAsyncError)>(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    std::this_thread::sleep_for(100us);
  }
}

// One communicator's part of a round of small collectives through the real NCCL: `words` go to a device buffer,
// `enqueue` issues the call on it, and the buffer's words come back into `words`.
struct Round {
  ncclComm_t comm = nullptr;
  std::vector<int64_t> words;
  std::function<ncclResult_t(int64_t* buf, cudaStream_t stream)> enqueue;
};

// Runs the rounds (in one NCCL group where there are several). false where a CUDA or NCCL call failed or the result
// did not come within the creation timeout (a peer is gone: the communicator is broken anyway).
bool nccl_rounds(std::vector<Round>& rounds) {
  struct Slot {
    int device = -1;
    int64_t* buf = nullptr;
    cudaStream_t stream = nullptr;
  };
  std::vector<Slot> slots(rounds.size());
  bool ok = true;
  for (size_t i = 0; i < rounds.size() && ok; ++i) {
    Slot& s = slots[i];
    const size_t bytes = rounds[i].words.size() * sizeof(int64_t);
    s.device = comm_device(rounds[i].comm);
    ok = s.device >= 0;
    if (!ok) break;
    symcomm::detail::DeviceScope scope(s.device);
    // On the round's stream: a copy from pageable memory on the legacy stream may land after the collective.
    ok = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking) == cudaSuccess &&
         cudaMalloc(&s.buf, bytes) == cudaSuccess &&
         cudaMemcpyAsync(s.buf, rounds[i].words.data(), bytes, cudaMemcpyHostToDevice, s.stream) == cudaSuccess;
  }
  if (ok) {
    const bool group = rounds.size() > 1;
    if (group) ok = forward_call<Target::kGroupStart, decltype(&pncclGroupStart)>() == ncclSuccess;
    for (size_t i = 0; i < rounds.size() && ok; ++i)
      ok = rounds[i].enqueue(slots[i].buf, slots[i].stream) == ncclSuccess;
    if (group) ok = forward_call<Target::kGroupEnd, decltype(&pncclGroupEnd)>() == ncclSuccess && ok;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(settings().init_timeout_ms);
  bool leak = false;
  for (size_t i = 0; i < rounds.size(); ++i) {
    Slot& s = slots[i];
    if (s.device < 0) continue;
    symcomm::detail::DeviceScope scope(s.device, std::nothrow);
    if (ok && s.stream != nullptr) {
      cudaError_t q;
      while ((q = cudaStreamQuery(s.stream)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(50us);
      }
      if (q == cudaErrorNotReady) leak = true;  // still running: its buffer and stream must stay
      ok = ok && q == cudaSuccess &&
           cudaMemcpy(rounds[i].words.data(), s.buf, rounds[i].words.size() * sizeof(int64_t),
                      cudaMemcpyDeviceToHost) == cudaSuccess;
    }
    if (!leak) {
      if (s.buf != nullptr) cudaFree(s.buf);
      if (s.stream != nullptr) cudaStreamDestroy(s.stream);
    }
  }
  return ok && !leak;
}

// The element-wise minimum over each communicator's ranks of its kAgreeWords values (one group for several).
constexpr int kAgreeWords = 4;
using AgreeWords = std::array<int64_t, kAgreeWords>;

bool nccl_min(const std::vector<ncclComm_t>& comms, std::vector<AgreeWords>& words) {
  std::vector<Round> rounds;
  for (size_t i = 0; i < comms.size(); ++i) {
    rounds.push_back(Round{comms[i], std::vector<int64_t>(words[i].begin(), words[i].end()),
                           [c = comms[i]](int64_t* buf, cudaStream_t s) {
                             return forward_call<Target::kAllReduce, decltype(&pncclAllReduce)>(
                                 buf, buf, kAgreeWords, ncclInt64, ncclMin, c, s);
                           }});
  }
  if (!nccl_rounds(rounds)) return false;
  for (size_t i = 0; i < comms.size(); ++i) std::copy(rounds[i].words.begin(), rounds[i].words.end(), words[i].begin());
  return true;
}

// Every rank's `mine` (the same number of words on each), in rank order.
std::optional<std::vector<int64_t>> nccl_all_gather(ncclComm_t comm, int rank, int nranks,
                                                    const std::vector<int64_t>& mine) {
  const size_t k = mine.size();
  std::vector<Round> rounds(1);
  rounds[0].comm = comm;
  rounds[0].words.assign(k * nranks, 0);
  std::copy(mine.begin(), mine.end(), rounds[0].words.begin() + rank * k);
  rounds[0].enqueue = [&](int64_t* buf, cudaStream_t s) {
    return forward_call<Target::kAllGather, decltype(&pncclAllGather)>(buf + rank * k, buf, k, ncclInt64, comm, s);
  };
  if (!nccl_rounds(rounds)) return std::nullopt;
  return std::move(rounds[0].words);
}

// symcomm's configuration for a communicator behind NCCL's: libsymcomm's SYMCOMM_* settings, without its own
// NCCL communicator (the real one is beside it), and unless set in the environment:
// - a small symmetric heap: the drop-in library passes the caller's buffers, which the staged kernels copy
//   through the staging buffer;
// - a collective timeout of a day: NCCL waits for a late peer for ever and its callers (PyTorch's watchdog)
//   decide when to give up and abort, which reaches symcomm's kernels at once. A dead peer is reported within
//   symcomm's detection time whatever the timeout.
Config comm_config() {
  Config c = Config::from_env();
  c.nccl = NcclInit::kOff;
  if (!settings().heap_bytes_set) c.heap_bytes = size_t{2} << 20;
  if (!settings().timeout_set) c.timeout = std::chrono::hours(24);
  return c;
}

// A NativeComm beside `comm` whose symcomm communicator `name` (ranks `ranks`, on `device`) is made by meeting in the
// store server on loopback `port` with `token`; `nc->sc` holds it.
std::shared_ptr<NativeComm> meet(ncclComm_t comm, int rank, int nranks, uint16_t port,
                                 const std::array<uint8_t, 16>& token, const std::string& name, const RankInfo& ranks,
                                 int device) {
  auto nc = std::make_shared<NativeComm>();
  nc->real = comm;
  nc->rank = rank;
  nc->nranks = nranks;
  nc->limits = resolved_limits(nranks);
  StoreOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  so.token = hex(token.data(), token.size());
  so.timeout = std::chrono::milliseconds(settings().init_timeout_ms);
  nc->store = Store::connect(so);
  CommOptions o;
  o.backend = BackendKind::kCuda;
  o.device = device;
  o.name = name;
  o.config = comm_config();
  o.meet_timeout = std::chrono::milliseconds(settings().init_timeout_ms);
  symcomm::detail::DeviceScope scope(device);  // creation makes the device current: give the caller's back
  nc->sc = Communicator::create(nc->store, ranks, o);
  return nc;
}

std::shared_ptr<NativeComm> create_from_stamp(ncclComm_t comm, int nranks, int rank, const IdStamp& stamp, int device) {
  return meet(comm, rank, nranks, stamp.port, stamp.token, fmt::format("nccl-{:016x}", stamp.nonce),
              RankInfo{rank, nranks, rank, nranks}, device);
}

// A symcomm communicator that every rank made (or failed to make) beside `comm`; whether it is whole.
bool usable(const NativeComm* nc, int rank, int nranks) {
  if (nc != nullptr && nc->mn != nullptr) return true;  // a multi-node one exists only whole (else its creation threw)
  return nc != nullptr && nc->sc != nullptr && nc->sc->rank() == rank && nc->sc->world_size() == nranks &&
         nc->sc->full_peer_access();
}

// What a creation made through the drop-in library still needs: the agreement and, for a fresh id, symcomm's
// communicator; `made` holds a split's symcomm communicator, made already.
struct Pending {
  ncclComm_t comm = nullptr;
  int nranks = 0;
  int rank = 0;
  std::optional<IdStamp> stamp;
  bool split = false;
  std::shared_ptr<NativeComm> made;
  bool spanning = false;  ///< a split of a communicator that spans nodes: made as one (attach_spanning)
};

// Agreement (2) and registration; every rank of the communicator calls it once.
void conclude(const Pending& p, std::shared_ptr<NativeComm> nc) {
  bool mine = false;
  try {
    mine = usable(nc.get(), p.rank, p.nranks);
  } catch (const std::exception&) {
  }
  std::vector<AgreeWords> w{{mine ? 1 : 0, 0, 0, 0}};
  const bool all = nccl_min({p.comm}, w) && w[0][0] == 1;
  if (!all) {
    if (mine) {
      SYMCOMM_LOG_INFO(
          "symcomm NCCL drop-in: rank {} of {}: another rank could not make symcomm's communicator; "
          "this communicator stays forward-only",
          p.rank, p.nranks);
    }
    try {
      nc.reset();
    } catch (const std::exception&) {
    }
    return;
  }
  nc->real = p.comm;
  put(std::move(nc));
}

// NOTE [drop-in communicators that span nodes]
// A communicator whose ranks are on several hosts (or, with SYMCOMM_FAKE_NODE_SIZE, several fake nodes) is served by a
// multi-node communicator (symcomm/multinode_cuda.h's implementation): symcomm in each node, the real NCCL between
// them. No store reaches every host, so the pieces are agreed through the real communicator: an all-gather of every
// rank's host, pid and pid namespace, store server and a random name (rank 0's names the node communicators); from
// it every rank computes the same layout, the node communicators meet in the store server of their node's lowest rank
// (on the same host: loopback), and one ncclCommSplit of the real communicator (color: local index, key: node) gives
// the communicators between the nodes where the nodes are of equal size. The caller's communicator is the whole job's
// engine, borrowed: it is never aborted by symcomm. A call runs there only where the multi-node plan takes a path
// other than flat (SYMCOMM_NODE_MIN_BYTES; a flat call is the caller's NCCL call, so it is forwarded as it is) and
// outside the caller's NCCL groups (the real NCCL defers a group's calls to ncclGroupEnd, which would reorder the
// stages). The second agreement round and forward-only on any "no" are as for one node.

// The real NCCL's functions for the stages between the nodes, past this library's hooks (a collective on the
// caller's communicator would come back into them).
const symcomm::detail::NcclCalls& real_calls() {
  static const symcomm::detail::NcclCalls calls{
      .comm_abort = [](ncclComm_t c) { return forward_call<Target::kCommAbort, decltype(&pncclCommAbort)>(c); },
      .comm_revoke =
          [](ncclComm_t c, int flags) {
            return forward_call<Target::kCommRevoke, ncclResult_t (*)(ncclComm_t, int)>(c, flags);
          },
      .comm_get_async_error =
          [](ncclComm_t c, ncclResult_t* e) {
            return forward_call<Target::kCommGetAsyncError, decltype(&pncclCommGetAsyncError)>(c, e);
          },
      // This library's own: the real library's text, or the drop-in library's failure.
      .get_error_string = &ncclGetErrorString,
      .get_last_error = &ncclGetLastError,
      .all_reduce =
          [](const void* in, void* out, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
            return forward_call<Target::kAllReduce, decltype(&pncclAllReduce)>(in, out, n, t, op, c, s);
          },
      .all_gather =
          [](const void* in, void* out, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
            return forward_call<Target::kAllGather, decltype(&pncclAllGather)>(in, out, n, t, c, s);
          },
      .reduce_scatter =
          [](const void* in, void* out, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
            return forward_call<Target::kReduceScatter, decltype(&pncclReduceScatter)>(in, out, n, t, op, c, s);
          },
      .broadcast =
          [](const void* in, void* out, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t s) {
            return forward_call<Target::kBroadcast, decltype(&pncclBroadcast)>(in, out, n, t, root, c, s);
          },
      .send = [](const void* buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
                 cudaStream_t s) { return forward_call<Target::kSend, decltype(&pncclSend)>(buf, n, t, peer, c, s); },
      .recv = [](void* buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
                 cudaStream_t s) { return forward_call<Target::kRecv, decltype(&pncclRecv)>(buf, n, t, peer, c, s); },
      .group_start = [] { return forward_call<Target::kGroupStart, decltype(&pncclGroupStart)>(); },
      .group_end = [] { return forward_call<Target::kGroupEnd, decltype(&pncclGroupEnd)>(); },
  };
  return calls;
}

// The nodes of a communicator from every rank's words (span_node_keys); nullopt where it cannot be served.
std::optional<symcomm::detail::NodeLayout> span_layout(const std::vector<int64_t>& all, int nranks) {
  std::vector<int64_t> keys;
  if (!span_node_keys(all, nranks, settings().fake_node_size, kMaxRanks, &keys)) return std::nullopt;
  return symcomm::detail::make_node_layout(keys);
}

std::shared_ptr<NativeComm> make_spanning(const Pending& p, int device, const std::vector<int64_t>& all,
                                          const symcomm::detail::NodeLayout& layout, ncclComm_t inter) {
  using symcomm::detail::CudaNodeParts;
  const int node = layout.node_of[p.rank], local = layout.local_of[p.rank];
  const int leader = layout.members[node].front();
  const int local_size = static_cast<int>(layout.members[node].size());
  std::array<uint8_t, 16> token{};
  std::memcpy(token.data(), &all[leader * kSpanWords + kSpanToken0], token.size());
  std::shared_ptr<NativeComm> nc =
      meet(p.comm, p.rank, p.nranks, static_cast<uint16_t>(all[leader * kSpanWords + kSpanPort]), token,
           fmt::format("nccl-span-{:016x}-node{}", static_cast<uint64_t>(all[kSpanName]), node),
           RankInfo{local, local_size, local, local_size}, device);
  if (layout.num_nodes() == 1) return nc;  // a communicator of one node (a split inside a node): served as one is
  CudaNodeParts parts;
  parts.thresholds =
      symcomm::detail::parse_node_thresholds(settings().node_min_bytes, symcomm::detail::cuda_node_thresholds());
  parts.node = std::move(nc->sc);
  parts.rank = p.rank;
  parts.device = device;
  parts.world = p.comm;
  parts.inter = inter;
  parts.nccl = &real_calls();
  for (int r = 0; r < p.nranks; ++r) {
    parts.pids.push_back(static_cast<int>(all[r * kSpanWords + kSpanPid]));
    if (r != p.rank && all[r * kSpanWords + kSpanPidSpace] == all[p.rank * kSpanWords + kSpanPidSpace]) {
      parts.host_peers.push_back(r);
    }
  }
  parts.layout = layout;
  nc->mn = std::make_unique<CudaMultiNodeCommunicator::Impl>(std::move(parts));
  return nc;
}

void attach_spanning(const Pending& p, int device) {
  const IdServer* server = id_server();
  std::vector<int64_t> mine(kSpanWords, 0);
  mine[kSpanHost] = static_cast<int64_t>(host_identity());
  mine[kSpanPid] = ::getpid();
  if (server != nullptr) {
    mine[kSpanPort] = server->server->port();
    std::memcpy(&mine[kSpanToken0], server->token.data(), server->token.size());
  }
  mine[kSpanName] = static_cast<int64_t>(random_u64());
  mine[kSpanPidSpace] = static_cast<int64_t>(symcomm::detail::fnv1a(symcomm::detail::host_identity()));
  const std::optional<std::vector<int64_t>> all = nccl_all_gather(p.comm, p.rank, p.nranks, mine);
  if (!all) return;  // the communicator is broken: a peer is gone, or this rank's CUDA failed
  std::optional<symcomm::detail::NodeLayout> layout;
  try {
    layout = span_layout(*all, p.nranks);
  } catch (const std::exception& e) {
    SYMCOMM_LOG_WARN("symcomm NCCL drop-in: rank {} of {}: {}", p.rank, p.nranks, e.what());
  }
  if (!layout) return;  // the same answer on every rank: forward-only everywhere
  // The split is collective over the real communicator: every rank takes part, whatever it made before.
  ncclComm_t inter = nullptr;
  const bool wants_inter = layout->num_nodes() > 1 && layout->uniform() && layout->node_size() > 1;
  bool inter_ok = !wants_inter;
  if (wants_inter) {
    const ncclResult_t r = forward_call<Target::kCommSplit, decltype(&pncclCommSplit)>(
        p.comm, layout->local_of[p.rank], layout->node_of[p.rank], &inter, nullptr);
    inter_ok = (r == ncclSuccess || r == ncclInProgress) && inter != nullptr && wait_ready(inter) == ncclSuccess;
  }
  std::shared_ptr<NativeComm> nc;
  if (inter_ok) {
    try {
      nc = make_spanning(p, device, *all, *layout, inter);
    } catch (const std::exception& e) {
      SYMCOMM_LOG_WARN(
          "symcomm NCCL drop-in: rank {} of {}: the multi-node communicator could not be made ({}); this "
          "communicator stays forward-only",
          p.rank, p.nranks, e.what());
    }
  }
  // Where no multi-node communicator owns the one between the nodes, nothing else ends it; where one does, its end
  // ends it (conclude() drops it on any rank's "no").
  if ((nc == nullptr || nc->mn == nullptr) && inter != nullptr) {
    forward_call<Target::kCommAbort, decltype(&pncclCommAbort)>(inter);
  }
  conclude(p, std::move(nc));
}

void attach_fresh(const Pending& p) {
  const NativeLimits limits = resolved_limits(p.nranks);
  const int device = comm_device(p.comm);
  const bool can = p.stamp.has_value() && p.nranks >= 2 && device >= 0;
  const int fake = settings().fake_node_size;
  const bool one_node = can && p.stamp->host == host_identity() && (fake == 0 || fake >= p.nranks);
  const int64_t h = settings_hash(limits);
  std::vector<AgreeWords> w{{can ? 1 : 0, h, -h, one_node ? 1 : 0}};
  if (!nccl_min({p.comm}, w) || w[0][0] != 1 || w[0][1] != -w[0][2]) return;  // (1): forward-only everywhere
  if (w[0][3] != 1) return attach_spanning(p, device);  // NOTE [drop-in communicators that span nodes]
  if (p.nranks > kMaxRanks) return;
  std::shared_ptr<NativeComm> nc;
  try {
    nc = create_from_stamp(p.comm, p.nranks, p.rank, *p.stamp, device);
  } catch (const std::exception& e) {
    SYMCOMM_LOG_WARN(
        "symcomm NCCL drop-in: rank {} of {}: symcomm's communicator could not be made ({}); this "
        "communicator stays forward-only",
        p.rank, p.nranks, e.what());
  }
  conclude(p, std::move(nc));
}

void attach(const Pending& p) noexcept {
  try {
    if (wait_ready(p.comm) != ncclSuccess) return;
    if (p.spanning) {
      const int device = comm_device(p.comm);
      if (device >= 0) attach_spanning(p, device);
    } else if (p.split) {
      conclude(p, p.made);
    } else {
      attach_fresh(p);
    }
  } catch (const std::exception& e) {
    SYMCOMM_LOG_WARN("symcomm NCCL drop-in: rank {} of {}: {}; the communicator stays forward-only", p.rank, p.nranks,
                     e.what());
  }
}

// The caller's open ncclGroupStart calls on this thread, and the creations it made inside them, finished at the
// outermost ncclGroupEnd.
thread_local int t_group_depth = 0;
thread_local std::vector<Pending> t_pending;

void finish_pending(std::vector<Pending> pending) {
  if (pending.size() == 1) {
    attach(pending[0]);
    return;
  }
  // One process, several of a group's creations (several GPUs): it cannot make symcomm's communicators one
  // after another from one thread, so every one answers "no" in one grouped round, as the first round of a
  // fresh id's agreement or the only round of a split's.
  std::vector<ncclComm_t> comms;
  for (const Pending& p : pending) {
    if (wait_ready(p.comm) == ncclSuccess) comms.push_back(p.comm);
  }
  std::vector<AgreeWords> w(comms.size(), AgreeWords{0, 0, 0, 0});
  if (!comms.empty()) nccl_min(comms, w);
}

void created(Pending p) {
  if (t_group_depth > 0) {
    t_pending.push_back(std::move(p));
  } else {
    attach(p);
  }
}

void destroy_native(std::shared_ptr<NativeComm> nc, bool abort) {
  try {
    if (abort) nc->abort();
    nc.reset();
  } catch (const std::exception& e) {
    SYMCOMM_LOG_WARN("symcomm NCCL drop-in: releasing symcomm's communicator: {}", e.what());
  }
}

// ---------------------------------------------------------------------------------------------------------
// Collectives

CollOptions on(cudaStream_t stream) {
  CollOptions o;
  o.stream = reinterpret_cast<Stream>(stream);
  return o;
}

// A multi-node communicator behind Communicator's calls, as the hooks make them: a call whose path is flat is left
// for the caller's NCCL (`ran` stays false).
struct SpanningTarget {
  CudaMultiNodeCommunicator::Impl& mn;
  bool ran = false;

  void all_reduce(const void* in, void* out, size_t n, DataType dt, ReduceOp op, const CollOptions& o) {
    issue(symcomm::detail::make_request(Collective::kAllReduce, in, out, n, dt, op, 0, o));
  }
  void all_gather(const void* in, void* out, size_t n, DataType dt, const CollOptions& o) {
    issue(symcomm::detail::make_request(Collective::kAllGather, in, out, n, dt, ReduceOp::kSum, 0, o));
  }
  void reduce_scatter(const void* in, void* out, size_t n, DataType dt, ReduceOp op, const CollOptions& o) {
    issue(symcomm::detail::make_request(Collective::kReduceScatter, in, out, n, dt, op, 0, o));
  }
  void broadcast(const void* in, void* out, size_t n, DataType dt, int root, const CollOptions& o) {
    issue(symcomm::detail::make_request(Collective::kBroadcast, in, out, n, dt, ReduceOp::kSum, root, o));
  }

 private:
  void issue(const symcomm::detail::Request& r) {
    if (mn.path_of(r, Hierarchy::kAuto) == NodePath::kFlat) return;
    mn.issue(r, Hierarchy::kAuto);
    ran = true;
  }
};

// Every size: the multi-node plan's thresholds choose between its paths.
NativeLimits unlimited() {
  NativeLimits l;
  for (size_t& v : l.max_bytes) v = SIZE_MAX;
  return l;
}

template <class Forward, class Run>
ncclResult_t collective(NativeColl coll, ncclComm_t comm, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                        Forward&& forward, Run&& run) noexcept {
  if (!active()) return forward();
  const std::shared_ptr<NativeComm> nc = find(comm);
  if (nc == nullptr) {
    if (strict() && count != 0) {
      return fail(nullptr, ncclInvalidUsage,
                  fmt::format("SYMCOMM_NCCL_SHIM=native-only: {} on a communicator that symcomm does not serve "
                              "(NOTE [drop-in communicators]: not every rank could make symcomm's part)",
                              native_coll_name(coll)));
    }
    tally(false, coll, count * nccl_type_size(dt));
    return forward();
  }
  if (nc->mn != nullptr) {  // NOTE [drop-in communicators that span nodes]
    const NativePlan p = plan_call(coll, count, dt, op, nc->nranks, unlimited(), false);
    if (!p.native || t_group_depth > 0) {
      tally(false, coll, p.bytes);
      return forward();
    }
    bool ran = false;
    const ncclResult_t r = guarded(nc.get(), [&] {
      SpanningTarget target{*nc->mn};
      run(target, p);
      ran = target.ran;
      return ncclSuccess;
    });
    if (r != ncclSuccess) return r;
    tally(ran, coll, p.bytes);
    return ran ? ncclSuccess : forward();
  }
  const NativePlan p = plan_call(coll, count, dt, op, nc->nranks, nc->limits, !strict());
  if (!p.native) {  // native-only too: what symcomm has no exact equivalent for (FP8, unsigned min/max, ...)
    tally(false, coll, p.bytes);
    return forward();
  }
  return guarded(nc.get(), [&] {
    run(*nc->sc, p);
    tally(true, coll, p.bytes);
    return ncclSuccess;
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Hooks

ncclResult_t GetUniqueId(ncclUniqueId* uniqueId) noexcept {
  const ncclResult_t r = forward_call<Target::kGetUniqueId, decltype(&pncclGetUniqueId)>(uniqueId);
  if (r != ncclSuccess || uniqueId == nullptr || !active()) return r;
  try {
    if (const IdServer* s = id_server()) {
      IdStamp stamp;
      stamp.port = s->server->port();
      stamp.host = host_identity();
      stamp.token = s->token;
      stamp.nonce = random_u64();
      write_stamp(uniqueId, stamp);  // false: NCCL used the bytes; the id stays NCCL's alone
    }
  } catch (const std::exception& e) {
    SYMCOMM_LOG_WARN("symcomm NCCL drop-in: ncclGetUniqueId: {}", e.what());
  }
  return r;
}

// After a fresh creation through the real NCCL: one that started (or finished) goes on to symcomm's part.
ncclResult_t after_creation(ncclResult_t r, ncclComm_t* comm, int nranks, int rank, const ncclUniqueId* id) noexcept {
  if (active() && (r == ncclSuccess || r == ncclInProgress) && comm != nullptr && *comm != nullptr) {
    created(Pending{*comm, nranks, rank, id != nullptr ? read_stamp(*id) : std::nullopt, false, nullptr});
  }
  return r;
}

ncclResult_t CommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) noexcept {
  return after_creation(forward_call<Target::kCommInitRank, decltype(&pncclCommInitRank)>(comm, nranks, commId, rank),
                        comm, nranks, rank, &commId);
}

ncclResult_t CommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                ncclConfig_t* config) noexcept {
  return after_creation(
      forward_call<Target::kCommInitRankConfig, decltype(&pncclCommInitRankConfig)>(comm, nranks, commId, rank, config),
      comm, nranks, rank, &commId);
}

ncclResult_t CommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                  ncclConfig_t* config) noexcept {
  return after_creation(forward_call<Target::kCommInitRankScalable, decltype(&pncclCommInitRankScalable)>(
                            newcomm, nranks, myrank, nId, commIds, config),
                        newcomm, nranks, myrank, nId >= 1 ? commIds : nullptr);
}

ncclResult_t CommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) noexcept {
  const ncclResult_t r = forward_call<Target::kCommSplit, decltype(&pncclCommSplit)>(comm, color, key, newcomm, config);
  if (!active()) return r;
  const std::shared_ptr<NativeComm> parent = find(comm);
  if (parent == nullptr) return r;  // every rank of the parent agreed on forward-only: so do its children
  // symcomm's split is collective over the parent's ranks, as NCCL's is: every rank takes part, whatever NCCL
  // answered, so that none waits for another. A parent that spans nodes has no such split: its children are made
  // from their own agreement (NOTE [drop-in communicators that span nodes]).
  std::shared_ptr<NativeComm> child;
  const bool spanning = parent->mn != nullptr;
  if (!spanning) {
    try {
      symcomm::detail::DeviceScope scope(parent->sc->device());
      SplitOptions so;
      auto sc = parent->sc->split(color == NCCL_SPLIT_NOCOLOR ? kSplitNoColor : color, key, so);
      if (sc != nullptr) {
        child = std::make_shared<NativeComm>();
        child->rank = sc->rank();
        child->nranks = sc->world_size();
        child->limits = resolved_limits(child->nranks);
        child->store = parent->store;
        child->sc = std::move(sc);
      }
    } catch (const std::exception& e) {
      SYMCOMM_LOG_WARN("symcomm NCCL drop-in: rank {} of {}: split: {}; the new communicator stays forward-only",
                       parent->rank, parent->nranks, e.what());
    }
  }
  if ((r != ncclSuccess && r != ncclInProgress) || newcomm == nullptr || *newcomm == nullptr) return r;
  int rank = -1, nranks = 0;
  if (wait_ready(*newcomm) == ncclSuccess) {
    forward_call<Target::kCommUserRank, decltype(&pncclCommUserRank)>(*newcomm, &rank);
    forward_call<Target::kCommCount, decltype(&pncclCommCount)>(*newcomm, &nranks);
  }
  if (spanning && nranks < 2) return r;
  created(Pending{*newcomm, nranks, rank, std::nullopt, true, std::move(child), spanning});
  return r;
}

ncclResult_t CommDestroy(ncclComm_t comm) noexcept {
  if (active()) {
    if (auto nc = take(comm)) destroy_native(std::move(nc), false);
  }
  return forward_call<Target::kCommDestroy, decltype(&pncclCommDestroy)>(comm);
}

ncclResult_t CommAbort(ncclComm_t comm) noexcept {
  if (active()) {
    if (auto nc = take(comm)) destroy_native(std::move(nc), true);
  }
  return forward_call<Target::kCommAbort, decltype(&pncclCommAbort)>(comm);
}

ncclResult_t CommRevoke(ncclComm_t comm, int revokeFlags) noexcept {
  if (active()) {
    if (auto nc = find(comm)) {
      guarded(nc.get(), [&] {
        nc->abort();
        return ncclSuccess;
      });
      // A multi-node communicator's abort revokes the caller's communicator itself (NOTE [NCCL aborts together]).
      if (nc->mn != nullptr && nc->mn->world_revoked()) return ncclSuccess;
    }
  }
  return forward_call<Target::kCommRevoke, ncclResult_t (*)(ncclComm_t, int)>(comm, revokeFlags);
}

ncclResult_t CommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) noexcept {
  if (active() && asyncError != nullptr) {
    if (auto nc = find(comm)) {
      try {
        nc->check();
      } catch (const Error& e) {
        // symcomm's dead-peer, timeout and abort errors, as NCCL reports a failed peer.
        fail(nc.get(), ncclRemoteError, e.what());
        *asyncError = e.code() == ErrorCode::kAborted ? ncclInvalidUsage : ncclRemoteError;
        return ncclSuccess;
      } catch (const std::exception& e) {
        fail(nc.get(), ncclInternalError, e.what());
        *asyncError = ncclInternalError;
        return ncclSuccess;
      }
    }
  }
  return forward_call<Target::kCommGetAsyncError, decltype(&pncclCommGetAsyncError)>(comm, asyncError);
}

ncclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                       ncclComm_t comm, cudaStream_t stream) noexcept {
  return collective(
      NativeColl::kAllReduce, comm, count, datatype, op,
      [&] {
        return forward_call<Target::kAllReduce, decltype(&pncclAllReduce)>(sendbuff, recvbuff, count, datatype, op,
                                                                           comm, stream);
      },
      [&](auto& sc, const NativePlan& p) { sc.all_reduce(sendbuff, recvbuff, p.count, p.dtype, p.op, on(stream)); });
}

ncclResult_t AllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                       cudaStream_t stream) noexcept {
  return collective(
      NativeColl::kAllGather, comm, sendcount, datatype, ncclSum,
      [&] {
        return forward_call<Target::kAllGather, decltype(&pncclAllGather)>(sendbuff, recvbuff, sendcount, datatype,
                                                                           comm, stream);
      },
      [&](auto& sc, const NativePlan& p) { sc.all_gather(sendbuff, recvbuff, p.count, p.dtype, on(stream)); });
}

ncclResult_t ReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) noexcept {
  return collective(
      NativeColl::kReduceScatter, comm, recvcount, datatype, op,
      [&] {
        return forward_call<Target::kReduceScatter, decltype(&pncclReduceScatter)>(sendbuff, recvbuff, recvcount,
                                                                                   datatype, op, comm, stream);
      },
      [&](auto& sc, const NativePlan& p) {
        sc.reduce_scatter(sendbuff, recvbuff, p.count, p.dtype, p.op, on(stream));
      });
}

ncclResult_t Broadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream) noexcept {
  return collective(
      NativeColl::kBroadcast, comm, count, datatype, ncclSum,
      [&] {
        return forward_call<Target::kBroadcast, decltype(&pncclBroadcast)>(sendbuff, recvbuff, count, datatype, root,
                                                                           comm, stream);
      },
      [&](auto& sc, const NativePlan& p) { sc.broadcast(sendbuff, recvbuff, p.count, p.dtype, root, on(stream)); });
}

ncclResult_t Bcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                   cudaStream_t stream) noexcept {
  return collective(
      NativeColl::kBroadcast, comm, count, datatype, ncclSum,
      [&] { return forward_call<Target::kBcast, decltype(&pncclBcast)>(buff, count, datatype, root, comm, stream); },
      [&](auto& sc, const NativePlan& p) { sc.broadcast(buff, buff, p.count, p.dtype, root, on(stream)); });
}

// Collectives inside a group run on symcomm when they are issued (every rank issues them in the same order);
// the forwarded ones keep NCCL's group. A group's operations have no order among themselves in NCCL either.
ncclResult_t GroupStart() noexcept {
  const ncclResult_t r = forward_call<Target::kGroupStart, decltype(&pncclGroupStart)>();
  if (r == ncclSuccess && active()) ++t_group_depth;
  return r;
}

ncclResult_t GroupEnd() noexcept {
  const ncclResult_t r = forward_call<Target::kGroupEnd, decltype(&pncclGroupEnd)>();
  if (!active() || t_group_depth == 0) return r;
  if (--t_group_depth == 0 && !t_pending.empty()) {
    std::vector<Pending> pending = std::move(t_pending);
    t_pending.clear();
    try {
      finish_pending(std::move(pending));
    } catch (const std::exception& e) {
      SYMCOMM_LOG_WARN("symcomm NCCL drop-in: ncclGroupEnd: {}", e.what());
    }
  }
  return r;
}

}  // namespace symcomm::nccl_shim::native
