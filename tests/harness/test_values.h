#pragma once
// Exactly-known test inputs and an independent reference for the collectives tests (host and GPU).
//
// Inputs are small integers chosen per reduce op so that every result is exact in every dtype (sums of up
// to 8 ranks of [-3, 3]; products of {-1, 1, 2}; min/max of [-50, 50]), so results are compared bit for
// bit; only avg, whose quotient may be inexact, is compared within one unit in the last place of the dtype.
// Conversions here use the compiler's _Float16 and plain bit truncation for bfloat16 (exact for these
// integers), independent of the library's own conversion code.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "algos/elements.h"
#include "harness/rank_harness.h"
#include "symcomm/types.h"

namespace symcomm::testing {

inline bool is_signed_type(DataType d) { return d != DataType::kUInt8; }
inline bool is_float_type(DataType d) {
  return d == DataType::kFloat32 || d == DataType::kFloat64 || d == DataType::kFloat16 || d == DataType::kBFloat16;
}

/// Input of `rank` at element i for a test case identified by `seed`.
inline double input_value(uint64_t seed, int rank, size_t i, ReduceOp op, DataType d, bool reduction) {
  uint64_t h = mix64(seed * 1000003ull + static_cast<uint64_t>(rank) * 7919ull + i);
  bool s = is_signed_type(d);
  if (!reduction || op == ReduceOp::kMin || op == ReduceOp::kMax) {
    return s ? static_cast<double>(h % 101) - 50 : static_cast<double>(h % 101);
  }
  if (op == ReduceOp::kProd) {
    uint64_t k = h % 3;
    return k == 0 ? (s ? -1.0 : 1.0) : static_cast<double>(k);
  }
  return s ? static_cast<double>(h % 7) - 3 : static_cast<double>(h % 4);  // sum, avg
}

/// Converts an exact integer result to what the dtype holds (integers wrap modulo 2^bits).
inline double to_dtype_value(double v, DataType d) {
  switch (d) {
    case DataType::kInt8: return static_cast<int8_t>(static_cast<int64_t>(v));
    case DataType::kUInt8: return static_cast<uint8_t>(static_cast<int64_t>(v));
    case DataType::kInt32: return static_cast<int32_t>(static_cast<int64_t>(v));
    default: return v;
  }
}

// Buffers may be deliberately misaligned: detail::store_element / load_element (src/algos/elements.h) access
// them through memcpy.

/// Reference reduction over ranks 0..n-1 of input_value(), in the dtype's arithmetic.
inline double expected_reduction(uint64_t seed, int n, size_t i, ReduceOp op, DataType d) {
  double acc = input_value(seed, 0, i, op, d, true);
  for (int r = 1; r < n; ++r) {
    double v = input_value(seed, r, i, op, d, true);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) {
    if (is_float_type(d)) return acc / n;
    return std::trunc(acc / n);  // C++ integer division truncates toward zero
  }
  return to_dtype_value(acc, d);
}

/// Tolerance for comparing `got` with the reference: 0 (bitwise) except avg of floats (one ulp).
inline double tolerance(ReduceOp op, DataType d, double expected) {
  if (op != ReduceOp::kAvg || !is_float_type(d)) return 0;
  double ulp = d == DataType::kBFloat16  ? 0x1p-7
               : d == DataType::kFloat16 ? 0x1p-10
               : d == DataType::kFloat32 ? 0x1p-23
                                         : 0x1p-52;
  return std::fabs(expected) * ulp * 1.01 + 1e-300;
}

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = 14695981039346656037ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace symcomm::testing
