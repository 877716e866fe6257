// Tests of host_reduce() (src/algos/host_reduce.cc): every dtype x op x source count x element count, with
// inputs chosen so that the exact result is known (small integers), expected values computed independently
// (integers in uint64 modular arithmetic, floats in double; binary16 rounding by the compiler's _Float16,
// bfloat16 rounding by std::nearbyint), poisoned guard bytes around the output, and targeted cases for
// wraparound, integer average, and 16-bit float accumulation in float32.

#include "algos/host_reduce.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "symcomm/error.h"

namespace symcomm::detail {
namespace {

constexpr DataType kAllDataTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                                      DataType::kInt8,    DataType::kUInt8,   DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
// host_reduce works in blocks of 1024 elements: counts on both sides of one and several blocks.
constexpr size_t kCounts[] = {0, 1, 1023, 1024, 1025, 5000};
constexpr int kMaxSources = 8;
constexpr size_t kGuardElems = 16;
constexpr unsigned char kPoison = 0xa5;

bool is_integer(DataType d) {
  return d == DataType::kInt8 || d == DataType::kUInt8 || d == DataType::kInt32 || d == DataType::kInt64;
}

// --- element encoding, written independently of half.h ----------------------------------------------------

uint16_t half_bits(double v) {
  _Float16 h = static_cast<_Float16>(static_cast<float>(v));
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
double half_value(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
// Only for values exactly representable in bfloat16 (the low 16 bits of the float are zero).
uint16_t bf16_bits_exact(double v) {
  float f = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  EXPECT_EQ(b & 0xffffu, 0u) << v << " is not a bfloat16 value";
  return static_cast<uint16_t>(b >> 16);
}
double bf16_value(uint16_t b) {
  uint32_t w = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

// Rounds x (normal range, no overflow) to `bits` significant bits, ties to even.
double round_significand(double x, int bits) {
  if (x == 0) return x;
  int e;
  std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
  return std::ldexp(std::nearbyint(std::ldexp(x, bits - e)), e - bits);
}

template <class T>
void store_as(void* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
T load_as(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Writes the (exactly representable) value v as an element of type d.
void encode(DataType d, int64_t v, void* p) {
  switch (d) {
    case DataType::kFloat32: return store_as(p, static_cast<float>(v));
    case DataType::kFloat64: return store_as(p, static_cast<double>(v));
    case DataType::kFloat16: return store_as(p, half_bits(static_cast<double>(v)));
    case DataType::kBFloat16: return store_as(p, bf16_bits_exact(static_cast<double>(v)));
    case DataType::kInt8: return store_as(p, static_cast<int8_t>(v));
    case DataType::kUInt8: return store_as(p, static_cast<uint8_t>(v));
    case DataType::kInt32: return store_as(p, static_cast<int32_t>(v));
    case DataType::kInt64: return store_as(p, v);
  }
}

// The element at p as a double (float types) or an integer converted exactly to int64 (integer types).
double decode_float(DataType d, const void* p) {
  switch (d) {
    case DataType::kFloat32: return load_as<float>(p);
    case DataType::kFloat64: return load_as<double>(p);
    case DataType::kFloat16: return half_value(load_as<uint16_t>(p));
    case DataType::kBFloat16: return bf16_value(load_as<uint16_t>(p));
    default: ADD_FAILURE() << "not a float type"; return 0;
  }
}
int64_t decode_int(DataType d, const void* p) {
  switch (d) {
    case DataType::kInt8: return load_as<int8_t>(p);
    case DataType::kUInt8: return load_as<uint8_t>(p);
    case DataType::kInt32: return load_as<int32_t>(p);
    case DataType::kInt64: return load_as<int64_t>(p);
    default: ADD_FAILURE() << "not an integer type"; return 0;
  }
}

// --- expected values ---------------------------------------------------------------------------------------

// v modulo 2^bits of d, as a value of d.
int64_t wrap(DataType d, uint64_t v) {
  switch (d) {
    case DataType::kInt8: return static_cast<int8_t>(static_cast<uint8_t>(v));
    case DataType::kUInt8: return static_cast<uint8_t>(v);
    case DataType::kInt32: return static_cast<int32_t>(static_cast<uint32_t>(v));
    default: return static_cast<int64_t>(v);
  }
}

int64_t expected_int(DataType d, ReduceOp op, const std::vector<int64_t>& v) {
  uint64_t sum = 0, prod = 1;
  for (int64_t x : v) {
    sum += static_cast<uint64_t>(x);
    prod *= static_cast<uint64_t>(x);
  }
  switch (op) {
    case ReduceOp::kSum: return wrap(d, sum);
    case ReduceOp::kProd: return wrap(d, prod);
    case ReduceOp::kMin: return *std::min_element(v.begin(), v.end());
    case ReduceOp::kMax: return *std::max_element(v.begin(), v.end());
    case ReduceOp::kAvg: return wrap(d, sum) / static_cast<int64_t>(v.size());  // truncates toward zero
  }
  return 0;
}

// Float types: the exact result (small integers), rounded once to float32 where the type computes in
// float32, then to the element type.
double expected_float(DataType d, ReduceOp op, const std::vector<int64_t>& v) {
  double sum = 0, prod = 1;
  for (int64_t x : v) {
    sum += static_cast<double>(x);
    prod *= static_cast<double>(x);
  }
  double exact = 0;
  switch (op) {
    case ReduceOp::kSum: exact = sum; break;
    case ReduceOp::kProd: exact = prod; break;
    case ReduceOp::kMin: exact = static_cast<double>(*std::min_element(v.begin(), v.end())); break;
    case ReduceOp::kMax: exact = static_cast<double>(*std::max_element(v.begin(), v.end())); break;
    case ReduceOp::kAvg: exact = sum / static_cast<double>(v.size()); break;
  }
  if (d == DataType::kFloat64) return exact;
  const float f32 = static_cast<float>(exact);  // sums and products here are exact in float32
  switch (d) {
    case DataType::kFloat16: return half_value(half_bits(f32));
    case DataType::kBFloat16: return round_significand(f32, 8);
    default: return f32;
  }
}

std::string element_string(DataType d, const void* p) {
  return is_integer(d) ? std::to_string(decode_int(d, p)) : fmt::format("{}", decode_float(d, p));
}

// --- the checker -------------------------------------------------------------------------------------------

struct Buffers {
  std::vector<std::vector<unsigned char>> srcs;
  std::vector<std::vector<int64_t>> values;  // values[i][r]: element i of source r
};

Buffers make_inputs(DataType d, int nsrc, size_t count, int64_t lo, int64_t hi, uint64_t seed) {
  const size_t es = dtype_size(d);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  Buffers b;
  b.srcs.assign(nsrc, std::vector<unsigned char>(count * es));
  b.values.assign(count, std::vector<int64_t>(nsrc));
  for (int r = 0; r < nsrc; ++r) {
    for (size_t i = 0; i < count; ++i) {
      int64_t x = dist(rng);
      b.values[i][r] = x;
      encode(d, x, b.srcs[r].data() + i * es);
    }
  }
  return b;
}

// Reduces `b` out of place into a poisoned buffer; checks every element, the guard bytes and the inputs.
void check_out_of_place(DataType d, ReduceOp op, const Buffers& b, size_t count, const std::string& what) {
  const size_t es = dtype_size(d);
  const int nsrc = static_cast<int>(b.srcs.size());
  std::vector<unsigned char> out((count + 2 * kGuardElems) * es, kPoison);
  std::vector<const void*> ptrs;
  for (const auto& s : b.srcs) ptrs.push_back(s.data());
  const std::vector<std::vector<unsigned char>> before = b.srcs;

  unsigned char* o = out.data() + kGuardElems * es;
  host_reduce(d, op, o, ptrs.data(), nsrc, count);

  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    const void* got = o + i * es;
    bool ok = is_integer(d) ? decode_int(d, got) == expected_int(d, op, b.values[i])
                            : decode_float(d, got) == expected_float(d, op, b.values[i]);
    if (!ok && bad++ == 0) {
      std::string want = is_integer(d) ? std::to_string(expected_int(d, op, b.values[i]))
                                       : fmt::format("{}", expected_float(d, op, b.values[i]));
      ADD_FAILURE() << what << ": element " << i << " = " << element_string(d, got) << ", want " << want << " (inputs "
                    << fmt::format("{}", fmt::join(b.values[i], ", ")) << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": wrong elements";
  for (size_t k = 0; k < kGuardElems * es; ++k) {
    ASSERT_EQ(out[k], kPoison) << what << ": byte " << k << " before the output was written";
    ASSERT_EQ(out[out.size() - 1 - k], kPoison) << what << ": byte " << k << " after the output was written";
  }
  EXPECT_TRUE(before == b.srcs) << what << ": an input was modified";
}

// Input range per (dtype, op): results stay exact in the float types; integer products wrap.
void input_range(DataType d, ReduceOp op, int64_t* lo, int64_t* hi) {
  const bool prod = op == ReduceOp::kProd;
  *lo = d == DataType::kUInt8 ? 0 : (prod ? -3 : -8);
  *hi = prod ? 3 : (d == DataType::kUInt8 ? 16 : 8);
}

TEST(HostReduce, EveryDtypeOpSourceCountAndElementCount) {
  uint64_t seed = 1;
  for (DataType d : kAllDataTypes) {
    for (ReduceOp op : kAllOps) {
      int64_t lo, hi;
      input_range(d, op, &lo, &hi);
      for (int nsrc = 1; nsrc <= kMaxSources; ++nsrc) {
        for (size_t count : kCounts) {
          std::string what = fmt::format("{} {} nsrc={} count={}", to_string(d), to_string(op), nsrc, count);
          check_out_of_place(d, op, make_inputs(d, nsrc, count, lo, hi, seed++), count, what);
        }
      }
    }
  }
}

// Full-range integers: sums and products wrap modulo 2^bits, avg divides the wrapped sum.
TEST(HostReduce, IntegerWraparoundOnFullRangeInputs) {
  uint64_t seed = 1000;
  struct Range {
    DataType d;
    int64_t lo, hi;
  };
  const Range ranges[] = {{DataType::kInt8, INT8_MIN, INT8_MAX},
                          {DataType::kUInt8, 0, UINT8_MAX},
                          {DataType::kInt32, INT32_MIN, INT32_MAX},
                          {DataType::kInt64, INT64_MIN, INT64_MAX}};
  for (const Range& r : ranges) {
    for (ReduceOp op : kAllOps) {
      for (int nsrc : {2, 3, 8}) {
        std::string what = fmt::format("{} {} nsrc={} full range", to_string(r.d), to_string(op), nsrc);
        check_out_of_place(r.d, op, make_inputs(r.d, nsrc, 1025, r.lo, r.hi, seed++), 1025, what);
      }
    }
  }
}

// One element, explicit inputs and the exact expected element, as an integer.
template <class T>
T reduce_one(DataType d, ReduceOp op, std::vector<T> inputs) {
  std::vector<const void*> ptrs;
  for (const T& x : inputs) ptrs.push_back(&x);
  T out{};
  host_reduce(d, op, &out, ptrs.data(), static_cast<int>(ptrs.size()), 1);
  return out;
}

TEST(HostReduce, IntegerWraparoundExamples) {
  using R = ReduceOp;
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, R::kSum, {100, 100}), -56);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, R::kSum, {-128, -1}), 127);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, R::kProd, {16, 16}), 0);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, R::kProd, {-128, -1}), -128);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, R::kProd, {3, 3, 3, 3, 3}), -13);  // 243 - 256
  EXPECT_EQ(reduce_one<uint8_t>(DataType::kUInt8, R::kSum, {200, 100}), 44);
  EXPECT_EQ(reduce_one<uint8_t>(DataType::kUInt8, R::kProd, {16, 17}), 16);
  EXPECT_EQ(reduce_one<uint8_t>(DataType::kUInt8, R::kProd, {255, 255}), 1);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, R::kSum, {INT32_MAX, 1}), INT32_MIN);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, R::kProd, {65536, 65536}), 0);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, R::kProd, {INT32_MIN, -1}), INT32_MIN);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, R::kProd, {-65537, 65537}), -131073);  // -(2^32+2^17+1)
  EXPECT_EQ(reduce_one<int64_t>(DataType::kInt64, R::kSum, {INT64_MAX, 1}), INT64_MIN);
  EXPECT_EQ(reduce_one<int64_t>(DataType::kInt64, R::kProd, {INT64_MIN, -1}), INT64_MIN);
  EXPECT_EQ(reduce_one<int64_t>(DataType::kInt64, R::kProd, {int64_t{1} << 32, int64_t{1} << 32}), 0);
}

