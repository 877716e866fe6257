// symcomm._core: symcomm::Communicator for NumPy arrays on the host backend (the package symcomm in
// python/symcomm wraps it; docs/python.md).
//
// NOTE [python buffers]
// - Every array is checked before the library is called: a numpy.ndarray (else TypeError) of a supported
//   dtype in native byte order (else TypeError), C-contiguous (else ValueError); outputs also writeable and of
//   the input's dtype and the element count the collective needs (else ValueError / TypeError). A failed check
//   runs nothing and leaves the communicator usable, like the library's own Error(kInvalidArgument).
// - The GIL is released while the library runs (creation, collectives, waits, close); one mutex per
//   communicator serialises its calls from several Python threads. abort() does not take it, so that another
//   thread can abort a collective that blocks.
// - The arrays of an `*_async` call stay referenced until its Work has completed: by the Work and by the
//   communicator's list of pending calls, which drops completed entries at every call, so a Work the caller
//   discards does not free buffers the collective still uses. Calls recorded in a group keep their arrays
//   until the outermost group level ends (group_end() or group_cancel()). close() waits for pending calls
//   before it destroys the communicator.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "symcomm/communicator.h"
#include "symcomm/error.h"
#include "symcomm/fused.h"
#include "symcomm/types.h"

namespace py = pybind11;

namespace symcomm::python {
namespace {

/// symcomm.Error (a RuntimeError), set when the module is imported.
PyObject* g_error_type = nullptr;

/// "invalid argument" -> "invalid_argument".
std::string code_name(ErrorCode code) {
  std::string s(to_string(code));
  for (char& c : s) {
    if (c == ' ') c = '_';
  }
  return s;
}

std::string type_name(const py::handle& o) { return py::str(py::type::handle_of(o).attr("__name__")); }

/// "float32", or "float32 (byte order >)" outside the native byte order.
std::string dtype_name(const py::dtype& d) {
  std::string name = d.attr("name").cast<std::string>();
  if (!d.attr("isnative").cast<bool>()) name += " (byte order " + d.attr("byteorder").cast<std::string>() + ")";
  return name;
}

/// The DataType of a NumPy dtype; TypeError for one symcomm has no type for.
DataType data_type(const py::dtype& d, const char* what) {
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (d.attr("isnative").cast<bool>()) {
    if (kind == 'f' && size == 2) return DataType::kFloat16;
    if (kind == 'f' && size == 4) return DataType::kFloat32;
    if (kind == 'f' && size == 8) return DataType::kFloat64;
    if (kind == 'i' && size == 1) return DataType::kInt8;
    if (kind == 'i' && size == 4) return DataType::kInt32;
    if (kind == 'i' && size == 8) return DataType::kInt64;
    if (kind == 'u' && size == 1) return DataType::kUInt8;
  }
  throw py::type_error(std::string(what) + ": dtype " + dtype_name(d) +
                       " is not supported (float16, float32, float64, int8, uint8, int32, int64 in native byte order)");
}

/// One checked array argument.
struct Buffer {
  py::array array;
  DataType dtype;
  size_t count;  ///< elements

