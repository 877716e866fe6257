#pragma once
// The array arguments of symcomm's Python modules (symcomm._core, symcomm._mpi): every check that runs before the
// library is called, and the translation of symcomm::Error into symcomm.Error.
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

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "symcomm/error.h"
#include "symcomm/node_path.h"
#include "symcomm/types.h"

namespace symcomm::python {

namespace py = pybind11;

/// "invalid argument" -> "invalid_argument".
inline std::string code_name(ErrorCode code) {
  std::string s(to_string(code));
  for (char& c : s) {
    if (c == ' ') c = '_';
  }
  return s;
}

inline std::string type_name(const py::handle& o) { return py::str(py::type::handle_of(o).attr("__name__")); }

/// "float32", or "float32 (byte order >)" outside the native byte order.
inline std::string dtype_name(const py::dtype& d) {
  std::string name = d.attr("name").cast<std::string>();
  if (!d.attr("isnative").cast<bool>()) name += " (byte order " + d.attr("byteorder").cast<std::string>() + ")";
  return name;
}

/// The DataType of a NumPy dtype; TypeError for one symcomm has no type for.
inline DataType data_type(const py::dtype& d, const char* what) {
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
inline DataType array_type(const py::array& a, const char* what, const std::string& as_dtype) {
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
inline Buffer checked_numpy(const py::handle& o, const char* what, bool writeable, const std::string& as_dtype) {
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
inline std::optional<DataType> typestr_type(const std::string& t) {
  if (t.size() < 3 || (t[0] != '<' && t[0] != '|' && t[0] != '=')) return std::nullopt;
  const std::string kind_size = t.substr(1);
  for (auto [name, dtype] :
       {std::pair{"f2", DataType::kFloat16}, std::pair{"f4", DataType::kFloat32}, std::pair{"f8", DataType::kFloat64},
        std::pair{"i1", DataType::kInt8}, std::pair{"u1", DataType::kUInt8}, std::pair{"i4", DataType::kInt32},
        std::pair{"i8", DataType::kInt64}}) {
    if (kind_size == name) return dtype;
  }
  return std::nullopt;
}

/// A __cuda_array_interface__ argument (CUDA backend): data pointer, shape, type, C-contiguity, stream.
inline Buffer checked_cuda_interface(const py::handle& o, const char* what, bool writeable,
                                     const std::string& as_dtype) {
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
  } else if (typestr.size() != 3 || typestr[0] == '>' || (typestr[1] != 'i' && typestr[1] != 'u') ||
             typestr[2] != '2') {
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
inline Buffer checked_pointer(const py::tuple& t, const char* what, const std::string& as_dtype) {
  std::optional<DataType> dtype = parse_dtype(as_dtype);
  if (as_dtype.empty() || !dtype) {
    throw py::value_error(std::string(what) +
                          ": a (pointer, count) pair needs dtype, one of float16, bfloat16, "
                          "float32, float64, int8, uint8, int32, int64 (got '" +
                          as_dtype + "')");
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
// Buffer::keep holds that for as long as the call holds the array. On the CUDA backend `stream` names the stream the
// call will run on (the protocol's numbering: 1 the legacy default stream, 2 the per-thread one, else a cudaStream_t),
// so the producer orders its pending work on that memory before it. DLPack 0.6 has no read-only flag; NumPy refuses to
// export a read-only array instead.

/// The DataType of a DLPack element type; nullopt for one symcomm has no type for. With `as_dtype` "bfloat16",
/// 16-bit integers hold bfloat16 bits (as for NumPy arrays).
inline std::optional<DataType> dlpack_type(DLDataType t, const std::string& as_dtype) {
  if (t.lanes != 1) return std::nullopt;
  if (as_dtype == "bfloat16") {
    return (t.code == kDLInt || t.code == kDLUInt) && t.bits == 16 ? std::optional(DataType::kBFloat16) : std::nullopt;
  }
  for (auto [code, bits, dtype] :
       {std::tuple{kDLFloat, 16, DataType::kFloat16}, std::tuple{kDLFloat, 32, DataType::kFloat32},
        std::tuple{kDLFloat, 64, DataType::kFloat64}, std::tuple{kDLBfloat, 16, DataType::kBFloat16},
        std::tuple{kDLInt, 8, DataType::kInt8}, std::tuple{kDLInt, 32, DataType::kInt32},
        std::tuple{kDLInt, 64, DataType::kInt64}, std::tuple{kDLUInt, 8, DataType::kUInt8}}) {
    if (t.code == static_cast<uint8_t>(code) && t.bits == bits) return dtype;
  }
  return std::nullopt;
}

/// "float32", "bfloat16", "uint16", ... of a DLPack element type, for errors.
inline std::string dlpack_type_name(DLDataType t) {
  const char* kind = t.code == kDLInt       ? "int"
                     : t.code == kDLUInt    ? "uint"
                     : t.code == kDLFloat   ? "float"
                     : t.code == kDLBfloat  ? "bfloat"
                     : t.code == kDLComplex ? "complex"
                                            : "code ";
  std::string name = kind + std::to_string(t.bits);
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

/// An object with __dlpack__ (NOTE [python dlpack]): its memory must be host memory on the host backend
/// (`cuda` false), GPU memory on the CUDA backend.
inline Buffer checked_dlpack(const py::handle& o, const char* what, const std::string& as_dtype, bool cuda,
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
inline Buffer checked(const py::handle& o, const char* what, bool writeable, const std::string& as_dtype, bool cuda,
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
    throw py::type_error(std::string(what) +
                         ": expected a numpy.ndarray, an object with __array_interface__ or a "
                         "CPU tensor with __dlpack__ on the host backend, got " +
                         type_name(o));
  }
  if (py::isinstance<py::tuple>(o) && py::len(o) == 2) {
    return checked_pointer(py::reinterpret_borrow<py::tuple>(o), what, as_dtype);
  }
  if (py::hasattr(o, "__cuda_array_interface__")) return checked_cuda_interface(o, what, writeable, as_dtype);
  if (py::hasattr(o, "__dlpack__")) return checked_dlpack(o, what, as_dtype, true, stream);
  throw py::type_error(std::string(what) +
                       ": expected a CUDA array (an object with __cuda_array_interface__ or "
                       "__dlpack__, such as a torch CUDA tensor or a CuPy array) on the CUDA backend, got " +
                       type_name(o));
}

/// Checks the output `out` against the input: same dtype, `count` elements.
inline Buffer checked_output(const py::handle& out, const Buffer& in, size_t count, const char* rule,
                             const std::string& as_dtype, bool cuda, const py::object& stream = py::none()) {
  Buffer b = checked(out, "out", true, as_dtype, cuda, stream);
  if (b.dtype != in.dtype)
    throw py::type_error("out: dtype " + b.type_label + " differs from the input's " + in.type_label);
  if (b.count != count) {
    throw py::value_error("out: " + std::to_string(b.count) + " elements, expected " + std::to_string(count) + " (" +
                          rule + ")");
  }
  return b;
}

/// The TensorRef (include/symcomm/fused.h) of a checked array: its data, dtype and shape.

/// What a call must keep referenced while it uses these buffers: each one's array and what else it holds.
inline std::vector<py::object> refs(std::initializer_list<const Buffer*> buffers) {
  std::vector<py::object> out;
  for (const Buffer* b : buffers) {
    out.push_back(b->owner);
    if (b->keep && !b->keep.is_none()) out.push_back(b->keep);
  }
  return out;
}

/// Refuses `in` (ValueError) unless the world size divides its element count.
inline void check_divisible(const Buffer& in, int world_size, const char* what = "x") {
  if (in.count % world_size != 0) {
    throw py::value_error(std::string(what) + ": " + std::to_string(in.count) +
                          " elements are not divisible by the world size " + std::to_string(world_size));
  }
}

/// The `hierarchy` argument of the calls of a communicator that spans nodes.
inline Hierarchy parse_hierarchy(const std::string& h) {
  if (h == "auto") return Hierarchy::kAuto;
  if (h == "hierarchical") return Hierarchy::kHierarchical;
  if (h == "flat") return Hierarchy::kFlat;
  throw py::value_error("hierarchy '" + h + "' is unknown (auto, hierarchical, flat)");
}

/// Raises symcomm.Error (`type`, made by symcomm._core) for `e`: code ("peer_dead", ...), message and ranks.
inline void set_python_error(PyObject* type, const Error& e) {
  py::object cls = py::reinterpret_borrow<py::object>(type);
  py::object exc = cls(py::str(e.what()));
  exc.attr("code") = code_name(e.code());
  exc.attr("ranks") = py::cast(e.ranks());
  exc.attr("message") = py::str(e.message());
  PyErr_SetObject(type, exc.ptr());
}

}  // namespace symcomm::python
