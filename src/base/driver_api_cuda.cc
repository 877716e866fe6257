#include "base/driver_api_cuda.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <mutex>

#include "base/check.h"
#include "base/cuda_check.h"

namespace symcomm::detail {
namespace {

// The ABI version requested for every entry point: the cuMem* virtual memory API is unchanged since 10.2;
// 12000 pins the signatures declared by the 12.x/13.x headers we compile against.
constexpr unsigned int kDriverAbiVersion = 12000;

template <class Fn>
void load(Fn& fn, const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, kDriverAbiVersion, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
    SYMCOMM_THROW(kCuda, "cannot resolve CUDA driver entry point {} (runtime error {}, status {})", name,
                  cudaGetErrorName(err), static_cast<int>(status));
  }
  fn = reinterpret_cast<Fn>(p);
}

DriverApi load_all() {
  DriverApi d;
  load(d.get_error_name, "cuGetErrorName");
  load(d.get_error_string, "cuGetErrorString");
  load(d.mem_create, "cuMemCreate");
  load(d.mem_release, "cuMemRelease");
  load(d.mem_export, "cuMemExportToShareableHandle");
  load(d.mem_import, "cuMemImportFromShareableHandle");
  load(d.mem_address_reserve, "cuMemAddressReserve");
  load(d.mem_address_free, "cuMemAddressFree");
  load(d.mem_map, "cuMemMap");
  load(d.mem_unmap, "cuMemUnmap");
  load(d.mem_set_access, "cuMemSetAccess");
  load(d.mem_get_granularity, "cuMemGetAllocationGranularity");
  load(d.stream_batch_mem_op, "cuStreamBatchMemOp");
  return d;
}

}  // namespace

const DriverApi& driver() {
  // A failed load throws from call_once and leaves it unset, so a later call retries.
  static std::once_flag once;
  static DriverApi table;
  std::call_once(once, [] { table = load_all(); });
  return table;
}

std::string driver_error_string(CUresult r) {
  const char* name = nullptr;
  const char* desc = nullptr;
  const DriverApi& d = driver();
  if (d.get_error_name) d.get_error_name(r, &name);
  if (d.get_error_string) d.get_error_string(r, &desc);
  return fmt::format("{}: {}", name ? name : "CUDA_ERROR_?", desc ? desc : "unknown driver error");
}

}  // namespace symcomm::detail
