#include "core/comm_core.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include "base/check.h"
#include "base/logging.h"

namespace symcomm::detail {

// The Work returned by *_async calls inside a group: it becomes the group's Work once the group ends.
class CommCore::GroupWork final : public Work {
 public:
  void bind(std::shared_ptr<Work> target, std::exception_ptr error) {
    std::lock_guard lock(mu_);
    target_ = std::move(target);
    error_ = error;
    bound_ = true;
  }
  bool is_completed() override {
    auto [t, e] = get();
    return e || (t && t->is_completed());
  }
  void wait() override {
    auto [t, e] = get();
    if (e) std::rethrow_exception(e);
    t->wait();
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    auto [t, e] = get();
    if (e) std::rethrow_exception(e);
    return t->wait_for(timeout);
  }
  std::exception_ptr exception() override {
    auto [t, e] = get();
    return e ? e : (t && t->is_completed() ? t->exception() : nullptr);
  }

 private:
  std::pair<std::shared_ptr<Work>, std::exception_ptr> get() {
    std::lock_guard lock(mu_);
    SYMCOMM_CHECK_ARG(bound_, "wait on a collective of a group that has not ended yet (call group_end first)");
    return {target_, error_};
  }
  std::mutex mu_;
  bool bound_ = false;
  std::shared_ptr<Work> target_;
  std::exception_ptr error_;
};

CommCore::CommCore(std::unique_ptr<CommContext> ctx, BackendKind kind, int device) : ctx_(std::move(ctx)) {
  backend_ = make_backend(kind, *ctx_, device);
}

CommCore::~CommCore() {
  backend_.reset();  // unmaps peers' memory; peers keep their own mappings alive
  if (ctx_->mesh) ctx_->mesh->close();
  ctx_->store.reset();
  ctx_->server.reset();
}

Algorithm CommCore::select(const Request& r) const {
  if (r.is_p2p()) return Algorithm::kDirect;  // one path: NOTE [point-to-point] in src/backends/host/host_p2p.cc
  SelectRequest s{.kind = r.kind,
                  .dtype = r.dtype,
                  .op = r.op,
                  .bytes = r.count * r.elem_size(),
                  .forced = r.options.algorithm,
                  .contention = r.options.contention};
  return select_algorithm(s, backend_->capabilities(), ctx_->config.tuning);
}

void CommCore::check_arguments(const Request& r) {
  check_request(r, ctx_->ranks.rank, ctx_->ranks.world_size);
  if (r.is_p2p()) {
    SYMCOMM_CHECK_ARG(r.peer != ctx_->ranks.rank || in_group(),
                      "rank {}: {} with this rank as its peer outside a group: its match can only come from the same "
                      "group",
                      ctx_->ranks.rank, r.describe());
    return backend_->check_p2p(r);
  }
  backend_->check_buffers(r);
}

std::shared_ptr<Work> CommCore::enqueue(const Request& r, bool async) {
  ctx_->throw_if_failed();
  // This rank's own checks. In debug mode a refusal is not thrown yet but shared with the peers first (NOTE
  // [refused on one rank]).
  std::exception_ptr refused;
  Algorithm algo = Algorithm::kAuto;
  try {
    check_arguments(r);
    if (async) backend_->check_async(r);
    algo = select(r);
  } catch (const Error&) {
    // Point-to-point operations are not cross-checked: their peers check count and dtype as the data arrives.
    if (!ctx_->config.debug_checks || r.is_p2p()) throw;
    refused = std::current_exception();
  }
  uint64_t seq = ctx_->history.record(OpRecord{.kind = r.kind,
                                               .dtype = r.dtype,
                                               .op = r.op,
                                               .count = r.count,
                                               .algo = algo,
                                               .state = OpState::kIssued,
                                               .p2p = r.p2p,
                                               .peer = r.peer});
  if (!refused && !r.is_p2p()) last_algo_.store(algo, std::memory_order_relaxed);
  try {
    if (ctx_->config.debug_checks && !r.is_p2p()) debug_cross_check(r, algo, seq, refused);
    if (in_group()) {  // recorded now, run by group_end()
      std::lock_guard lock(group_mu_);
      group_.ops.emplace_back(r, algo);
      group_.seqs.push_back(seq);
      if (!async) return nullptr;
      group_.handed_out = true;
      return group_.scopes.back().work;
    }
    ctx_->history.set_state(seq, OpState::kRunning);
    if (async) return make_tracked_work(backend_->run_async(r, algo), ctx_->history, {seq});
    backend_->run(r, algo);
    ctx_->history.set_state(seq, OpState::kDone);
    return nullptr;
  } catch (const Error& e) {
    if (refused && std::current_exception() == refused) {
      // This rank's own refusal: nothing ran, and outside debug mode it is thrown before anything could mark
      // the communicator failed (NOTE [host worker start] in host_backend.cc), so not here either.
      ctx_->history.set_state(seq, OpState::kFailed);
      throw;
    }
    failed(seq, e);
    throw;
  }
}

void CommCore::failed(uint64_t seq, const Error& e) {
  ctx_->history.set_state(seq, OpState::kFailed);
  if (is_fatal(e.code())) ctx_->set_sticky(e);  // logs it with the history, the first time
}

bool CommCore::reduce_scatter_gathered(const GatheredReduceScatter& g) {
  if (g.count == 0 || g.nseg == 0 || ctx_->ranks.world_size < 2 || !backend_->can_reduce_scatter_gathered() ||
      in_group()) {
    return false;
  }
  ctx_->throw_if_failed();
  const Request r{.kind = Collective::kReduceScatter,
                  .in = g.stage,  // stands for the inputs (each was validated when recorded; some may be null)
                  .out = g.out,
                  .count = g.count,
                  .dtype = g.dtype,
                  .op = g.op,
                  .root = 0,
                  .options = g.options};
  validate_request(r, ctx_->ranks.world_size);
  const Algorithm algo = select(r);
  // Only where symcomm's own kernel would run the flattened reduce-scatter (the same choice on every rank).
  if (algo != Algorithm::kDirect) return false;
  uint64_t seq = ctx_->history.record(OpRecord{
      .kind = r.kind, .dtype = r.dtype, .op = r.op, .count = r.count, .algo = algo, .state = OpState::kRunning});
  try {
    if (ctx_->config.debug_checks) debug_cross_check(r, algo, seq, nullptr);
    backend_->reduce_scatter_gathered(g);
  } catch (const Error& e) {
    failed(seq, e);
    throw;
  }
  last_algo_.store(algo, std::memory_order_relaxed);
  ctx_->history.set_state(seq, OpState::kDone);
  return true;
}

// NOTE [refused on one rank] A call that one rank's own checks refuse (a null input on the broadcast root only,
// a misaligned pointer, an algorithm forced on one rank) is refused there at once, and nothing runs; its peers,
// whose arguments are fine, go into the collective and wait for it until their deadline (as with NCCL). In debug
// mode (Config::debug_checks) the refusal goes into the rank's published record instead, with its message: every
// rank then throws in the same call, the refusing rank its own error, the others kInvalidArgument naming it and
// repeating its reason, and no rank runs the op, so the communicator stays usable and in step on all of them.
void CommCore::debug_cross_check(const Request& r, Algorithm algo, uint64_t seq, std::exception_ptr refused) {
  // Every rank publishes its arguments for this op and compares them with everyone's before launching, so a
  // mismatch is reported field by field instead of hanging or corrupting memory.
  struct Fields {
    uint32_t kind, dtype, op, root, algo, refused;
    uint64_t count;
  } mine{static_cast<uint32_t>(r.kind),
         static_cast<uint32_t>(r.dtype),
         static_cast<uint32_t>(r.has_reduction() ? r.op : ReduceOp::kSum),
         static_cast<uint32_t>(r.root),
         static_cast<uint32_t>(algo),
         refused ? 1u : 0u,
         r.count};
  std::string reason;  // after the fields: why this rank refused the call
  if (refused) {
    try {
      std::rethrow_exception(refused);
    } catch (const Error& e) {
      reason = e.message();
    }
  }
  Bytes bytes(sizeof(Fields) + reason.size());
  std::memcpy(bytes.data(), &mine, sizeof(Fields));
  std::memcpy(bytes.data() + sizeof(Fields), reason.data(), reason.size());
  // Keyed by the collectives' own count: `seq` also counts point-to-point operations, which only some ranks issue.
  std::string base = fmt::format("{}/dbg/{}/", ctx_->prefix, checked_collectives_.fetch_add(1) + 1);
  ctx_->store->set(base + std::to_string(ctx_->ranks.rank), bytes);
  std::string report, refusals;
  std::vector<int> bad, refusing;
  const Deadline deadline = ctx_->deadline();
  for (int p = 0; p < ctx_->ranks.world_size; ++p) {
    Bytes theirs_b = ctx_->store_get(base + std::to_string(p), deadline);
    Fields theirs{};
    SYMCOMM_CHECK(theirs_b.size() >= sizeof(Fields), kInternal, "bad debug-check record from rank {}", p);
    std::memcpy(&theirs, theirs_b.data(), sizeof(Fields));
    if (theirs.refused) {
      refusing.push_back(p);
      refusals += fmt::format(" rank {}: {};", p,
                              std::string_view(reinterpret_cast<const char*>(theirs_b.data()) + sizeof(Fields),
                                               theirs_b.size() - sizeof(Fields)));
      continue;  // its fields are what it was given, not what it would run
    }
    if (refused) continue;
    std::string diff;
    auto cmp = [&](const char* name, auto a, auto b, auto show) {
      if (a != b)
        diff += fmt::format(" {}: rank {} has {}, rank {} has {};", name, ctx_->ranks.rank, show(a), p, show(b));
    };
    auto num = [](auto v) { return fmt::format("{}", v); };
    cmp("collective", mine.kind, theirs.kind,
        [](uint32_t v) { return std::string(to_string(static_cast<Collective>(v))); });
    cmp("dtype", mine.dtype, theirs.dtype, [](uint32_t v) { return std::string(to_string(static_cast<DataType>(v))); });
    cmp("op", mine.op, theirs.op, [](uint32_t v) { return std::string(to_string(static_cast<ReduceOp>(v))); });
    cmp("count", mine.count, theirs.count, num);
    cmp("root", mine.root, theirs.root, num);
    cmp("algorithm", mine.algo, theirs.algo,
        [](uint32_t v) { return std::string(to_string(static_cast<Algorithm>(v))); });
    if (!diff.empty()) {
      bad.push_back(p);
      report += diff;
    }
  }
  // Everyone has read every record once all ranks published "done"; the last reader cleans up.
  if (ctx_->store->add(base + "done", 1) == ctx_->ranks.world_size) {
    for (int p = 0; p < ctx_->ranks.world_size; ++p) ctx_->store->remove(base + std::to_string(p));
    ctx_->store->remove(base + "done");
  }
  if (refused) std::rethrow_exception(refused);
  if (!refusing.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("rank {}: op {} {} was refused on rank(s) {}, so no rank runs it (debug checks):{}",
                            ctx_->ranks.rank, seq, to_string(r.kind), fmt::join(refusing, ", "), refusals),
                __FILE__, __LINE__, refusing);
  }
  if (!bad.empty()) {
    throw Error(ErrorCode::kMismatch, fmt::format("op {} {} differs across ranks:{}", seq, to_string(r.kind), report),
                __FILE__, __LINE__, bad);
  }
}

