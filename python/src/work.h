#pragma once
// What symcomm's Python modules (symcomm._core, symcomm._mpi) keep of their calls in flight: the Work handed to
// Python (symcomm._core.Work, registered by symcomm._core), and the arrays each call uses until it is over
// (NOTE [python buffers]).

#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "symcomm/communicator.h"
#include "symcomm/error.h"

namespace symcomm::python {

namespace py = pybind11;

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

/// Waits for every Work, ignoring their errors (they belong to the Works' owners; the calls are over): before a
/// communicator is destroyed. Called without the GIL.
inline void wait_quietly(const std::vector<std::shared_ptr<Work>>& works) {
  for (const auto& w : works) {
    try {
      w->wait();
    } catch (const std::exception&) {
    }
  }
}

/// The arrays of one communicator's calls in flight: those of `*_async` calls until their Work has completed, those
/// of calls recorded in a group until its outermost level has ended (or, for group_end_async(), until the group's
/// Work has completed). Used with the GIL held.
class InFlight {
 public:
  /// Before a call: drops the arrays of completed `*_async` calls. Inside a group it does nothing: the Works of
  /// calls recorded there cannot be asked before the group ends.
  void prune() {
    if (depth_ > 0) return;
    std::erase_if(pending_, [](const std::shared_ptr<Pending>& p) {
      if (!p->work->is_completed()) return false;
      p->keep.clear();
      return true;
    });
  }

  /// After a call was issued: keeps `arrays` for as long as it may use them; returns `result`, or for an
  /// asynchronous call (`work` not null) a symcomm._core.Work whose wait() returns it.
  py::object issued(std::vector<py::object> arrays, std::shared_ptr<Work> work, py::object result) {
    if (depth_ > 0) {
      for (auto& a : arrays) group_keep_.push_back(a);
    }
    if (!work) return result;
    auto pending = std::make_shared<Pending>(Pending{std::move(work), std::move(arrays)});
    pending_.push_back(pending);
    return py::cast(PyWork(std::move(pending), std::move(result)));
  }

  void group_started() { ++depth_; }
  /// Whether a group is open (its calls keep their arrays until it ends).
  bool in_group() const { return depth_ > 0; }

  /// Ends a group level with `end` (returning the group's Work, or null): an error other than kInvalidArgument
  /// ended the level all the same. Returns the Work of an asynchronous end (`async`), which keeps the group's
  /// arrays, else None.
  template <class F>
  py::object end_group(F&& end, bool async) {
    std::vector<py::object> keep = async && depth_ == 1 ? group_keep_ : std::vector<py::object>{};
    std::shared_ptr<Work> work;
    try {
      work = end();
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument) level_ended();
      throw;
    }
    level_ended();
    if (!async) return py::none();
    return issued(std::move(keep), std::move(work), py::none());
  }

  /// The Works of the calls still in flight.
  std::vector<std::shared_ptr<Work>> works() const {
    std::vector<std::shared_ptr<Work>> out;
    for (const auto& p : pending_) out.push_back(p->work);
    return out;
  }

  void clear() {
    pending_.clear();
    group_keep_.clear();
    depth_ = 0;
  }

 private:
  void level_ended() {
    if (depth_ > 0 && --depth_ == 0) group_keep_.clear();
  }

  std::vector<std::shared_ptr<Pending>> pending_;
  std::vector<py::object> group_keep_;
  int depth_ = 0;
};

}  // namespace symcomm::python
