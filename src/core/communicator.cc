// Communicator: creation (store, mesh, backend) and the thin public entry points, each of which builds a
// Request and calls CommCore::enqueue.

#include "symcomm/communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/logging.h"
#include "core/comm_core.h"
#include "core/tuning_file.h"

namespace symcomm {

using detail::CommContext;
using detail::CommCore;
using detail::make_p2p;
using detail::make_request;
using detail::P2pDir;
using detail::Request;

namespace {

std::atomic<uint64_t> g_comm_counter{0};

// NOTE [rendezvous generations] Rank 0 of every communicator made by create(Rendezvous) starts a store server
// on the rendezvous port, and destroying the communicator stops it. A job that creates such a communicator again
// on the same port (destroy, then create from the same variables) lets a fast rank connect to the earlier
// server while rank 0 is still shutting it down: its creation then failed with a store error. So the n-th
// communicator a process makes from a rendezvous token uses the token "<token>#<n>" (n > 0; every rank makes
// them in the same order, as creation is collective), and its ranks retry, until the deadline, a server that
// refuses that token, which the earlier server does. Counted per token, not per port: rank 0 may be given port
// 0 where the others are given the port it picked.
std::string rendezvous_token(const std::string& token, uint64_t* generation) {
  static std::mutex mu;
  static std::map<std::string, uint64_t> made;
  std::lock_guard lock(mu);
  *generation = made[token]++;
  return *generation == 0 ? token : fmt::format("{}#{}", token, *generation);
}

void validate_rank_info(const RankInfo& r) {
  SYMCOMM_CHECK_ARG(r.world_size >= 1 && r.world_size <= kMaxRanks, "world_size {} is outside [1, {}]", r.world_size,
                    kMaxRanks);
  SYMCOMM_CHECK_ARG(r.rank >= 0 && r.rank < r.world_size, "rank {} is outside [0, {})", r.rank, r.world_size);
  SYMCOMM_CHECK_ARG(r.local_world_size == r.world_size,
                    "symcomm communicators span one node: local_world_size ({}) must equal world_size ({})",
                    r.local_world_size, r.world_size);
  SYMCOMM_CHECK_ARG(r.local_rank == r.rank, "local_rank ({}) must equal rank ({}) within one node", r.local_rank,
                    r.rank);
}

// NOTE [configuration agreement] Selection and kernels read the configuration on each rank independently.
// Ranks whose SYMCOMM_* settings differ (a variable exported in one rank's shell, a Config built per rank)
// would choose different algorithms, grids or staging layouts for the same call: a mismatch caught later at
// best, a hang or silently wrong elements at worst (a two-shot all-reduce with another block count slices the
// staging differently, and every block's barrier still passes). So at creation every rank sends its settings
// to every other, and each rank fails with kMismatch naming the settings that differ and the ranks whose
// values differ from its own; all ranks see the same settings, so all fail alike. Settings that only concern
// the rank itself may differ: log level, operations remembered, trace directory, timeout. On the host backend the
// memory sizes are left to the heap exchange, which compares them with a message of its own (and whose failure
// paths the lifecycle tests exercise through it). The CUDA heap's exchange does not compare them, so there they
// are compared here: with heaps of different sizes, a rank whose heap is full refuses an alloc() before its
// exchange while its peers go on into theirs, and every later alloc() pairs different allocations. The Tuning
// compared is the one each rank resolved (NOTE [tuning precedence] in tuning_file.cc), so ranks that read
// different tuning files, or whose GPUs pick different entries of one, fail here too; the message then says where
// each rank's Tuning came from. The file's path itself is not compared: two paths may hold the same values.
constexpr uint32_t kTagConfig = 3;
constexpr uint32_t kTagSplit = 4;
constexpr uint32_t kTagTuning = 5;

// Resolves ctx.config.tuning from ctx.requested (NOTE [tuning precedence]); returns where it came from.
std::string resolve_comm_tuning(CommContext& ctx, BackendKind backend, int device) {
  const Config& req = ctx.requested;
  const int n = ctx.ranks.world_size;
  const std::string name =
      backend == BackendKind::kCuda ? detail::cuda_device_name(ctx, device) : std::string(detail::kHostTuningDevice);
  const detail::TuningEntry* compiled = detail::compiled_tuning().find(n, name);
  std::string source = compiled ? fmt::format("the compiled-in entry for {} ranks on '{}'", n, name)
                                : fmt::format("no compiled-in entry for {} ranks on '{}'", n, name);
  detail::TuningFile file;
  const detail::TuningEntry* entry = nullptr;
  if (!req.tuning_file.empty()) {
    file = detail::read_tuning_file(req.tuning_file);
    entry = file.find(n, name);
    source = fmt::format("tuning file '{}', {} for {} ranks on '{}'; {}", req.tuning_file,
                         entry ? "its entry" : "no entry", n, name, source);
  }
  ctx.config.tuning = detail::resolve_tuning(req, backend, n, entry, compiled);
  return source;
}

// Reads Config::topology_file into ctx.topology (NOTE [tuning agreement]: an error is every rank's).
void resolve_topology(CommContext& ctx) {
  const std::string& path = ctx.requested.topology_file;
  if (path.empty()) return;
  const std::string text = detail::read_config_file(path, "topology file");
  try {
    ctx.topology = detail::parse_topology(text);
  } catch (const Error& e) {
    SYMCOMM_THROW(kInvalidArgument, "topology file '{}': {}", path, e.message());
  }
  SYMCOMM_CHECK_ARG(ctx.topology->world_size() == ctx.ranks.world_size,
                    "topology file '{}' describes {} ranks, the communicator has {}", path, ctx.topology->world_size(),
                    ctx.ranks.world_size);
}

// NOTE [tuning agreement]
// Each rank resolves its Tuning (and reads its topology file) before the mesh exists. A rank whose tuning file cannot
// be read or parsed keeps the error until this exchange, where every rank learns of it: that rank throws its own error,
// the others an Error of the same code naming it and its problem, so no rank goes on into an exchange that rank will
// never join. The exchange also carries where each rank's Tuning came from (returned by rank), for check_same_config's
// message.
std::vector<std::string> agree_tuning(CommContext& ctx, const std::optional<Error>& error, const std::string& source) {
  const int n = ctx.ranks.world_size, me = ctx.ranks.rank;
  if (n == 1) {
    if (error) throw *error;
    return {source};
  }
  const std::string mine =
      error ? fmt::format("E{}\n{}", static_cast<int>(error->code()), error->message()) : "S" + source;
  const auto all = ctx.mesh_all_gather(kTagTuning, std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> sources(n);
  std::vector<int> failed;
  std::string problems;
  ErrorCode code = ErrorCode::kInvalidArgument;
  for (int p = 0; p < n; ++p) {
    const std::string text(all[p].begin(), all[p].end());
    if (text.empty() || (text[0] != 'S' && text[0] != 'E')) {
      throw Error(ErrorCode::kInternal, fmt::format("rank {}: bad tuning message from rank {}", me, p), __FILE__,
                  __LINE__, {p});
    }
    if (text[0] == 'S') {
      sources[p] = text.substr(1);
      continue;
    }
    const size_t eol = text.find('\n');
    const std::string message = eol == std::string::npos ? "" : text.substr(eol + 1);
    if (failed.empty()) code = static_cast<ErrorCode>(std::atoi(text.substr(1, eol - 1).c_str()));
    failed.push_back(p);
    problems += fmt::format("{}rank {}: {}", problems.empty() ? "" : "; ", p, message);
  }
  if (error) throw *error;
  if (!failed.empty()) {
    throw Error(
        code,
        fmt::format("rank {}: rank{} {} could not resolve {} configuration: {}", me, failed.size() > 1 ? "s" : "",
                    fmt::join(failed, ","), failed.size() > 1 ? "their" : "its", problems),
        __FILE__, __LINE__, failed);
  }
  return sources;
}

void check_same_config(CommContext& ctx, BackendKind backend, const std::vector<std::string>& tuning_sources) {
  const int n = ctx.ranks.world_size, me = ctx.ranks.rank;
  if (n == 1) return;
  static const std::set<std::string> kPerRank = {"SYMCOMM_LOG", "SYMCOMM_OP_HISTORY", "SYMCOMM_TIMEOUT_MS",
                                                 "SYMCOMM_TRACE_DIR"};
  static const std::set<std::string> kByHeap = {"SYMCOMM_HEAP_BYTES", "SYMCOMM_SCRATCH_BYTES",
                                                "SYMCOMM_CUDA_SCRATCH_BYTES"};
  std::string mine;
  for (const auto& [name, value] : ctx.config.settings()) {
    if (kPerRank.contains(name) || (backend == BackendKind::kHost && kByHeap.contains(name))) continue;
    if (name == "SYMCOMM_TUNING_FILE") continue;    // compared through the Tuning it resolves to
    if (name == "SYMCOMM_TOPOLOGY_FILE") continue;  // compared through the links it gives, below
    mine += name + "=" + value + "\n";
  }
  mine += "topology=" + (ctx.topology ? ctx.topology->to_json() : std::string("(every pair linked)")) + "\n";
  // Each rank's settings by name; `order` lists every name any rank sent, in the order first seen.
  std::vector<std::map<std::string, std::string>> by_rank(n);
  std::vector<std::string> order;
  const auto all = ctx.mesh_all_gather(kTagConfig, std::vector<uint8_t>(mine.begin(), mine.end()));
  for (int p = 0; p < n; ++p) {
    const std::string text(all[p].begin(), all[p].end());
    for (size_t at = 0; at < text.size();) {
      const size_t eol = std::min(text.find('\n', at), text.size());
      const std::string line = text.substr(at, eol - at);
      const size_t eq = line.find('=');
      const std::string name = line.substr(0, eq);
      if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
      by_rank[p][name] = eq == std::string::npos ? "" : line.substr(eq + 1);
      at = eol + 1;
    }
  }
  std::string diffs;
  std::set<int> others;  // ranks whose value of some setting is not this rank's
  bool tuning_differs = false;
  for (const std::string& name : order) {
    std::map<std::string, std::vector<int>> ranks_by_value;  // "(absent)": a rank of another build lacks it
    for (int p = 0; p < n; ++p) {
      const auto it = by_rank[p].find(name);
      ranks_by_value[it == by_rank[p].end() ? "(absent)" : it->second].push_back(p);
    }
    if (ranks_by_value.size() == 1) continue;
    std::string what;
    for (const auto& [value, ranks] : ranks_by_value) {
      what += fmt::format("{}{} on rank{} {}", what.empty() ? "" : ", ", value, ranks.size() > 1 ? "s" : "",
                          fmt::join(ranks, ","));
      if (std::find(ranks.begin(), ranks.end(), me) == ranks.end()) others.insert(ranks.begin(), ranks.end());
    }
    diffs += fmt::format("{}{}: {}", diffs.empty() ? "" : "; ", name, what);
    for (const detail::TuningField& f : detail::tuning_fields()) tuning_differs = tuning_differs || f.env == name;
  }
  if (diffs.empty()) return;
  std::string sources;
  for (int p = 0; tuning_differs && p < n; ++p) {
    sources += fmt::format("{}rank {}: {}", p == 0 ? " (Tuning resolved from: " : "; ", p, tuning_sources[p]);
  }
  if (tuning_differs) sources += ")";
  throw Error(ErrorCode::kMismatch,
              fmt::format("rank {}: the ranks' configurations differ (every rank must use the same SYMCOMM_* "
                          "settings, except {}): {}{}",
                          me, fmt::join(kPerRank, ", "), diffs, sources),
              __FILE__, __LINE__, std::vector<int>(others.begin(), others.end()));
}

std::string random_hex(size_t n) {
  std::random_device rd;
  std::string out;
  while (out.size() < n) out += fmt::format("{:08x}", rd());
  out.resize(n);
  return out;
}

}  // namespace

Communicator::Communicator(std::unique_ptr<detail::CommCore> core) : core_(std::move(core)) {}
Communicator::~Communicator() = default;

namespace {

// Communicator::create(store, ranks, options), and split()'s creation of a child that inherits its members'
// links (`inherited`), which the backend must see when it is made (the CUDA backend sets its inboxes up for them).
std::unique_ptr<detail::CommCore> make_core(std::shared_ptr<Store> store, const RankInfo& ranks,
                                            const CommOptions& options, std::optional<detail::Topology> inherited) {
  SYMCOMM_CHECK_ARG(store != nullptr, "store is null");
  validate_rank_info(ranks);
  SYMCOMM_CHECK_ARG(is_valid(options.backend), "invalid backend value {}", static_cast<int>(options.backend));
  auto ctx = std::make_unique<CommContext>();
  ctx->ranks = ranks;
  ctx->requested = options.config ? *options.config : Config::from_env();
  ctx->requested.tuning.validate();  // a Config built in code; from_env() checked its variables as it read them
  ctx->config = ctx->requested;
  detail::set_log_level(ctx->config.log_level);
  detail::set_log_rank(ranks.rank);
  ctx->history.set_capacity(static_cast<size_t>(ctx->config.op_history));
  // NOTE [tuning agreement]: an error here is every rank's, after the mesh exists.
  std::optional<Error> tuning_error;
  std::string tuning_source;
  try {
    tuning_source = resolve_comm_tuning(*ctx, options.backend, options.device);
    if (inherited) {
      ctx->topology = std::move(inherited);
    } else {
      resolve_topology(*ctx);
    }
  } catch (const Error& e) {
    tuning_error = e;
  }
  uint64_t n = g_comm_counter.fetch_add(1);
  ctx->prefix = options.name.empty() ? fmt::format("symcomm/c{}", n) : "symcomm/" + options.name;
  ctx->store = std::move(store);

  // A nonce of rank 0 names the mesh sockets and authenticates their hellos, so that two jobs (or two
  // communicators with the same name over different stores) never connect to each other.
  std::string nonce_key = ctx->prefix + "/nonce";
  const detail::Deadline meet =
      options.meet_timeout.count() > 0 ? detail::Deadline(options.meet_timeout) : ctx->deadline();
  if (ranks.rank == 0) {
    ctx->token = random_hex(32);
    ctx->store->set(nonce_key, std::string_view(ctx->token));
  } else {
    // Bounded by the meeting's deadline, not only the store's (a rank 0 that never publishes it).
    const Bytes nonce = ctx->store_get(nonce_key, meet);
    ctx->token.assign(nonce.begin(), nonce.end());
  }
  try {
    ctx->mesh = detail::PeerMesh::create(*ctx->store, ctx->prefix, ranks, ctx->token, meet);
  } catch (...) {
    if (ranks.rank == 0) {  // a failed creation leaves no key behind (the store itself may be what failed)
      try {
        ctx->store->remove(nonce_key);
      } catch (const Error&) {
      }
    }
    throw;
  }
  if (ranks.rank == 0) ctx->store->remove(nonce_key);  // every rank read it before connecting to rank 0
  const std::vector<std::string> tuning_sources = agree_tuning(*ctx, tuning_error, tuning_source);
  check_same_config(*ctx, options.backend, tuning_sources);  // NOTE [configuration agreement]
  SYMCOMM_LOG_INFO("rank {}: Tuning from {}", ranks.rank, tuning_source);

  auto core = std::make_unique<CommCore>(std::move(ctx), options.backend, options.device);
  SYMCOMM_LOG_INFO("communicator {} ready: rank {}/{}, backend {}", core->ctx().prefix, ranks.rank, ranks.world_size,
                   to_string(options.backend));
  return core;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, const RankInfo& ranks,
                                                   const CommOptions& options) {
  return std::unique_ptr<Communicator>(new Communicator(make_core(std::move(store), ranks, options, std::nullopt)));
}

std::unique_ptr<Communicator> Communicator::create(const Rendezvous& rv, const CommOptions& options) {
  validate_rank_info(rv.ranks);
  SYMCOMM_CHECK_ARG(!rv.token.empty(), "the rendezvous token is empty");
  uint64_t generation = 0;
  const std::string token = rendezvous_token(rv.token, &generation);  // NOTE [rendezvous generations]
  Config config = options.config ? *options.config : Config::from_env();
  config.tuning.validate();               // before a store server is started for a communicator that would be refused
  if (!backend_built(options.backend)) {  // every rank's build is the same: every rank throws here
    SYMCOMM_THROW(kUnsupported, "this build of symcomm has no CUDA backend (nvcc was not found at build time)");
  }
  std::unique_ptr<StoreServer> server;
  if (rv.ranks.rank == 0) {
    server = StoreServer::start(
        StoreServerOptions{.host = rv.store_host, .port = rv.store_port, .token = token, .limits = {}});
  }
  uint16_t port = server ? server->port() : rv.store_port;
  if (server && rv.on_store_started) rv.on_store_started(port);
  SYMCOMM_CHECK_ARG(port != 0, "the store port is 0 on rank {} (only rank 0 may pick a free port)", rv.ranks.rank);
  std::shared_ptr<Store> store(Store::connect(StoreOptions{.host = rv.store_host,
                                                           .port = port,
                                                           .token = token,
                                                           .timeout = config.timeout,
                                                           .retry_refused = generation > 0}));
  CommOptions opts = options;
  opts.config = config;
  // Rank 0's server is this communicator's alone (NOTE [rendezvous generations]): a fixed default name, where a
  // count of the process's communicators differs between ranks that made different sub-communicators before.
  if (opts.name.empty()) opts.name = "rendezvous";
  auto comm = create(std::move(store), rv.ranks, opts);
  comm->core_->ctx().server = std::move(server);
  return comm;
}

bool Communicator::backend_built(BackendKind backend) {
  return backend == BackendKind::kHost || (backend == BackendKind::kCuda && detail::cuda_backend_built());
}

std::unique_ptr<Communicator> Communicator::create_from_env(const CommOptions& options) {
  return create(Rendezvous::from_env(), options);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const SplitOptions& options) {
  CommContext& ctx = core_->ctx();
  SYMCOMM_CHECK_ARG(color >= kSplitNoColor, "split color {} is below kSplitNoColor ({})", color, kSplitNoColor);
  SYMCOMM_CHECK_ARG(!core_->in_group(), "split() inside a group");
  ctx.throw_if_failed();
  const int n = ctx.ranks.world_size, me = ctx.ranks.rank;
  const uint32_t index = ctx.splits++;
  // Every rank's (color, key), over the mesh; then this rank's group, ordered by (key, rank).
  const int32_t mine[2] = {color, key};
  const auto* raw = reinterpret_cast<const uint8_t*>(mine);
  const auto all = ctx.mesh_all_gather(kTagSplit, std::vector<uint8_t>(raw, raw + sizeof(mine)));
  std::vector<std::pair<int32_t, int>> members;  // (key, rank here) of the ranks with this color
  for (int p = 0; p < n; ++p) {
    SYMCOMM_CHECK(all[p].size() == sizeof(mine), kInternal, "rank {}: bad split message from rank {}", me, p);
    int32_t theirs[2];
    std::memcpy(theirs, all[p].data(), sizeof(theirs));
    if (color != kSplitNoColor && theirs[0] == color) members.emplace_back(theirs[1], p);
  }
  if (color == kSplitNoColor) {
    // The ranks with a color each create() a communicator, which takes a number from g_comm_counter; take one
    // too, so that the next communicator created without a name gets the same default name on every rank
    // (otherwise it would be c<k> here and c<k+1> there, and both sides would wait for keys that never come).
    g_comm_counter.fetch_add(1);
    return nullptr;
  }
  std::sort(members.begin(), members.end());
  const int new_rank = static_cast<int>(
      std::find_if(members.begin(), members.end(), [me](const auto& m) { return m.second == me; }) - members.begin());
  const int new_size = static_cast<int>(members.size());
  CommOptions child;
  child.backend = backend();
  child.device = backend() == BackendKind::kCuda ? device() : -1;
  child.config = options.config ? *options.config : ctx.requested;
  // A child that inherits the configuration gets the parent's links among its members (renumbered) instead of
  // the file, which describes the parent's ranks.
  std::optional<detail::Topology> inherited;
  if (ctx.topology && !options.config) {
    std::vector<int> old_ranks;
    for (const auto& m : members) old_ranks.push_back(m.second);
    inherited = ctx.topology->among(old_ranks);
    child.config->topology_file.clear();
  }
  // The color is always part of the name: every group publishes its mesh under its own keys.
  const std::string base = !options.name.empty()
                               ? options.name
                               : fmt::format("{}/split{}", ctx.prefix.substr(std::string("symcomm/").size()), index);
  child.name = fmt::format("{}/{}", base, color);
  const RankInfo ranks{.rank = new_rank, .world_size = new_size, .local_rank = new_rank, .local_world_size = new_size};
  const int log_as = detail::log_rank();  // the process keeps logging as the rank it was (create() sets it)
  std::unique_ptr<Communicator> comm;
  try {
    comm.reset(new Communicator(make_core(ctx.store, ranks, child, std::move(inherited))));
  } catch (...) {
    detail::set_log_rank(log_as);
    throw;
  }
  detail::set_log_rank(log_as);
  comm->core_->ctx().server = ctx.server;
  SYMCOMM_LOG_INFO("rank {}: split {} color {} key {}: rank {} of {} in {}", me, index, color, key, new_rank, new_size,
                   comm->core_->ctx().prefix);
  return comm;
}

int Communicator::rank() const { return core_->ctx().ranks.rank; }
int Communicator::world_size() const { return core_->ctx().ranks.world_size; }
const RankInfo& Communicator::rank_info() const { return core_->ctx().ranks; }
BackendKind Communicator::backend() const { return core_->backend().kind(); }
int Communicator::device() const { return core_->backend().device(); }
const Config& Communicator::config() const { return core_->ctx().config; }
bool Communicator::full_peer_access() const { return core_->backend().full_peer_access(); }

void* Communicator::alloc(size_t bytes) {
  core_->ctx().throw_if_failed();
  return core_->backend().alloc(bytes);
}
void Communicator::free(void* ptr) {
  if (ptr != nullptr) core_->backend().free(ptr);
}
void* Communicator::peer_ptr(const void* ptr, int peer) const {
  SYMCOMM_CHECK_ARG(peer >= 0 && peer < world_size(), "peer {} is outside [0, {})", peer, world_size());
  void* p = core_->backend().peer_ptr(ptr, peer);
  SYMCOMM_CHECK_ARG(p != nullptr, "{} is not in the symmetric heap", ptr);
  return p;
}

void Communicator::all_reduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                              const CollOptions& o) {
  core_->enqueue(make_request(Collective::kAllReduce, in, out, count, dtype, op, 0, o), false);
}
void Communicator::all_gather(const void* in, void* out, size_t count, DataType dtype, const CollOptions& o) {
  core_->enqueue(make_request(Collective::kAllGather, in, out, count, dtype, ReduceOp::kSum, 0, o), false);
}
void Communicator::reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                  const CollOptions& o) {
  core_->enqueue(make_request(Collective::kReduceScatter, in, out, count, dtype, op, 0, o), false);
}
void Communicator::broadcast(const void* in, void* out, size_t count, DataType dtype, int root, const CollOptions& o) {
  core_->enqueue(make_request(Collective::kBroadcast, in, out, count, dtype, ReduceOp::kSum, root, o), false);
}
void Communicator::all_to_all(const void* in, void* out, size_t count, DataType dtype, const CollOptions& o) {
  core_->enqueue(make_request(Collective::kAllToAll, in, out, count, dtype, ReduceOp::kSum, 0, o), false);
}
void Communicator::barrier(const CollOptions& o) {
  core_->enqueue(make_request(Collective::kBarrier, nullptr, nullptr, 0, DataType::kUInt8, ReduceOp::kSum, 0, o),
                 false);
}

std::shared_ptr<Work> Communicator::all_reduce_async(const void* in, void* out, size_t count, DataType dtype,
                                                     ReduceOp op, const CollOptions& o) {
  return core_->enqueue(make_request(Collective::kAllReduce, in, out, count, dtype, op, 0, o), true);
}
std::shared_ptr<Work> Communicator::all_gather_async(const void* in, void* out, size_t count, DataType dtype,
                                                     const CollOptions& o) {
  return core_->enqueue(make_request(Collective::kAllGather, in, out, count, dtype, ReduceOp::kSum, 0, o), true);
}
std::shared_ptr<Work> Communicator::reduce_scatter_async(const void* in, void* out, size_t count, DataType dtype,
                                                         ReduceOp op, const CollOptions& o) {
  return core_->enqueue(make_request(Collective::kReduceScatter, in, out, count, dtype, op, 0, o), true);
}
std::shared_ptr<Work> Communicator::broadcast_async(const void* in, void* out, size_t count, DataType dtype, int root,
                                                    const CollOptions& o) {
  return core_->enqueue(make_request(Collective::kBroadcast, in, out, count, dtype, ReduceOp::kSum, root, o), true);
}
std::shared_ptr<Work> Communicator::all_to_all_async(const void* in, void* out, size_t count, DataType dtype,
                                                     const CollOptions& o) {
  return core_->enqueue(make_request(Collective::kAllToAll, in, out, count, dtype, ReduceOp::kSum, 0, o), true);
}
std::shared_ptr<Work> Communicator::barrier_async(const CollOptions& o) {
  return core_->enqueue(make_request(Collective::kBarrier, nullptr, nullptr, 0, DataType::kUInt8, ReduceOp::kSum, 0, o),
                        true);
}

void Communicator::send(const void* buf, size_t count, DataType dtype, int peer, const CollOptions& o) {
  core_->enqueue(make_p2p(P2pDir::kSend, buf, nullptr, count, dtype, peer, o), false);
}
void Communicator::recv(void* buf, size_t count, DataType dtype, int peer, const CollOptions& o) {
  core_->enqueue(make_p2p(P2pDir::kRecv, nullptr, buf, count, dtype, peer, o), false);
}
std::shared_ptr<Work> Communicator::send_async(const void* buf, size_t count, DataType dtype, int peer,
                                               const CollOptions& o) {
  return core_->enqueue(make_p2p(P2pDir::kSend, buf, nullptr, count, dtype, peer, o), true);
}
std::shared_ptr<Work> Communicator::recv_async(void* buf, size_t count, DataType dtype, int peer,
                                               const CollOptions& o) {
  return core_->enqueue(make_p2p(P2pDir::kRecv, nullptr, buf, count, dtype, peer, o), true);
}

void Communicator::group_start() { core_->group_start(); }
void Communicator::group_end() { core_->group_end(false); }
std::shared_ptr<Work> Communicator::group_end_async() { return core_->group_end(true); }
void Communicator::group_cancel() { core_->group_cancel(); }

CollectiveGroup::CollectiveGroup(Communicator& comm) : comm_(&comm), exceptions_at_start_(std::uncaught_exceptions()) {
  comm_->group_start();
}

CollectiveGroup::~CollectiveGroup() noexcept(false) {
  if (!active_) return;
  active_ = false;
  if (std::uncaught_exceptions() > exceptions_at_start_) {
    comm_->group_cancel();  // leaving by an exception: do not run a half-built group
  } else {
    comm_->group_end();
  }
}

void CollectiveGroup::end() {
  SYMCOMM_CHECK_ARG(active_, "CollectiveGroup already ended");
  active_ = false;
  comm_->group_end();
}

std::shared_ptr<Work> CollectiveGroup::end_async() {
  SYMCOMM_CHECK_ARG(active_, "CollectiveGroup already ended");
  active_ = false;
  return comm_->group_end_async();
}

Algorithm Communicator::last_algorithm() const { return core_->last_algorithm(); }
KernelPath Communicator::last_path() const { return core_->backend().last_path(); }
void Communicator::abort() { core_->abort(); }
bool Communicator::is_aborted() const { return core_->ctx().aborted.load(std::memory_order_acquire); }
void Communicator::check() const {
  core_->backend().poll_errors();
  core_->ctx().throw_if_failed();
}

}  // namespace symcomm