// NOTE [nested groups] Groups nest: every group_start() opens a level (Scope) and its group_end() or
// group_cancel() closes it. Only the outermost end runs the group: every collective recorded at any level
// that was not cancelled, in issue order, and the Works that any level handed out (to `*_async` calls, or
// from an inner group_end_async()) complete with it. group_cancel() drops what its own level recorded
// (inner levels included) and fails that level's Works; the outer levels' collectives stay recorded. So a
// CollectiveGroup guard left by an exception cancels its level only, and each enclosing guard that the
// exception also leaves cancels its own: no guard finds its level already gone (if an inner cancel dropped
// the whole group, the outer guard's cancel would throw while unwinding: std::terminate).
bool CommCore::in_group() const {
  std::lock_guard lock(group_mu_);
  return !group_.scopes.empty() && group_.owner == std::this_thread::get_id();
}

void CommCore::group_start() {
  std::lock_guard lock(group_mu_);
  if (group_.scopes.empty()) {
    group_.owner = std::this_thread::get_id();
  } else {
    SYMCOMM_CHECK_ARG(group_.owner == std::this_thread::get_id(),
                      "group_start: another thread has a group open on this communicator");
  }
  group_.scopes.push_back(
      {.id = group_.next_id++, .first_op = group_.ops.size(), .work = std::make_shared<GroupWork>()});
}

