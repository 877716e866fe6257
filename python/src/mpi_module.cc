// symcomm._mpi: symcomm::MultiNodeCommunicator (symcomm/multinode.h) for host arrays, in jobs started by mpirun
// (symcomm.MultiNodeCommunicator in python/symcomm/multinode.py wraps it; docs/python.md). Built where MPI is found.
//
// NOTE [python MPI]
// - MPI is initialised by the first create() unless the program did it itself (mpi4py, say); MPI_THREAD_MULTIPLE is
//   asked for. The module then finalises it when the interpreter exits, after closing every communicator still
//   open, unless a communicator saw a peer die (MPI_Finalize would wait for it).
// - Open MPI opens its components with dlopen, and they need libmpi's symbols in the global scope, where the
//   libraries of a Python extension are not: before MPI_Init the module reopens the libmpi it was linked with with
//   RTLD_GLOBAL.
// - Arrays are checked and kept as by symcomm._core (NOTE [python buffers]); `*_async` calls return a
//   symcomm._core.Work. Issuing a call holds one process-wide mutex (the MPI library may give less than
//   MPI_THREAD_MULTIPLE) and releases the GIL; abort() takes neither, so another thread can abort a call that
//   waits. A communicator's asynchronous calls run on its progress thread (NOTE [multi-node queue]), which calls MPI
//   beside the threads that issue calls: the MPI_THREAD_MULTIPLE this module asks for.
#include <dlfcn.h>
#include <mpi.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "buffers.h"
#include "symcomm/error.h"
#include "symcomm/multinode.h"
#include "work.h"

namespace symcomm::python {
namespace {

PyObject* g_error_type = nullptr;  ///< symcomm.Error, from symcomm._core
std::mutex g_call_mu;              ///< one MPI-using call at a time in this process
bool g_initialized_mpi = false;    ///< this module called MPI_Init_thread
bool g_peer_died = false;          ///< a communicator reported a dead peer: MPI_Finalize would wait for it

void ensure_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw py::value_error("MPI was finalised in this process; it cannot be initialised again");
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) != 0 && info.dli_fname != nullptr) {
    dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);  // NOTE [python MPI]; the handle stays open
  }
  int provided = 0;
  py::gil_scoped_release release;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    throw Error(ErrorCode::kSystem, "MPI_Init_thread failed", __FILE__, __LINE__);
  }
  g_initialized_mpi = true;
}

/// MPI_Comm_rank or MPI_Comm_size of MPI_COMM_WORLD, MPI initialised first.
int world_query(int (*query)(MPI_Comm, int*)) {
  ensure_mpi();
  int value = 0;
  query(MPI_COMM_WORLD, &value);
  return value;
}

class PyMultiNode;
std::vector<PyMultiNode*> g_open;  ///< communicators not yet closed (guarded by the GIL)

