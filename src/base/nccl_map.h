#pragma once
// symcomm's element types and reduction operators as NCCL's (header-only; used by the CUDA backend's NCCL
// fallback and by the benchmark's NCCL baselines).
#include <nccl.h>

#include "symcomm/types.h"

namespace symcomm::detail {

inline ncclDataType_t to_nccl(DataType d) {
  switch (d) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kInt8: return ncclInt8;
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
  }
  return ncclFloat32;
}

inline ncclRedOp_t to_nccl(ReduceOp o) {
  switch (o) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return ncclAvg;
  }
  return ncclSum;
}

}  // namespace symcomm::detail