  void* data() const { return const_cast<void*>(array.data()); }
};

/// The DataType of `a`: its dtype's, or bfloat16 where `as_dtype` is "bfloat16" (then the array holds the
/// bfloat16 bits as int16 or uint16, NumPy having no bfloat16).
DataType array_type(const py::array& a, const char* what, const std::string& as_dtype) {
  if (as_dtype.empty()) return data_type(a.dtype(), what);
  if (as_dtype != "bfloat16")
    throw py::value_error("dtype '" + as_dtype + "' is unknown ('bfloat16', or '' for the array's)");
  const char kind = a.dtype().kind();
  if ((kind != 'i' && kind != 'u') || a.dtype().itemsize() != 2 || !a.dtype().attr("isnative").cast<bool>()) {
    throw py::type_error(std::string(what) + ": dtype bfloat16 needs an int16 or uint16 array, got " +
                         dtype_name(a.dtype()));
  }
  return DataType::kBFloat16;
}

/// Checks `o` as an input (`writeable` false) or output array of a collective.
Buffer checked(const py::handle& o, const char* what, bool writeable, const std::string& as_dtype) {
  if (!py::isinstance<py::array>(o)) {
    throw py::type_error(std::string(what) + ": expected a numpy.ndarray, got " + type_name(o));
  }
  auto a = py::reinterpret_borrow<py::array>(o);
  DataType dtype = array_type(a, what, as_dtype);
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(what) + ": the array is not C-contiguous");
  if (writeable && !a.writeable()) throw py::value_error(std::string(what) + ": the array is read-only");
  return Buffer{a, dtype, static_cast<size_t>(a.size())};
}

/// Checks the output `out` against the input: same dtype, `count` elements.
Buffer checked_output(const py::handle& out, const Buffer& in, size_t count, const char* rule,
                      const std::string& as_dtype) {
  Buffer b = checked(out, "out", true, as_dtype);
  if (b.dtype != in.dtype) {
    throw py::type_error("out: dtype " + dtype_name(b.array.dtype()) + " differs from the input's " +
                         dtype_name(in.array.dtype()));
  }
  if (b.count != count) {
    throw py::value_error("out: " + std::to_string(b.count) + " elements, expected " + std::to_string(count) + " (" +
                          rule + ")");
  }
  return b;
}

/// The TensorRef (include/symcomm/fused.h) of a checked array: its data, dtype and shape.
TensorRef tensor_ref(const Buffer& b) {
  TensorRef t{.data = b.data(), .dtype = b.dtype, .shape = {}};
  for (py::ssize_t i = 0; i < b.array.ndim(); ++i) t.shape.push_back(static_cast<int64_t>(b.array.shape(i)));
  return t;
}

/// A call of `*_async` not yet known to be complete, with the arrays it uses.
struct Pending {
  std::shared_ptr<Work> work;
  std::vector<py::object> keep;
};

/// symcomm._core.Work: the completion handle of an `*_async` call.
class PyWork {
 public:
  PyWork(std::shared_ptr<Pending> pending, py::object result)
      : pending_(std::move(pending)), result_(std::move(result)) {}

  bool is_completed() const { return pending_->work->is_completed(); }

  /// Blocks until the collective completes; rethrows its error. Returns the output array (None for a barrier).
  py::object wait() {
    try {
      py::gil_scoped_release release;
      pending_->work->wait();
    } catch (...) {
      pending_->keep.clear();  // completed, with an error: the buffers are no longer used
      throw;
    }
    pending_->keep.clear();
    return result_;
  }

  /// Like wait(), but gives up after `seconds` and returns false (the collective keeps running).
  bool wait_for(double seconds) {
    if (!(seconds >= 0)) throw py::value_error("wait_for: seconds must be >= 0");
    bool done = false;
    {
      py::gil_scoped_release release;
      done =
          pending_->work->wait_for(std::chrono::milliseconds(static_cast<long long>(std::min(seconds, 1e9) * 1000.0)));
    }
    if (done) wait();  // rethrows the collective's error
    return done;
  }

  py::object result() const { return result_; }

 private:
  std::shared_ptr<Pending> pending_;
  py::object result_;
};

/// symcomm._core.Communicator: owns a symcomm::Communicator until close().
class PyCommunicator {
 public:
  static std::unique_ptr<PyCommunicator> from_env(const std::string& backend) {
    std::optional<BackendKind> kind = parse_backend(backend);
    if (!kind) throw py::value_error("backend '" + backend + "' is unknown (host)");
    if (*kind != BackendKind::kHost) {
      throw py::value_error("backend '" + backend + "': only the host backend is available from Python");
    }
    std::shared_ptr<Communicator> comm;
    {
      py::gil_scoped_release release;
      CommOptions options;
      options.backend = *kind;
      comm = Communicator::create_from_env(options);
    }
    return std::make_unique<PyCommunicator>(std::move(comm));
  }

