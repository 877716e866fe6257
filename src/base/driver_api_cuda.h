#pragma once
// DriverApi: the CUDA driver functions symcomm uses, reached through cudaGetDriverEntryPointByVersion into
// one table, so that nothing links libcuda directly (the runtime already loaded it). Filled once per process.

#include <cuda.h>

#include <string>

namespace symcomm::detail {

struct DriverApi {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemExportToShareableHandle) mem_export = nullptr;
  decltype(&::cuMemImportFromShareableHandle) mem_import = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_granularity = nullptr;
  /// Stream memory operations (waits and writes of 32-bit words by the GPU front end, no SM involved).
  decltype(&::cuStreamBatchMemOp) stream_batch_mem_op = nullptr;
};

/// The process-wide table (loaded on first use; throws Error(kCuda) if a symbol is missing).
const DriverApi& driver();
/// "CUDA_ERROR_X: description" for a driver result.
std::string driver_error_string(CUresult r);

}  // namespace symcomm::detail
