#pragma once
// Element-wise reduction of several source arrays on the host, for every dtype and op: the one place where
// the runtime (dtype, op) pair becomes a template instance.
//
// Sources are combined strictly in the order given (rank 0 first), 16-bit floats accumulate in float32 and
// are rounded once at the end, so every rank that reduces the same inputs gets bitwise the same result.
// Integer sum and product wrap modulo 2^bits; avg is the sum divided by nsrc (integer division for
// integers, after the wrapping sum).

#include <cstddef>

#include "symcomm/types.h"

namespace symcomm::detail {

void host_reduce(DataType dtype, ReduceOp op, void* out, const void* const* srcs, int nsrc, size_t count);
/// data[i] /= divisor for `count` elements, in the arithmetic avg uses (integer division for integers; 16-bit
/// floats in float32, rounded once).
void host_divide(DataType dtype, void* data, size_t count, int divisor);

}  // namespace symcomm::detail
