#pragma once
// Row-major GEMMs through cuBLASLt, shared by the fused operations and the benchmark's baselines (so both
// run the very same GEMM).

#include <cuda_runtime_api.h>

#include "fused/fused_engine.h"

namespace symcomm::detail::fused {

/// Enqueues g on `stream` (device `device`). The cuBLASLt handle is cached per device and the plan
/// (descriptors and the heuristic's algorithm) per shape, dtypes and pointer alignment; the 32 MiB cuBLASLt
/// workspace is allocated from a per-device stream-ordered pool before the GEMM and freed after it, on
/// `stream` (NOTE [cuBLASLt workspace]), also inside a graph capture. k = 0 writes zeros.
void cublaslt_gemm(const Gemm& g, int device, cudaStream_t stream);

}  // namespace symcomm::detail::fused
