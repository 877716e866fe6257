// symcomm._core.CudaMultiNodeCommunicator: symcomm::CudaMultiNodeCommunicator (symcomm/multinode_cuda.h) for CUDA
// arrays, symcomm inside each node and NCCL between the nodes, made from a store rendezvous (no MPI). symcomm.torch
// runs the CUDA tensors of its groups that span nodes on it (docs/python.md).
//
// Calls are stream-ordered, as the CUDA backend's are: each enqueues the collective on `stream` (None: the stream an
// array names, else the legacy default stream) and returns its output array; there are no `*_async` forms. Arrays
// are checked as symcomm._core checks them (NOTE [python buffers] in buffers.h). A build without the CUDA backend
// has the class, and create() raises symcomm.Error with code "unsupported".
#include "cuda_multinode.h"

#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "buffers.h"
#include "symcomm/multinode_cuda.h"
#include "symcomm/store.h"

namespace symcomm::python {
namespace {

class PyCudaMultiNode {
 public:
  static std::unique_ptr<PyCudaMultiNode> create(int rank, int world_size, int local_rank, const std::string& token,
                                                 const std::string& host, int port, const py::object& on_store_started,
                                                 int fake_node_size, bool round_robin,
                                                 const std::optional<std::string>& min_bytes, int device) {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      throw py::value_error("rank " + std::to_string(rank) + " is outside [0, world_size " +
                            std::to_string(world_size) + ")");
    }
    if (port < 0 || port > 65535) throw py::value_error("port " + std::to_string(port) + " is outside [0, 65535]");
    if (device < -1) throw py::value_error("device " + std::to_string(device) + " is negative (-1: the local rank)");
    if (fake_node_size < 0) throw py::value_error("fake_node_size " + std::to_string(fake_node_size) + " is negative");
    if (token.empty()) throw py::value_error("the token is empty");
    if (!Communicator::backend_built(BackendKind::kCuda)) {  // before a store server is started for nothing
      throw Error(ErrorCode::kUnsupported,
                  "this build of symcomm has no CUDA backend (nvcc was not found at build time)", __FILE__, __LINE__);
    }
    MultiNodeOptions options;
    options.node.backend = BackendKind::kCuda;
    options.node.device = device;
    options.fake_node_size = fake_node_size;
    options.fake_round_robin = round_robin;
    options.min_bytes = min_bytes;
    // The store served below is this communicator's alone: a fixed name, where the default (a count of the process's
    // multi-node communicators) differs between ranks that made different groups before.
    options.node.name = "multinode";
    const Config config = Config::from_env();
    auto self = std::make_unique<PyCudaMultiNode>();
    uint16_t bound = static_cast<uint16_t>(port);
    if (rank == 0) {
      py::gil_scoped_release release;
      self->server_ = StoreServer::start(StoreServerOptions{.host = host, .port = bound, .token = token, .limits = {}});
      bound = self->server_->port();
    }
    if (rank == 0 && !on_store_started.is_none()) on_store_started(static_cast<int>(bound));
    if (bound == 0) throw py::value_error("the store port is 0 on rank " + std::to_string(rank));
    {
      py::gil_scoped_release release;
      std::shared_ptr<Store> store(
          Store::connect(StoreOptions{.host = host, .port = bound, .token = token, .timeout = config.timeout}));
      const RankInfo ranks{
          .rank = rank, .world_size = world_size, .local_rank = local_rank, .local_world_size = world_size};
      self->comm_ = CudaMultiNodeCommunicator::create(std::move(store), ranks, options);
    }
    self->rank_ = self->comm_->rank();
    self->world_size_ = self->comm_->world_size();
    self->device_ = self->comm_->device();
    return self;
  }

  ~PyCudaMultiNode() {
    try {
      close();
    } catch (...) {  // destruction reports nothing; close() raises
      PyErr_Clear();
    }
  }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int device() const { return device_; }
  int node() const {
    return run([](CudaMultiNodeCommunicator& c) { return c.node(); });
  }
  int num_nodes() const {
    return run([](CudaMultiNodeCommunicator& c) { return c.num_nodes(); });
  }
  int local_rank() const {
    return run([](CudaMultiNodeCommunicator& c) { return c.local_rank(); });
  }
  int local_world_size() const {
    return run([](CudaMultiNodeCommunicator& c) { return c.local_world_size(); });
  }
  bool closed() const {
    std::lock_guard lock(mu_);
    return comm_ == nullptr;
  }
  std::string last_path() const {
    std::lock_guard lock(mu_);
    return comm_ ? std::string(to_string(comm_->last_path())) : "none";
  }

  py::object all_reduce(const py::handle& x, const py::handle& out, ReduceOp op, const std::string& hierarchy,
                        bool async, const std::string& dtype, const py::object& stream) {
    refuse_async(async);
    Buffer in = checked(x, "x", false, dtype, true, stream);
    Buffer o = checked_output(out, in, in.count, "the input's count", dtype, true, stream);
    const NodeCollOptions opts = options(hierarchy, stream, in);
    run([&](CudaMultiNodeCommunicator& c) { c.all_reduce(in.data(), o.data(), in.count, in.dtype, op, opts); });
    return o.owner;
  }

