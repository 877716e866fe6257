#pragma once
// Row-major GEMMs through cuBLASLt, shared by the fused operations and the benchmark's baselines (so both
// run the very same GEMM).

#include <cuda_runtime_api.h>

#include "fused/fused_engine.h"

namespace symcomm::detail::fused {

/// Enqueues g on `stream` (device `device`). The cuBLASLt handle is cached per device and the plan
/// (descriptors and the heuristic's algorithm) per shape, dtypes and pointer alignment. The 32 MiB cuBLASLt
/// workspace: the first few streams of a device keep one of their own; any other stream's GEMM allocates one
/// from a per-device stream-ordered pool before it and frees it after it, on `stream`, also inside a graph
/// capture (NOTE [cuBLASLt workspace]). k = 0 writes zeros.
void cublaslt_gemm(const Gemm& g, int device, cudaStream_t stream);

}  // namespace symcomm::detail::fused
