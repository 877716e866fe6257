#pragma once
// Small kernels of the fused operations (fused_kernels.cu).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "symcomm/types.h"

namespace symcomm::detail::fused {

/// dst[r·ld_dst + c] = dtype(scale · src[r·cols + c]): a reduce-scatter's float32 result into the output.
struct StoreRowsParams {
  const float* src = nullptr;
  int64_t rows = 0, cols = 0;
  void* dst = nullptr;
  int64_t ld_dst = 0;
  DataType dtype = DataType::kBFloat16;
  float scale = 1.0f;
};

void launch_store_rows(const StoreRowsParams& p, cudaStream_t stream);

}  // namespace symcomm::detail::fused