TEST(HostReduce, IntegerAverageTruncatesTowardZero) {
  using R = ReduceOp;
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, R::kAvg, {-7, 0}), -3);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, R::kAvg, {7, 0}), 3);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, R::kAvg, {-1, -1, 0}), 0);
  EXPECT_EQ(reduce_one<int64_t>(DataType::kInt64, R::kAvg, {-9, 0, 0, 0}), -2);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, R::kAvg, {-5, -4, -4}), -4);              // -13 / 3
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, R::kAvg, {100, 100, 100}), 14);           // 300 wraps to 44
  EXPECT_EQ(reduce_one<uint8_t>(DataType::kUInt8, R::kAvg, {200, 100}), 22);              // 300 wraps to 44
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, R::kAvg, {INT32_MAX, INT32_MAX}), -1);  // wraps to -2
}

TEST(HostReduce, FloatAverage) {
  using R = ReduceOp;
  EXPECT_EQ(reduce_one<float>(DataType::kFloat32, R::kAvg, {1, 2}), 1.5f);
  EXPECT_EQ(reduce_one<float>(DataType::kFloat32, R::kAvg, {1, 1, 0}), 0x1.555556p-1f);  // 2/3
  EXPECT_EQ(reduce_one<float>(DataType::kFloat32, R::kAvg, {-3, 0}), -1.5f);
  EXPECT_EQ(reduce_one<double>(DataType::kFloat64, R::kAvg, {1, 0, 0}), 1.0 / 3.0);
  EXPECT_EQ(reduce_one<uint16_t>(DataType::kFloat16, R::kAvg, {0x3c00, 0, 0}), 0x3555);   // 1/3 = 0.33325
  EXPECT_EQ(reduce_one<uint16_t>(DataType::kBFloat16, R::kAvg, {0x3f80, 0, 0}), 0x3eab);  // 1/3 = 0.33398
}

