// symcomm._core: symcomm::Communicator for NumPy arrays on the host backend and CUDA arrays on the CUDA backend
// (the package symcomm in python/symcomm wraps it; docs/python.md).
//
// NOTE [python buffers]
// - Every array is checked before the library is called. Host backend: a numpy.ndarray, an object with
//   __array_interface__ (viewed through numpy.asarray, no copy), or an object with __dlpack__ whose memory is on
//   the CPU (a torch CPU tensor, a JAX CPU array); else TypeError. CUDA backend: an object with
//   __cuda_array_interface__ (a torch CUDA tensor, a CuPy or Numba array), an object with __dlpack__ whose memory
//   is on a GPU (else TypeError), or the pair (pointer, count) or (pointer, shape) of ints for wrappers that
//   checked their tensors themselves, with `dtype` naming the element type. Either way of a supported dtype in
//   native byte order (else TypeError), C-contiguous (else ValueError); outputs also writeable and of the
//   input's dtype and the element count the collective needs (else ValueError / TypeError). A failed check runs
//   nothing and leaves the communicator usable, like the library's own Error(kInvalidArgument).
// - DLPack (NOTE [python dlpack]): the exported tensor is held (its deleter runs) until the call no longer uses
//   the memory, like the arrays themselves.
// - CUDA backend: a call is enqueued on `stream` (an int: a cudaStream_t, 0 the legacy default stream; None:
//   the input's interface stream if it names one, else 0) and returns without waiting, like NCCL; the caller
//   keeps the buffers alive until the stream has passed the call (stream-ordered allocators such as torch's
//   and CuPy's do). Work.wait() of an `*_async` call waits for the device work.
// - The GIL is released while the library runs (creation, collectives, waits, close); one mutex per
//   communicator serialises its calls from several Python threads. abort() does not take it, so that another
//   thread can abort a collective that blocks.
// - The arrays of an `*_async` call stay referenced until its Work has completed: by the Work and by the
//   communicator's list of pending calls, which drops completed entries at every call, so a Work the caller
//   discards does not free buffers the collective still uses. Calls recorded in a group keep their arrays
//   until the outermost group level ends (group_end() or group_cancel()). close() waits for pending calls
//   before it destroys the communicator.
#include <dlpack.h>  // libdlpack-dev's, or the one torch ships (python/CMakeLists.txt)
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
  py::object owner;  ///< the array object (kept referenced by `*_async` calls)
  py::object keep;   ///< what else must live while the call uses the memory (a consumed DLPack tensor), or None
  void* ptr = nullptr;
  DataType dtype = DataType::kFloat32;
  size_t count = 0;  ///< elements
  std::vector<int64_t> shape;
  std::string type_label;          ///< the dtype as errors name it
  std::optional<intptr_t> stream;  ///< a CUDA array's interface stream, if it names one

  void* data() const { return ptr; }
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

/// A NumPy array argument (host backend).
Buffer checked_numpy(const py::handle& o, const char* what, bool writeable, const std::string& as_dtype) {
  if (!py::isinstance<py::array>(o)) {
    throw py::type_error(std::string(what) + ": expected a numpy.ndarray, got " + type_name(o));
  }
  auto a = py::reinterpret_borrow<py::array>(o);
  DataType dtype = array_type(a, what, as_dtype);
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(what) + ": the array is not C-contiguous");
  if (writeable && !a.writeable()) throw py::value_error(std::string(what) + ": the array is read-only");
  Buffer b{.owner = a,
           .keep = py::none(),
           .ptr = const_cast<void*>(a.data()),
           .dtype = dtype,
           .count = static_cast<size_t>(a.size()),
           .shape = {},
           .type_label = dtype_name(a.dtype()),
           .stream = std::nullopt};
  for (py::ssize_t i = 0; i < a.ndim(); ++i) b.shape.push_back(static_cast<int64_t>(a.shape(i)));
  return b;
}

