// symcomm._core: symcomm::Communicator for NumPy arrays on the host backend and CUDA arrays on the CUDA backend
// (the package symcomm in python/symcomm wraps it; docs/python.md).
//
// Array arguments: NOTE [python buffers] in buffers.h.
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

#include "bucketer.h"
#include "buffers.h"
#include "cuda_multinode.h"
#include "symcomm/communicator.h"
#include "symcomm/error.h"
#include "symcomm/fused.h"
#include "symcomm/types.h"
#include "work.h"

namespace py = pybind11;

namespace symcomm::python {
namespace {

/// symcomm.Error (a RuntimeError), set when the module is imported.
PyObject* g_error_type = nullptr;

TensorRef tensor_ref(const Buffer& b) { return TensorRef{.data = b.data(), .dtype = b.dtype, .shape = b.shape}; }

/// symcomm._core.HeapBuffer: bytes of a communicator's symmetric heap (Communicator::alloc), or a peer's copy of
/// them (Communicator::peer_ptr), described by the array interface of its memory: __cuda_array_interface__ on the
/// CUDA backend, __array_interface__ on the host backend (uint8, one dimension), so that torch.as_tensor(),
/// numpy.asarray() or cupy.asarray() view it without a copy. It does not own the memory: Communicator.free()
/// releases it, collectively (NOTE [python heap]).
struct PyHeapBuffer {
  uintptr_t ptr = 0;
  size_t nbytes = 0;
  bool cuda = false;
  int device = -1;
  int peer = -1;  ///< the rank whose copy this is; -1 for this rank's own allocation

  py::dict interface() const {
    py::dict d;
    d["shape"] = py::make_tuple(nbytes);
    d["typestr"] = "|u1";
    d["data"] = py::make_tuple(ptr, false);
    d["strides"] = py::none();
    d["version"] = 3;
    if (cuda) d["stream"] = py::none();
    return d;
  }
};

/// The options of a communicator of `backend` ("host" or "cuda") on `device` (CUDA: -1 for the local rank).
CommOptions comm_options(const std::string& backend, int device) {
  std::optional<BackendKind> kind = parse_backend(backend);
  if (!kind) throw py::value_error("backend '" + backend + "' is unknown (host, cuda)");
  if (device < -1) throw py::value_error("device " + std::to_string(device) + " is negative (-1: the local rank)");
  CommOptions options;
  options.backend = *kind;
  options.device = device;
  return options;
}

/// symcomm._core.Communicator: owns a symcomm::Communicator until close().
class PyCommunicator {
 public:
  static std::unique_ptr<PyCommunicator> from_env(const std::string& backend, int device) {
    CommOptions options = comm_options(backend, device);
    std::shared_ptr<Communicator> comm;
    {
      py::gil_scoped_release release;
      comm = Communicator::create_from_env(options);
    }
    return std::make_unique<PyCommunicator>(std::move(comm));
  }

  /// Rendezvous at host:port with `token` (rank 0 serves the store there; port 0: a free port, passed to
  /// `on_store_started` on rank 0 once the store is up, with the GIL held). `timeout_ms` > 0 replaces the
  /// configuration's timeout (SYMCOMM_TIMEOUT_MS) for this communicator.
  static std::unique_ptr<PyCommunicator> create(int rank, int world_size, const std::string& token,
                                                const std::string& host, int port, py::object on_store_started,
                                                const std::string& backend, int device, int64_t timeout_ms) {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      throw py::value_error("rank " + std::to_string(rank) + " is outside [0, world_size " +
                            std::to_string(world_size) + ")");
    }
    if (port < 0 || port > 65535) throw py::value_error("port " + std::to_string(port) + " is outside [0, 65535]");
    if (timeout_ms < 0) throw py::value_error("timeout_ms " + std::to_string(timeout_ms) + " is negative");
    CommOptions options = comm_options(backend, device);
    if (timeout_ms > 0) {
      Config config = Config::from_env();
      config.timeout = std::chrono::milliseconds(timeout_ms);
      options.config = config;
    }
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
      comm = Communicator::create(rv, options);
    }
    return std::make_unique<PyCommunicator>(std::move(comm));
  }

  explicit PyCommunicator(std::shared_ptr<Communicator> comm)
      : comm_(std::move(comm)),
        rank_(comm_->rank()),
        world_size_(comm_->world_size()),
        device_(comm_->device()),
        cuda_(comm_->backend() == BackendKind::kCuda),
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
  int device() const { return device_; }
  const std::string& backend() const { return backend_; }
  bool closed() const {
    std::lock_guard lock(ptr_mu_);
    return comm_ == nullptr;
  }

