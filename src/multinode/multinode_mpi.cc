// MultiNodeCommunicator (symcomm/multinode.h): symcomm inside each node, MPI between the nodes. The plans (layout,
// paths, block orders) are src/algos/node_plan.h; this file runs them and makes every wait watch for faults.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "algos/host_reduce.h"
#include "algos/node_plan.h"
#include "algos/request.h"
#include "base/check.h"
#include "base/deadline.h"
#include "base/host_process.h"
#include "multinode/multinode_impl.h"
#include "multinode/node_common.h"
#include "symcomm/mpi.h"

namespace symcomm {

using detail::Clock;
using detail::NodeLayout;
using detail::NodeThresholds;

namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  SYMCOMM_THROW(kSystem, "{} failed: {} (MPI error {})", what, std::string(text, len), rc);
}

// 16-bit floats have no MPI type: each travels as a 2-byte contiguous type. Every (op, dtype) pair has an MPI_Op of
// its own that runs symcomm's element-wise reduction (wrapping integer sums and products, 16-bit floats through
// float32), so that the inter-node stage computes what the node stage does; avg runs as sum, divided at the end.
// Made once per process, after MPI_Init; MPI_Finalize frees them.
template <ReduceOp kOp, DataType kType>
void reduce_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  const void* srcs[2] = {in, inout};
  detail::host_reduce(kType, kOp, inout, srcs, 2, static_cast<size_t>(*len));
}

struct MpiTypes {
  MPI_Datatype half = MPI_DATATYPE_NULL;
  MPI_Op ops[kNumReduceOps][kNumDataTypes] = {};
};

template <ReduceOp kOp, size_t... kTypes>
void make_ops(MpiTypes& t, std::index_sequence<kTypes...>) {
  (check_mpi(MPI_Op_create(reduce_fn<kOp, static_cast<DataType>(kTypes)>, 1, &t.ops[static_cast<int>(kOp)][kTypes]),
             "MPI_Op_create"),
   ...);
}

MpiTypes& mpi_types() {
  static MpiTypes t;
  static std::once_flag once;
  std::call_once(once, [] {
    check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &t.half), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&t.half), "MPI_Type_commit");
    const auto all = std::make_index_sequence<kNumDataTypes>();
    make_ops<ReduceOp::kSum>(t, all);
    make_ops<ReduceOp::kProd>(t, all);
    make_ops<ReduceOp::kMin>(t, all);
    make_ops<ReduceOp::kMax>(t, all);
    for (int d = 0; d < kNumDataTypes; ++d) {
      t.ops[static_cast<int>(ReduceOp::kAvg)][d] = t.ops[static_cast<int>(ReduceOp::kSum)][d];
    }
  });
  return t;
}

MPI_Datatype mpi_type(DataType d) {
  switch (d) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBFloat16: return mpi_types().half;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
  }
  SYMCOMM_THROW(kInvalidArgument, "invalid dtype value {}", static_cast<int>(d));
}

MPI_Op mpi_op(ReduceOp op, DataType d) {
  return mpi_types().ops[static_cast<int>(op == ReduceOp::kAvg ? ReduceOp::kSum : op)][static_cast<int>(d)];
}

// MPI counts are ints: element-wise calls run in pieces of at most this many elements.
constexpr size_t kMaxMpiCount = size_t{1} << 30;

int mpi_count(size_t n, const char* what) {
  SYMCOMM_CHECK(n <= static_cast<size_t>(INT_MAX), kUnsupported,
                "{}: blocks of {} elements exceed what MPI can count ({})", what, n, INT_MAX);
  return static_cast<int>(n);
}

constexpr size_t kIdentityBytes = 160;
constexpr size_t kOptionBytes = 512;

}  // namespace