  py::object all_gather(const py::handle& x, const py::handle& out, const std::string& hierarchy, bool async,
                        const std::string& dtype, const py::object& stream) {
    refuse_async(async);
    Buffer in = checked(x, "x", false, dtype, true, stream);
    Buffer o =
        checked_output(out, in, in.count * world_size_, "world_size times the input's count", dtype, true, stream);
    const NodeCollOptions opts = options(hierarchy, stream, in);
    run([&](CudaMultiNodeCommunicator& c) { c.all_gather(in.data(), o.data(), in.count, in.dtype, opts); });
    return o.owner;
  }

  py::object reduce_scatter(const py::handle& x, const py::handle& out, ReduceOp op, const std::string& hierarchy,
                            bool async, const std::string& dtype, const py::object& stream) {
    refuse_async(async);
    Buffer in = checked(x, "x", false, dtype, true, stream);
    check_divisible(in, world_size_);
    Buffer o =
        checked_output(out, in, in.count / world_size_, "the input's count divided by world_size", dtype, true, stream);
    const NodeCollOptions opts = options(hierarchy, stream, in);
    run([&](CudaMultiNodeCommunicator& c) { c.reduce_scatter(in.data(), o.data(), o.count, in.dtype, op, opts); });
    return o.owner;
  }

  py::object broadcast(const py::handle& x, const py::handle& out, int root, const std::string& hierarchy, bool async,
                       const std::string& dtype, const py::object& stream) {
    refuse_async(async);
    Buffer in = checked(x, "x", false, dtype, true, stream);
    Buffer o = checked_output(out, in, in.count, "the input's count", dtype, true, stream);
    const NodeCollOptions opts = options(hierarchy, stream, in);
    run([&](CudaMultiNodeCommunicator& c) { c.broadcast(in.data(), o.data(), in.count, in.dtype, root, opts); });
    return o.owner;
  }

  py::object all_to_all(const py::handle& x, const py::handle& out, const std::string& hierarchy, bool async,
                        const std::string& dtype, const py::object& stream) {
    refuse_async(async);
    Buffer in = checked(x, "x", false, dtype, true, stream);
    check_divisible(in, world_size_);
    Buffer o = checked_output(out, in, in.count, "the input's count", dtype, true, stream);
    const NodeCollOptions opts = options(hierarchy, stream, in);
    const size_t block = in.count / world_size_;
    run([&](CudaMultiNodeCommunicator& c) { c.all_to_all(in.data(), o.data(), block, in.dtype, opts); });
    return o.owner;
  }

  void barrier(const std::string& hierarchy, bool async, const py::object& stream) {
    refuse_async(async);
    const NodeCollOptions opts = options(hierarchy, stream, Buffer{});
    run([&](CudaMultiNodeCommunicator& c) { c.barrier(opts); });
  }

  void send(const py::handle& x, int peer, bool async, const std::string& dtype, const py::object& stream) {
    refuse_async(async);
    Buffer in = checked(x, "x", false, dtype, true, stream);
    const NodeCollOptions opts = options("auto", stream, in);
    run([&](CudaMultiNodeCommunicator& c) { c.send(in.data(), in.count, in.dtype, peer, opts); });
  }

  py::object recv(const py::handle& out, int peer, bool async, const std::string& dtype, const py::object& stream) {
    refuse_async(async);
    Buffer o = checked(out, "out", true, dtype, true, stream);
    const NodeCollOptions opts = options("auto", stream, o);
    run([&](CudaMultiNodeCommunicator& c) { c.recv(o.data(), o.count, o.dtype, peer, opts); });
    return o.owner;
  }

  void group_start() {
    run([](CudaMultiNodeCommunicator& c) { c.group_start(); });
  }
  void group_end() {
    run([](CudaMultiNodeCommunicator& c) { c.group_end(); });
  }
  void group_cancel() {
    run([](CudaMultiNodeCommunicator& c) { c.group_cancel(); });
  }
  void check() const {
    run([](CudaMultiNodeCommunicator& c) { c.check(); });
  }

  /// Local and non-blocking: later calls fail with Error(kAborted). Does nothing once closed.
  void abort() {
    std::lock_guard lock(mu_);
    if (comm_) comm_->abort();
  }

  /// Destroys the communicator (after the work it enqueued, unless it failed), then rank 0's store server;
  /// idempotent.
  void close() {
    std::unique_ptr<CudaMultiNodeCommunicator> comm;
    std::unique_ptr<StoreServer> server;
    {
      std::lock_guard lock(mu_);
      comm = std::move(comm_);
      server = std::move(server_);
    }
    py::gil_scoped_release release;
    comm.reset();
    server.reset();
  }

 private:
  static void refuse_async(bool async) {
    if (async) {
      throw py::value_error(
          "async_op=True: the calls of a CUDA communicator are enqueued on their stream; order later work after it "
          "on that stream");
    }
  }

