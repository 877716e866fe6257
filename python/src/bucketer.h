#pragma once
// symcomm._core.ReduceScatterBucketer's state: symcomm::ReduceScatterBucketer (include/symcomm/bucketer.h) for
// Python callbacks.
//
// NOTE [python bucketer]
// - The C++ bucketer calls its callbacks inside its calls, where the GIL is released and the communicator's lock
//   is held: a Python callback there could neither run nor call a collective. So each C++ callback only notes
//   (which call, result pointer, count), and the Python callbacks run once the C++ call has returned, in the
//   order the results came, with a view of each result: a NumPy array on the host backend (bfloat16 as int16
//   bits), a HeapBuffer of its bytes on the CUDA backend (ready in the order of the call's stream). A view is
//   valid until its bucket is flushed again or torn down; the first exception of a callback is raised after the
//   others have run.
// - An input stays referenced until its result has been delivered: the bucketer reads it at the flush.
// - The bucket memory lies in the symmetric heap and is freed collectively: by close() (every rank alike) or when
//   the communicator is closed, never by garbage collection.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "buffers.h"
#include "symcomm/bucketer.h"

namespace symcomm::python {

/// The NumPy dtype of a host result view.
inline py::dtype numpy_dtype(DataType d) {
  switch (d) {
    case DataType::kFloat16: return py::dtype("float16");
    case DataType::kBFloat16: return py::dtype("int16");
    case DataType::kFloat32: return py::dtype("float32");
    case DataType::kFloat64: return py::dtype("float64");
    case DataType::kInt8: return py::dtype("int8");
    case DataType::kUInt8: return py::dtype("uint8");
    case DataType::kInt32: return py::dtype("int32");
    case DataType::kInt64: return py::dtype("int64");
  }
  throw py::value_error("no NumPy dtype for this element type");
}

class PyBucketerState {
 public:
  /// A view of `count` elements of `dtype` at `ptr`, as the callbacks get it (NOTE [python bucketer]).
  using MakeView = py::object (*)(const void* ptr, size_t count, DataType dtype, int device);

  PyBucketerState(Communicator& comm, double bucket_cap_mb, MakeView make_view, int device)
      : bucketer_(comm, BucketOptions{.bucket_cap_mb = bucket_cap_mb}), make_view_(make_view), device_(device) {}

  /// Records `in` (world_size * count elements) for `callback`; `issue(f)` runs f(bucketer) under the
  /// communicator's lock without the GIL.
  template <class Issue>
  void record(Issue&& issue, const Buffer& in, size_t count, ReduceOp op, py::object callback,
              const CollOptions& options) {
    if (!PyCallable_Check(callback.ptr())) throw py::type_error("callback_fn must be callable");
    const uint64_t id = next_++;
    waiting_[id] = Waiting{.callback = std::move(callback), .keep = refs({&in}), .dtype = in.dtype};
    try {
      issue([&](ReduceScatterBucketer& b) {
        b.reduce_scatter_async(
            in.data(), count, in.dtype, op,
            [this, id](const void* result, size_t n) { ready_.emplace_back(id, result, n); }, options);
      });
    } catch (const Error& e) {
      waiting_.erase(id);  // this input was not recorded
      after_failure(e);
      throw;
    }
    deliver();
  }

  template <class Issue>
  void flush(Issue&& issue) {
    try {
      issue([](ReduceScatterBucketer& b) { b.flush(); });
    } catch (const Error& e) {
      after_failure(e);
      throw;
    }
    deliver();
  }

  ReduceScatterBucketer& bucketer() { return bucketer_; }
  size_t waiting() const { return waiting_.size(); }

  /// Drops the Python objects it holds (the callbacks and inputs not yet delivered): called with the GIL held
  /// before the state is destroyed without it (closing frees the bucket memory under the communicator's lock).
  void forget() {
    waiting_.clear();
    ready_.clear();
  }

 private:
  struct Waiting {
    py::object callback;
    std::vector<py::object> keep;
    DataType dtype;
  };

  /// Runs the Python callbacks of the results noted since the last delivery; raises the first exception.
  void deliver() {
    std::vector<std::tuple<uint64_t, const void*, size_t>> ready;
    ready.swap(ready_);
    std::unique_ptr<py::error_already_set> error;
    for (const auto& [id, result, count] : ready) {
      auto it = waiting_.find(id);
      if (it == waiting_.end()) continue;
      Waiting w = std::move(it->second);
      waiting_.erase(it);
      try {
        w.callback(make_view_(result, count, w.dtype, device_));
      } catch (py::error_already_set& e) {
        if (!error) error = std::make_unique<py::error_already_set>(std::move(e));
      }
    }
    if (error) throw std::move(*error);
  }

  /// After a call failed with `e`: delivers what completed before (the failure is the error raised); a failure
  /// other than a refused argument leaves the communicator failed, so the other results will not come.
  void after_failure(const Error& e) {
    try {
      deliver();
    } catch (py::error_already_set&) {
    }
    if (e.code() != ErrorCode::kInvalidArgument) waiting_.clear();
  }

  ReduceScatterBucketer bucketer_;
  MakeView make_view_;
  int device_;
  std::map<uint64_t, Waiting> waiting_;
  std::vector<std::tuple<uint64_t, const void*, size_t>> ready_;  ///< noted by the C++ callbacks
  uint64_t next_ = 0;
};

}  // namespace symcomm::python
