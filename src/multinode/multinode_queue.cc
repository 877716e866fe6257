// The order of a MultiNodeCommunicator's calls (symcomm/multinode.h): synchronous ones, asynchronous ones on a
// progress thread, and groups.
//
// NOTE [multi-node queue]
// Every call is checked when it is issued (arguments, path, the sticky error), so an argument error is immediate
// and queues nothing. Then:
// - inside a group it is recorded; the outermost group_end() runs the group's calls as one batch: the collectives
//   in issue order, consecutive all-reduces of one dtype, op and hierarchy packed into one (their elements copied
//   into one buffer: per element the same reduction, so the same bits), then every send and receive at once
//   (Impl::exchange), so that exchanges cannot deadlock;
// - outside a group, a synchronous call runs on the calling thread while no progress thread exists;
// - the first asynchronous call starts the communicator's progress thread, which from then on runs every batch in
//   issue order: later synchronous calls are handed to it too and waited for, so they stay in order behind the
//   asynchronous ones. MPI is then called from two threads in turn: MPI_THREAD_SERIALIZED at least (else
//   Error(kUnsupported) at that first call).
// A batch's calls complete their Works one by one; an error of one call fails it alone unless it is fatal (a dead
// peer, a timeout, abort), which makes the sticky error that every later call fails with. Destruction waits for
// the queued batches (after abort() they fail at once).

#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "base/check.h"
#include "multinode/multinode_impl.h"

namespace symcomm {

namespace detail {

bool NodeWork::is_completed() {
  std::lock_guard lock(mu_);
  return done_;
}

void NodeWork::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool NodeWork::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; })) return false;
  if (error_) std::rethrow_exception(error_);
  return true;
}

std::exception_ptr NodeWork::exception() {
  std::lock_guard lock(mu_);
  return done_ ? error_ : nullptr;
}

void NodeWork::complete(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

std::vector<std::pair<const Request*, const Request*>> self_messages(std::span<const NodeCall> calls, int rank) {
  std::vector<const Request*> sends, recvs;
  for (const NodeCall& c : calls) {
    if (c.request.is_p2p() && c.request.peer == rank) {
      (c.request.p2p == P2pDir::kSend ? sends : recvs).push_back(&c.request);
    }
  }
  SYMCOMM_CHECK_ARG(sends.size() == recvs.size(), "a group holds {} sends to rank {} itself and {} receives from it",
                    sends.size(), rank, recvs.size());
  std::vector<std::pair<const Request*, const Request*>> pairs;
  for (size_t k = 0; k < sends.size(); ++k) {
    SYMCOMM_CHECK_ARG(sends[k]->count == recvs[k]->count && sends[k]->dtype == recvs[k]->dtype,
                      "send {} of rank {} to itself has {} x {}, its receive {} x {}", k, rank, sends[k]->count,
                      to_string(sends[k]->dtype), recvs[k]->count, to_string(recvs[k]->dtype));
    pairs.emplace_back(sends[k], recvs[k]);
  }
  return pairs;
}

namespace {

bool packs_with(const Request& a, Hierarchy ha, const NodeCall& b) {
  return b.request.kind == Collective::kAllReduce && !b.request.is_p2p() && b.request.dtype == a.dtype &&
         b.request.op == a.op && b.hierarchy == ha;
}

std::exception_ptr cancelled(const char* why) {
  return std::make_exception_ptr(Error(ErrorCode::kInvalidArgument, why, __FILE__, __LINE__));
}

}  // namespace
}  // namespace detail

using detail::NodeBatch;
using detail::NodeCall;
using detail::NodeWork;

void MultiNodeCommunicator::Impl::precheck(const detail::Request& r, Hierarchy h, bool in_group) const {
  detail::check_request(r, rank_, layout_.world_size);
  if (r.is_p2p()) {
    SYMCOMM_CHECK_ARG(in_group || r.peer != rank_, "{} to itself outside a group",
                      r.p2p == detail::P2pDir::kSend ? "send" : "recv");
  } else {
    path_of(r, h);
  }
  check();
}