  static NodeCollOptions options(const std::string& hierarchy, const py::object& stream, const Buffer& first) {
    NodeCollOptions o;
    o.hierarchy = parse_hierarchy(hierarchy);
    intptr_t handle = 0;
    if (!stream.is_none()) {
      handle = stream.cast<intptr_t>();
    } else if (first.stream) {
      handle = *first.stream;
    }
    o.stream = reinterpret_cast<Stream>(handle);
    return o;
  }

  /// Runs `f` on the communicator without the GIL; ValueError once closed.
  template <class F>
  std::invoke_result_t<F, CudaMultiNodeCommunicator&> run(F&& f) const {
    std::lock_guard lock(mu_);
    if (!comm_) throw py::value_error("the communicator is closed");
    py::gil_scoped_release release;
    return f(*comm_);
  }

  mutable std::mutex mu_;  ///< comm_, and one call at a time (an NCCL communicator takes one thread at a time)
  std::unique_ptr<StoreServer> server_;  ///< rank 0's, kept while the communicator lives
  std::unique_ptr<CudaMultiNodeCommunicator> comm_;
  int rank_ = 0, world_size_ = 0, device_ = -1;
};

}  // namespace

void bind_cuda_multinode(py::module_& m) {
  py::class_<PyCudaMultiNode>(m, "CudaMultiNodeCommunicator",
                              "symcomm inside each node and NCCL between the nodes, for CUDA arrays; calls are "
                              "enqueued on their stream (use symcomm.torch or the package symcomm)")
      .def_static("create", &PyCudaMultiNode::create, py::arg("rank"), py::arg("world_size"), py::arg("local_rank"),
                  py::arg("token"), py::arg("host"), py::arg("port"), py::arg("on_store_started"),
                  py::arg("fake_node_size") = 0, py::arg("round_robin") = false, py::arg("min_bytes") = py::none(),
                  py::arg("device") = -1)
      .def_property_readonly("rank", &PyCudaMultiNode::rank)
      .def_property_readonly("world_size", &PyCudaMultiNode::world_size)
      .def_property_readonly("device", &PyCudaMultiNode::device)
      .def_property_readonly("node", &PyCudaMultiNode::node)
      .def_property_readonly("num_nodes", &PyCudaMultiNode::num_nodes)
      .def_property_readonly("local_rank", &PyCudaMultiNode::local_rank)
      .def_property_readonly("local_world_size", &PyCudaMultiNode::local_world_size)
      .def_property_readonly("closed", &PyCudaMultiNode::closed)
      .def_property_readonly("last_path", &PyCudaMultiNode::last_path)
      .def("all_reduce", &PyCudaMultiNode::all_reduce, py::arg("x"), py::arg("out"), py::arg("op"),
           py::arg("hierarchy") = "auto", py::arg("async_op") = false, py::arg("dtype") = "",
           py::arg("stream") = py::none())
      .def("all_gather", &PyCudaMultiNode::all_gather, py::arg("x"), py::arg("out"), py::arg("hierarchy") = "auto",
           py::arg("async_op") = false, py::arg("dtype") = "", py::arg("stream") = py::none())
      .def("reduce_scatter", &PyCudaMultiNode::reduce_scatter, py::arg("x"), py::arg("out"), py::arg("op"),
           py::arg("hierarchy") = "auto", py::arg("async_op") = false, py::arg("dtype") = "",
           py::arg("stream") = py::none())
      .def("broadcast", &PyCudaMultiNode::broadcast, py::arg("x"), py::arg("out"), py::arg("root"),
           py::arg("hierarchy") = "auto", py::arg("async_op") = false, py::arg("dtype") = "",
           py::arg("stream") = py::none())
      .def("all_to_all", &PyCudaMultiNode::all_to_all, py::arg("x"), py::arg("out"), py::arg("hierarchy") = "auto",
           py::arg("async_op") = false, py::arg("dtype") = "", py::arg("stream") = py::none())
      .def("barrier", &PyCudaMultiNode::barrier, py::arg("hierarchy") = "auto", py::arg("async_op") = false,
           py::arg("stream") = py::none())
      .def("send", &PyCudaMultiNode::send, py::arg("x"), py::arg("peer"), py::arg("async_op") = false,
           py::arg("dtype") = "", py::arg("stream") = py::none())
      .def("recv", &PyCudaMultiNode::recv, py::arg("out"), py::arg("peer"), py::arg("async_op") = false,
           py::arg("dtype") = "", py::arg("stream") = py::none())
      .def("group_start", &PyCudaMultiNode::group_start)
      .def("group_end", &PyCudaMultiNode::group_end)
      .def("group_cancel", &PyCudaMultiNode::group_cancel)
      .def("check", &PyCudaMultiNode::check)
      .def("abort", &PyCudaMultiNode::abort)
      .def("close", &PyCudaMultiNode::close);
}

}  // namespace symcomm::python