// NOTE [16-bit accumulation]
// 16-bit floats accumulate in float32 and are rounded once. Adding each small value to 1.0 in the 16-bit
// type would round back to 1.0 at every step (each is below half an ulp of 1.0), and a running product
// rounds its intermediate values: both differ from the float32-accumulated results asserted here.
TEST(HostReduce, SixteenBitFloatsAccumulateInFloat32AndRoundOnce) {
  using R = ReduceOp;
  // bfloat16: ulp(1) = 2^-7. 1 + 7 * 2^-9 = 1 + 1.75 ulp -> 1 + 2 ulp = 1.015625 (0x3f82); per step: 0x3f80.
  const uint16_t bf_small = 0x3b00;  // 2^-9
  ASSERT_EQ(bf16_value(bf_small), 0x1p-9);
  std::vector<uint16_t> bf = {0x3f80, bf_small, bf_small, bf_small, bf_small, bf_small, bf_small, bf_small};
  EXPECT_EQ(reduce_one<uint16_t>(DataType::kBFloat16, R::kSum, bf), 0x3f82);
  // binary16: ulp(1) = 2^-10. 1 + 7 * 2^-12 -> 1 + 2^-9 (0x3c02); per step: 0x3c00.
  const uint16_t h_small = 0x0c00;  // 2^-12
  ASSERT_EQ(half_value(h_small), 0x1p-12);
  std::vector<uint16_t> h = {0x3c00, h_small, h_small, h_small, h_small, h_small, h_small, h_small};
  EXPECT_EQ(reduce_one<uint16_t>(DataType::kFloat16, R::kSum, h), 0x3c02);
  // Products of eight 3s: 6561 rounds once to 6560 in both; per-step rounding gives 6564 (binary16) and
  // 6528 (bfloat16).
  const uint16_t h3 = 0x4200, bf3 = 0x4040;
  ASSERT_EQ(half_value(h3), 3.0);
  ASSERT_EQ(bf16_value(bf3), 3.0);
  EXPECT_EQ(half_value(reduce_one<uint16_t>(DataType::kFloat16, R::kProd, std::vector<uint16_t>(8, h3))), 6560.0);
  EXPECT_EQ(bf16_value(reduce_one<uint16_t>(DataType::kBFloat16, R::kProd, std::vector<uint16_t>(8, bf3))), 6560.0);

  // The same over many elements, so that every block of 1024 is covered.
  const size_t count = 5000;
  std::vector<std::vector<uint16_t>> srcs(8, std::vector<uint16_t>(count, bf_small));
  std::fill(srcs[0].begin(), srcs[0].end(), uint16_t{0x3f80});
  std::vector<const void*> ptrs;
  for (const auto& s : srcs) ptrs.push_back(s.data());
  std::vector<uint16_t> out(count, 0);
  host_reduce(DataType::kBFloat16, R::kSum, out.data(), ptrs.data(), 8, count);
  EXPECT_EQ(std::count(out.begin(), out.end(), uint16_t{0x3f82}), static_cast<ptrdiff_t>(count));
}