/// symcomm._mpi.MultiNodeCommunicator: owns a MultiNodeCommunicator over MPI_COMM_WORLD until close().
class PyMultiNode {
 public:
  /// Over MPI_COMM_WORLD, or over the world ranks `ranks` (ranked in that order; collective over those ranks only,
  /// through MPI_Comm_create_group).
  static std::unique_ptr<PyMultiNode> create(int fake_node_size, bool fake_round_robin,
                                             std::optional<std::string> min_bytes,
                                             std::optional<std::vector<int>> ranks) {
    if (fake_node_size < 0) throw py::value_error("fake_node_size " + std::to_string(fake_node_size) + " is negative");
    ensure_mpi();
    if (ranks) check_ranks(*ranks);
    MultiNodeOptions options;
    options.fake_node_size = fake_node_size;
    options.fake_round_robin = fake_round_robin;
    options.min_bytes = std::move(min_bytes);
    std::unique_ptr<MultiNodeCommunicator> comm;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(g_call_mu);
      if (!ranks) {
        comm = MultiNodeCommunicator::create(MPI_COMM_WORLD, options);
      } else {
        MPI_Comm sub = subset_comm(*ranks);
        try {
          comm = MultiNodeCommunicator::create(sub, options);  // it keeps a duplicate of `sub`
        } catch (...) {
          MPI_Comm_free(&sub);
          throw;
        }
        MPI_Comm_free(&sub);
      }
    }
    return std::make_unique<PyMultiNode>(std::move(comm));
  }

  /// ValueError unless `ranks` are distinct ranks of MPI_COMM_WORLD and include this process.
  static void check_ranks(const std::vector<int>& ranks) {
    int world = 0;
    int me = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    std::vector<bool> seen(static_cast<size_t>(world), false);
    for (int r : ranks) {
      if (r < 0 || r >= world || seen[static_cast<size_t>(r)]) {
        throw py::value_error("ranks: " + std::to_string(r) + " is not a distinct rank of MPI_COMM_WORLD (size " +
                              std::to_string(world) + ")");
      }
      seen[static_cast<size_t>(r)] = true;
    }
    if (!seen[static_cast<size_t>(me)]) {
      throw py::value_error("ranks: this process (MPI_COMM_WORLD rank " + std::to_string(me) + ") is not among them");
    }
  }

  /// A communicator of the world ranks `ranks`, in that order (MPI_Comm_create_group: only they take part).
  static MPI_Comm subset_comm(const std::vector<int>& ranks) {
    MPI_Group world_group = MPI_GROUP_NULL;
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    int rc = MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, kCreateGroupTag, &sub);
    if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (rc != MPI_SUCCESS || sub == MPI_COMM_NULL) {
      throw Error(ErrorCode::kSystem, "MPI_Comm_create_group failed (rc " + std::to_string(rc) + ")", __FILE__,
                  __LINE__);
    }
    return sub;
  }
  /// The tag of MPI_Comm_create_group: creations are collective calls, issued in the same order by every member.
  static constexpr int kCreateGroupTag = 0x5c0;

  explicit PyMultiNode(std::unique_ptr<MultiNodeCommunicator> comm)
      : comm_(std::move(comm)),
        rank_(comm_->rank()),
        world_size_(comm_->world_size()),
        node_(comm_->node()),
        num_nodes_(comm_->num_nodes()),
        local_rank_(comm_->local_rank()),
        local_world_size_(comm_->local_world_size()) {
    g_open.push_back(this);
  }
  ~PyMultiNode() {
    try {
      close();
    } catch (...) {  // destruction reports nothing; close() raises
      PyErr_Clear();
    }
  }
  PyMultiNode(const PyMultiNode&) = delete;
  PyMultiNode& operator=(const PyMultiNode&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int node() const { return node_; }
  int num_nodes() const { return num_nodes_; }
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }
  bool closed() const {
    std::lock_guard lock(ptr_mu_);
    return comm_ == nullptr;
  }
  std::string last_path() const {
    std::lock_guard lock(ptr_mu_);
    return comm_ ? std::string(to_string(comm_->last_path())) : "none";
  }

  py::object all_reduce(const py::handle& x, const py::handle& out, ReduceOp op, const std::string& hierarchy,
                        bool async, const std::string& dtype) {
    Buffer in = checked(x, "x", false, dtype, false);
    Buffer o = checked_output(out, in, in.count, "the input's count", dtype, false);
    const NodeCollOptions opts{.hierarchy = parse_hierarchy(hierarchy)};
    return submit(refs({&in, &o}), o.owner, async, [&](MultiNodeCommunicator& c, bool a) {
      if (a) return c.all_reduce_async(in.data(), o.data(), in.count, in.dtype, op, opts);
      c.all_reduce(in.data(), o.data(), in.count, in.dtype, op, opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object all_gather(const py::handle& x, const py::handle& out, const std::string& hierarchy, bool async,
                        const std::string& dtype) {
    Buffer in = checked(x, "x", false, dtype, false);
    Buffer o = checked_output(out, in, in.count * world_size_, "world_size times the input's count", dtype, false);
    const NodeCollOptions opts{.hierarchy = parse_hierarchy(hierarchy)};
    return submit(refs({&in, &o}), o.owner, async, [&](MultiNodeCommunicator& c, bool a) {
      if (a) return c.all_gather_async(in.data(), o.data(), in.count, in.dtype, opts);
      c.all_gather(in.data(), o.data(), in.count, in.dtype, opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object reduce_scatter(const py::handle& x, const py::handle& out, ReduceOp op, const std::string& hierarchy,
                            bool async, const std::string& dtype) {
    Buffer in = checked(x, "x", false, dtype, false);
    check_divisible(in, world_size_);
    Buffer o = checked_output(out, in, in.count / world_size_, "the input's count divided by world_size", dtype, false);
    const NodeCollOptions opts{.hierarchy = parse_hierarchy(hierarchy)};
    return submit(refs({&in, &o}), o.owner, async, [&](MultiNodeCommunicator& c, bool a) {
      if (a) return c.reduce_scatter_async(in.data(), o.data(), o.count, in.dtype, op, opts);
      c.reduce_scatter(in.data(), o.data(), o.count, in.dtype, op, opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object broadcast(const py::handle& x, const py::handle& out, int root, const std::string& hierarchy, bool async,
                       const std::string& dtype) {
    Buffer in = checked(x, "x", false, dtype, false);
    Buffer o = checked_output(out, in, in.count, "the input's count", dtype, false);
    const NodeCollOptions opts{.hierarchy = parse_hierarchy(hierarchy)};
    return submit(refs({&in, &o}), o.owner, async, [&](MultiNodeCommunicator& c, bool a) {
      if (a) return c.broadcast_async(in.data(), o.data(), in.count, in.dtype, root, opts);
      c.broadcast(in.data(), o.data(), in.count, in.dtype, root, opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object all_to_all(const py::handle& x, const py::handle& out, const std::string& hierarchy, bool async,
                        const std::string& dtype) {
    Buffer in = checked(x, "x", false, dtype, false);
    check_divisible(in, world_size_);
    Buffer o = checked_output(out, in, in.count, "the input's count", dtype, false);
    const NodeCollOptions opts{.hierarchy = parse_hierarchy(hierarchy)};
    const size_t block = in.count / world_size_;
    return submit(refs({&in, &o}), o.owner, async, [&](MultiNodeCommunicator& c, bool a) {
      if (a) return c.all_to_all_async(in.data(), o.data(), block, in.dtype, opts);
      c.all_to_all(in.data(), o.data(), block, in.dtype, opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object barrier(const std::string& hierarchy, bool async) {
    const NodeCollOptions opts{.hierarchy = parse_hierarchy(hierarchy)};
    return submit({}, py::none(), async, [&](MultiNodeCommunicator& c, bool a) {
      if (a) return c.barrier_async(opts);
      c.barrier(opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object send(const py::handle& x, int peer, bool async, const std::string& dtype) {
    Buffer in = checked(x, "x", false, dtype, false);
    return submit(refs({&in}), py::none(), async, [&](MultiNodeCommunicator& c, bool a) {
      if (a) return c.send_async(in.data(), in.count, in.dtype, peer);
      c.send(in.data(), in.count, in.dtype, peer);
      return std::shared_ptr<Work>();
    });
  }

  py::object recv(const py::handle& out, int peer, bool async, const std::string& dtype) {
    Buffer o = checked(out, "out", true, dtype, false);
    return submit(refs({&o}), o.owner, async, [&](MultiNodeCommunicator& c, bool a) {
      if (a) return c.recv_async(o.data(), o.count, o.dtype, peer);
      c.recv(o.data(), o.count, o.dtype, peer);
      return std::shared_ptr<Work>();
    });
  }

  void group_start() {
    run([](MultiNodeCommunicator& c) { c.group_start(); });
    in_flight_.group_started();
  }
  void group_end() {
    in_flight_.end_group(
        [&] {
          return run([](MultiNodeCommunicator& c) {
            c.group_end();
            return std::shared_ptr<Work>();
          });
        },
        false);
  }
  void group_cancel() {
    in_flight_.end_group(
        [&] {
          return run([](MultiNodeCommunicator& c) {
            c.group_cancel();
            return std::shared_ptr<Work>();
          });
        },
        false);
  }
  py::object group_end_async() {
    return in_flight_.end_group([&] { return run([](MultiNodeCommunicator& c) { return c.group_end_async(); }); },
                                true);
  }

  void check() {
    run([](MultiNodeCommunicator& c) { c.check(); });
  }

  /// Local and non-blocking: pending and later calls fail with Error(kAborted). Does nothing once closed.
  void abort() {
    std::lock_guard lock(ptr_mu_);
    if (comm_) comm_->abort();
  }

  /// Waits for the calls in flight (ignoring their errors) and destroys the communicator (collective, like its
  /// creation: every rank closes it); idempotent.
  void close() {
    std::erase(g_open, this);
    std::vector<std::shared_ptr<Work>> works = in_flight_.works();
    {
      py::gil_scoped_release release;
      wait_quietly(works);
    }
    in_flight_.clear();
    std::unique_ptr<MultiNodeCommunicator> comm;
    {
      std::lock_guard lock(ptr_mu_);
      comm = std::move(comm_);
    }
    if (!comm) return;
    py::gil_scoped_release release;
    std::lock_guard lock(g_call_mu);
    comm.reset();
  }

 private:
  /// Issues a call through `call(comm, async)`; keeps its arrays as NOTE [python buffers] says.
  template <class F>
  py::object submit(std::vector<py::object> arrays, py::object result, bool async, F&& call) {
    in_flight_.prune();
    std::shared_ptr<Work> work = run([&](MultiNodeCommunicator& c) { return call(c, async); });
    return in_flight_.issued(std::move(arrays), async ? std::move(work) : nullptr, std::move(result));
  }

  /// Runs `f` on the communicator without the GIL, one call at a time in the process (NOTE [python MPI]).
  template <class F>
  std::invoke_result_t<F&, MultiNodeCommunicator&> run(F&& f) {
    MultiNodeCommunicator* comm = nullptr;
    {
      std::lock_guard lock(ptr_mu_);
      comm = comm_.get();
    }
    if (comm == nullptr) throw py::value_error("the communicator is closed");
    try {
      py::gil_scoped_release release;
      std::lock_guard lock(g_call_mu);
      return f(*comm);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kPeerDead) g_peer_died = true;
      throw;
    }
  }

  mutable std::mutex ptr_mu_;  ///< guards comm_ (abort() reads it while a call runs)
  std::unique_ptr<MultiNodeCommunicator> comm_;
  int rank_, world_size_, node_, num_nodes_, local_rank_, local_world_size_;
  InFlight in_flight_;  ///< used with the GIL held
};

/// At interpreter exit: closes what is still open, then finalises MPI if this module initialised it.
void finalize() {
  while (!g_open.empty()) g_open.back()->close();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_initialized_mpi && !finalized && !g_peer_died) {
    py::gil_scoped_release release;
    MPI_Finalize();
  }
}

}  // namespace
}  // namespace symcomm::python

PYBIND11_MODULE(_mpi, m) {
  using namespace symcomm;          // NOLINT(google-build-using-namespace)
  using namespace symcomm::python;  // NOLINT(google-build-using-namespace)
  m.doc() =
      "symcomm communicators that span nodes (MPI between them) for host arrays; use symcomm.MultiNodeCommunicator";

  py::module_ core = py::module_::import("symcomm._core");
  g_error_type = core.attr("Error").ptr();
  Py_INCREF(g_error_type);
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      set_python_error(g_error_type, e);
    }
  });
  py::module_::import("atexit").attr("register")(py::cpp_function(&finalize));

  // MPI_COMM_WORLD's rank of this process and size (MPI is initialised here if it is not yet).
  m.def("world_rank", [] { return world_query(MPI_Comm_rank); });
  m.def("world_size", [] { return world_query(MPI_Comm_size); });

  py::class_<PyMultiNode>(m, "MultiNodeCommunicator")
      .def_static("create", &PyMultiNode::create, py::arg("fake_node_size") = 0, py::arg("fake_round_robin") = false,
                  py::arg("min_bytes") = py::none(), py::arg("ranks") = py::none())
      .def_property_readonly("rank", &PyMultiNode::rank)
      .def_property_readonly("world_size", &PyMultiNode::world_size)
      .def_property_readonly("node", &PyMultiNode::node)
      .def_property_readonly("num_nodes", &PyMultiNode::num_nodes)
      .def_property_readonly("local_rank", &PyMultiNode::local_rank)
      .def_property_readonly("local_world_size", &PyMultiNode::local_world_size)
      .def_property_readonly("closed", &PyMultiNode::closed)
      .def_property_readonly("last_path", &PyMultiNode::last_path)
      .def("all_reduce", &PyMultiNode::all_reduce, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("hierarchy"),
           py::arg("async_op"), py::arg("dtype") = "")
      .def("all_gather", &PyMultiNode::all_gather, py::arg("x"), py::arg("out"), py::arg("hierarchy"),
           py::arg("async_op"), py::arg("dtype") = "")
      .def("reduce_scatter", &PyMultiNode::reduce_scatter, py::arg("x"), py::arg("out"), py::arg("op"),
           py::arg("hierarchy"), py::arg("async_op"), py::arg("dtype") = "")
      .def("broadcast", &PyMultiNode::broadcast, py::arg("x"), py::arg("out"), py::arg("root"), py::arg("hierarchy"),
           py::arg("async_op"), py::arg("dtype") = "")
      .def("all_to_all", &PyMultiNode::all_to_all, py::arg("x"), py::arg("out"), py::arg("hierarchy"),
           py::arg("async_op"), py::arg("dtype") = "")
      .def("barrier", &PyMultiNode::barrier, py::arg("hierarchy"), py::arg("async_op"))
      .def("send", &PyMultiNode::send, py::arg("x"), py::arg("peer"), py::arg("async_op"), py::arg("dtype") = "")
      .def("recv", &PyMultiNode::recv, py::arg("out"), py::arg("peer"), py::arg("async_op"), py::arg("dtype") = "")
      .def("group_start", &PyMultiNode::group_start)
      .def("group_end", &PyMultiNode::group_end)
      .def("group_end_async", &PyMultiNode::group_end_async)
      .def("group_cancel", &PyMultiNode::group_cancel)
      .def("check", &PyMultiNode::check)
      .def("abort", &PyMultiNode::abort)
      .def("close", &PyMultiNode::close);
}
