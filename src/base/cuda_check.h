#pragma once
// Check macros for the CUDA runtime, the CUDA driver (through the DriverApi table) and NCCL. Each turns a
// failure into symcomm::Error(kCuda) naming the call, the error name and its description. The throwing
// happens out of line (cuda_check_cuda.cc), so these macros also work in .cu files, where nvcc cannot
// evaluate fmt's compile-time format checks.

#include <cuda_runtime_api.h>

#include <new>

#include "base/device_switch.h"

namespace symcomm::detail {
[[noreturn]] void throw_cuda_error(int err, const char* expr, const char* file, int line);
[[noreturn]] void throw_driver_error(int res, const char* expr, const char* file, int line);
[[noreturn]] void throw_nccl_error(int res, const char* expr, const char* file, int line);
/// True while `s` is being captured into a CUDA graph (false, with the error cleared, if the query fails).
bool stream_capturing(cudaStream_t s);

/// NOTE [caller's device] Makes `device` the calling thread's current device for the scope and gives the
/// thread its own device back at the end. Every entry point of the CUDA backend that makes CUDA calls holds
/// one: a caller whose current device is another GPU (a second thread, which starts on device 0; a process
/// driving GPUs in turn) gets its kernels, events and syncs on the communicator's device, and its own current
/// device unchanged afterwards (NCCL's calls leave it unchanged too). Only creation leaves the communicator's
/// device current (Communicator::create documents it). Cheap where the device is already current (one
/// cudaGetDevice).
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  /// For destructors: a device that cannot be made current is logged, not thrown.
  DeviceScope(int device, std::nothrow_t);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  DeviceSwitch switch_;
};
}  // namespace symcomm::detail

/// Throws Error(kCuda) if a CUDA runtime call does not return cudaSuccess.
#define SYMCOMM_CUDA_CHECK(expr)                                                                           \
  do {                                                                                                     \
    cudaError_t symcomm_cuda_err_ = (expr);                                                                \
    if (symcomm_cuda_err_ != cudaSuccess) {                                                                \
      ::symcomm::detail::throw_cuda_error(static_cast<int>(symcomm_cuda_err_), #expr, __FILE__, __LINE__); \
    }                                                                                                      \
  } while (0)

/// Throws Error(kCuda) if a CUDA driver call (made through symcomm::detail::driver()) does not return
/// CUDA_SUCCESS.
#define SYMCOMM_CU_CHECK(expr)                                                           \
  do {                                                                                   \
    int symcomm_cu_err_ = static_cast<int>(expr);                                        \
    if (symcomm_cu_err_ != 0) {                                                          \
      ::symcomm::detail::throw_driver_error(symcomm_cu_err_, #expr, __FILE__, __LINE__); \
    }                                                                                    \
  } while (0)

/// Throws Error(kCuda) if an NCCL call does not return ncclSuccess.
#define SYMCOMM_NCCL_CHECK(expr)                                                         \
  do {                                                                                   \
    int symcomm_nccl_err_ = static_cast<int>(expr);                                      \
    if (symcomm_nccl_err_ != 0) {                                                        \
      ::symcomm::detail::throw_nccl_error(symcomm_nccl_err_, #expr, __FILE__, __LINE__); \
    }                                                                                    \
  } while (0)