MultiNodeCommunicator::Impl::Impl(MPI_Comm comm, const MultiNodeOptions& options) {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  SYMCOMM_CHECK_ARG(initialized, "MultiNodeCommunicator::create: MPI is not initialised");
  SYMCOMM_CHECK(options.node.backend == BackendKind::kHost, kUnsupported,
                "MultiNodeCommunicator: the {} backend between nodes needs NCCL, which this library does not drive; "
                "use the host backend",
                to_string(options.node.backend));
  mpi_types();
  check_mpi(MPI_Comm_dup(comm, &world_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  int world = 0;
  MPI_Comm_rank(world_, &rank_);
  MPI_Comm_size(world_, &world);

  const int fake = options.fake_node_size;
  SYMCOMM_CHECK_ARG(fake >= 0, "fake_node_size {} is negative", fake);
  const bool round_robin = options.fake_round_robin;
  const std::string min_bytes = options.min_bytes.value_or("");
  const Config config = options.node.config.value_or(Config::from_env());
  timeout_ = config.timeout;

  // Every rank's options, host identity and pid: the options must agree; the rest feeds the liveness watch.
  struct Hello {
    char options[kOptionBytes];
    char identity[kIdentityBytes];
    int32_t pid;
    int64_t node_key;
  };
  Hello mine{};
  const std::string opts =
      fmt::format("fake_node_size={};round_robin={};min_bytes={}", fake, round_robin ? 1 : 0, min_bytes);
  SYMCOMM_CHECK_ARG(opts.size() < kOptionBytes, "multinode options are too long ({} bytes)", opts.size());
  std::snprintf(mine.options, sizeof(mine.options), "%s", opts.c_str());
  std::snprintf(mine.identity, sizeof(mine.identity), "%s", detail::host_identity().c_str());
  mine.pid = static_cast<int32_t>(::getpid());
  if (fake > 0) {
    mine.node_key = detail::fake_node_keys(world, fake, round_robin)[rank_];
  } else {
    MPI_Comm shared;
    check_mpi(MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shared), "MPI_Comm_split_type");
    int lowest = rank_;
    check_mpi(MPI_Allreduce(&rank_, &lowest, 1, MPI_INT, MPI_MIN, shared), "MPI_Allreduce");
    MPI_Comm_free(&shared);
    mine.node_key = lowest;
  }
  std::vector<Hello> all(world);
  check_mpi(MPI_Allgather(&mine, sizeof(Hello), MPI_BYTE, all.data(), sizeof(Hello), MPI_BYTE, world_),
            "MPI_Allgather");
  std::vector<std::string> options_of;
  for (const Hello& h : all) options_of.emplace_back(h.options, strnlen(h.options, kOptionBytes));
  detail::check_same_options(rank_, opts, options_of);
  std::vector<int64_t> keys(world);
  for (int p = 0; p < world; ++p) {
    keys[p] = all[p].node_key;
    pids_.push_back(all[p].pid);
    if (p != rank_ && std::strncmp(all[p].identity, mine.identity, kIdentityBytes) == 0) host_peers_.push_back(p);
  }
  layout_ = detail::make_node_layout(keys);
  node_ = layout_.node_of[rank_];
  local_ = layout_.local_of[rank_];
  thresholds_ = detail::parse_node_thresholds(min_bytes, detail::default_node_thresholds(layout_.node_size()));

  check_mpi(MPI_Comm_split(world_, node_, local_, &node_mpi_), "MPI_Comm_split");
  check_mpi(MPI_Comm_set_errhandler(node_mpi_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_split(world_, layout_.uniform() ? local_ : MPI_UNDEFINED, node_, &inter_), "MPI_Comm_split");
  if (inter_ != MPI_COMM_NULL) {
    check_mpi(MPI_Comm_set_errhandler(inter_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  node_comm_ = create_communicator_mpi(node_mpi_, options.node);
}

MultiNodeCommunicator::Impl::~Impl() {
  stop_progress();
  node_comm_.reset();
  // Communicators with operations still pending (after an error) are left to MPI_Finalize: freeing one that a
  // pending collective uses is an error in Open MPI.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!fault_.has_error() && !finalized) {
    if (inter_ != MPI_COMM_NULL) MPI_Comm_free(&inter_);
    if (node_mpi_ != MPI_COMM_NULL) MPI_Comm_free(&node_mpi_);
    if (world_ != MPI_COMM_NULL) MPI_Comm_free(&world_);
  }
}

void MultiNodeCommunicator::Impl::check() const { fault_.check(rank_); }

void MultiNodeCommunicator::Impl::abort() {
  fault_.set_aborted();
  node_comm_->abort();
}

void* MultiNodeCommunicator::Impl::scratch(int which, size_t bytes) {
  auto& s = scratch_[which];
  if (s.size() < bytes) s.resize(bytes);
  return s.data();
}

void MultiNodeCommunicator::Impl::watch(const char* what, Clock::time_point start, Clock::time_point* last_look) {
  if (fault_.aborted()) {
    SYMCOMM_THROW(kAborted, "rank {}: {}: the multi-node communicator was aborted", rank_, what);
  }
  const Clock::time_point now = Clock::now();
  if (now - *last_look < std::chrono::milliseconds(5)) return;
  *last_look = now;
  if (auto dead = detail::dead_host_peers(rank_, host_peers_, pids_, what)) throw *dead;
  if (now - start > timeout_) {
    SYMCOMM_THROW(kTimeout, "rank {}: {} did not complete within {} ms", rank_, what, timeout_.count());
  }
}

void MultiNodeCommunicator::Impl::wait(MPI_Request& req, const char* what) {
  const Clock::time_point start = Clock::now();
  Clock::time_point last_look = start;
  // NOTE [MPI progress] Open MPI's nonblocking collectives advance only inside MPI calls: each MPI_Test moves a
  // multi-round collective by about one round. With the 1 ms sleeps of the default pause, a flat 4 MB float32
  // all-reduce over 4 ranks took 190 ms instead of 4.0 ms (16-core x86 host, Open MPI 4.1). So the wait spins
  // (yielding) for its first second, as MPI's own blocking waits do, and then tests at least every 100 us.
  detail::PollPause pause(std::chrono::seconds(1), std::chrono::microseconds(10), std::chrono::microseconds(100));
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    watch(what, start, &last_look);
    pause();
  }
}

void MultiNodeCommunicator::Impl::rethrow_node_error(const Error& e, const char* what) {
  throw detail::node_error(layout_, rank_, node_, e, what);
}

void MultiNodeCommunicator::Impl::wait(const std::shared_ptr<Work>& work, const char* what) {
  const Clock::time_point start = Clock::now();
  Clock::time_point last_look = start;
  detail::PollPause pause;
  while (!work->is_completed()) {
    watch(what, start, &last_look);
    pause();
  }
  try {
    work->wait();
  } catch (const Error& e) {
    rethrow_node_error(e, what);
  }
}

template <class Issue>
void MultiNodeCommunicator::Impl::run_node(Issue&& issue, const char* what) {
  std::shared_ptr<Work> work;
  try {
    work = issue();
  } catch (const Error& e) {
    rethrow_node_error(e, what);
  }
  wait(work, what);
}

template <class F>
void MultiNodeCommunicator::Impl::guarded(const detail::Request& r, F&& body) {
  detail::check_request(r, rank_, layout_.world_size);
  check();
  try {
    body();
  } catch (const Error& e) {
    if (detail::is_fatal(e.code())) {
      fault_.record(e);
      node_comm_->abort();
    }
    throw;
  }
}

NodePath MultiNodeCommunicator::Impl::path_of(const detail::Request& r, Hierarchy h) const {
  return detail::call_path(layout_, thresholds_, r, h);
}

NodePath MultiNodeCommunicator::Impl::plan(const detail::Request& r, Hierarchy h) {
  const NodePath p = path_of(r, h);
  last_.store(p);
  return p;
}

void MultiNodeCommunicator::Impl::mpi_all_reduce(void* buf, size_t count, DataType dtype, ReduceOp op, MPI_Comm comm,
                                                 const char* what) {
  const size_t es = dtype_size(dtype);
  for (size_t at = 0; at < count; at += kMaxMpiCount) {
    const int n = static_cast<int>(std::min(kMaxMpiCount, count - at));
    MPI_Request req;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, static_cast<uint8_t*>(buf) + at * es, n, mpi_type(dtype), mpi_op(op, dtype),
                             comm, &req),
              what);
    wait(req, what);
  }
}

void MultiNodeCommunicator::Impl::node_all_reduce(const void* in, void* out, size_t count, DataType dtype,
                                                  ReduceOp op) {
  run_node([&] { return node_comm_->all_reduce_async(in, out, count, dtype, op); }, "the node all-reduce");
}

void MultiNodeCommunicator::Impl::all_reduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                             Hierarchy h) {
  const detail::Request r = detail::make_request(Collective::kAllReduce, in, out, count, dtype, op);
  guarded(r, [&] {
    const NodePath path = plan(r, h);
    if (count == 0) return;
    const size_t es = dtype_size(dtype), bytes = count * es;
    const int world = layout_.world_size;
    if (path == NodePath::kNode) return node_all_reduce(in, out, count, dtype, op);
    if (in != out) {
      if (detail::overlaps(in, bytes, out, bytes)) in = std::memcpy(scratch(2, bytes), in, bytes);
    }
    if (path == NodePath::kFlat) {
      if (in != out) std::memcpy(out, in, bytes);
      mpi_all_reduce(out, count, dtype, op, world_, "the inter-node all-reduce");
      if (op == ReduceOp::kAvg) detail::host_divide(dtype, out, count, world);
      return;
    }
    // Node reduce-scatter, inter-node all-reduce of this rank's shard, node all-gather; the count % L elements
    // left over are all-reduced in the node and across the nodes by every rank.
    const int l = layout_.node_size();
    const size_t shard = count / l, tail = count % l;
    const ReduceOp sop = detail::stage_op(op);
    auto* o = static_cast<uint8_t*>(out);
    const auto* i = static_cast<const uint8_t*>(in);
    if (shard > 0) {
      void* s = scratch(0, shard * es);
      run_node([&] { return node_comm_->reduce_scatter_async(i, s, shard, dtype, sop); }, "the node reduce-scatter");
      mpi_all_reduce(s, shard, dtype, sop, inter_, "the inter-node all-reduce");
      if (op == ReduceOp::kAvg) detail::host_divide(dtype, s, shard, world);
      run_node([&] { return node_comm_->all_gather_async(s, o, shard, dtype); }, "the node all-gather");
    }
    if (tail > 0) {
      void* t = scratch(1, tail * es);
      node_all_reduce(i + shard * l * es, t, tail, dtype, sop);
      mpi_all_reduce(t, tail, dtype, sop, inter_, "the inter-node all-reduce");
      if (op == ReduceOp::kAvg) detail::host_divide(dtype, t, tail, world);
      std::memcpy(o + shard * l * es, t, tail * es);
    }
  });
}