void MultiNodeCommunicator::Impl::execute(const detail::Request& r, Hierarchy h) {
  switch (r.kind) {
    case Collective::kAllReduce: return all_reduce(r.in, r.out, r.count, r.dtype, r.op, h);
    case Collective::kAllGather: return all_gather(r.in, r.out, r.count, r.dtype, h);
    case Collective::kReduceScatter: return reduce_scatter(r.in, r.out, r.count, r.dtype, r.op, h);
    case Collective::kBroadcast: return broadcast(r.in, r.out, r.count, r.dtype, r.root, h);
    case Collective::kAllToAll: return all_to_all(r.in, r.out, r.count, r.dtype, h);
    case Collective::kBarrier: return barrier(h);
  }
  SYMCOMM_THROW(kInternal, "no multi-node path runs {}", r.describe());
}

void MultiNodeCommunicator::Impl::packed_all_reduce(std::span<const NodeCall> run) {
  const detail::Request& first = run.front().request;
  const size_t es = dtype_size(first.dtype);
  size_t total = 0;
  for (const NodeCall& c : run) total += c.request.count;
  if (pack_.size() < total * es) pack_.resize(total * es);
  size_t at = 0;
  for (const NodeCall& c : run) {
    if (c.request.count > 0) std::memcpy(pack_.data() + at * es, c.request.in, c.request.count * es);
    at += c.request.count;
  }
  all_reduce(pack_.data(), pack_.data(), total, first.dtype, first.op, run.front().hierarchy);
  at = 0;
  for (const NodeCall& c : run) {
    if (c.request.count > 0) std::memcpy(c.request.out, pack_.data() + at * es, c.request.count * es);
    at += c.request.count;
  }
}

std::exception_ptr MultiNodeCommunicator::Impl::run_batch(NodeBatch& batch) {
  std::exception_ptr first;
  // Runs `body` for the calls `done` and completes their Works with its error, if any.
  auto attempt = [&first](std::span<const NodeCall> done, auto&& body) {
    std::exception_ptr e;
    try {
      body();
    } catch (...) {
      e = std::current_exception();
      if (!first) first = e;
    }
    for (const NodeCall& c : done) {
      if (c.work) c.work->complete(e);
    }
  };
  std::vector<NodeCall> collectives, p2p;
  for (NodeCall& c : batch.calls) (c.request.is_p2p() ? p2p : collectives).push_back(std::move(c));
  for (size_t i = 0; i < collectives.size();) {
    const NodeCall& c = collectives[i];
    size_t j = i + 1;
    if (c.request.kind == Collective::kAllReduce) {
      while (j < collectives.size() && detail::packs_with(c.request, c.hierarchy, collectives[j])) ++j;
    }
    const std::span<const NodeCall> run(collectives.data() + i, j - i);
    attempt(run, [&] { run.size() > 1 ? packed_all_reduce(run) : execute(c.request, c.hierarchy); });
    i = j;
  }
  if (!p2p.empty()) attempt(p2p, [&] { exchange(p2p); });
  for (auto& w : batch.done) w->complete(first);
  return first;
}

void MultiNodeCommunicator::Impl::dispatch(NodeBatch batch, bool async, std::unique_lock<std::mutex>& lock) {
  if (!async && !progress_.joinable()) {
    if (std::exception_ptr e = run_batch(batch)) std::rethrow_exception(e);
    return;
  }
  if (!progress_.joinable()) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    SYMCOMM_CHECK(provided >= MPI_THREAD_SERIALIZED, kUnsupported,
                  "rank {}: asynchronous multi-node calls run on a progress thread, which needs MPI initialised with "
                  "MPI_THREAD_SERIALIZED or more (MPI_Init_thread); this process has level {}",
                  rank_, provided);
    progress_ = std::thread([this] { progress_loop(); });
  }
  auto waited = std::make_shared<NodeWork>();
  batch.done.push_back(waited);
  {
    std::lock_guard q(queue_mu_);
    queue_.push_back(std::move(batch));
  }
  queue_cv_.notify_one();
  if (async) return;
  lock.unlock();  // other threads may issue while this one waits
  waited->wait();
}

