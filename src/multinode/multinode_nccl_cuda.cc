// CudaMultiNodeCommunicator (symcomm/multinode_cuda.h): symcomm inside each node, NCCL between the nodes. The plans
// (layout, paths, block orders) are src/algos/node_plan.h; this file enqueues their stages on the caller's stream
// and watches for faults.

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "algos/cuda_divide.h"
#include "algos/node_plan.h"
#include "algos/request.h"
#include "base/check.h"
#include "base/cuda_check.h"
#include "base/host_process.h"
#include "base/logging.h"
#include "base/nccl_map.h"
#include "multinode/multinode_cuda_impl.h"
#include "multinode/node_common.h"
#include "symcomm/multinode_cuda.h"

namespace symcomm {

using detail::DeviceScope;

namespace {

const detail::NcclCalls& linked() { return detail::linked_nccl_calls(); }

void check_nccl(ncclResult_t r, ncclComm_t comm, const char* what) { detail::check_nccl(linked(), r, comm, what); }

CollOptions on(cudaStream_t s) {
  CollOptions o;
  o.stream = s;
  return o;
}

// Device scratch of one call, from the stream-ordered allocator: freed on the stream after the call's last stage,
// so a later call on any stream cannot reuse it early, and CUDA-graph capture records it as allocation nodes.
class StreamScratch {
 public:
  explicit StreamScratch(cudaStream_t s) : stream_(s) {}
  ~StreamScratch() {
    for (void* p : blocks_) cudaFreeAsync(p, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  uint8_t* get(size_t bytes) {
    void* p = nullptr;
    SYMCOMM_CUDA_CHECK(cudaMallocAsync(&p, std::max<size_t>(bytes, 1), stream_));
    blocks_.push_back(p);
    return static_cast<uint8_t*>(p);
  }
  /// A scratch copy of `bytes` at `src` (an input that overlaps the call's output), made on the stream.
  const uint8_t* copy(const void* src, size_t bytes) {
    uint8_t* p = get(bytes);
    SYMCOMM_CUDA_CHECK(cudaMemcpyAsync(p, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    return p;
  }

 private:
  cudaStream_t stream_;
  std::vector<void*> blocks_;
};

std::atomic<int> g_made{0};

// What every rank publishes at creation: "options\nidentity\npid".
struct Hello {
  std::string options, identity;
  int pid = 0;
  std::string nccl_place;  ///< detail::nccl_place() of the rank where ranks share GPUs, else empty
};

Hello parse_hello(const Bytes& b) {
  std::istringstream in(std::string(b.begin(), b.end()));
  Hello h;
  std::string pid;
  std::getline(in, h.options);
  std::getline(in, h.identity);
  std::getline(in, pid);
  h.pid = std::atoi(pid.c_str());
  std::getline(in, h.nccl_place);
  return h;
}

}  // namespace

namespace detail {

const NcclCalls& linked_nccl_calls() {
  static const NcclCalls calls{
      .comm_abort = &ncclCommAbort,
      .comm_revoke = nullptr,  // only a borrowed communicator is revoked, and only the drop-in library lends one
      .comm_get_async_error = &ncclCommGetAsyncError,
      .get_error_string = &ncclGetErrorString,
      .get_last_error = &ncclGetLastError,
      .all_reduce = &ncclAllReduce,
      .all_gather = &ncclAllGather,
      .reduce_scatter = &ncclReduceScatter,
      .broadcast = &ncclBroadcast,
      .send = &ncclSend,
      .recv = &ncclRecv,
      .group_start = &ncclGroupStart,
      .group_end = &ncclGroupEnd,
  };
  return calls;
}

// NOTE [NCCL aborts together] ncclCommAbort frees the communicator's pinned host memory, and that free waits until
// this process's work on the device has ended. A kernel of a second NCCL communicator that waits for a dead peer
// never ends until that communicator is aborted too, so aborting them one after the other hangs in the first: seen
// with 4 ranks sharing 1 x H100 as two fake nodes, NCCL between them and a rank SIGKILLed (the watch waited in
// cuMemFreeHost under ncclCommAbort, the caller in cudaDeviceSynchronize). Every abort (and the revoke of a borrowed
// communicator, which ends its kernels and frees nothing) starts at once, each on its own thread, so each sets its
// communicator's abort flag before any free waits.
bool abort_nccl_together(const NcclCalls& api, const std::vector<ncclComm_t>& abort, ncclComm_t revoke) {
  std::atomic<bool> revoked{false};
  std::vector<std::function<void()>> ends;
  for (ncclComm_t c : abort) ends.emplace_back([&api, c] { api.comm_abort(c); });
  if (revoke != nullptr && api.comm_revoke != nullptr) {
    ends.emplace_back([&api, &revoked, revoke] { revoked = api.comm_revoke(revoke, 0) == ncclSuccess; });
  }
  run_together(ends);
  return revoked.load();
}

void check_nccl(const NcclCalls& api, ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess) return;
  const char* last = api.get_last_error(comm);
  SYMCOMM_THROW(kCuda, "{} failed: {}{}", what, api.get_error_string(r),
                last && *last ? fmt::format(" ({})", last) : std::string());
}

template <class F>
void NodeEngine::run(F&& f) const {
  try {
    f();
  } catch (const Error& e) {
    if (!detail::is_fatal(e.code())) throw;
    throw job_error(e);
  }
}

void NodeEngine::all_reduce(const void* in, void* out, size_t n, DataType dt, ReduceOp op, cudaStream_t s) const {
  if (sc) return run([&] { sc->all_reduce(in, out, n, dt, op, on(s)); });
  check_nccl(*api, api->all_reduce(in, out, n, to_nccl(dt), to_nccl(op), nccl, s), nccl, "ncclAllReduce");
}

void NodeEngine::all_gather(const void* in, void* out, size_t n, DataType dt, cudaStream_t s) const {
  if (sc) return run([&] { sc->all_gather(in, out, n, dt, on(s)); });
  check_nccl(*api, api->all_gather(in, out, n, to_nccl(dt), nccl, s), nccl, "ncclAllGather");
}

void NodeEngine::reduce_scatter(const void* in, void* out, size_t n, DataType dt, ReduceOp op, cudaStream_t s) const {
  if (sc) return run([&] { sc->reduce_scatter(in, out, n, dt, op, on(s)); });
  check_nccl(*api, api->reduce_scatter(in, out, n, to_nccl(dt), to_nccl(op), nccl, s), nccl, "ncclReduceScatter");
}

void NodeEngine::broadcast(const void* in, void* out, size_t n, DataType dt, int root, cudaStream_t s) const {
  if (sc) return run([&] { sc->broadcast(in, out, n, dt, root, on(s)); });
  check_nccl(*api, api->broadcast(in, out, n, to_nccl(dt), root, nccl, s), nccl, "ncclBroadcast");
}

void NodeEngine::all_to_all(const uint8_t* in, uint8_t* out, size_t n, DataType dt, int world, cudaStream_t s) const {
  if (sc) return run([&] { sc->all_to_all(in, out, n, dt, on(s)); });
  const size_t block = n * dtype_size(dt);
  const ncclDataType_t t = to_nccl(dt);
  check_nccl(*api, api->group_start(), nccl, "ncclGroupStart");
  ncclResult_t res = ncclSuccess;
  for (int p = 0; p < world && res == ncclSuccess; ++p) {
    res = api->send(in + p * block, n, t, p, nccl, s);
    if (res == ncclSuccess) res = api->recv(out + p * block, n, t, p, nccl, s);
  }
  const ncclResult_t end = api->group_end();
  check_nccl(*api, res, nccl, "ncclSend/ncclRecv");
  check_nccl(*api, end, nccl, "ncclGroupEnd");
}

Error NodeEngine::job_error(const Error& e) const {
  std::vector<int> ranks;
  for (int r : e.ranks()) {
    if (r >= 0 && r < static_cast<int>(job_rank.size())) ranks.push_back(job_rank[r]);
  }
  return Error(e.code(), fmt::format("between the nodes: {} (the job's ranks {})", e.message(), fmt::join(ranks, ", ")),
               e.file(), e.line(), ranks);
}

}  // namespace detail

CudaMultiNodeCommunicator::Impl::Impl(std::shared_ptr<Store> store, const RankInfo& ranks,
                                      const MultiNodeOptions& options)
    : store_(std::move(store)), nccl_api_(&linked()) {
  world_.api = inter_.api = nccl_api_;
  const int world = ranks.world_size;
  SYMCOMM_CHECK_ARG(store_ != nullptr, "CudaMultiNodeCommunicator::create: the store is null");
  SYMCOMM_CHECK_ARG(world >= 1 && ranks.rank >= 0 && ranks.rank < world, "rank {} of world size {} is out of range",
                    ranks.rank, world);
  SYMCOMM_CHECK(options.node.backend == BackendKind::kCuda, kUnsupported,
                "CudaMultiNodeCommunicator runs the CUDA backend; the {} backend spans nodes through "
                "MultiNodeCommunicator (MPI)",
                to_string(options.node.backend));
  const int fake = options.fake_node_size;
  SYMCOMM_CHECK_ARG(fake >= 0, "fake_node_size {} is negative", fake);
  rank_ = ranks.rank;
  const Config config = options.node.config.value_or(Config::from_env());
  const std::string name =
      options.node.name.empty() ? fmt::format("multinode{}", g_made.fetch_add(1)) : options.node.name;
  const std::string min_bytes = options.min_bytes.value_or("");

  // The device: as a one-node communicator picks it, from the rank's place on its host (not in its node, which
  // differs on fake nodes).
  device_ = options.node.device;
  if (device_ < 0) {
    device_ = ranks.local_rank;
    int visible = 0;
    if (config.shared_gpu && cudaGetDeviceCount(&visible) == cudaSuccess && visible > 0) device_ %= visible;
  }

  // Every rank's options, host identity, pid and place for NCCL: the options must agree; the rest gives the nodes
  // (unless fake), the liveness watch and whether NCCL takes the ranks.
  const std::string opts = fmt::format("fake_node_size={};round_robin={};min_bytes={};shared_gpu={}", fake,
                                       options.fake_round_robin ? 1 : 0, min_bytes, config.shared_gpu ? 1 : 0);
  SYMCOMM_CHECK_ARG(opts.find('\n') == std::string::npos, "multinode options hold a line break");
  const std::string identity = detail::host_identity();
  // The place decides only where ranks share GPUs (elsewhere NCCL is made in any case), so only there is it asked.
  std::string place;
  if (config.shared_gpu) {
    std::array<char, 32> bus{};
    if (cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), device_) != cudaSuccess) {
      bus[0] = '\0';       // a bad device fails the node communicator's creation below, with its message
      cudaGetLastError();  // not left for a later launch's check
    }
    place = detail::nccl_place(detail::nccl_host_id(), identity, bus.data());
  }
  store_->set(fmt::format("{}/hello/{}", name, rank_),
              fmt::format("{}\n{}\n{}\n{}", opts, identity, ::getpid(), place));
  std::vector<Hello> all(world);
  for (int p = 0; p < world; ++p) all[p] = parse_hello(store_->get(fmt::format("{}/hello/{}", name, p)));
  std::vector<std::string> options_of;
  for (const Hello& h : all) options_of.push_back(h.options);
  detail::check_same_options(rank_, opts, options_of);
  std::vector<int64_t> keys(world);
  std::vector<std::string> places;
  for (int p = 0; p < world; ++p) {
    pids_.push_back(all[p].pid);
    places.push_back(all[p].nccl_place);
    if (p != rank_ && all[p].identity == identity) host_peers_.push_back(p);
    // A real node is a host: its key is the lowest rank with the same identity.
    keys[p] = p;
    for (int q = 0; q < p; ++q) {
      if (all[q].identity == all[p].identity) {
        keys[p] = q;
        break;
      }
    }
  }
  if (fake > 0) keys = detail::fake_node_keys(world, fake, options.fake_round_robin);
  layout_ = detail::make_node_layout(keys);
  node_ = layout_.node_of[rank_];
  local_ = layout_.local_of[rank_];
  thresholds_ = detail::parse_node_thresholds(min_bytes, detail::cuda_node_thresholds());
  const bool several = layout_.num_nodes() > 1;
  const bool one_host = static_cast<int>(host_peers_.size()) == world - 1;
  // Ranks that share GPUs get NCCL where NCCL takes them: where each presents a host of its own (NCCL_HOSTID).
  const bool use_nccl = !config.shared_gpu || detail::nccl_takes_ranks(places);
  SYMCOMM_CHECK(!(several && !use_nccl && !one_host), kUnsupported,
                "rank {}: ranks that share GPUs (Config::shared_gpu) span nodes on one host only, unless each sets an "
                "NCCL_HOSTID of its own: NCCL, which refuses two ranks on one GPU of one host, is not made, and "
                "symcomm's communicators do not reach other hosts",
                rank_);

