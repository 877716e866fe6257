#include <fmt/format.h>
#include <nccl.h>

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/driver_api_cuda.h"
#include "core/logging.h"

namespace symcomm::detail {

void throw_cuda_error(int err, const char* expr, const char* file, int line) {
  auto e = static_cast<cudaError_t>(err);
  throw_error(ErrorCode::kCuda, fmt::format("{} failed: {} ({})", expr, cudaGetErrorName(e), cudaGetErrorString(e)),
              file, line);
}

void throw_driver_error(int res, const char* expr, const char* file, int line) {
  throw_error(ErrorCode::kCuda, fmt::format("{} failed: {}", expr, driver_error_string(static_cast<CUresult>(res))),
              file, line);
}

void throw_nccl_error(int res, const char* expr, const char* file, int line) {
  throw_error(ErrorCode::kCuda, fmt::format("{} failed: {}", expr, ncclGetErrorString(static_cast<ncclResult_t>(res))),
              file, line);
}

bool stream_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return st != cudaStreamCaptureStatusNone;
}

cudaError_t DeviceScope::enter(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  if (current == device) return cudaSuccess;
  const cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return err;
  }
  previous_ = current;
  return cudaSuccess;
}

DeviceScope::DeviceScope(int device) {
  const cudaError_t err = enter(device);
  if (err != cudaSuccess) throw_cuda_error(static_cast<int>(err), "cudaSetDevice(device)", __FILE__, __LINE__);
}

DeviceScope::DeviceScope(int device, std::nothrow_t) {
  const cudaError_t err = enter(device);
  if (err != cudaSuccess) {
    SYMCOMM_LOG_WARN("cannot make device {} current ({}); going on with the current one", device,
                     cudaGetErrorString(err));
  }
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
}

}  // namespace symcomm::detail