void MultiNodeCommunicator::Impl::all_gather(const void* in, void* out, size_t count, DataType dtype, Hierarchy h) {
  const detail::Request r = detail::make_request(Collective::kAllGather, in, out, count, dtype);
  guarded(r, [&] {
    const NodePath path = plan(r, h);
    if (count == 0) return;
    if (path == NodePath::kNode)
      return run_node([&] { return node_comm_->all_gather_async(in, out, count, dtype); }, "the all-gather");
    const int world = layout_.world_size, n_nodes = layout_.num_nodes();
    const size_t es = dtype_size(dtype), block = count * es;
    auto* o = static_cast<uint8_t*>(out);
    const bool in_place = in == o + rank_ * block;
    if (!in_place && detail::overlaps(in, block, out, block * world)) in = std::memcpy(scratch(2, block), in, block);
    const int n = mpi_count(count, "all-gather");
    if (path == NodePath::kFlat) {
      MPI_Request req;
      check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : in, n, mpi_type(dtype), out, n, mpi_type(dtype), world_, &req),
                "MPI_Iallgather");
      return wait(req, "the inter-node all-gather");
    }
    // Inter-node all-gather of this rank's block among its local index, node all-gather of those N blocks, then
    // every block to its rank's place (detail::local_major_rank).
    auto* across = static_cast<uint8_t*>(scratch(0, block * n_nodes));
    auto* gathered = static_cast<uint8_t*>(scratch(1, block * world));
    MPI_Request req;
    check_mpi(MPI_Iallgather(in, n, mpi_type(dtype), across, n, mpi_type(dtype), inter_, &req), "MPI_Iallgather");
    wait(req, "the inter-node all-gather");
    run_node([&] { return node_comm_->all_gather_async(across, gathered, count * n_nodes, dtype); },
             "the node all-gather");
    detail::copy_blocks(o, gathered, detail::block_order_copies(layout_, block, true));
  });
}

