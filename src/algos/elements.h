#pragma once
// One element of a buffer of any DataType, read or written as a double (host code): how the tests and the
// benchmark fill inputs and check outputs. 16-bit floats round to nearest even (half.h); integers convert
// as static_cast does.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "algos/half.h"
#include "symcomm/types.h"

namespace symcomm::detail {

template <class T>
void put_element(void* buf, size_t i, T v) {
  std::memcpy(static_cast<uint8_t*>(buf) + i * sizeof(T), &v, sizeof(T));
}

template <class T>
T get_element(const void* buf, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(buf) + i * sizeof(T), sizeof(T));
  return v;
}

/// Writes `v` as element `i` of `buf`, converted to `d`.
inline void store_element(DataType d, void* buf, size_t i, double v) {
  switch (d) {
    case DataType::kFloat32: return put_element(buf, i, static_cast<float>(v));
    case DataType::kFloat64: return put_element(buf, i, v);
    case DataType::kFloat16: return put_element(buf, i, float_to_half(static_cast<float>(v)));
    case DataType::kBFloat16: return put_element(buf, i, float_to_bf16(static_cast<float>(v)));
    case DataType::kInt8: return put_element(buf, i, static_cast<int8_t>(v));
    case DataType::kUInt8: return put_element(buf, i, static_cast<uint8_t>(v));
    case DataType::kInt32: return put_element(buf, i, static_cast<int32_t>(v));
    case DataType::kInt64: return put_element(buf, i, static_cast<int64_t>(v));
  }
}

/// Element `i` of `buf`, of type `d`, as a double (NaN for a DataType outside the enum).
inline double load_element(DataType d, const void* buf, size_t i) {
  switch (d) {
    case DataType::kFloat32: return get_element<float>(buf, i);
    case DataType::kFloat64: return get_element<double>(buf, i);
    case DataType::kFloat16: return half_to_float(get_element<uint16_t>(buf, i));
    case DataType::kBFloat16: return bf16_to_float(get_element<uint16_t>(buf, i));
    case DataType::kInt8: return get_element<int8_t>(buf, i);
    case DataType::kUInt8: return get_element<uint8_t>(buf, i);
    case DataType::kInt32: return get_element<int32_t>(buf, i);
    case DataType::kInt64: return static_cast<double>(get_element<int64_t>(buf, i));
  }
  return NAN;
}

}  // namespace symcomm::detail
