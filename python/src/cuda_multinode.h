#pragma once
// symcomm._core.CudaMultiNodeCommunicator (cuda_multinode.cc), added to the module by module.cc.
#include <pybind11/pybind11.h>

namespace symcomm::python {

namespace py = pybind11;

/// Adds the class CudaMultiNodeCommunicator to `m`.
void bind_cuda_multinode(py::module_& m);

}  // namespace symcomm::python