// out == srcs[0] (in place): each block is read before it is written.
TEST(HostReduce, OutputMayAliasTheFirstSource) {
  uint64_t seed = 5000;
  for (DataType d : kAllDataTypes) {
    for (ReduceOp op : kAllOps) {
      const size_t es = dtype_size(d), count = 5000;
      const int nsrc = 3;
      int64_t lo, hi;
      input_range(d, op, &lo, &hi);
      Buffers b = make_inputs(d, nsrc, count, lo, hi, seed++);
      std::vector<const void*> ptrs;
      for (const auto& s : b.srcs) ptrs.push_back(s.data());
      host_reduce(d, op, b.srcs[0].data(), ptrs.data(), nsrc, count);
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) {
        const void* got = b.srcs[0].data() + i * es;
        bool ok = is_integer(d) ? decode_int(d, got) == expected_int(d, op, b.values[i])
                                : decode_float(d, got) == expected_float(d, op, b.values[i]);
        bad += ok ? 0 : 1;
      }
      EXPECT_EQ(bad, 0u) << to_string(d) << " " << to_string(op) << " in place";
    }
  }
}

TEST(HostReduce, InvalidDtypeOrOpThrows) {
  float a = 1, b = 2, out = 0;
  const void* srcs[] = {&a, &b};
  try {
    host_reduce(static_cast<DataType>(kNumDataTypes), ReduceOp::kSum, &out, srcs, 2, 1);
    ADD_FAILURE() << "invalid dtype accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  try {
    host_reduce(DataType::kFloat32, static_cast<ReduceOp>(kNumReduceOps), &out, srcs, 2, 1);
    ADD_FAILURE() << "invalid op accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(out, 0.0f);
}

}  // namespace
}  // namespace symcomm::detail