  py::object all_reduce(const py::handle& x, const py::handle& out, ReduceOp op, bool async,
                        const std::string& as_dtype, const py::object& stream, const std::string& algorithm,
                        const std::string& contention) {
    Buffer in = input(x, "x", as_dtype, stream);
    Buffer o = checked_output(out, in, in.count, "the input's count", as_dtype, cuda_, stream);
    const CollOptions opts = coll_options(stream, in, algorithm, contention);
    return submit(refs({&in, &o}), o.owner, async, [&](Communicator& c, bool a) {
      if (a) return c.all_reduce_async(in.data(), o.data(), in.count, in.dtype, op, opts);
      c.all_reduce(in.data(), o.data(), in.count, in.dtype, op, opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object all_gather(const py::handle& x, const py::handle& out, bool async, const std::string& as_dtype,
                        const py::object& stream, const std::string& algorithm, const std::string& contention) {
    Buffer in = input(x, "x", as_dtype, stream);
    Buffer o =
        checked_output(out, in, in.count * world_size_, "world_size times the input's count", as_dtype, cuda_, stream);
    const CollOptions opts = coll_options(stream, in, algorithm, contention);
    return submit(refs({&in, &o}), o.owner, async, [&](Communicator& c, bool a) {
      if (a) return c.all_gather_async(in.data(), o.data(), in.count, in.dtype, opts);
      c.all_gather(in.data(), o.data(), in.count, in.dtype, opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object reduce_scatter(const py::handle& x, const py::handle& out, ReduceOp op, bool async,
                            const std::string& as_dtype, const py::object& stream, const std::string& algorithm,
                            const std::string& contention) {
    Buffer in = input(x, "x", as_dtype, stream);
    check_divisible(in, world_size_);
    Buffer o = checked_output(out, in, in.count / world_size_, "the input's count divided by world_size", as_dtype,
                              cuda_, stream);
    const CollOptions opts = coll_options(stream, in, algorithm, contention);
    return submit(refs({&in, &o}), o.owner, async, [&](Communicator& c, bool a) {
      if (a) return c.reduce_scatter_async(in.data(), o.data(), o.count, in.dtype, op, opts);
      c.reduce_scatter(in.data(), o.data(), o.count, in.dtype, op, opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object broadcast(const py::handle& x, const py::handle& out, int root, bool async, const std::string& as_dtype,
                       const py::object& stream, const std::string& algorithm, const std::string& contention) {
    Buffer in = input(x, "x", as_dtype, stream);
    Buffer o = checked_output(out, in, in.count, "the input's count", as_dtype, cuda_, stream);
    const CollOptions opts = coll_options(stream, in, algorithm, contention);
    return submit(refs({&in, &o}), o.owner, async, [&](Communicator& c, bool a) {
      if (a) return c.broadcast_async(in.data(), o.data(), in.count, in.dtype, root, opts);
      c.broadcast(in.data(), o.data(), in.count, in.dtype, root, opts);
      return std::shared_ptr<Work>();
    });
  }

  /// all_gather_matmul (include/symcomm/fused.h): outs[i] = (a_shard gathered along gather_dim) · bs[i];
  /// a_gathered, if not None, receives the gathered A. Shapes and dtypes are checked by the library (Error with
  /// code invalid_argument, nothing run). Host backend: synchronous. CUDA backend: enqueued on `stream`, on the
  /// pipelined path with this communicator's fused workspace (NOTE [python fused workspace]).
  void all_gather_matmul(const py::handle& a_shard, const py::sequence& bs, int gather_dim, const py::sequence& outs,
                         const py::object& a_gathered, const std::string& as_dtype, const py::object& stream) {
    if (py::len(bs) != py::len(outs)) {
      throw py::value_error("bs and outs: " + std::to_string(py::len(bs)) + " weights but " +
                            std::to_string(py::len(outs)) + " outputs");
    }
    Buffer a = input(a_shard, "a_shard", as_dtype, stream);
    std::vector<py::object> keep = refs({&a});
    std::vector<TensorRef> b_refs, out_refs;
    for (size_t i = 0; i < py::len(bs); ++i) {
      const std::string b_what = "bs[" + std::to_string(i) + "]", out_what = "outs[" + std::to_string(i) + "]";
      Buffer b = input(bs[i], b_what.c_str(), as_dtype, stream);
      Buffer o = checked(outs[i], out_what.c_str(), true, as_dtype, cuda_, stream);
      b_refs.push_back(tensor_ref(b));
      out_refs.push_back(tensor_ref(o));
      for (py::object& r : refs({&b, &o})) keep.push_back(std::move(r));
    }
    std::optional<TensorRef> gathered;
    if (!a_gathered.is_none()) {
      Buffer g = checked(a_gathered, "a_gathered", true, as_dtype, cuda_, stream);
      gathered = tensor_ref(g);
      for (py::object& r : refs({&g})) keep.push_back(std::move(r));
    }
    const TensorRef a_ref = tensor_ref(a);
    const CollOptions opts = coll_options(stream, a);
    submit(std::move(keep), py::none(), false, [&](Communicator& c, bool) {
      FusedOptions fused;
      if (cuda_) {
        fused.workspace =
            workspace(c, all_gather_matmul_workspace_bytes(world_size_, a_ref, gather_dim, gathered.has_value()));
      }
      symcomm::all_gather_matmul(c, a_ref, b_refs, gather_dim, out_refs, gathered ? &*gathered : nullptr, opts, fused);
      return std::shared_ptr<Work>();
    });
  }

  /// matmul_reduce_scatter (include/symcomm/fused.h): out = block `rank` of the reduction (op over ranks) of
  /// a · b along scatter_dim. Host backend: synchronous; CUDA backend: enqueued on `stream` like
  /// all_gather_matmul.
  void matmul_reduce_scatter(const py::handle& a, const py::handle& b, ReduceOp op, int scatter_dim,
                             const py::handle& out, const std::string& as_dtype, const py::object& stream) {
    Buffer ab = input(a, "a", as_dtype, stream);
    Buffer bb = input(b, "b", as_dtype, stream);
    Buffer ob = checked(out, "out", true, as_dtype, cuda_, stream);
    const TensorRef a_ref = tensor_ref(ab), b_ref = tensor_ref(bb), out_ref = tensor_ref(ob);
    const CollOptions opts = coll_options(stream, ab);
    submit(refs({&ab, &bb, &ob}), py::none(), false, [&](Communicator& c, bool) {
      FusedOptions fused;
      if (cuda_) {
        fused.workspace = workspace(c, matmul_reduce_scatter_workspace_bytes(world_size_, a_ref, b_ref, scatter_dim));
      }
      symcomm::matmul_reduce_scatter(c, a_ref, b_ref, op, scatter_dim, out_ref, opts, fused);
      return std::shared_ptr<Work>();
    });
  }

  py::object all_to_all(const py::handle& x, const py::handle& out, bool async, const std::string& as_dtype,
                        const py::object& stream, const std::string& algorithm, const std::string& contention) {
    Buffer in = input(x, "x", as_dtype, stream);
    check_divisible(in, world_size_);
    Buffer o = checked_output(out, in, in.count, "the input's count", as_dtype, cuda_, stream);
    const CollOptions opts = coll_options(stream, in, algorithm, contention);
    return submit(refs({&in, &o}), o.owner, async, [&](Communicator& c, bool a) {
      if (a) return c.all_to_all_async(in.data(), o.data(), in.count / world_size_, in.dtype, opts);
      c.all_to_all(in.data(), o.data(), in.count / world_size_, in.dtype, opts);
      return std::shared_ptr<Work>();
    });
  }

  /// send / recv (include/symcomm/communicator.h): x's elements to rank `peer`, or from it into `out` (returned).
  py::object send(const py::handle& x, int peer, bool async, const std::string& as_dtype) {
    Buffer in = input(x, "x", as_dtype);
    return submit(refs({&in}), py::none(), async, [&](Communicator& c, bool a) {
      if (a) return c.send_async(in.data(), in.count, in.dtype, peer);
      c.send(in.data(), in.count, in.dtype, peer);
      return std::shared_ptr<Work>();
    });
  }

  py::object recv(const py::handle& out, int peer, bool async, const std::string& as_dtype) {
    Buffer o = checked(out, "out", true, as_dtype, cuda_);
    return submit(refs({&o}), o.owner, async, [&](Communicator& c, bool a) {
      if (a) return c.recv_async(o.data(), o.count, o.dtype, peer);
      c.recv(o.data(), o.count, o.dtype, peer);
      return std::shared_ptr<Work>();
    });
  }

  py::object barrier(bool async, const py::object& stream) {
    const CollOptions opts = coll_options(stream, Buffer{});
    return submit({}, py::none(), async, [&](Communicator& c, bool a) {
      if (a) return c.barrier_async(opts);
      c.barrier(opts);
      return std::shared_ptr<Work>();
    });
  }

  /// Raises the communicator's sticky error (a dead peer, a timeout, abort), if any.
  void check() {
    std::shared_ptr<Communicator> comm;
    {
      std::lock_guard lock(ptr_mu_);
      comm = comm_;
    }
    if (comm == nullptr) throw py::value_error("the communicator is closed");
    comm->check();
  }

  // NOTE [python heap]
  // alloc() and free() are Communicator::alloc / free: collective, in the same order with the same sizes on every
  // rank. Python frees nothing by itself: a HeapBuffer (and any tensor viewing it) that is dropped leaves its
  // bytes allocated until free() or close(), since garbage collection runs at different times on different ranks
  // and a collective free at such a time would deadlock or pair the wrong calls. Collectives on buffers inside
  // the heap run zero-copy (every rank must then pass the same allocation at the same offset).

  /// `nbytes` of the symmetric heap (collective).
  PyHeapBuffer alloc(size_t nbytes) {
    if (nbytes == 0) throw py::value_error("alloc: nbytes must be positive");
    void* p = locked([&](Communicator& c) { return c.alloc(nbytes); });
    return PyHeapBuffer{
        .ptr = reinterpret_cast<uintptr_t>(p), .nbytes = nbytes, .cuda = cuda_, .device = device_, .peer = -1};
  }

  /// Returns a HeapBuffer's memory, or the allocation at an int address, to the heap (collective).
  void free(const py::handle& buffer) {
    uintptr_t p = 0;
    if (py::isinstance<PyHeapBuffer>(buffer)) {
      const auto& b = buffer.cast<const PyHeapBuffer&>();
      if (b.peer >= 0) throw py::value_error("free: a peer's copy is not freed; free this rank's buffer");
      p = b.ptr;
    } else {
      p = buffer.cast<uintptr_t>();
    }
    locked([&](Communicator& c) { c.free(reinterpret_cast<void*>(p)); });
  }

  /// `peer`'s copy of the heap bytes [ptr, ptr + nbytes) of this rank's allocation `buffer` (an int address
  /// inside it, with nbytes; or a HeapBuffer), mapped in this process.
  PyHeapBuffer peer_buffer(const py::handle& buffer, int peer, std::optional<size_t> nbytes) {
    uintptr_t p = 0;
    size_t n = 0;
    if (py::isinstance<PyHeapBuffer>(buffer)) {
      const auto& b = buffer.cast<const PyHeapBuffer&>();
      p = b.ptr;
      n = nbytes.value_or(b.nbytes);
    } else {
      p = buffer.cast<uintptr_t>();
      if (!nbytes) throw py::value_error("peer_buffer: an address needs nbytes");
      n = *nbytes;
    }
    if (peer < 0 || peer >= world_size_) {
      throw py::value_error("peer_buffer: peer " + std::to_string(peer) + " is outside [0, " +
                            std::to_string(world_size_) + ")");
    }
    void* q = locked([&](Communicator& c) { return c.peer_ptr(reinterpret_cast<void*>(p), peer); });
    return PyHeapBuffer{
        .ptr = reinterpret_cast<uintptr_t>(q), .nbytes = n, .cuda = cuda_, .device = device_, .peer = peer};
  }

  void group_start() {
    locked([](Communicator& c) { c.group_start(); });
    in_flight_.group_started();
  }

  void group_end() {
    in_flight_.end_group(
        [&] {
          return locked([](Communicator& c) {
            c.group_end();
            return std::shared_ptr<Work>();
          });
        },
        false);
  }
  void group_cancel() {
    in_flight_.end_group(
        [&] {
          return locked([](Communicator& c) {
            c.group_cancel();
            return std::shared_ptr<Work>();
          });
        },
        false);
  }
  /// Ends the group level like group_end() and returns one Work for every collective of the group; the arrays of
  /// the group stay referenced until it completes (NOTE [python buffers]).
  py::object group_end_async() {
    return in_flight_.end_group([&] { return locked([](Communicator& c) { return c.group_end_async(); }); }, true);
  }

  // ReduceScatterBucketer (NOTE [python bucketer]): the communicator owns the bucketers it made, so that closing it
  // frees their memory first; the Python handles name them.

  PyBucketerState* bucketer_new(double bucket_cap_mb) {
    auto state = locked([&](Communicator& c) {
      return std::make_unique<PyBucketerState>(c, bucket_cap_mb, cuda_ ? &device_view : &host_view, device_);
    });
    bucketers_.push_back(std::move(state));
    return bucketers_.back().get();
  }

  void bucketer_record(PyBucketerState* b, const py::handle& x, py::object callback, ReduceOp op,
                       const std::string& as_dtype, const py::object& stream) {
    Buffer in = input(x, "input", as_dtype, stream);
    check_divisible(in, world_size_, "input");
    const CollOptions opts = coll_options(stream, in);
    b->record([&](auto&& f) { locked([&](Communicator&) { f(b->bucketer()); }); }, in, in.count / world_size_, op,
              std::move(callback), opts);
  }

  void bucketer_flush(PyBucketerState* b) {
    b->flush([&](auto&& f) { locked([&](Communicator&) { f(b->bucketer()); }); });
  }

  void bucketer_teardown(PyBucketerState* b) {
    locked([&](Communicator&) { b->bucketer().teardown(); });
  }

  /// Frees the bucketer's memory (collective) and forgets it; its results not yet delivered are dropped.
  void bucketer_close(PyBucketerState* b) {
    std::unique_ptr<PyBucketerState> gone;
    auto it = std::find_if(bucketers_.begin(), bucketers_.end(), [b](const auto& p) { return p.get() == b; });
    if (it == bucketers_.end()) return;
    gone = std::move(*it);
    bucketers_.erase(it);
    gone->forget();  // with the GIL; the rest is destroyed without it
    locked([&](Communicator&) { gone.reset(); });
  }

  /// Whether `b` is still one of this communicator's bucketers (closed ones are not).
  bool bucketer_open(const PyBucketerState* b) const {
    return std::any_of(bucketers_.begin(), bucketers_.end(), [b](const auto& p) { return p.get() == b; });
  }

  /// Communicator::split (collective): the communicator of the ranks that pass `color` (>= 0), ranked by `key`
  /// (None: this rank), ties by rank; None for a rank that passes -1 (symcomm._core.SPLIT_NOCOLOR).
  std::unique_ptr<PyCommunicator> split(int color, std::optional<int> key) {
    std::unique_ptr<Communicator> child = locked([&](Communicator& c) { return c.split(color, key.value_or(rank_)); });
    if (!child) return nullptr;
    return std::make_unique<PyCommunicator>(std::shared_ptr<Communicator>(std::move(child)));
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
    std::vector<std::shared_ptr<Work>> works = in_flight_.works();
    for (auto& b : bucketers_) b->forget();  // with the GIL; the bucketers are destroyed without it
    std::shared_ptr<Communicator> comm;
    {
      py::gil_scoped_release release;
      std::lock_guard op_lock(op_mu_);
      wait_quietly(works);
      workspace_.reset();
      bucketers_.clear();  // collective frees of their memory, before the communicator goes
      {
        std::lock_guard lock(ptr_mu_);
        comm = std::move(comm_);
      }
      comm.reset();
    }
    in_flight_.clear();
  }

  /// An all-reduce of `count` elements at `p` in place, enqueued on `stream` without the argument checks of
  /// all_reduce() (TorchAllReduce checked the tensor). False, and nothing done, on the host backend and inside a
  /// group (whose calls keep their arrays until it ends).
  bool enqueue_all_reduce(void* p, size_t count, DataType dtype, ReduceOp op, intptr_t stream) {
    if (!cuda_ || in_flight_.in_group()) return false;
    in_flight_.prune();
    CollOptions opts;
    opts.stream = reinterpret_cast<Stream>(stream);
    locked([&](Communicator& c) { c.all_reduce(p, p, count, dtype, op, opts); });
    return true;
  }

 private:
  Buffer input(const py::handle& o, const char* what, const std::string& as_dtype,
               const py::object& stream = py::none()) const {
    return checked(o, what, false, as_dtype, cuda_, stream);
  }

  /// The callbacks' views of a result (NOTE [python bucketer]): a NumPy array of the host memory, without a copy
  /// (its base a capsule that owns nothing) ...
  static py::object host_view(const void* p, size_t count, DataType dtype, int) {
    py::capsule no_owner(p, [](void*) {});
    return py::array(numpy_dtype(dtype), {static_cast<py::ssize_t>(count)}, {}, p, no_owner);
  }
  /// ... or a HeapBuffer of the device bytes.
  static py::object device_view(const void* p, size_t count, DataType dtype, int device) {
    return py::cast(PyHeapBuffer{.ptr = reinterpret_cast<uintptr_t>(p),
                                 .nbytes = count * dtype_size(dtype),
                                 .cuda = true,
                                 .device = device,
                                 .peer = -1});
  }

  /// The options of a call: its stream (NOTE [python buffers]); ignored by the host backend.
  CollOptions coll_options(const py::object& stream, const Buffer& first, const std::string& algorithm = "",
                           const std::string& contention = "") const {
    CollOptions opts;
    if (!algorithm.empty()) {
      std::optional<Algorithm> a = parse_algorithm(algorithm);
      if (!a) {
        throw py::value_error("algorithm '" + algorithm +
                              "' is unknown (auto, one_shot, two_shot, direct, copy_engine, nccl)");
      }
      opts.algorithm = *a;
    }
    if (!contention.empty()) {
      bool found = false;
      for (Contention c : {Contention::kAuto, Contention::kLow, Contention::kThroughput}) {
        if (contention == to_string(c)) {
          opts.contention = c;
          found = true;
        }
      }
      if (!found) throw py::value_error("contention '" + contention + "' is unknown (auto, low, throughput)");
    }
    intptr_t handle = 0;
    if (!stream.is_none()) {
      handle = stream.cast<intptr_t>();
    } else if (first.stream) {
      handle = *first.stream;
    }
    opts.stream = reinterpret_cast<Stream>(handle);
    return opts;
  }

  // NOTE [python fused workspace]
  // The fused operations of a CUDA communicator run on the pipelined path with one workspace of this
  // communicator, made at the first fused call and made again, larger, by a call that needs more. Making and
  // freeing it is collective (symmetric heap); every rank passes the same shapes to a fused operation, so every
  // rank does it at the same call. Like any workspace it serves one operation at a time in stream order:
  // consecutive fused calls on one communicator go on one stream (or are ordered by the caller). close() frees
  // it before the communicator.
  FusedWorkspace* workspace(Communicator& c, size_t bytes) {
    if (!workspace_ || workspace_->bytes() < bytes) {
      workspace_.reset();
      workspace_ = FusedWorkspace::create(c, bytes);
    }
    return workspace_.get();
  }

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
    in_flight_.prune();
    std::shared_ptr<Work> work = locked([&](Communicator& c) { return call(c, async); });
    return in_flight_.issued(std::move(arrays), async ? std::move(work) : nullptr, std::move(result));
  }

  mutable std::mutex ptr_mu_;  ///< guards comm_ (abort() reads it while a collective runs)
  std::mutex op_mu_;           ///< one library call at a time
  std::shared_ptr<Communicator> comm_;
  int rank_, world_size_, device_;
  bool cuda_;
  std::string backend_;
  std::unique_ptr<FusedWorkspace> workspace_;                ///< guarded by op_mu_ (NOTE [python fused workspace])
  std::vector<std::unique_ptr<PyBucketerState>> bucketers_;  ///< used with the GIL held
  InFlight in_flight_;                                       ///< used with the GIL held
};

/// symcomm._core.ReduceScatterBucketer: a handle of one of a communicator's bucketers (NOTE [python bucketer]).
struct PyBucketer {
  PyCommunicator* comm;
  PyBucketerState* state;

  PyBucketerState* open() const {
    if (!comm->bucketer_open(state)) throw py::value_error("the bucketer is closed");
    return state;
  }
};

// NOTE [python torch hot path]
// symcomm._core._TorchAllReduce is the hot call of symcomm.torch's process group (NOTE [torch hot path] in
// python/symcomm/torch.py): dist.all_reduce of one contiguous CUDA tensor, in place. Its checks are the process
// group's general path's in their cheapest form: CPython calls with interned names, type and dtype objects compared
// by identity (torch's dtypes and layouts are singletons), the op by its hash; the collective is enqueued without
// Communicator.all_reduce's argument parsing. A call it does not take returns None with nothing done, and the
// process group's general path runs it (and raises what is wrong with it). It knows torch only through the objects
// symcomm.torch hands it, so the module builds and loads without torch.

/// A new reference returned by a CPython call, or the pending Python error thrown.
py::object checked_ref(PyObject* o) {
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

/// The value of a Python int, or the pending Python error thrown.
template <class T>
T checked_value(T v) {
  if (v == static_cast<T>(-1) && PyErr_Occurred() != nullptr) throw py::error_already_set();
  return v;
}

class TorchAllReduce {
 public:
  /// `dtypes`: {torch dtype: symcomm dtype name}; `ops`: {hash of a torch ReduceOp: symcomm.ReduceOp};
  /// `raw_stream(device)`: the current stream of a device as an int; `has_async_op`: whether the options carry
  /// asyncOp (torch 2.x), which says whether the caller wants a Work.
  TorchAllReduce(py::object comm, int device, py::object tensor_type, py::object options_type, py::object strided,
                 const py::dict& dtypes, const py::dict& ops, py::object raw_stream, bool has_async_op)
      : comm_obj_(std::move(comm)),
        comm_(&comm_obj_.cast<PyCommunicator&>()),
        device_(device),
        device_obj_(py::int_(device)),
        tensor_type_(std::move(tensor_type)),
        options_type_(std::move(options_type)),
        strided_(std::move(strided)),
        raw_stream_(std::move(raw_stream)),
        has_async_op_(has_async_op) {
    for (auto [key, name] : dtypes) {
      std::optional<DataType> dtype = parse_dtype(name.cast<std::string>());
      if (!dtype) throw py::value_error("unknown dtype name " + name.cast<std::string>());
      dtypes_.emplace_back(py::reinterpret_borrow<py::object>(key), *dtype);
    }
    for (auto [hash, op] : ops) ops_.emplace_back(hash.cast<Py_hash_t>(), op.cast<ReduceOp>());
  }

  /// Enqueues all_reduce(tensors[0]) when the call is the hot one: None if not (nothing done), else whether the
  /// caller wants a Work.
  py::object operator()(const py::handle& tensors, const py::handle& opts) const {
    PyObject* list = tensors.ptr();
    if (PyList_CheckExact(list) == 0 || PyList_GET_SIZE(list) != 1 || opts.get_type().ptr() != options_type_.ptr()) {
      return py::none();
    }
    PyObject* t = PyList_GET_ITEM(list, 0);
    if (reinterpret_cast<PyObject*>(Py_TYPE(t)) != tensor_type_.ptr()) return py::none();
    const DataType* dtype = dtype_of(attr(t, names().dtype).ptr());
    if (dtype == nullptr || attr(t, names().is_cuda).ptr() != Py_True ||
        attr(t, names().layout).ptr() != strided_.ptr() || call(t, names().is_contiguous).ptr() != Py_True ||
        checked_value(PyLong_AsLong(call(t, names().get_device).ptr())) != device_) {
      return py::none();
    }
    const Py_hash_t hash = checked_value(PyObject_Hash(attr(opts.ptr(), names().reduce_op).ptr()));
    const auto op = std::find_if(ops_.begin(), ops_.end(), [hash](const auto& e) { return e.first == hash; });
    if (op == ops_.end()) return py::none();
    bool wants_work = true;
    if (has_async_op_) wants_work = checked_value(PyObject_IsTrue(attr(opts.ptr(), names().async_op).ptr())) != 0;
    void* data = PyLong_AsVoidPtr(call(t, names().data_ptr).ptr());
    if (data == nullptr && PyErr_Occurred() != nullptr) throw py::error_already_set();
    const Py_ssize_t count = checked_value(PyLong_AsSsize_t(call(t, names().numel).ptr()));
    const py::object stream = checked_ref(PyObject_CallOneArg(raw_stream_.ptr(), device_obj_.ptr()));
    const auto handle = checked_value(PyLong_AsLongLong(stream.ptr()));
    if (!comm_->enqueue_all_reduce(data, static_cast<size_t>(count), *dtype, op->second,
                                   static_cast<intptr_t>(handle))) {
      return py::none();
    }
    return py::bool_(wants_work);
  }

 private:
  struct Names {
    PyObject* dtype = PyUnicode_InternFromString("dtype");
    PyObject* is_cuda = PyUnicode_InternFromString("is_cuda");
    PyObject* layout = PyUnicode_InternFromString("layout");
    PyObject* is_contiguous = PyUnicode_InternFromString("is_contiguous");
    PyObject* get_device = PyUnicode_InternFromString("get_device");
    PyObject* data_ptr = PyUnicode_InternFromString("data_ptr");
    PyObject* numel = PyUnicode_InternFromString("numel");
    PyObject* reduce_op = PyUnicode_InternFromString("reduceOp");
    PyObject* async_op = PyUnicode_InternFromString("asyncOp");
  };
  /// The attribute names, interned once (made with the GIL held, at the first construction; never freed).
  static const Names& names() {
    static const Names* n = new Names();  // NOLINT(cppcoreguidelines-owning-memory) - lives as long as the module
    return *n;
  }

  static py::object attr(PyObject* o, PyObject* name) { return checked_ref(PyObject_GetAttr(o, name)); }
  static py::object call(PyObject* o, PyObject* name) { return checked_ref(PyObject_CallMethodNoArgs(o, name)); }

  const DataType* dtype_of(PyObject* dtype) const {
    for (const auto& [key, value] : dtypes_) {
      if (key.ptr() == dtype) return &value;
    }
    return nullptr;
  }

  py::object comm_obj_;  ///< keeps comm_ alive
  PyCommunicator* comm_;
  int device_;
  py::object device_obj_;
  py::object tensor_type_, options_type_, strided_, raw_stream_;
  bool has_async_op_;
  std::vector<std::pair<py::object, DataType>> dtypes_;
  std::vector<std::pair<Py_hash_t, ReduceOp>> ops_;
};

}  // namespace
}  // namespace symcomm::python

PYBIND11_MODULE(_core, m) {
  using namespace symcomm;          // NOLINT(google-build-using-namespace)
  using namespace symcomm::python;  // NOLINT(google-build-using-namespace)
  m.doc() =
      "symcomm collectives for NumPy arrays (host backend) and CUDA arrays (CUDA backend); use the package symcomm";

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
      set_python_error(g_error_type, e);
    }
  });

  py::enum_<ReduceOp>(m, "ReduceOp", "Reduction operators (AVG: integer division for integer dtypes).")
      .value("SUM", ReduceOp::kSum)
      .value("PROD", ReduceOp::kProd)
      .value("MIN", ReduceOp::kMin)
      .value("MAX", ReduceOp::kMax)
      .value("AVG", ReduceOp::kAvg);

  m.def(
      "backends",
      [] {
        std::vector<std::string> built;
        for (BackendKind kind : {BackendKind::kHost, BackendKind::kCuda}) {
          if (Communicator::backend_built(kind)) built.emplace_back(to_string(kind));
        }
        return built;
      },
      "The backends this build of symcomm has ('host', and 'cuda' where nvcc was found at build time).");

  m.attr("SPLIT_NOCOLOR") = kSplitNoColor;

  py::class_<PyHeapBuffer>(m, "HeapBuffer")
      .def_readonly("ptr", &PyHeapBuffer::ptr)
      .def_readonly("nbytes", &PyHeapBuffer::nbytes)
      .def_readonly("device", &PyHeapBuffer::device)
      .def_readonly("peer", &PyHeapBuffer::peer)
      .def_property_readonly("__cuda_array_interface__",
                             [](const PyHeapBuffer& b) {
                               if (!b.cuda) throw py::attribute_error("a host-backend HeapBuffer is host memory");
                               return b.interface();
                             })
      .def_property_readonly("__array_interface__", [](const PyHeapBuffer& b) {
        if (b.cuda) throw py::attribute_error("a CUDA-backend HeapBuffer is device memory");
        return b.interface();
      });

  py::class_<PyWork>(m, "Work")
      .def("is_completed", &PyWork::is_completed)
      .def("wait", &PyWork::wait)
      .def("wait_for", &PyWork::wait_for, py::arg("seconds"))
      .def("result", &PyWork::result);

  py::class_<PyCommunicator>(m, "Communicator")
      .def_static("from_env", &PyCommunicator::from_env, py::arg("backend") = "host", py::arg("device") = -1)
      .def_static("create", &PyCommunicator::create, py::arg("rank"), py::arg("world_size"), py::arg("token"),
                  py::arg("host") = "127.0.0.1", py::arg("port") = 0, py::arg("on_store_started") = py::none(),
                  py::arg("backend") = "host", py::arg("device") = -1, py::arg("timeout_ms") = 0)
      .def_property_readonly("rank", &PyCommunicator::rank)
      .def_property_readonly("world_size", &PyCommunicator::world_size)
      .def_property_readonly("backend", &PyCommunicator::backend)
      .def_property_readonly("device", &PyCommunicator::device)
      .def_property_readonly("closed", &PyCommunicator::closed)
      .def("all_reduce", &PyCommunicator::all_reduce, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("async_op"),
           py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "", py::arg("contention") = "")
      .def("all_gather", &PyCommunicator::all_gather, py::arg("x"), py::arg("out"), py::arg("async_op"),
           py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "", py::arg("contention") = "")
      .def("reduce_scatter", &PyCommunicator::reduce_scatter, py::arg("x"), py::arg("out"), py::arg("op"),
           py::arg("async_op"), py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "",
           py::arg("contention") = "")
      .def("broadcast", &PyCommunicator::broadcast, py::arg("x"), py::arg("out"), py::arg("root"), py::arg("async_op"),
           py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "", py::arg("contention") = "")
      .def("all_to_all", &PyCommunicator::all_to_all, py::arg("x"), py::arg("out"), py::arg("async_op"),
           py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "", py::arg("contention") = "")
      .def("send", &PyCommunicator::send, py::arg("x"), py::arg("peer"), py::arg("async_op"), py::arg("dtype") = "")
      .def("recv", &PyCommunicator::recv, py::arg("out"), py::arg("peer"), py::arg("async_op"), py::arg("dtype") = "")
      .def("barrier", &PyCommunicator::barrier, py::arg("async_op"), py::arg("stream") = py::none())
      .def("check", &PyCommunicator::check)
      .def("all_gather_matmul", &PyCommunicator::all_gather_matmul, py::arg("a_shard"), py::arg("bs"),
           py::arg("gather_dim"), py::arg("outs"), py::arg("a_gathered") = py::none(), py::arg("dtype") = "",
           py::arg("stream") = py::none())
      .def("matmul_reduce_scatter", &PyCommunicator::matmul_reduce_scatter, py::arg("a"), py::arg("b"), py::arg("op"),
           py::arg("scatter_dim"), py::arg("out"), py::arg("dtype") = "", py::arg("stream") = py::none())
      .def("alloc", &PyCommunicator::alloc, py::arg("nbytes"))
      .def("free", &PyCommunicator::free, py::arg("buffer"))
      .def("peer_buffer", &PyCommunicator::peer_buffer, py::arg("buffer"), py::arg("peer"),
           py::arg("nbytes") = py::none())
      .def("group_start", &PyCommunicator::group_start)
      .def("group_end", &PyCommunicator::group_end)
      .def("group_cancel", &PyCommunicator::group_cancel)
      .def("group_end_async", &PyCommunicator::group_end_async)
      .def("split", &PyCommunicator::split, py::arg("color"), py::arg("key") = py::none())
      .def("abort", &PyCommunicator::abort)
      .def("close", &PyCommunicator::close)
      .def(
          "bucketer",
          [](PyCommunicator& c, double bucket_cap_mb) {
            return PyBucketer{&c, c.bucketer_new(bucket_cap_mb)};
          },
          py::arg("bucket_cap_mb") = 25.0, py::keep_alive<0, 1>());

  py::class_<TorchAllReduce>(m, "_TorchAllReduce")
      .def(py::init<py::object, int, py::object, py::object, py::object, const py::dict&, const py::dict&, py::object,
                    bool>(),
           py::arg("comm"), py::arg("device"), py::arg("tensor_type"), py::arg("options_type"), py::arg("strided"),
           py::arg("dtypes"), py::arg("ops"), py::arg("raw_stream"), py::arg("has_async_op"))
      .def("__call__", &TorchAllReduce::operator(), py::arg("tensors"), py::arg("opts"));

  py::class_<PyBucketer>(m, "ReduceScatterBucketer")
      .def(
          "reduce_scatter_async",
          [](PyBucketer& b, const py::handle& input, py::object callback_fn, ReduceOp op, const std::string& dtype,
             const py::object& stream) {
            b.comm->bucketer_record(b.open(), input, std::move(callback_fn), op, dtype, stream);
          },
          py::arg("input"), py::arg("callback_fn"), py::arg("op") = ReduceOp::kSum, py::arg("dtype") = "",
          py::arg("stream") = py::none())
      .def("flush", [](PyBucketer& b) { b.comm->bucketer_flush(b.open()); })
      .def("teardown", [](PyBucketer& b) { b.comm->bucketer_teardown(b.open()); })
      .def("close", [](PyBucketer& b) { b.comm->bucketer_close(b.state); })
      .def_property_readonly("closed", [](const PyBucketer& b) { return !b.comm->bucketer_open(b.state); })
      .def_property_readonly("pending", [](PyBucketer& b) { return b.open()->bucketer().pending(); })
      .def_property_readonly("bucket_bytes_per_rank",
                             [](PyBucketer& b) { return b.open()->bucketer().bucket_bytes_per_rank(); });

  bind_cuda_multinode(m);
}
