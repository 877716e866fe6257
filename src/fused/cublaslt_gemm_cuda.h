#pragma once
// Row-major GEMMs through cuBLASLt, shared by the fused operations and the benchmark's baselines (so both
// run the very same GEMM).

#include <cuda_runtime_api.h>

#include "fused/fused_engine.h"

namespace symcomm::detail::fused {

/// Enqueues g on `stream` (device `device`). The cuBLASLt handle is cached per device, the plan (descriptors
/// and the heuristic's algorithm) per shape, dtypes and pointer alignment, and a 32 MiB cuBLASLt workspace
/// per (device, stream); a stream that is being captured into a graph and has no workspace yet runs without
/// one (cudaMalloc is not allowed during capture). k = 0 writes zeros.
void cublaslt_gemm(const Gemm& g, int device, cudaStream_t stream);

}  // namespace symcomm::detail::fused
