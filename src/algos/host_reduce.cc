#include "algos/host_reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "algos/half.h"
#include "base/check.h"

namespace symcomm::detail {
namespace {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// Acc: the type arithmetic is done in; load/store convert.
template <class T>
struct Traits {
  using Acc = T;
  static Acc load(T v) { return v; }
  static T store(Acc v) { return v; }
};
template <>
struct Traits<Half> {
  using Acc = float;
  static float load(Half v) { return half_to_float(v.bits); }
  static Half store(float v) { return Half{float_to_half(v)}; }
};
template <>
struct Traits<BFloat16> {
  using Acc = float;
  static float load(BFloat16 v) { return bf16_to_float(v.bits); }
  static BFloat16 store(float v) { return BFloat16{float_to_bf16(v)}; }
};

template <class A>
A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class A>
A mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    // Multiply in at least 32-bit unsigned arithmetic: no signed overflow, result modulo 2^bits.
    using U = std::conditional_t<(sizeof(A) < 4), uint32_t, std::make_unsigned_t<A>>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

template <ReduceOp kOp, class A>
A combine(A a, A b) {
  if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kAvg) return add(a, b);
  if constexpr (kOp == ReduceOp::kProd) return mul(a, b);
  if constexpr (kOp == ReduceOp::kMin) return b < a ? b : a;
  if constexpr (kOp == ReduceOp::kMax) return a < b ? b : a;
}

// Blocked so that the accumulator stays in L1 and each pass vectorises.
constexpr size_t kBlock = 1024;

template <class T, ReduceOp kOp>
void reduce_aligned(void* out_v, const void* const* srcs_v, int nsrc, size_t count) {
  using Tr = Traits<T>;
  using A = typename Tr::Acc;
  T* out = static_cast<T*>(out_v);
  A acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t n = std::min(kBlock, count - base);
    const T* s0 = static_cast<const T*>(srcs_v[0]) + base;
    for (size_t j = 0; j < n; ++j) acc[j] = Tr::load(s0[j]);
    for (int r = 1; r < nsrc; ++r) {
      const T* s = static_cast<const T*>(srcs_v[r]) + base;
      for (size_t j = 0; j < n; ++j) acc[j] = combine<kOp>(acc[j], Tr::load(s[j]));
    }
    if constexpr (kOp == ReduceOp::kAvg) {
      A div = static_cast<A>(nsrc);
      for (size_t j = 0; j < n; ++j) acc[j] = acc[j] / div;
    }
    T* o = out + base;
    for (size_t j = 0; j < n; ++j) o[j] = Tr::store(acc[j]);
  }
}

bool aligned_to(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Pointers not aligned to the element size (allowed by the API) are never accessed through T*: each block
// is staged through aligned local buffers with memcpy, then reduced on the aligned path.
template <class T, ReduceOp kOp>
void reduce_typed(void* out, const void* const* srcs, int nsrc, size_t count) {
  bool aligned = aligned_to(out, alignof(T));
  for (int r = 0; r < nsrc; ++r) aligned = aligned && aligned_to(srcs[r], alignof(T));
  if (aligned) return reduce_aligned<T, kOp>(out, srcs, nsrc, count);
  alignas(64) T staged[kMaxRanks][kBlock / 4];
  alignas(64) T result[kBlock / 4];
  const void* staged_srcs[kMaxRanks];
  for (int r = 0; r < nsrc; ++r) staged_srcs[r] = staged[r];
  constexpr size_t kStage = kBlock / 4;
  for (size_t base = 0; base < count; base += kStage) {
    size_t n = std::min(kStage, count - base);
    for (int r = 0; r < nsrc; ++r)
      std::memcpy(staged[r], static_cast<const uint8_t*>(srcs[r]) + base * sizeof(T), n * sizeof(T));
    reduce_aligned<T, kOp>(result, staged_srcs, nsrc, n);
    std::memcpy(static_cast<uint8_t*>(out) + base * sizeof(T), result, n * sizeof(T));
  }
}

template <class T>
void reduce_op(ReduceOp op, void* out, const void* const* srcs, int nsrc, size_t count) {
  switch (op) {
    case ReduceOp::kSum: return reduce_typed<T, ReduceOp::kSum>(out, srcs, nsrc, count);
    case ReduceOp::kProd: return reduce_typed<T, ReduceOp::kProd>(out, srcs, nsrc, count);
    case ReduceOp::kMin: return reduce_typed<T, ReduceOp::kMin>(out, srcs, nsrc, count);
    case ReduceOp::kMax: return reduce_typed<T, ReduceOp::kMax>(out, srcs, nsrc, count);
    case ReduceOp::kAvg: return reduce_typed<T, ReduceOp::kAvg>(out, srcs, nsrc, count);
  }
  SYMCOMM_THROW(kInvalidArgument, "invalid reduce op {}", static_cast<int>(op));
}

template <class T>
void divide_typed(void* data, size_t count, int divisor) {
  using Tr = Traits<T>;
  using A = typename Tr::Acc;
  auto* p = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    const T q = Tr::store(Tr::load(v) / static_cast<A>(divisor));
    std::memcpy(p + i * sizeof(T), &q, sizeof(T));
  }
}

}  // namespace

void host_divide(DataType dtype, void* data, size_t count, int divisor) {
  switch (dtype) {
    case DataType::kFloat32: return divide_typed<float>(data, count, divisor);
    case DataType::kFloat64: return divide_typed<double>(data, count, divisor);
    case DataType::kFloat16: return divide_typed<Half>(data, count, divisor);
    case DataType::kBFloat16: return divide_typed<BFloat16>(data, count, divisor);
    case DataType::kInt8: return divide_typed<int8_t>(data, count, divisor);
    case DataType::kUInt8: return divide_typed<uint8_t>(data, count, divisor);
    case DataType::kInt32: return divide_typed<int32_t>(data, count, divisor);
    case DataType::kInt64: return divide_typed<int64_t>(data, count, divisor);
  }
  SYMCOMM_THROW(kInvalidArgument, "invalid dtype {}", static_cast<int>(dtype));
}

void host_reduce(DataType dtype, ReduceOp op, void* out, const void* const* srcs, int nsrc, size_t count) {
  switch (dtype) {
    case DataType::kFloat32: return reduce_op<float>(op, out, srcs, nsrc, count);
    case DataType::kFloat64: return reduce_op<double>(op, out, srcs, nsrc, count);
    case DataType::kFloat16: return reduce_op<Half>(op, out, srcs, nsrc, count);
    case DataType::kBFloat16: return reduce_op<BFloat16>(op, out, srcs, nsrc, count);
    case DataType::kInt8: return reduce_op<int8_t>(op, out, srcs, nsrc, count);
    case DataType::kUInt8: return reduce_op<uint8_t>(op, out, srcs, nsrc, count);
    case DataType::kInt32: return reduce_op<int32_t>(op, out, srcs, nsrc, count);
    case DataType::kInt64: return reduce_op<int64_t>(op, out, srcs, nsrc, count);
  }
  SYMCOMM_THROW(kInvalidArgument, "invalid dtype {}", static_cast<int>(dtype));
}

}  // namespace symcomm::detail