/// The DataType of an array-interface type string ("<f4", "|i1", ...); nullopt for one symcomm has no type for.
/// The machines symcomm runs on are little-endian: '<', '|' and '=' are the native byte order.
std::optional<DataType> typestr_type(const std::string& t) {
  if (t.size() < 3 || (t[0] != '<' && t[0] != '|' && t[0] != '=')) return std::nullopt;
  const std::string kind_size = t.substr(1);
  for (auto [name, dtype] : {std::pair{"f2", DataType::kFloat16}, std::pair{"f4", DataType::kFloat32},
                             std::pair{"f8", DataType::kFloat64}, std::pair{"i1", DataType::kInt8},
                             std::pair{"u1", DataType::kUInt8}, std::pair{"i4", DataType::kInt32},
                             std::pair{"i8", DataType::kInt64}}) {
    if (kind_size == name) return dtype;
  }
  return std::nullopt;
}

/// A __cuda_array_interface__ argument (CUDA backend): data pointer, shape, type, C-contiguity, stream.
Buffer checked_cuda_interface(const py::handle& o, const char* what, bool writeable, const std::string& as_dtype) {
  py::dict cai = o.attr("__cuda_array_interface__");
  const std::string typestr = py::str(cai["typestr"]);
  const auto shape = cai["shape"].cast<std::vector<int64_t>>();
  const auto data = cai["data"].cast<std::pair<uintptr_t, bool>>();
  Buffer b{.owner = py::reinterpret_borrow<py::object>(o),
           .keep = py::none(),
           .ptr = reinterpret_cast<void*>(data.first),
           .dtype = DataType::kFloat32,
           .count = 1,
           .shape = shape,
           .type_label = typestr,
           .stream = std::nullopt};
  if (as_dtype.empty()) {
    std::optional<DataType> dtype = typestr_type(typestr);
    if (!dtype) {
      throw py::type_error(std::string(what) + ": type '" + typestr +
                           "' is not supported (float16, float32, float64, int8, uint8, int32, int64 in native byte "
                           "order)");
    }
    b.dtype = *dtype;
  } else if (as_dtype != "bfloat16") {
    throw py::value_error("dtype '" + as_dtype + "' is unknown ('bfloat16', or '' for the array's)");
  } else if (typestr.size() != 3 || typestr[0] == '>' || (typestr[1] != 'i' && typestr[1] != 'u') || typestr[2] != '2') {
    throw py::type_error(std::string(what) + ": dtype bfloat16 needs an int16 or uint16 array, got '" + typestr + "'");
  } else {
    b.dtype = DataType::kBFloat16;
  }
  for (int64_t extent : shape) b.count *= static_cast<size_t>(extent);
  if (cai.contains("strides") && !cai["strides"].is_none() && b.count > 0) {
    const auto strides = cai["strides"].cast<std::vector<int64_t>>();
    int64_t expected = static_cast<int64_t>(dtype_size(b.dtype));
    for (size_t i = shape.size(); i-- > 0;) {
      if (shape[i] != 1 && (i >= strides.size() || strides[i] != expected)) {
        throw py::value_error(std::string(what) + ": the array is not C-contiguous");
      }
      expected *= shape[i];
    }
  }
  if (writeable && data.second) throw py::value_error(std::string(what) + ": the array is read-only");
  if (cai.contains("stream") && !cai["stream"].is_none()) b.stream = cai["stream"].cast<intptr_t>();
  return b;
}

/// A (pointer, count) or (pointer, shape) pair of ints (CUDA backend) with `as_dtype` naming its type.
Buffer checked_pointer(const py::tuple& t, const char* what, const std::string& as_dtype) {
  std::optional<DataType> dtype = parse_dtype(as_dtype);
  if (as_dtype.empty() || !dtype) {
    throw py::value_error(std::string(what) + ": a (pointer, count) pair needs dtype, one of float16, bfloat16, "
                          "float32, float64, int8, uint8, int32, int64 (got '" + as_dtype + "')");
  }
  Buffer b{.owner = t,
           .keep = py::none(),
           .ptr = reinterpret_cast<void*>(t[0].cast<uintptr_t>()),
           .dtype = *dtype,
           .count = 1,
           .shape = {},
           .type_label = std::string(to_string(*dtype)),
           .stream = std::nullopt};
  if (py::isinstance<py::int_>(t[1])) {
    b.shape.push_back(t[1].cast<int64_t>());
  } else {
    b.shape = t[1].cast<std::vector<int64_t>>();
  }
  for (int64_t extent : b.shape) {
    if (extent < 0) throw py::value_error(std::string(what) + ": negative extent " + std::to_string(extent));
    b.count *= static_cast<size_t>(extent);
  }
  if (b.ptr == nullptr && b.count > 0) throw py::value_error(std::string(what) + ": null pointer");
  return b;
}

