#include <fmt/format.h>
#include <nccl.h>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/driver_api_cuda.h"
#include "base/logging.h"

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

namespace {
// The runtime's calls for DeviceSwitch; a failure's error is cleared from the thread's last error, which
// belongs to the caller (NOTE [launch result] in src/algos/cuda_common.cuh).
int get_device(int* device) {
  const cudaError_t err = cudaGetDevice(device);
  if (err != cudaSuccess) cudaGetLastError();
  return static_cast<int>(err);
}
int set_device(int device) {
  const cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) cudaGetLastError();
  return static_cast<int>(err);
}
constexpr DeviceCalls kRuntime{.get = get_device, .set = set_device};
}  // namespace

DeviceScope::DeviceScope(int device) {
  const int err = switch_.enter(kRuntime, device);
  if (err != 0) throw_cuda_error(err, "cudaSetDevice(device)", __FILE__, __LINE__);
}

DeviceScope::DeviceScope(int device, std::nothrow_t) {
  const int err = switch_.enter(kRuntime, device);
  if (err != 0) {
    SYMCOMM_LOG_WARN("cannot make device {} current ({}); going on with the current one", device,
                     cudaGetErrorString(static_cast<cudaError_t>(err)));
  }
}

DeviceScope::~DeviceScope() { switch_.leave(kRuntime); }

}  // namespace symcomm::detail