  CommOptions node_options = options.node;
  node_options.device = device_;
  node_options.config = config;
  node_options.name = fmt::format("{}/node{}", name, node_);
  const int local_size = static_cast<int>(layout_.members[node_].size());
  node_comm_ = Communicator::create(
      store_, RankInfo{.rank = local_, .world_size = local_size, .local_rank = local_, .local_world_size = local_size},
      node_options);

  // The engines between the nodes: the whole job's and, for uniform layouts of several nodes, one per local index with
  // one rank per node (ranked by node).
  const bool inter = several && layout_.uniform() && layout_.node_size() > 1;  // nodes of one rank run flat
  name_engine_ranks(inter);
  if (!use_nccl) {
    // Fake nodes of ranks that share GPUs: symcomm CUDA communicators stand in for NCCL between them.
    if (several) {
      CommOptions o = node_options;
      o.name = fmt::format("{}/world", name);
      world_.sc = Communicator::create(store_, RankInfo{rank_, world, rank_, world}, o);
      if (inter) {
        const int n_nodes = layout_.num_nodes();
        o.name = fmt::format("{}/inter{}", name, local_);
        inter_.sc = Communicator::create(store_, RankInfo{node_, n_nodes, node_, n_nodes}, o);
      }
    }
  } else {
    // NCCL: rank 0 of each communicator makes its id; every rank shows it holds its ids before any creates, so a rank
    // that died before is reported as a timeout of the store rather than a hang inside NCCL.
    DeviceScope scope(device_);
    auto share_id = [&](const std::string& key, bool maker) {
      ncclUniqueId id;
      if (maker) {
        check_nccl(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
        store_->set(key,
                    Bytes(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof(id)));
      }
      const Bytes b = store_->get(key);
      SYMCOMM_CHECK(b.size() == sizeof(id), kStore, "rank {}: NCCL id under {} has {} bytes", rank_, key, b.size());
      std::memcpy(&id, b.data(), sizeof(id));
      return id;
    };
    const ncclUniqueId world_id = share_id(fmt::format("{}/nccl/world", name), rank_ == 0);
    std::optional<ncclUniqueId> inter_id;
    if (inter) inter_id = share_id(fmt::format("{}/nccl/inter{}", name, local_), node_ == 0);
    store_->set(fmt::format("{}/ready/{}", name, rank_), "1");
    std::vector<std::string> ready;
    for (int p = 0; p < world; ++p) ready.push_back(fmt::format("{}/ready/{}", name, p));
    store_->wait(ready, config.timeout);
    check_nccl(ncclCommInitRank(&world_.nccl, world, world_id, rank_), nullptr, "ncclCommInitRank (the whole job)");
    if (inter_id) {
      const ncclResult_t res = ncclCommInitRank(&inter_.nccl, layout_.num_nodes(), *inter_id, node_);
      if (res != ncclSuccess) {
        ncclCommAbort(world_.nccl);
        world_.nccl = inter_.nccl = nullptr;
        check_nccl(res, nullptr, "ncclCommInitRank (one rank per node)");
      }
    }
    has_nccl_ = true;
  }
  start_watch();
}

CudaMultiNodeCommunicator::Impl::Impl(detail::CudaNodeParts parts)
    : rank_(parts.rank),
      device_(parts.device),
      layout_(std::move(parts.layout)),
      node_comm_(std::move(parts.node)),
      thresholds_(parts.thresholds),
      pids_(std::move(parts.pids)),
      host_peers_(std::move(parts.host_peers)),
      nccl_api_(parts.nccl),
      has_nccl_(true),
      world_borrowed_(true) {
  SYMCOMM_CHECK_ARG(node_comm_ != nullptr && parts.world != nullptr && nccl_api_ != nullptr,
                    "rank {}: a multi-node communicator's parts need the node communicator, the whole job's NCCL "
                    "communicator and NCCL's functions",
                    rank_);
  node_ = layout_.node_of[rank_];
  local_ = layout_.local_of[rank_];
  world_.api = inter_.api = nccl_api_;
  world_.nccl = parts.world;
  inter_.nccl = parts.inter;
  name_engine_ranks(inter_.nccl != nullptr);
  start_watch();
}

void CudaMultiNodeCommunicator::Impl::name_engine_ranks(bool inter) {
  world_.job_rank.resize(layout_.world_size);
  for (int p = 0; p < layout_.world_size; ++p) world_.job_rank[p] = p;
  if (inter) {
    for (int n = 0; n < layout_.num_nodes(); ++n) inter_.job_rank.push_back(layout_.members[n][local_]);
  }
}

void CudaMultiNodeCommunicator::Impl::start_watch() {
  watch_ = std::thread([this] { watch_loop(); });
}

CudaMultiNodeCommunicator::Impl::~Impl() {
  {
    std::lock_guard lock(watch_mu_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watch_.joinable()) watch_.join();
  DeviceScope scope(device_, std::nothrow);
  if (!fault_.failed()) cudaDeviceSynchronize();  // the enqueued stages finish before their communicators go
  // ncclCommAbort also on a clean shutdown: it never waits for peers, which may be gone or busy elsewhere
  // (the CUDA backend's NCCL communicator ends the same way).
  std::call_once(engines_aborted_, [&] { abort_nccl(); });
  inter_.sc.reset();
  world_.sc.reset();
  node_comm_.reset();
}

void CudaMultiNodeCommunicator::Impl::abort_nccl() {
  std::vector<ncclComm_t> owned;
  ncclComm_t borrowed = nullptr;
  {
    std::lock_guard nccl_lock(nccl_mu_);  // the watch reads them under it
    for (detail::NodeEngine* e : {&inter_, &world_}) {
      if (e->nccl == nullptr) continue;
      if (e == &world_ && world_borrowed_) {
        borrowed = e->nccl;
      } else {
        owned.push_back(e->nccl);
      }
      e->nccl = nullptr;
    }
  }
  // A clean end (nothing failed, the device synchronised) leaves the caller's communicator as it is.
  if (!fault_.failed()) borrowed = nullptr;
  if (detail::abort_nccl_together(*nccl_api_, owned, borrowed)) world_revoked_ = true;
}

// NOTE [multi-node CUDA faults] Calls only enqueue, so faults surface on a thread of the communicator's own: every
// 5 ms it looks at the node communicator's sticky error (a peer of the node dead, a node stage past its deadline),
// NCCL's asynchronous errors and the pids of every rank on this host. The first fault becomes the sticky error and
// aborts both engines: the node communicator (its kernels return) and the NCCL communicators (ncclCommAbort ends
// their kernels and proxy threads), so nothing enqueued waits for ever and the caller's stream drains. A call that
// is enqueueing holds engine_mu_, so an abort does not free an NCCL communicator under it; a call that blocks inside
// NCCL (connecting to a dead peer) is ended by the abort itself, which takes the communicators without the lock
// after waiting 1 s for it.
void CudaMultiNodeCommunicator::Impl::watch_loop() {
  std::unique_lock lock(watch_mu_);
  while (!watch_cv_.wait_for(lock, std::chrono::milliseconds(5), [&] { return stopping_; })) {
    try {
      if (auto dead = detail::dead_host_peers(rank_, host_peers_, pids_, "the multi-node communicator")) fail(*dead);
      try {
        node_comm_->check();
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kAborted || !fault_.aborted()) fail(node_error(e, "the node communicator"));
      }
      for (const detail::NodeEngine* engine : {&world_, &inter_}) {
        if (engine->sc == nullptr) continue;
        try {
          engine->sc->check();
        } catch (const Error& e) {
          if (e.code() != ErrorCode::kAborted || !fault_.aborted()) fail(engine->job_error(e));
        }
      }
      std::optional<Error> nccl_error;
      {
        std::lock_guard nccl_lock(nccl_mu_);  // abort_nccl() frees them under it
        for (const detail::NodeEngine* engine : {&world_, &inter_}) {
          ncclResult_t state = ncclSuccess;
          if (engine->nccl == nullptr || nccl_error ||
              nccl_api_->comm_get_async_error(engine->nccl, &state) != ncclSuccess) {
            continue;
          }
          if (state != ncclSuccess && state != ncclInProgress) {
            nccl_error =
                Error(ErrorCode::kCuda,
                      fmt::format("rank {}: NCCL reported {} on the {} communicator", rank_,
                                  nccl_api_->get_error_string(state), engine == &world_ ? "whole job's" : "inter-node"),
                      __FILE__, __LINE__);
          }
        }
      }
      if (nccl_error) fail(*nccl_error);
    } catch (const std::exception& e) {
      SYMCOMM_LOG_WARN("rank {}: the multi-node watch failed: {}", rank_, e.what());
    }
    if (fault_.failed()) break;
  }
}

void CudaMultiNodeCommunicator::Impl::fail(const Error& e) {
  fault_.record(e);
  abort_engines();
}

void CudaMultiNodeCommunicator::Impl::abort_engines() {
  node_comm_->abort();
  for (const detail::NodeEngine* engine : {&world_, &inter_}) {
    if (engine->sc) engine->sc->abort();
  }
  std::call_once(engines_aborted_, [&] {
    const bool locked = engine_mu_.try_lock_for(std::chrono::seconds(1));
    abort_nccl();
    if (locked) engine_mu_.unlock();
  });
}

Error CudaMultiNodeCommunicator::Impl::node_error(const Error& e, const char* what) const {
  return detail::node_error(layout_, rank_, node_, e, what);
}

template <class F>
void CudaMultiNodeCommunicator::Impl::node_stage(const char* what, F&& f) const {
  try {
    f();
  } catch (const Error& e) {
    if (!detail::is_fatal(e.code())) throw;
    throw node_error(e, what);
  }
}

void CudaMultiNodeCommunicator::Impl::check() const { fault_.check(rank_); }

void CudaMultiNodeCommunicator::Impl::abort() {
  fault_.set_aborted();
  abort_engines();
}

NodePath CudaMultiNodeCommunicator::Impl::path_of(const detail::Request& r, Hierarchy h) const {
  return detail::call_path(layout_, thresholds_, r, h);
}

void CudaMultiNodeCommunicator::Impl::issue(const detail::Request& r, Hierarchy h) {
  detail::check_request(r, rank_, layout_.world_size);
  if (r.is_p2p()) {
    SYMCOMM_CHECK_ARG(group_depth_ > 0 || r.peer != rank_,
                      "rank {}: a send or receive to this rank itself must be in a group", rank_);
    SYMCOMM_CHECK(has_nccl_, kUnsupported,
                  "rank {}: point-to-point needs NCCL, which is not made where ranks share a GPU (Config::shared_gpu)",
                  rank_);
  } else {
    (void)path_of(r, h);  // argument errors (a hierarchy the call cannot take) now
  }
  check();
  if (group_depth_ > 0) {
    recorded_.push_back(Call{r, h});
    return;
  }
  if (r.is_p2p()) return exchange({&r});
  execute(r, h);
}

void CudaMultiNodeCommunicator::Impl::group_start() {
  ++group_depth_;
  level_starts_.push_back(recorded_.size());
}

void CudaMultiNodeCommunicator::Impl::group_end() {
  SYMCOMM_CHECK_ARG(group_depth_ > 0, "rank {}: group_end() without group_start()", rank_);
  --group_depth_;
  level_starts_.pop_back();
  if (group_depth_ > 0) return;
  std::vector<Call> calls;
  calls.swap(recorded_);
  check();
  std::vector<const detail::Request*> p2p;
  for (const Call& c : calls) {
    if (c.request.is_p2p()) {
      p2p.push_back(&c.request);
    } else {
      execute(c.request, c.hierarchy);
    }
  }
  if (!p2p.empty()) exchange(p2p);
}

void CudaMultiNodeCommunicator::Impl::group_cancel() {
  SYMCOMM_CHECK_ARG(group_depth_ > 0, "rank {}: group_cancel() without group_start()", rank_);
  recorded_.resize(level_starts_.back());
  level_starts_.pop_back();
  --group_depth_;
}

void CudaMultiNodeCommunicator::Impl::execute(const detail::Request& r, Hierarchy h) {
  const NodePath path = path_of(r, h);
  last_.store(path);
  auto s = static_cast<cudaStream_t>(r.options.stream);
  DeviceScope scope(device_);
  std::optional<Error> failure;
  {
    std::lock_guard lock(engine_mu_);
    check();
    try {
      switch (r.kind) {
        case Collective::kAllReduce: return all_reduce(r, path, s);
        case Collective::kAllGather: return all_gather(r, path, s);
        case Collective::kReduceScatter: return reduce_scatter(r, path, s);
        case Collective::kBroadcast: return broadcast(r, path, s);
        case Collective::kAllToAll:
          if (path == NodePath::kNode) {
            return node_stage("the all-to-all", [&] { node_comm_->all_to_all(r.in, r.out, r.count, r.dtype, on(s)); });
          }
          return all_to_all(r, s);
        case Collective::kBarrier: return barrier(path, s);
      }
      SYMCOMM_THROW(kInvalidArgument, "rank {}: invalid collective {}", rank_, static_cast<int>(r.kind));
    } catch (const Error& e) {
      if (!detail::is_fatal(e.code())) throw;
      failure = e;
    }
  }
  if (!failure) return;
  fail(*failure);  // without engine_mu_, which abort_engines() takes
  throw *failure;
}

void CudaMultiNodeCommunicator::Impl::divide_if_avg(ReduceOp op, void* data, size_t count, DataType dtype,
                                                    cudaStream_t s) const {
  if (op == ReduceOp::kAvg) detail::cuda::launch_divide(data, count, dtype, layout_.world_size, s);
}

void CudaMultiNodeCommunicator::Impl::all_reduce(const detail::Request& r, NodePath path, cudaStream_t s) {
  const DataType dtype = r.dtype;
  const ReduceOp op = r.op, sop = detail::stage_op(op);
  const size_t count = r.count, es = dtype_size(dtype), bytes = count * es;
  if (path == NodePath::kNode) {
    return node_stage("the all-reduce", [&] { node_comm_->all_reduce(r.in, r.out, count, dtype, op, on(s)); });
  }
  if (count == 0) return;
  StreamScratch scratch(s);
  const auto* in = static_cast<const uint8_t*>(r.in);
  auto* out = static_cast<uint8_t*>(r.out);
  if (in != out && detail::overlaps(in, bytes, out, bytes)) {
    in = scratch.copy(in, bytes);
  }
  if (path == NodePath::kFlat) {
    world_.all_reduce(in, out, count, dtype, sop, s);
    return divide_if_avg(op, out, count, dtype, s);
  }
  // Node reduce-scatter, inter-node all-reduce of this rank's shard, node all-gather; the count % L elements left
  // over are all-reduced in the node and across the nodes by every rank.
  const int l = layout_.node_size();
  const size_t shard = count / l, tail = count % l;
  if (shard > 0) {
    uint8_t* sh = scratch.get(shard * es);
    node_stage("the node reduce-scatter", [&] { node_comm_->reduce_scatter(in, sh, shard, dtype, sop, on(s)); });
    inter_.all_reduce(sh, sh, shard, dtype, sop, s);
    divide_if_avg(op, sh, shard, dtype, s);
    node_stage("the node all-gather", [&] { node_comm_->all_gather(sh, out, shard, dtype, on(s)); });
  }
  if (tail > 0) {
    uint8_t* tl = scratch.get(tail * es);
    node_stage("the node all-reduce",
               [&] { node_comm_->all_reduce(in + shard * l * es, tl, tail, dtype, sop, on(s)); });
    inter_.all_reduce(tl, tl, tail, dtype, sop, s);
    divide_if_avg(op, tl, tail, dtype, s);
    SYMCOMM_CUDA_CHECK(cudaMemcpyAsync(out + shard * l * es, tl, tail * es, cudaMemcpyDeviceToDevice, s));
  }
}

void CudaMultiNodeCommunicator::Impl::reorder(uint8_t* dst, const uint8_t* src, size_t block, bool to_rank_order,
                                              cudaStream_t s) const {
  for (const detail::BlockCopy& c : detail::block_order_copies(layout_, block, to_rank_order)) {
    if (c.rows == 1) {
      SYMCOMM_CUDA_CHECK(cudaMemcpyAsync(dst + c.dst_offset, src + c.src_offset, c.width, cudaMemcpyDeviceToDevice, s));
    } else {
      SYMCOMM_CUDA_CHECK(cudaMemcpy2DAsync(dst + c.dst_offset, c.dst_pitch, src + c.src_offset, c.src_pitch, c.width,
                                           c.rows, cudaMemcpyDeviceToDevice, s));
    }
  }
}

void CudaMultiNodeCommunicator::Impl::all_gather(const detail::Request& r, NodePath path, cudaStream_t s) {
  const size_t count = r.count;
  if (path == NodePath::kNode) {
    return node_stage("the all-gather", [&] { node_comm_->all_gather(r.in, r.out, count, r.dtype, on(s)); });
  }
  if (count == 0) return;
  const int world = layout_.world_size, n_nodes = layout_.num_nodes();
  const size_t block = count * dtype_size(r.dtype);
  StreamScratch scratch(s);
  const auto* in = static_cast<const uint8_t*>(r.in);
  auto* out = static_cast<uint8_t*>(r.out);
  const bool in_place = in == out + rank_ * block;
  if (!in_place && detail::overlaps(in, block, out, block * world)) {
    in = scratch.copy(in, block);
  }
  if (path == NodePath::kFlat) return world_.all_gather(in, out, count, r.dtype, s);
  // Inter-node all-gather of this rank's block among its local index, node all-gather of those N blocks, then
  // every block to its rank's place (detail::local_major_rank).
  uint8_t* across = scratch.get(block * n_nodes);
  uint8_t* gathered = scratch.get(block * world);
  inter_.all_gather(in, across, count, r.dtype, s);
  node_stage("the node all-gather", [&] { node_comm_->all_gather(across, gathered, count * n_nodes, r.dtype, on(s)); });
  reorder(out, gathered, block, true, s);
}

void CudaMultiNodeCommunicator::Impl::reduce_scatter(const detail::Request& r, NodePath path, cudaStream_t s) {
  const size_t count = r.count;
  const ReduceOp op = r.op, sop = detail::stage_op(op);
  if (path == NodePath::kNode) {
    return node_stage("the reduce-scatter",
                      [&] { node_comm_->reduce_scatter(r.in, r.out, count, r.dtype, op, on(s)); });
  }
  if (count == 0) return;
  const int world = layout_.world_size, n_nodes = layout_.num_nodes();
  const size_t block = count * dtype_size(r.dtype);
  StreamScratch scratch(s);
  const auto* in = static_cast<const uint8_t*>(r.in);
  if (path == NodePath::kFlat) {
    // NCCL's in-place form (out at in + rank * count) needs no copy; any other overlap does.
    const bool in_place = r.out == in + rank_ * block;
    if (!in_place && detail::overlaps(in, block * world, r.out, block)) {
      in = scratch.copy(in, block * world);
    }
    world_.reduce_scatter(in, r.out, count, r.dtype, sop, s);
  } else {
    // Input blocks reordered local index by local index (detail::local_major_rank), node reduce-scatter of N blocks
    // each, inter-node reduce-scatter among this rank's local index.
    uint8_t* ordered = scratch.get(block * world);
    reorder(ordered, in, block, false, s);
    uint8_t* partial = scratch.get(block * n_nodes);
    node_stage("the node reduce-scatter",
               [&] { node_comm_->reduce_scatter(ordered, partial, count * n_nodes, r.dtype, sop, on(s)); });
    inter_.reduce_scatter(partial, r.out, count, r.dtype, sop, s);
  }
  divide_if_avg(op, r.out, count, r.dtype, s);
}

void CudaMultiNodeCommunicator::Impl::broadcast(const detail::Request& r, NodePath path, cudaStream_t s) {
  const size_t count = r.count;
  if (path == NodePath::kNode) {
    return node_stage("the broadcast", [&] { node_comm_->broadcast(r.in, r.out, count, r.dtype, r.root, on(s)); });
  }
  if (count == 0) return;
  if (path == NodePath::kFlat) return world_.broadcast(r.in, r.out, count, r.dtype, r.root, s);
  // Among the root's local index across the nodes, then in every node from that local index.
  const int root_node = layout_.node_of[r.root], root_local = layout_.local_of[r.root];
  if (local_ == root_local) {
    inter_.broadcast(rank_ == r.root ? r.in : r.out, r.out, count, r.dtype, root_node, s);
  }
  node_stage("the node broadcast", [&] { node_comm_->broadcast(r.out, r.out, count, r.dtype, root_local, on(s)); });
}

void CudaMultiNodeCommunicator::Impl::all_to_all(const detail::Request& r, cudaStream_t s) {
  const int world = layout_.world_size;
  const size_t count = r.count, block = count * dtype_size(r.dtype);
  if (count == 0) return;
  SYMCOMM_CHECK(world_.made(), kUnsupported, "rank {}: the all-to-all of several nodes needs the whole job's engine",
                rank_);
  StreamScratch scratch(s);
  const auto* in = static_cast<const uint8_t*>(r.in);
  auto* out = static_cast<uint8_t*>(r.out);
  if (detail::overlaps(in, block * world, out, block * world)) {
    in = scratch.copy(in, block * world);
  }
  world_.all_to_all(in, out, count, r.dtype, world, s);
}

void CudaMultiNodeCommunicator::Impl::barrier(NodePath path, cudaStream_t s) {
  if (path == NodePath::kNode) return node_stage("the barrier", [&] { node_comm_->barrier(on(s)); });
  StreamScratch scratch(s);
  uint8_t* word = scratch.get(sizeof(int32_t));
  SYMCOMM_CUDA_CHECK(cudaMemsetAsync(word, 0, sizeof(int32_t), s));
  if (path == NodePath::kFlat) return world_.all_reduce(word, word, 1, DataType::kInt32, ReduceOp::kSum, s);
  node_stage("the node barrier", [&] { node_comm_->barrier(on(s)); });
  inter_.all_reduce(word, word, 1, DataType::kInt32, ReduceOp::kSum, s);
  node_stage("the node barrier", [&] { node_comm_->barrier(on(s)); });
}

void CudaMultiNodeCommunicator::Impl::exchange(const std::vector<const detail::Request*>& p2p) {
  DeviceScope scope(device_);
  SYMCOMM_CHECK(has_nccl_, kUnsupported,
                "rank {}: point-to-point needs NCCL, which is not made where ranks share a GPU (Config::shared_gpu)",
                rank_);
  std::optional<Error> failure;
  {
    std::lock_guard lock(engine_mu_);
    check();
    ncclComm_t c = world_.nccl;
    try {
      const detail::NcclCalls& api = *nccl_api_;
      detail::check_nccl(api, api.group_start(), c, "ncclGroupStart");
      ncclResult_t res = ncclSuccess;
      for (const detail::Request* r : p2p) {
        if (res != ncclSuccess) break;
        const ncclDataType_t t = detail::to_nccl(r->dtype);
        auto s = static_cast<cudaStream_t>(r->options.stream);
        res = r->p2p == detail::P2pDir::kSend ? api.send(r->in, r->count, t, r->peer, c, s)
                                              : api.recv(r->out, r->count, t, r->peer, c, s);
      }
      const ncclResult_t end = api.group_end();
      detail::check_nccl(api, res, c, "ncclSend/ncclRecv");
      detail::check_nccl(api, end, c, "ncclGroupEnd");
    } catch (const Error& e) {
      failure = e;
    }
  }
  if (!failure) return;
  fail(*failure);  // without engine_mu_, which abort_engines() takes
  throw *failure;
}

CudaMultiNodeCommunicator::CudaMultiNodeCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaMultiNodeCommunicator::~CudaMultiNodeCommunicator() = default;

std::unique_ptr<CudaMultiNodeCommunicator> CudaMultiNodeCommunicator::create(std::shared_ptr<Store> store,
                                                                             const RankInfo& ranks,
                                                                             const MultiNodeOptions& options) {
  return std::unique_ptr<CudaMultiNodeCommunicator>(
      new CudaMultiNodeCommunicator(std::make_unique<Impl>(std::move(store), ranks, options)));
}

int CudaMultiNodeCommunicator::rank() const { return impl_->rank_; }
int CudaMultiNodeCommunicator::world_size() const { return impl_->layout_.world_size; }
int CudaMultiNodeCommunicator::node() const { return impl_->node_; }
int CudaMultiNodeCommunicator::num_nodes() const { return impl_->layout_.num_nodes(); }
int CudaMultiNodeCommunicator::local_rank() const { return impl_->local_; }
int CudaMultiNodeCommunicator::local_world_size() const {
  return static_cast<int>(impl_->layout_.members[impl_->node_].size());
}
int CudaMultiNodeCommunicator::device() const { return impl_->device_; }
Communicator& CudaMultiNodeCommunicator::node_communicator() { return *impl_->node_comm_; }

void CudaMultiNodeCommunicator::all_reduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                           const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kAllReduce, in, out, count, dtype, op, 0, on(o.stream)), o.hierarchy);
}
void CudaMultiNodeCommunicator::all_gather(const void* in, void* out, size_t count, DataType dtype,
                                           const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kAllGather, in, out, count, dtype, ReduceOp::kSum, 0, on(o.stream)),
               o.hierarchy);
}
void CudaMultiNodeCommunicator::reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                               const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kReduceScatter, in, out, count, dtype, op, 0, on(o.stream)),
               o.hierarchy);
}
void CudaMultiNodeCommunicator::broadcast(const void* in, void* out, size_t count, DataType dtype, int root,
                                          const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kBroadcast, in, out, count, dtype, ReduceOp::kSum, root, on(o.stream)),
               o.hierarchy);
}
void CudaMultiNodeCommunicator::all_to_all(const void* in, void* out, size_t count, DataType dtype,
                                           const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kAllToAll, in, out, count, dtype, ReduceOp::kSum, 0, on(o.stream)),
               o.hierarchy);
}
void CudaMultiNodeCommunicator::barrier(const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kBarrier, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum, 0,
                                    on(o.stream)),
               o.hierarchy);
}
void CudaMultiNodeCommunicator::send(const void* buf, size_t count, DataType dtype, int peer,
                                     const NodeCollOptions& o) {
  impl_->issue(detail::make_p2p(detail::P2pDir::kSend, buf, nullptr, count, dtype, peer, on(o.stream)), o.hierarchy);
}
void CudaMultiNodeCommunicator::recv(void* buf, size_t count, DataType dtype, int peer, const NodeCollOptions& o) {
  impl_->issue(detail::make_p2p(detail::P2pDir::kRecv, nullptr, buf, count, dtype, peer, on(o.stream)), o.hierarchy);
}

void CudaMultiNodeCommunicator::group_start() { impl_->group_start(); }
void CudaMultiNodeCommunicator::group_end() { impl_->group_end(); }
void CudaMultiNodeCommunicator::group_cancel() { impl_->group_cancel(); }

NodePath CudaMultiNodeCommunicator::last_path() const { return impl_->last_.load(); }
void CudaMultiNodeCommunicator::abort() { impl_->abort(); }
bool CudaMultiNodeCommunicator::is_aborted() const { return impl_->fault_.aborted(); }
void CudaMultiNodeCommunicator::check() const { impl_->check(); }

}  // namespace symcomm
