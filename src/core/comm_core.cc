#include "core/comm_core.h"

#include <fmt/format.h>

#include <cstring>

#include "core/check.h"
#include "core/logging.h"

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

void Backend::reduce_scatter_gathered(const GatheredReduceScatter& /*g*/) {
  SYMCOMM_THROW(kUnsupported, "this backend has no gathered reduce-scatter");
}

bool is_fatal(ErrorCode code) { return code != ErrorCode::kInvalidArgument && code != ErrorCode::kUnsupported; }

CommCore::CommCore(std::unique_ptr<CommContext> ctx, BackendKind kind, int device) : ctx_(std::move(ctx)) {
  backend_ = kind == BackendKind::kCuda ? make_cuda_backend(*ctx_, device) : make_host_backend(*ctx_);
}

CommCore::~CommCore() {
  backend_.reset();  // unmaps peers' memory; peers keep their own mappings alive
  if (ctx_->mesh) ctx_->mesh->close();
  ctx_->store.reset();
  ctx_->server.reset();
}

Algorithm CommCore::select(const Request& r) const {
  SelectRequest s{.kind = r.kind,
                  .dtype = r.dtype,
                  .op = r.op,
                  .bytes = r.count * r.elem_size(),
                  .forced = r.options.algorithm,
                  .contention = r.options.contention};
  return select_algorithm(s, backend_->capabilities(), ctx_->config.tuning);
}

std::shared_ptr<Work> CommCore::enqueue(const Request& r, bool async) {
  ctx_->throw_if_failed();
  validate_request(r, ctx_->ranks.world_size);
  backend_->check_buffers(r);
  Algorithm algo = select(r);
  uint64_t seq = ctx_->history.record(OpRecord{
      .kind = r.kind, .dtype = r.dtype, .op = r.op, .count = r.count, .algo = algo, .state = OpState::kIssued});
  last_algo_.store(algo, std::memory_order_relaxed);
  try {
    if (ctx_->config.debug_checks) debug_cross_check(r, algo, seq);
    if (in_group()) {  // recorded now, run by group_end()
      std::lock_guard lock(group_mu_);
      group_.ops.emplace_back(r, algo);
      group_.seqs.push_back(seq);
      return async ? group_.work : nullptr;
    }
    ctx_->history.set_state(seq, OpState::kRunning);
    if (async) {
      auto work = backend_->run_async(r, algo);
      return work;
    }
    backend_->run(r, algo);
    ctx_->history.set_state(seq, OpState::kDone);
    return nullptr;
  } catch (const Error& e) {
    failed(seq, e);
    throw;
  }
}

void CommCore::failed(uint64_t seq, const Error& e) {
  ctx_->history.set_state(seq, OpState::kFailed);
  if (is_fatal(e.code())) {
    ctx_->set_sticky(e);
    SYMCOMM_LOG_ERROR("{}\nlast operations of {}:\n{}", e.what(), ctx_->prefix, ctx_->history.dump());
  }
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
    if (ctx_->config.debug_checks) debug_cross_check(r, algo, seq);
    backend_->reduce_scatter_gathered(g);
  } catch (const Error& e) {
    failed(seq, e);
    throw;
  }
  last_algo_.store(algo, std::memory_order_relaxed);
  ctx_->history.set_state(seq, OpState::kDone);
  return true;
}