// NOTE [python dlpack]
// An object with __dlpack__ is asked for a DLPack tensor (the unversioned capsule "dltensor", which every
// producer still gives when no max_version is passed). The capsule is renamed "used_dltensor", as the protocol
// asks of a consumer, and its DLManagedTensor's deleter runs when a capsule of this module that owns it dies:
// Buffer::keep holds that for as long as the call holds the array. On the CUDA backend `stream` names the stream the call will
// run on (the protocol's numbering: 1 the legacy default stream, 2 the per-thread one, else a cudaStream_t), so
// the producer orders its pending work on that memory before it. DLPack 0.6 has no read-only flag; NumPy refuses
// to export a read-only array instead.

/// The DataType of a DLPack element type; nullopt for one symcomm has no type for. With `as_dtype` "bfloat16",
/// 16-bit integers hold bfloat16 bits (as for NumPy arrays).
std::optional<DataType> dlpack_type(DLDataType t, const std::string& as_dtype) {
  if (t.lanes != 1) return std::nullopt;
  if (as_dtype == "bfloat16") {
    return (t.code == kDLInt || t.code == kDLUInt) && t.bits == 16 ? std::optional(DataType::kBFloat16) : std::nullopt;
  }
  for (auto [code, bits, dtype] : {std::tuple{kDLFloat, 16, DataType::kFloat16}, std::tuple{kDLFloat, 32, DataType::kFloat32},
                                   std::tuple{kDLFloat, 64, DataType::kFloat64}, std::tuple{kDLBfloat, 16, DataType::kBFloat16},
                                   std::tuple{kDLInt, 8, DataType::kInt8}, std::tuple{kDLInt, 32, DataType::kInt32},
                                   std::tuple{kDLInt, 64, DataType::kInt64}, std::tuple{kDLUInt, 8, DataType::kUInt8}}) {
    if (t.code == static_cast<uint8_t>(code) && t.bits == bits) return dtype;
  }
  return std::nullopt;
}