void MultiNodeCommunicator::Impl::progress_loop() {
  for (;;) {
    NodeBatch batch;
    {
      std::unique_lock q(queue_mu_);
      queue_cv_.wait(q, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      batch = std::move(queue_.front());
      queue_.pop_front();
    }
    run_batch(batch);
  }
}

void MultiNodeCommunicator::Impl::stop_progress() {
  {
    std::lock_guard lock(issue_mu_);
    for (NodeCall& c : recorded_) {
      if (c.work) c.work->complete(detail::cancelled("the communicator was destroyed with its group open"));
    }
    for (auto& w : inner_ends_) w->complete(detail::cancelled("the communicator was destroyed with its group open"));
    recorded_.clear();
    inner_ends_.clear();
  }
  {
    std::lock_guard q(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_one();
  if (progress_.joinable()) progress_.join();
}

std::shared_ptr<Work> MultiNodeCommunicator::Impl::issue(const detail::Request& r, Hierarchy h, bool async) {
  std::unique_lock lock(issue_mu_);
  precheck(r, h, group_depth_ > 0);
  NodeCall call{.request = r, .hierarchy = h, .work = async ? std::make_shared<NodeWork>() : nullptr};
  std::shared_ptr<Work> work = call.work;
  if (group_depth_ > 0) {
    recorded_.push_back(std::move(call));
    return work;
  }
  NodeBatch batch;
  batch.calls.push_back(std::move(call));
  dispatch(std::move(batch), async, lock);
  return work;
}

void MultiNodeCommunicator::Impl::group_start() {
  std::lock_guard lock(issue_mu_);
  level_starts_.push_back(recorded_.size());
  ++group_depth_;
}

std::shared_ptr<Work> MultiNodeCommunicator::Impl::group_end(bool async) {
  std::unique_lock lock(issue_mu_);
  SYMCOMM_CHECK_ARG(group_depth_ > 0, "group_end() without group_start()");
  if (group_depth_ == 1) detail::self_messages(recorded_, rank_);  // refused: the group stays open
  level_starts_.pop_back();
  auto work = std::make_shared<NodeWork>();
  if (--group_depth_ > 0) {  // an inner level: its calls run with the outermost one
    inner_ends_.push_back(work);
    return async ? work : nullptr;
  }
  NodeBatch batch{.calls = std::move(recorded_), .done = std::move(inner_ends_)};
  recorded_.clear();
  inner_ends_.clear();
  batch.done.push_back(work);
  dispatch(std::move(batch), async, lock);
  return async ? work : nullptr;
}

void MultiNodeCommunicator::Impl::group_cancel() {
  std::lock_guard lock(issue_mu_);
  SYMCOMM_CHECK_ARG(group_depth_ > 0, "group_cancel() without group_start()");
  const size_t from = level_starts_.back();
  level_starts_.pop_back();
  --group_depth_;
  for (size_t i = from; i < recorded_.size(); ++i) {
    if (recorded_[i].work) recorded_[i].work->complete(detail::cancelled("the call's group was cancelled"));
  }
  recorded_.resize(from);
  if (group_depth_ == 0) {
    for (auto& w : inner_ends_) w->complete(detail::cancelled("the group was cancelled"));
    inner_ends_.clear();
  }
}

// The public entry points: one request each, through issue().

namespace {

detail::Request p2p_request(bool send, const void* buf, size_t count, DataType dtype, int peer) {
  return detail::make_p2p(send ? detail::P2pDir::kSend : detail::P2pDir::kRecv, buf, const_cast<void*>(buf), count,
                          dtype, peer);
}

}  // namespace

void MultiNodeCommunicator::all_reduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                       const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kAllReduce, in, out, count, dtype, op), o.hierarchy, false);
}
void MultiNodeCommunicator::all_gather(const void* in, void* out, size_t count, DataType dtype,
                                       const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kAllGather, in, out, count, dtype), o.hierarchy, false);
}
void MultiNodeCommunicator::reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                           const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kReduceScatter, in, out, count, dtype, op), o.hierarchy, false);
}
void MultiNodeCommunicator::broadcast(const void* in, void* out, size_t count, DataType dtype, int root,
                                      const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kBroadcast, in, out, count, dtype, ReduceOp::kSum, root), o.hierarchy,
               false);
}
void MultiNodeCommunicator::all_to_all(const void* in, void* out, size_t count, DataType dtype,
                                       const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kAllToAll, in, out, count, dtype), o.hierarchy, false);
}
void MultiNodeCommunicator::barrier(const NodeCollOptions& o) {
  impl_->issue(detail::make_request(Collective::kBarrier, nullptr, nullptr, 0, DataType::kFloat32), o.hierarchy, false);
}
void MultiNodeCommunicator::send(const void* buf, size_t count, DataType dtype, int peer) {
  impl_->issue(p2p_request(true, buf, count, dtype, peer), Hierarchy::kAuto, false);
}
void MultiNodeCommunicator::recv(void* buf, size_t count, DataType dtype, int peer) {
  impl_->issue(p2p_request(false, buf, count, dtype, peer), Hierarchy::kAuto, false);
}