void MultiNodeCommunicator::Impl::reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                                 Hierarchy h) {
  const detail::Request r = detail::make_request(Collective::kReduceScatter, in, out, count, dtype, op);
  guarded(r, [&] {
    const NodePath path = plan(r, h);
    if (count == 0) return;
    if (path == NodePath::kNode) {
      return run_node([&] { return node_comm_->reduce_scatter_async(in, out, count, dtype, op); },
                      "the reduce-scatter");
    }
    const int world = layout_.world_size, n_nodes = layout_.num_nodes();
    const size_t es = dtype_size(dtype), block = count * es;
    const int n = mpi_count(count, "reduce-scatter");
    const ReduceOp sop = detail::stage_op(op);
    const auto* i = static_cast<const uint8_t*>(in);
    if (path == NodePath::kFlat) {
      if (detail::overlaps(in, block * world, out, block))
        i = static_cast<uint8_t*>(std::memcpy(scratch(2, block * world), in, block * world));
      MPI_Request req;
      check_mpi(MPI_Ireduce_scatter_block(i, out, n, mpi_type(dtype), mpi_op(sop, dtype), world_, &req),
                "MPI_Ireduce_scatter_block");
      wait(req, "the inter-node reduce-scatter");
    } else {
      // Input blocks reordered local index by local index (detail::local_major_rank), node
      // reduce-scatter of N blocks each, inter-node reduce-scatter among this rank's local index.
      auto* ordered = static_cast<uint8_t*>(scratch(0, block * world));
      detail::copy_blocks(ordered, i, detail::block_order_copies(layout_, block, false));
      auto* partial = static_cast<uint8_t*>(scratch(1, block * n_nodes));
      run_node([&] { return node_comm_->reduce_scatter_async(ordered, partial, count * n_nodes, dtype, sop); },
               "the node reduce-scatter");
      MPI_Request req;
      check_mpi(MPI_Ireduce_scatter_block(partial, out, n, mpi_type(dtype), mpi_op(sop, dtype), inter_, &req),
                "MPI_Ireduce_scatter_block");
      wait(req, "the inter-node reduce-scatter");
    }
    if (op == ReduceOp::kAvg) detail::host_divide(dtype, out, count, world);
  });
}