  /// Rendezvous at host:port with `token` (rank 0 serves the store there; port 0: a free port, passed to
  /// `on_store_started` on rank 0 once the store is up, with the GIL held).
  static std::unique_ptr<PyCommunicator> create(int rank, int world_size, const std::string& token,
                                                const std::string& host, int port, py::object on_store_started) {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      throw py::value_error("rank " + std::to_string(rank) + " is outside [0, world_size " +
                            std::to_string(world_size) + ")");
    }
    if (port < 0 || port > 65535) throw py::value_error("port " + std::to_string(port) + " is outside [0, 65535]");
    Rendezvous rv;
    rv.ranks = RankInfo{rank, world_size, rank, world_size};
    rv.store_host = host;
    rv.store_port = static_cast<uint16_t>(port);
    rv.token = token;
    if (!on_store_started.is_none()) {
      rv.on_store_started = [&on_store_started](uint16_t bound) {
        py::gil_scoped_acquire acquire;
        on_store_started(static_cast<int>(bound));
      };
    }
    std::shared_ptr<Communicator> comm;
    {
      py::gil_scoped_release release;
      CommOptions options;
      options.backend = BackendKind::kHost;
      comm = Communicator::create(rv, options);
    }
    return std::make_unique<PyCommunicator>(std::move(comm));
  }

  explicit PyCommunicator(std::shared_ptr<Communicator> comm)
      : comm_(std::move(comm)),
        rank_(comm_->rank()),
        world_size_(comm_->world_size()),
        backend_(to_string(comm_->backend())) {}

  ~PyCommunicator() {
    try {
      close();
    } catch (...) {  // destruction reports nothing; close() raises
      PyErr_Clear();
    }
  }