void CommCore::debug_cross_check(const Request& r, Algorithm algo, uint64_t seq) {
  // Every rank publishes its arguments for this op and compares them with everyone's before launching, so a
  // mismatch is reported field by field instead of hanging or corrupting memory.
  struct Fields {
    uint32_t kind, dtype, op, root, algo;
    uint64_t count;
  } mine{static_cast<uint32_t>(r.kind),
         static_cast<uint32_t>(r.dtype),
         static_cast<uint32_t>(r.has_reduction() ? r.op : ReduceOp::kSum),
         static_cast<uint32_t>(r.root),
         static_cast<uint32_t>(algo),
         r.count};
  Bytes bytes(sizeof(Fields));
  std::memcpy(bytes.data(), &mine, sizeof(Fields));
  std::string base = fmt::format("{}/dbg/{}/", ctx_->prefix, seq);
  ctx_->store->set(base + std::to_string(ctx_->ranks.rank), bytes);
  std::string report;
  std::vector<int> bad;
  const Deadline deadline = ctx_->deadline();
  for (int p = 0; p < ctx_->ranks.world_size; ++p) {
    Bytes theirs_b = ctx_->store_get(base + std::to_string(p), deadline);
    Fields theirs{};
    SYMCOMM_CHECK(theirs_b.size() == sizeof(Fields), kInternal, "bad debug-check record from rank {}", p);
    std::memcpy(&theirs, theirs_b.data(), sizeof(Fields));
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
  if (!bad.empty()) {
    throw Error(ErrorCode::kMismatch, fmt::format("op {} {} differs across ranks:{}", seq, to_string(r.kind), report),
                __FILE__, __LINE__, bad);
  }
}

bool CommCore::in_group() const {
  std::lock_guard lock(group_mu_);
  return group_.depth > 0 && group_.owner == std::this_thread::get_id();
}

void CommCore::group_start() {
  std::lock_guard lock(group_mu_);
  if (group_.depth == 0) {
    group_.owner = std::this_thread::get_id();
    group_.work = std::make_shared<GroupWork>();
  } else {
    SYMCOMM_CHECK_ARG(group_.owner == std::this_thread::get_id(),
                      "group_start: another thread has a group open on this communicator");
  }
  ++group_.depth;
}

std::shared_ptr<Work> CommCore::group_end(bool async) {
  Group g;
  {
    std::lock_guard lock(group_mu_);
    SYMCOMM_CHECK_ARG(group_.depth > 0 && group_.owner == std::this_thread::get_id(),
                      "group_end without a matching group_start on this thread");
    if (--group_.depth > 0) return async ? group_.work : nullptr;
    g = std::move(group_);
    group_ = Group{};
  }
  try {
    ctx_->throw_if_failed();
    if (async) {
      std::shared_ptr<Work> work = backend_->run_group_async(g.ops);
      g.work->bind(work, nullptr);
      return g.work;
    }
    backend_->run_group(g.ops);
    for (uint64_t seq : g.seqs) ctx_->history.set_state(seq, OpState::kDone);
    g.work->bind(make_composite_work({}), nullptr);
    return nullptr;
  } catch (const Error& e) {
    for (uint64_t seq : g.seqs) ctx_->history.set_state(seq, OpState::kFailed);
    g.work->bind(nullptr, std::current_exception());
    if (is_fatal(e.code())) {
      ctx_->set_sticky(e);
      SYMCOMM_LOG_ERROR("{}\nlast operations of {}:\n{}", e.what(), ctx_->prefix, ctx_->history.dump());
    }
    throw;
  }
}

void CommCore::group_cancel() {
  std::lock_guard lock(group_mu_);
  SYMCOMM_CHECK_ARG(group_.depth > 0 && group_.owner == std::this_thread::get_id(),
                    "group_cancel without a matching group_start on this thread");
  try {
    SYMCOMM_THROW(kInvalidArgument, "the collective's group was cancelled");
  } catch (...) {
    group_.work->bind(nullptr, std::current_exception());
  }
  for (uint64_t seq : group_.seqs) ctx_->history.set_state(seq, OpState::kFailed);
  group_ = Group{};
}

void CommCore::abort() {
  if (ctx_->aborted.exchange(true)) return;
  SYMCOMM_LOG_WARN("communicator {} aborted by rank {}\nlast operations:\n{}", ctx_->prefix, ctx_->ranks.rank,
                   ctx_->history.dump());
  backend_->abort();
}

}  // namespace symcomm::detail