std::shared_ptr<Work> MultiNodeCommunicator::all_reduce_async(const void* in, void* out, size_t count, DataType dtype,
                                                              ReduceOp op, const NodeCollOptions& o) {
  return impl_->issue(detail::make_request(Collective::kAllReduce, in, out, count, dtype, op), o.hierarchy, true);
}
std::shared_ptr<Work> MultiNodeCommunicator::all_gather_async(const void* in, void* out, size_t count, DataType dtype,
                                                              const NodeCollOptions& o) {
  return impl_->issue(detail::make_request(Collective::kAllGather, in, out, count, dtype), o.hierarchy, true);
}
std::shared_ptr<Work> MultiNodeCommunicator::reduce_scatter_async(const void* in, void* out, size_t count,
                                                                  DataType dtype, ReduceOp op,
                                                                  const NodeCollOptions& o) {
  return impl_->issue(detail::make_request(Collective::kReduceScatter, in, out, count, dtype, op), o.hierarchy, true);
}
std::shared_ptr<Work> MultiNodeCommunicator::broadcast_async(const void* in, void* out, size_t count, DataType dtype,
                                                             int root, const NodeCollOptions& o) {
  return impl_->issue(detail::make_request(Collective::kBroadcast, in, out, count, dtype, ReduceOp::kSum, root),
                      o.hierarchy, true);
}
std::shared_ptr<Work> MultiNodeCommunicator::all_to_all_async(const void* in, void* out, size_t count, DataType dtype,
                                                              const NodeCollOptions& o) {
  return impl_->issue(detail::make_request(Collective::kAllToAll, in, out, count, dtype), o.hierarchy, true);
}
std::shared_ptr<Work> MultiNodeCommunicator::barrier_async(const NodeCollOptions& o) {
  return impl_->issue(detail::make_request(Collective::kBarrier, nullptr, nullptr, 0, DataType::kFloat32), o.hierarchy,
                      true);
}
std::shared_ptr<Work> MultiNodeCommunicator::send_async(const void* buf, size_t count, DataType dtype, int peer) {
  return impl_->issue(p2p_request(true, buf, count, dtype, peer), Hierarchy::kAuto, true);
}
std::shared_ptr<Work> MultiNodeCommunicator::recv_async(void* buf, size_t count, DataType dtype, int peer) {
  return impl_->issue(p2p_request(false, buf, count, dtype, peer), Hierarchy::kAuto, true);
}

void MultiNodeCommunicator::group_start() { impl_->group_start(); }
void MultiNodeCommunicator::group_end() { impl_->group_end(false); }
std::shared_ptr<Work> MultiNodeCommunicator::group_end_async() { return impl_->group_end(true); }
void MultiNodeCommunicator::group_cancel() { impl_->group_cancel(); }

}  // namespace symcomm