  PyCommunicator(const PyCommunicator&) = delete;
  PyCommunicator& operator=(const PyCommunicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& backend() const { return backend_; }
  bool closed() const {
    std::lock_guard lock(ptr_mu_);
    return comm_ == nullptr;
  }

  py::object all_reduce(const py::handle& x, const py::handle& out, ReduceOp op, bool async,
                        const std::string& as_dtype) {
    Buffer in = checked(x, "x", false, as_dtype);
    Buffer o = checked_output(out, in, in.count, "the input's count", as_dtype);
    return submit({in.array, o.array}, o.array, async, [&](Communicator& c, bool a) {
      if (a) return c.all_reduce_async(in.data(), o.data(), in.count, in.dtype, op);
      c.all_reduce(in.data(), o.data(), in.count, in.dtype, op);
      return std::shared_ptr<Work>();
    });
  }

  py::object all_gather(const py::handle& x, const py::handle& out, bool async, const std::string& as_dtype) {
    Buffer in = checked(x, "x", false, as_dtype);
    Buffer o = checked_output(out, in, in.count * world_size_, "world_size times the input's count", as_dtype);
    return submit({in.array, o.array}, o.array, async, [&](Communicator& c, bool a) {
      if (a) return c.all_gather_async(in.data(), o.data(), in.count, in.dtype);
      c.all_gather(in.data(), o.data(), in.count, in.dtype);
      return std::shared_ptr<Work>();
    });
  }

  py::object reduce_scatter(const py::handle& x, const py::handle& out, ReduceOp op, bool async,
                            const std::string& as_dtype) {
    Buffer in = checked(x, "x", false, as_dtype);
    if (in.count % world_size_ != 0) {
      throw py::value_error("x: " + std::to_string(in.count) + " elements are not divisible by the world size " +
                            std::to_string(world_size_));
    }
    Buffer o = checked_output(out, in, in.count / world_size_, "the input's count divided by world_size", as_dtype);
    return submit({in.array, o.array}, o.array, async, [&](Communicator& c, bool a) {
      if (a) return c.reduce_scatter_async(in.data(), o.data(), o.count, in.dtype, op);
      c.reduce_scatter(in.data(), o.data(), o.count, in.dtype, op);
      return std::shared_ptr<Work>();
    });
  }

  py::object broadcast(const py::handle& x, const py::handle& out, int root, bool async, const std::string& as_dtype) {
    Buffer in = checked(x, "x", false, as_dtype);
    Buffer o = checked_output(out, in, in.count, "the input's count", as_dtype);
    return submit({in.array, o.array}, o.array, async, [&](Communicator& c, bool a) {
      if (a) return c.broadcast_async(in.data(), o.data(), in.count, in.dtype, root);
      c.broadcast(in.data(), o.data(), in.count, in.dtype, root);
      return std::shared_ptr<Work>();
    });
  }

  /// all_gather_matmul (include/symcomm/fused.h): outs[i] = (a_shard gathered along gather_dim) · bs[i];
  /// a_gathered, if not None, receives the gathered A. Synchronous; shapes and dtypes are checked by the
  /// library (Error with code invalid_argument, nothing run).
  void all_gather_matmul(const py::handle& a_shard, const py::sequence& bs, int gather_dim, const py::sequence& outs,
                         const py::object& a_gathered, const std::string& as_dtype) {
    if (py::len(bs) != py::len(outs)) {
      throw py::value_error("bs and outs: " + std::to_string(py::len(bs)) + " weights but " +
                            std::to_string(py::len(outs)) + " outputs");
    }
    Buffer a = checked(a_shard, "a_shard", false, as_dtype);
    std::vector<py::object> keep{a.array};
    std::vector<TensorRef> b_refs, out_refs;
    for (size_t i = 0; i < py::len(bs); ++i) {
      const std::string b_what = "bs[" + std::to_string(i) + "]", out_what = "outs[" + std::to_string(i) + "]";
      Buffer b = checked(bs[i], b_what.c_str(), false, as_dtype);
      Buffer o = checked(outs[i], out_what.c_str(), true, as_dtype);
      b_refs.push_back(tensor_ref(b));
      out_refs.push_back(tensor_ref(o));
      keep.push_back(b.array);
      keep.push_back(o.array);
    }
    std::optional<TensorRef> gathered;
    if (!a_gathered.is_none()) {
      Buffer g = checked(a_gathered, "a_gathered", true, as_dtype);
      gathered = tensor_ref(g);
      keep.push_back(g.array);
    }
    const TensorRef a_ref = tensor_ref(a);
    submit(std::move(keep), py::none(), false, [&](Communicator& c, bool) {
      symcomm::all_gather_matmul(c, a_ref, b_refs, gather_dim, out_refs, gathered ? &*gathered : nullptr);
      return std::shared_ptr<Work>();
    });
  }

  /// matmul_reduce_scatter (include/symcomm/fused.h): out = block `rank` of the reduction (op over ranks) of
  /// a · b along scatter_dim. Synchronous.
  void matmul_reduce_scatter(const py::handle& a, const py::handle& b, ReduceOp op, int scatter_dim,
                             const py::handle& out, const std::string& as_dtype) {
    Buffer ab = checked(a, "a", false, as_dtype);
    Buffer bb = checked(b, "b", false, as_dtype);
    Buffer ob = checked(out, "out", true, as_dtype);
    const TensorRef a_ref = tensor_ref(ab), b_ref = tensor_ref(bb), out_ref = tensor_ref(ob);
    submit({ab.array, bb.array, ob.array}, py::none(), false, [&](Communicator& c, bool) {
      symcomm::matmul_reduce_scatter(c, a_ref, b_ref, op, scatter_dim, out_ref);
      return std::shared_ptr<Work>();
    });
  }

  py::object all_to_all(const py::handle& x, const py::handle& out, bool async, const std::string& as_dtype) {
    Buffer in = checked(x, "x", false, as_dtype);
    if (in.count % world_size_ != 0) {
      throw py::value_error("x: " + std::to_string(in.count) + " elements are not divisible by the world size " +
                            std::to_string(world_size_));
    }
    Buffer o = checked_output(out, in, in.count, "the input's count", as_dtype);
    return submit({in.array, o.array}, o.array, async, [&](Communicator& c, bool a) {
      if (a) return c.all_to_all_async(in.data(), o.data(), in.count / world_size_, in.dtype);
      c.all_to_all(in.data(), o.data(), in.count / world_size_, in.dtype);
      return std::shared_ptr<Work>();
    });
  }

  /// send / recv (include/symcomm/communicator.h): x's elements to rank `peer`, or from it into `out` (returned).
  py::object send(const py::handle& x, int peer, bool async, const std::string& as_dtype) {
    Buffer in = checked(x, "x", false, as_dtype);
    return submit({in.array}, py::none(), async, [&](Communicator& c, bool a) {
      if (a) return c.send_async(in.data(), in.count, in.dtype, peer);
      c.send(in.data(), in.count, in.dtype, peer);
      return std::shared_ptr<Work>();
    });
  }

  py::object recv(const py::handle& out, int peer, bool async, const std::string& as_dtype) {
    Buffer o = checked(out, "out", true, as_dtype);
    return submit({o.array}, o.array, async, [&](Communicator& c, bool a) {
      if (a) return c.recv_async(o.data(), o.count, o.dtype, peer);
      c.recv(o.data(), o.count, o.dtype, peer);
      return std::shared_ptr<Work>();
    });
  }

  py::object barrier(bool async) {
    return submit({}, py::none(), async, [&](Communicator& c, bool a) {
      if (a) return c.barrier_async();
      c.barrier();
      return std::shared_ptr<Work>();
    });
  }

  void group_start() {
    locked([](Communicator& c) { c.group_start(); });
    ++group_depth_;
  }

  void group_end() {
    end_group_level([](Communicator& c) { c.group_end(); });
  }
  void group_cancel() {
    end_group_level([](Communicator& c) { c.group_cancel(); });
  }

  /// Local and non-blocking: pending and later collectives fail with Error(kAborted). Does nothing once closed.
  void abort() {
    std::shared_ptr<Communicator> comm;
    {
      std::lock_guard lock(ptr_mu_);
      comm = comm_;
    }
    if (comm) comm->abort();
  }

  /// Waits for pending `*_async` calls (ignoring their errors) and destroys the communicator; idempotent.
  void close() {
    std::vector<std::shared_ptr<Work>> works;
    for (const auto& p : pending_) works.push_back(p->work);
    std::shared_ptr<Communicator> comm;
    {
      py::gil_scoped_release release;
      std::lock_guard op_lock(op_mu_);
      for (const auto& w : works) {
        try {
          w->wait();
        } catch (const std::exception&) {  // the error belongs to the Work's owner; the call is over
        }
      }
      {
        std::lock_guard lock(ptr_mu_);
        comm = std::move(comm_);
      }
      comm.reset();
    }
    pending_.clear();
    group_keep_.clear();
    group_depth_ = 0;
  }

 private:
  template <class F>
  std::invoke_result_t<F&, Communicator&> locked(F&& f) {
    py::gil_scoped_release release;
    std::lock_guard op_lock(op_mu_);
    Communicator* comm = nullptr;
    {
      std::lock_guard lock(ptr_mu_);
      comm = comm_.get();
    }
    if (comm == nullptr) throw py::value_error("the communicator is closed");
    return f(*comm);
  }

  /// Runs `call(comm, async)` without the GIL; keeps `arrays` alive as NOTE [python buffers] says.
  template <class F>
  py::object submit(std::vector<py::object> arrays, py::object result, bool async, F&& call) {
    prune();
    std::shared_ptr<Work> work = locked([&](Communicator& c) { return call(c, async); });
    if (group_depth_ > 0) {
      for (auto& a : arrays) group_keep_.push_back(a);
    }
    if (!async) return result;
    auto pending = std::make_shared<Pending>(Pending{work, std::move(arrays)});
    pending_.push_back(pending);
    return py::cast(PyWork(std::move(pending), std::move(result)));
  }

  template <class F>
  void end_group_level(F&& f) {
    try {
      locked(f);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument && group_depth_ > 0) --group_depth_;  // the level ended
      throw;
    }
    if (group_depth_ > 0 && --group_depth_ == 0) group_keep_.clear();
  }