void MultiNodeCommunicator::Impl::broadcast(const void* in, void* out, size_t count, DataType dtype, int root,
                                            Hierarchy h) {
  const detail::Request r = detail::make_request(Collective::kBroadcast, in, out, count, dtype, ReduceOp::kSum, root);
  guarded(r, [&] {
    const NodePath path = plan(r, h);
    if (count == 0) return;
    if (path == NodePath::kNode) {
      return run_node([&] { return node_comm_->broadcast_async(in, out, count, dtype, root); }, "the broadcast");
    }
    const size_t es = dtype_size(dtype);
    if (rank_ == root && in != out) std::memmove(out, in, count * es);
    const int root_node = layout_.node_of[root], root_local = layout_.local_of[root];
    for (size_t at = 0; at < count; at += kMaxMpiCount) {
      const int n = static_cast<int>(std::min(kMaxMpiCount, count - at));
      void* piece = static_cast<uint8_t*>(out) + at * es;
      MPI_Request req;
      if (path == NodePath::kFlat) {
        check_mpi(MPI_Ibcast(piece, n, mpi_type(dtype), root, world_, &req), "MPI_Ibcast");
        wait(req, "the inter-node broadcast");
      } else if (local_ == root_local) {
        check_mpi(MPI_Ibcast(piece, n, mpi_type(dtype), root_node, inter_, &req), "MPI_Ibcast");
        wait(req, "the inter-node broadcast");
      }
    }
    if (path == NodePath::kHierarchical) {
      run_node([&] { return node_comm_->broadcast_async(out, out, count, dtype, root_local); }, "the node broadcast");
    }
  });
}

void MultiNodeCommunicator::Impl::all_to_all(const void* in, void* out, size_t count, DataType dtype, Hierarchy h) {
  const detail::Request r = detail::make_request(Collective::kAllToAll, in, out, count, dtype);
  guarded(r, [&] {
    const NodePath path = plan(r, h);
    if (count == 0) return;
    if (path == NodePath::kNode)
      return run_node([&] { return node_comm_->all_to_all_async(in, out, count, dtype); }, "the all-to-all");
    const size_t bytes = count * dtype_size(dtype) * layout_.world_size;
    if (detail::overlaps(in, bytes, out, bytes)) in = std::memcpy(scratch(2, bytes), in, bytes);
    const int n = mpi_count(count, "all-to-all");
    MPI_Request req;
    check_mpi(MPI_Ialltoall(in, n, mpi_type(dtype), out, n, mpi_type(dtype), world_, &req), "MPI_Ialltoall");
    wait(req, "the inter-node all-to-all");
  });
}

