#pragma once
/// \file device/vector.h
/// 16-byte vector loads/stores and alignment tests used by symcomm's kernels.

#include <cstddef>
#include <cstdint>

namespace symcomm::device {

inline constexpr int kVecBytes = 16;

__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & (kVecBytes - 1)) == 0;
}
__device__ __forceinline__ uint4 ld_vec(const void* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void st_vec(void* p, const uint4& v) { *reinterpret_cast<uint4*>(p) = v; }

}  // namespace symcomm::device