/// "float32", "bfloat16", "uint16", ... of a DLPack element type, for errors.
std::string dlpack_type_name(DLDataType t) {
  const char* kind = t.code == kDLInt     ? "int"
                     : t.code == kDLUInt  ? "uint"
                     : t.code == kDLFloat ? "float"
                     : t.code == kDLBfloat ? "bfloat"
                     : t.code == kDLComplex ? "complex"
                                           : "code " ;
  std::string name = kind + std::to_string(t.bits);
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

/// An object with __dlpack__ (NOTE [python dlpack]): its memory must be host memory on the host backend
/// (`cuda` false), GPU memory on the CUDA backend.
Buffer checked_dlpack(const py::handle& o, const char* what, const std::string& as_dtype, bool cuda,
                      const py::object& stream) {
  if (!as_dtype.empty() && as_dtype != "bfloat16")
    throw py::value_error("dtype '" + as_dtype + "' is unknown ('bfloat16', or '' for the array's)");
  // The protocol's __dlpack_device__ tells where the memory is before a stream is handed to the producer.
  auto where = [&](int device_type) {
    const bool host = device_type == kDLCPU || device_type == kDLCUDAHost;
    const bool gpu = device_type == kDLCUDA || device_type == kDLCUDAManaged;
    if (cuda ? !gpu : !host) {
      throw py::type_error(std::string(what) + ": the DLPack tensor of " + type_name(o) + " is in " +
                           (host ? "host" : "device") + " memory (device type " + std::to_string(device_type) +
                           "); the " + (cuda ? "CUDA backend needs GPU memory" : "host backend needs host memory"));
    }
  };
  if (py::hasattr(o, "__dlpack_device__")) where(o.attr("__dlpack_device__")().cast<std::pair<int, int>>().first);
  py::object capsule;
  if (cuda) {
    intptr_t s = stream.is_none() ? 0 : stream.cast<intptr_t>();
    capsule = o.attr("__dlpack__")(py::arg("stream") = s == 0 ? 1 : s);
  } else {
    capsule = o.attr("__dlpack__")();
  }
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    throw py::type_error(std::string(what) + ": __dlpack__ of " + type_name(o) + " did not give a DLPack tensor");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  // Owns the consumed tensor from here on: its deleter runs when this capsule dies.
  py::capsule guard(managed, [](void* p) {
    auto* tensor = static_cast<DLManagedTensor*>(p);
    if (tensor->deleter != nullptr) tensor->deleter(tensor);
  });
  const DLTensor& t = managed->dl_tensor;
  where(static_cast<int>(t.device.device_type));
  std::optional<DataType> dtype = dlpack_type(t.dtype, as_dtype);
  if (!dtype) {
    throw py::type_error(std::string(what) + ": dtype " + dlpack_type_name(t.dtype) +
                         (as_dtype.empty() ? " is not supported (float16, bfloat16, float32, float64, int8, uint8, "
                                             "int32, int64)"
                                           : " cannot hold bfloat16 (an int16 or uint16 array can)"));
  }
  Buffer b{.owner = py::reinterpret_borrow<py::object>(o),
           .keep = guard,
           .ptr = static_cast<uint8_t*>(t.data) + t.byte_offset,
           .dtype = *dtype,
           .count = 1,
           .shape = std::vector<int64_t>(t.shape, t.shape + t.ndim),
           .type_label = dlpack_type_name(t.dtype),
           .stream = std::nullopt};
  for (int64_t extent : b.shape) b.count *= static_cast<size_t>(extent);
  if (t.strides != nullptr && b.count > 0) {
    int64_t expected = 1;
    for (int i = t.ndim; i-- > 0;) {
      if (t.shape[i] != 1 && t.strides[i] != expected) {
        throw py::value_error(std::string(what) + ": the array is not C-contiguous");
      }
      expected *= t.shape[i];
    }
  }
  return b;
}

/// Checks `o` as an input (`writeable` false) or output array of a collective on a communicator of the host
/// (`cuda` false) or the CUDA backend; `stream` is the call's (NOTE [python dlpack]).
Buffer checked(const py::handle& o, const char* what, bool writeable, const std::string& as_dtype, bool cuda,
               const py::object& stream = py::none()) {
  if (!cuda) {
    if (py::isinstance<py::array>(o)) return checked_numpy(o, what, writeable, as_dtype);
    py::module_ numpy = py::module_::import("numpy");
    if (py::isinstance(o, numpy.attr("generic"))) {  // a NumPy scalar is a value, not memory to reduce into
      throw py::type_error(std::string(what) + ": expected an array, got the NumPy scalar " + type_name(o) +
                           " (numpy.asarray() makes a 0-d array of it)");
    }
    if (py::hasattr(o, "__array_interface__")) {
      Buffer b = checked_numpy(numpy.attr("asarray")(o), what, writeable, as_dtype);
      b.keep = b.owner;  // the view; the caller's object is what the call returns
      b.owner = py::reinterpret_borrow<py::object>(o);
      return b;
    }
    if (py::hasattr(o, "__dlpack__")) return checked_dlpack(o, what, as_dtype, false, stream);
    throw py::type_error(std::string(what) + ": expected a numpy.ndarray, an object with __array_interface__ or a "
                         "CPU tensor with __dlpack__ on the host backend, got " + type_name(o));
  }
  if (py::isinstance<py::tuple>(o) && py::len(o) == 2) {
    return checked_pointer(py::reinterpret_borrow<py::tuple>(o), what, as_dtype);
  }
  if (py::hasattr(o, "__cuda_array_interface__")) return checked_cuda_interface(o, what, writeable, as_dtype);
  if (py::hasattr(o, "__dlpack__")) return checked_dlpack(o, what, as_dtype, true, stream);
  throw py::type_error(std::string(what) + ": expected a CUDA array (an object with __cuda_array_interface__ or "
                       "__dlpack__, such as a torch CUDA tensor or a CuPy array) on the CUDA backend, got " +
                       type_name(o));
}

/// Checks the output `out` against the input: same dtype, `count` elements.
Buffer checked_output(const py::handle& out, const Buffer& in, size_t count, const char* rule,
                      const std::string& as_dtype, bool cuda, const py::object& stream = py::none()) {
  Buffer b = checked(out, "out", true, as_dtype, cuda, stream);
  if (b.dtype != in.dtype) throw py::type_error("out: dtype " + b.type_label + " differs from the input's " + in.type_label);
  if (b.count != count) {
    throw py::value_error("out: " + std::to_string(b.count) + " elements, expected " + std::to_string(count) + " (" +
                          rule + ")");
  }
  return b;
}

/// The TensorRef (include/symcomm/fused.h) of a checked array: its data, dtype and shape.
TensorRef tensor_ref(const Buffer& b) { return TensorRef{.data = b.data(), .dtype = b.dtype, .shape = b.shape}; }

/// What a call must keep referenced while it uses these buffers: each one's array and what else it holds.
std::vector<py::object> refs(std::initializer_list<const Buffer*> buffers) {
  std::vector<py::object> out;
  for (const Buffer* b : buffers) {
    out.push_back(b->owner);
    if (b->keep && !b->keep.is_none()) out.push_back(b->keep);
  }
  return out;
}

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
  /// `on_store_started` on rank 0 once the store is up, with the GIL held).
  static std::unique_ptr<PyCommunicator> create(int rank, int world_size, const std::string& token,
                                                const std::string& host, int port, py::object on_store_started,
                                                const std::string& backend, int device) {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      throw py::value_error("rank " + std::to_string(rank) + " is outside [0, world_size " +
                            std::to_string(world_size) + ")");
    }
    if (port < 0 || port > 65535) throw py::value_error("port " + std::to_string(port) + " is outside [0, 65535]");
    CommOptions options = comm_options(backend, device);
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
                        const std::string& as_dtype, const py::object& stream,
                        const std::string& algorithm, const std::string& contention) {
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
                        const py::object& stream,
                        const std::string& algorithm, const std::string& contention) {
    Buffer in = input(x, "x", as_dtype, stream);
    Buffer o = checked_output(out, in, in.count * world_size_, "world_size times the input's count", as_dtype, cuda_,
                              stream);
    const CollOptions opts = coll_options(stream, in, algorithm, contention);
    return submit(refs({&in, &o}), o.owner, async, [&](Communicator& c, bool a) {
      if (a) return c.all_gather_async(in.data(), o.data(), in.count, in.dtype, opts);
      c.all_gather(in.data(), o.data(), in.count, in.dtype, opts);
      return std::shared_ptr<Work>();
    });
  }

  py::object reduce_scatter(const py::handle& x, const py::handle& out, ReduceOp op, bool async,
                            const std::string& as_dtype, const py::object& stream,
                            const std::string& algorithm, const std::string& contention) {
    Buffer in = input(x, "x", as_dtype, stream);
    divisible(in);
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
                       const py::object& stream,
                       const std::string& algorithm, const std::string& contention) {
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
        fused.workspace = workspace(c, all_gather_matmul_workspace_bytes(world_size_, a_ref, gather_dim,
                                                                          gathered.has_value()));
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
                        const py::object& stream,
                        const std::string& algorithm, const std::string& contention) {
    Buffer in = input(x, "x", as_dtype, stream);
    divisible(in);
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
    return PyHeapBuffer{.ptr = reinterpret_cast<uintptr_t>(p), .nbytes = nbytes, .cuda = cuda_, .device = device_,
                        .peer = -1};
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
    return PyHeapBuffer{.ptr = reinterpret_cast<uintptr_t>(q), .nbytes = n, .cuda = cuda_, .device = device_,
                        .peer = peer};
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
  /// Ends the group level like group_end() and returns one Work for every collective of the group; the arrays of
  /// the group stay referenced until it completes (NOTE [python buffers]).
  py::object group_end_async() {
    std::vector<py::object> keep = group_depth_ == 1 ? group_keep_ : std::vector<py::object>{};
    std::shared_ptr<Work> work;
    end_group_level([&work](Communicator& c) { work = c.group_end_async(); });
    auto pending = std::make_shared<Pending>(Pending{std::move(work), std::move(keep)});
    pending_.push_back(pending);
    return py::cast(PyWork(std::move(pending), py::none()));
  }

  /// Communicator::split (collective): the communicator of the ranks that pass `color` (>= 0), ranked by `key`
  /// (None: this rank), ties by rank; None for a rank that passes -1 (symcomm._core.SPLIT_NOCOLOR).
  std::unique_ptr<PyCommunicator> split(int color, std::optional<int> key) {
    std::unique_ptr<Communicator> child =
        locked([&](Communicator& c) { return c.split(color, key.value_or(rank_)); });
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
      workspace_.reset();
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
  Buffer input(const py::handle& o, const char* what, const std::string& as_dtype,
               const py::object& stream = py::none()) const {
    return checked(o, what, false, as_dtype, cuda_, stream);
  }

  void divisible(const Buffer& in) const {
    if (in.count % world_size_ != 0) {
      throw py::value_error("x: " + std::to_string(in.count) + " elements are not divisible by the world size " +
                            std::to_string(world_size_));
    }
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
  int rank_, world_size_, device_;
  bool cuda_;
  std::string backend_;
  std::unique_ptr<FusedWorkspace> workspace_;  ///< guarded by op_mu_ (NOTE [python fused workspace])
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
  m.doc() = "symcomm collectives for NumPy arrays (host backend) and CUDA arrays (CUDA backend); use the package symcomm";

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
                  py::arg("backend") = "host", py::arg("device") = -1)
      .def_property_readonly("rank", &PyCommunicator::rank)
      .def_property_readonly("world_size", &PyCommunicator::world_size)
      .def_property_readonly("backend", &PyCommunicator::backend)
      .def_property_readonly("device", &PyCommunicator::device)
      .def_property_readonly("closed", &PyCommunicator::closed)
      .def("all_reduce", &PyCommunicator::all_reduce, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("async_op"),
           py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "",
           py::arg("contention") = "")
      .def("all_gather", &PyCommunicator::all_gather, py::arg("x"), py::arg("out"), py::arg("async_op"),
           py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "",
           py::arg("contention") = "")
      .def("reduce_scatter", &PyCommunicator::reduce_scatter, py::arg("x"), py::arg("out"), py::arg("op"),
           py::arg("async_op"), py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "",
           py::arg("contention") = "")
      .def("broadcast", &PyCommunicator::broadcast, py::arg("x"), py::arg("out"), py::arg("root"), py::arg("async_op"),
           py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "",
           py::arg("contention") = "")
      .def("all_to_all", &PyCommunicator::all_to_all, py::arg("x"), py::arg("out"), py::arg("async_op"),
           py::arg("dtype") = "", py::arg("stream") = py::none(), py::arg("algorithm") = "",
           py::arg("contention") = "")
      .def("send", &PyCommunicator::send, py::arg("x"), py::arg("peer"), py::arg("async_op"), py::arg("dtype") = "")
      .def("recv", &PyCommunicator::recv, py::arg("out"), py::arg("peer"), py::arg("async_op"), py::arg("dtype") = "")
      .def("barrier", &PyCommunicator::barrier, py::arg("async_op"), py::arg("stream") = py::none())
      .def("check", &PyCommunicator::check)
      .def("all_gather_matmul", &PyCommunicator::all_gather_matmul, py::arg("a_shard"), py::arg("bs"),
           py::arg("gather_dim"), py::arg("outs"), py::arg("a_gathered") = py::none(), py::arg("dtype") = "",
           py::arg("stream") = py::none())
      .def("matmul_reduce_scatter", &PyCommunicator::matmul_reduce_scatter, py::arg("a"), py::arg("b"),
           py::arg("op"), py::arg("scatter_dim"), py::arg("out"), py::arg("dtype") = "",
           py::arg("stream") = py::none())
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
      .def("close", &PyCommunicator::close);
}