void MultiNodeCommunicator::Impl::barrier(Hierarchy h) {
  const detail::Request r = detail::make_request(Collective::kBarrier, nullptr, nullptr, 0, DataType::kFloat32);
  guarded(r, [&] {
    const NodePath path = plan(r, h);
    if (path == NodePath::kNode) return run_node([&] { return node_comm_->barrier_async(); }, "the barrier");
    MPI_Request req;
    if (path == NodePath::kFlat) {
      check_mpi(MPI_Ibarrier(world_, &req), "MPI_Ibarrier");
      return wait(req, "the inter-node barrier");
    }
    run_node([&] { return node_comm_->barrier_async(); }, "the node barrier");
    check_mpi(MPI_Ibarrier(inter_, &req), "MPI_Ibarrier");
    wait(req, "the inter-node barrier");
    run_node([&] { return node_comm_->barrier_async(); }, "the node barrier");
  });
}

void MultiNodeCommunicator::Impl::exchange(std::span<const detail::NodeCall> calls) {
  guarded(calls.front().request, [&] {
    const auto to_self = detail::self_messages(calls, rank_);
    // Every piece of every message is posted before any is waited for, so that exchanges cannot deadlock; pieces of
    // one message keep their order (MPI's non-overtaking rule).
    std::vector<MPI_Request> reqs;
    for (const detail::NodeCall& c : calls) {
      const detail::Request& r = c.request;
      if (r.peer == rank_) continue;
      const bool send = r.p2p == detail::P2pDir::kSend;
      const size_t es = dtype_size(r.dtype);
      size_t at = 0;
      do {
        const int n = static_cast<int>(std::min(kMaxMpiCount, r.count - at));
        MPI_Request req;
        if (send) {
          check_mpi(
              MPI_Isend(static_cast<const uint8_t*>(r.in) + at * es, n, mpi_type(r.dtype), r.peer, 0, world_, &req),
              "MPI_Isend");
        } else {
          check_mpi(MPI_Irecv(static_cast<uint8_t*>(r.out) + at * es, n, mpi_type(r.dtype), r.peer, 0, world_, &req),
                    "MPI_Irecv");
        }
        reqs.push_back(req);
        at += n;
      } while (at < r.count);
    }
    for (const auto& [send, recv] : to_self) std::memcpy(recv->out, send->in, send->count * dtype_size(send->dtype));
    for (MPI_Request& req : reqs) wait(req, "a send or receive of the group");
  });
}

MultiNodeCommunicator::MultiNodeCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MultiNodeCommunicator::~MultiNodeCommunicator() = default;

std::unique_ptr<MultiNodeCommunicator> MultiNodeCommunicator::create(MPI_Comm comm, const MultiNodeOptions& options) {
  return std::unique_ptr<MultiNodeCommunicator>(new MultiNodeCommunicator(std::make_unique<Impl>(comm, options)));
}

int MultiNodeCommunicator::rank() const { return impl_->rank_; }
int MultiNodeCommunicator::world_size() const { return impl_->layout_.world_size; }
int MultiNodeCommunicator::node() const { return impl_->node_; }
int MultiNodeCommunicator::num_nodes() const { return impl_->layout_.num_nodes(); }
int MultiNodeCommunicator::local_rank() const { return impl_->local_; }
int MultiNodeCommunicator::local_world_size() const {
  return static_cast<int>(impl_->layout_.members[impl_->node_].size());
}
Communicator& MultiNodeCommunicator::node_communicator() { return *impl_->node_comm_; }
MPI_Comm MultiNodeCommunicator::inter_node_communicator() const { return impl_->inter_; }

NodePath MultiNodeCommunicator::last_path() const { return impl_->last_.load(); }
void MultiNodeCommunicator::abort() { impl_->abort(); }
bool MultiNodeCommunicator::is_aborted() const { return impl_->fault_.aborted(); }
void MultiNodeCommunicator::check() const { impl_->check(); }

}  // namespace symcomm