std::shared_ptr<Work> CommCore::group_end(bool async) {
  Group g;
  {
    std::lock_guard lock(group_mu_);
    SYMCOMM_CHECK_ARG(!group_.scopes.empty() && group_.owner == std::this_thread::get_id(),
                      "group_end without a matching group_start on this thread");
    if (group_.scopes.size() > 1) {  // an inner level: its Work completes with the whole group
      group_.ended.push_back(std::move(group_.scopes.back()));
      group_.scopes.pop_back();
      return async ? group_.ended.back().work : nullptr;
    }
    g = std::move(group_);
    group_ = Group{};
  }
  g.ended.push_back(std::move(g.scopes.back()));  // every level's Work, the outermost last
  auto bind_all = [&](const std::shared_ptr<Work>& work, std::exception_ptr error) {
    for (const Scope& s : g.ended) s.work->bind(work, error);
  };
  try {
    ctx_->throw_if_failed();
    if (async) {
      for (uint64_t seq : g.seqs) ctx_->history.set_state(seq, OpState::kRunning);
      bind_all(make_tracked_work(backend_->run_group_async(g.ops), ctx_->history, g.seqs), nullptr);
      return g.ended.back().work;
    }
    // Synchronous: returns when done (host) or enqueued (CUDA). Where an `*_async` call handed out a Work,
    // that Work must still wait for the device work (CUDA: events recorded after the group).
    std::shared_ptr<Work> work =
        g.handed_out ? backend_->run_group_with_work(g.ops) : (backend_->run_group(g.ops), make_composite_work({}));
    for (uint64_t seq : g.seqs) ctx_->history.set_state(seq, OpState::kDone);
    bind_all(work, nullptr);
    return nullptr;
  } catch (const Error& e) {
    for (uint64_t seq : g.seqs) ctx_->history.set_state(seq, OpState::kFailed);
    bind_all(nullptr, std::current_exception());
    if (is_fatal(e.code())) ctx_->set_sticky(e);  // logs it with the history, the first time
    throw;
  }
}