  /// Drops the arrays of completed `*_async` calls. Inside a group it does nothing: the Works of calls recorded
  /// there cannot be asked before the group ends (Error(kInvalidArgument)).
  void prune() {
    if (group_depth_ > 0) return;
    std::erase_if(pending_, [](const std::shared_ptr<Pending>& p) {
      if (!p->work->is_completed()) return false;
      p->keep.clear();
      return true;
    });
  }

  mutable std::mutex ptr_mu_;  ///< guards comm_ (abort() reads it while a collective runs)
  std::mutex op_mu_;           ///< one library call at a time
  std::shared_ptr<Communicator> comm_;
  int rank_, world_size_;
  std::string backend_;
  // The members below are used with the GIL held.
  std::vector<std::shared_ptr<Pending>> pending_;
  std::vector<py::object> group_keep_;
  int group_depth_ = 0;
};

}  // namespace
}  // namespace symcomm::python

PYBIND11_MODULE(_core, m) {
  using namespace symcomm;          // NOLINT(google-build-using-namespace)
  using namespace symcomm::python;  // NOLINT(google-build-using-namespace)
  m.doc() = "symcomm collectives for NumPy arrays on the host backend (use the package symcomm)";

  auto error = py::exception<Error>(m, "Error", PyExc_RuntimeError);
  error.attr("__module__") = "symcomm";
  error.attr("__doc__") =
      "A symcomm failure: code (e.g. 'invalid_argument', 'mismatch', 'peer_dead', 'timeout', 'aborted'), "
      "message and ranks (the ranks it is about).";
  error.attr("code") = py::none();
  error.attr("ranks") = py::list();
  error.attr("message") = py::str("");
  g_error_type = error.ptr();
  Py_INCREF(g_error_type);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object type = py::reinterpret_borrow<py::object>(g_error_type);
      py::object exc = type(py::str(e.what()));
      exc.attr("code") = code_name(e.code());
      exc.attr("ranks") = py::cast(e.ranks());
      exc.attr("message") = py::str(e.message());
      PyErr_SetObject(g_error_type, exc.ptr());
    }
  });

  py::enum_<ReduceOp>(m, "ReduceOp", "Reduction operators (AVG: integer division for integer dtypes).")
      .value("SUM", ReduceOp::kSum)
      .value("PROD", ReduceOp::kProd)
      .value("MIN", ReduceOp::kMin)
      .value("MAX", ReduceOp::kMax)
      .value("AVG", ReduceOp::kAvg);

  py::class_<PyWork>(m, "Work")
      .def("is_completed", &PyWork::is_completed)
      .def("wait", &PyWork::wait)
      .def("wait_for", &PyWork::wait_for, py::arg("seconds"))
      .def("result", &PyWork::result);

  py::class_<PyCommunicator>(m, "Communicator")
      .def_static("from_env", &PyCommunicator::from_env, py::arg("backend") = "host")
      .def_static("create", &PyCommunicator::create, py::arg("rank"), py::arg("world_size"), py::arg("token"),
                  py::arg("host") = "127.0.0.1", py::arg("port") = 0, py::arg("on_store_started") = py::none())
      .def_property_readonly("rank", &PyCommunicator::rank)
      .def_property_readonly("world_size", &PyCommunicator::world_size)
      .def_property_readonly("backend", &PyCommunicator::backend)
      .def_property_readonly("closed", &PyCommunicator::closed)
      .def("all_reduce", &PyCommunicator::all_reduce, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("async_op"),
           py::arg("dtype") = "")
      .def("all_gather", &PyCommunicator::all_gather, py::arg("x"), py::arg("out"), py::arg("async_op"),
           py::arg("dtype") = "")
      .def("reduce_scatter", &PyCommunicator::reduce_scatter, py::arg("x"), py::arg("out"), py::arg("op"),
           py::arg("async_op"), py::arg("dtype") = "")
      .def("broadcast", &PyCommunicator::broadcast, py::arg("x"), py::arg("out"), py::arg("root"), py::arg("async_op"),
           py::arg("dtype") = "")
      .def("all_to_all", &PyCommunicator::all_to_all, py::arg("x"), py::arg("out"), py::arg("async_op"),
           py::arg("dtype") = "")
      .def("send", &PyCommunicator::send, py::arg("x"), py::arg("peer"), py::arg("async_op"), py::arg("dtype") = "")
      .def("recv", &PyCommunicator::recv, py::arg("out"), py::arg("peer"), py::arg("async_op"), py::arg("dtype") = "")
      .def("barrier", &PyCommunicator::barrier, py::arg("async_op"))
      .def("all_gather_matmul", &PyCommunicator::all_gather_matmul, py::arg("a_shard"), py::arg("bs"),
           py::arg("gather_dim"), py::arg("outs"), py::arg("a_gathered") = py::none(), py::arg("dtype") = "")
      .def("matmul_reduce_scatter", &PyCommunicator::matmul_reduce_scatter, py::arg("a"), py::arg("b"),
           py::arg("op"), py::arg("scatter_dim"), py::arg("out"), py::arg("dtype") = "")
      .def("group_start", &PyCommunicator::group_start)
      .def("group_end", &PyCommunicator::group_end)
      .def("group_cancel", &PyCommunicator::group_cancel)
      .def("abort", &PyCommunicator::abort)
      .def("close", &PyCommunicator::close);
}
