#pragma once
// Element-wise division by an integer (CUDA), in the arithmetic of the collectives' avg: floats in their
// accumulation type (16-bit floats through float32), integers truncating. The collectives of a communicator that
// spans nodes sum in every stage and divide once, at the end, by the world size.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "symcomm/types.h"

namespace symcomm::detail::cuda {

/// data[i] = data[i] / divisor for i < count, on `stream`. count 0 launches nothing.
void launch_divide(void* data, size_t count, DataType dtype, int divisor, cudaStream_t stream);

}  // namespace symcomm::detail::cuda