void CommCore::group_cancel() {
  std::lock_guard lock(group_mu_);
  SYMCOMM_CHECK_ARG(!group_.scopes.empty() && group_.owner == std::this_thread::get_id(),
                    "group_cancel without a matching group_start on this thread");
  std::exception_ptr cancelled;
  try {
    SYMCOMM_THROW(kInvalidArgument, "the collective's group was cancelled");
  } catch (...) {
    cancelled = std::current_exception();
  }
  const Scope level = std::move(group_.scopes.back());
  group_.scopes.pop_back();
  level.work->bind(nullptr, cancelled);
  // Inner levels that ended inside this one (numbered after it) are dropped with it.
  std::erase_if(group_.ended, [&](const Scope& s) {
    if (s.id < level.id) return false;
    s.work->bind(nullptr, cancelled);
    return true;
  });
  for (size_t i = level.first_op; i < group_.seqs.size(); ++i)
    ctx_->history.set_state(group_.seqs[i], OpState::kFailed);
  group_.ops.resize(level.first_op);
  group_.seqs.resize(level.first_op);
  if (group_.scopes.empty()) group_ = Group{};
}

void CommCore::abort() {
  if (ctx_->aborted.exchange(true)) return;
  // One line: a collective that the abort stops reports it with the operations (NOTE [op record]).
  SYMCOMM_LOG_WARN("communicator {} aborted by rank {}", ctx_->prefix, ctx_->ranks.rank);
  backend_->abort();
}

}  // namespace symcomm::detail
