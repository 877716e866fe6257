// Tests of the float <-> binary16 / bfloat16 conversions in src/algos/half.h against independent references:
// the compiler's _Float16 (g++ on x86-64: libgcc's soft-float conversions) for binary16, and a bfloat16
// model written with double arithmetic (std::ilogb / std::ldexp / std::nearbyint) rather than bit tricks.
// Explicit known values check the references themselves.

#include "algos/half.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace symcomm::detail {
namespace {

static_assert(sizeof(_Float16) == 2, "the binary16 reference needs the compiler's _Float16");

// Every float whose bit pattern is a multiple of these strides is converted (the strides are prime, so every
// residue of the low, rounded-off bits occurs).
constexpr uint64_t kHalfStride = 251;  // ~17.1 million floats
constexpr uint64_t kBf16Stride = 509;  // ~8.4 million floats

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// --- binary16 reference: the compiler ------------------------------------------------------------------

float ref_half_to_float(uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, sizeof x);
  return static_cast<float>(x);
}

uint16_t ref_float_to_half(float f) {
  _Float16 x = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &x, sizeof h);
  return h;
}

bool is_half_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

// --- bfloat16 reference: double arithmetic -------------------------------------------------------------

float ref_bf16_to_float(uint16_t h) {
  const bool negative = (h & 0x8000u) != 0;
  const int exp = (h >> 7) & 0xff;
  const int mant = h & 0x7f;
  double v;
  if (exp == 0xff) {
    v = mant == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -133);  // subnormal: mant * 2^-126 * 2^-7
  } else {
    v = std::ldexp(static_cast<double>(128 + mant), exp - 127 - 7);
  }
  return static_cast<float>(negative ? -v : v);
}

// Rounds to nearest, ties to even, in units of the bfloat16 spacing at |f|; encodes from the value.
uint16_t ref_float_to_bf16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7fc0;
  if (std::isinf(f)) return sign | 0x7f80;
  const double x = std::fabs(static_cast<double>(f));
  if (x == 0) return sign;
  // Spacing: 2^(e-7) for x in [2^e, 2^(e+1)); below the normal range the spacing of 2^-126 applies.
  const int quantum_exp = std::max(std::ilogb(x), -126) - 7;
  const double units = std::nearbyint(std::ldexp(x, -quantum_exp));  // ties to even
  const double rounded = std::ldexp(units, quantum_exp);
  if (rounded >= 0x1p128) return sign | 0x7f80;
  if (rounded < 0x1p-126) return sign | static_cast<uint16_t>(std::ldexp(rounded, 133));  // subnormal
  const int e = std::ilogb(rounded);
  const int mant = static_cast<int>(std::ldexp(rounded, 7 - e)) - 128;
  return sign | static_cast<uint16_t>(((e + 127) << 7) | mant);
}

bool is_bf16_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

// --- comparison helpers ----------------------------------------------------------------------------------

// Counts mismatches and keeps the first few for the failure message.
class Mismatches {
 public:
  void add(std::string what) {
    if (examples_.size() < 8) examples_.push_back(std::move(what));
    ++count_;
  }
  size_t count() const { return count_; }
  std::string examples() const {
    std::string out;
    for (const std::string& e : examples_) out += "\n  " + e;
    return out;
  }

 private:
  size_t count_ = 0;
  std::vector<std::string> examples_;
};

// A 16-bit result matches the reference: bitwise, or both NaN with the same sign.
bool same_16(uint16_t got, uint16_t want, bool (*is_nan)(uint16_t)) {
  if (is_nan(want)) return is_nan(got) && (got & 0x8000u) == (want & 0x8000u);
  return got == want;
}

// A float result matches the reference: bitwise (so -0 differs from +0), or both NaN with the same sign.
bool same_float(float got, float want) {
  if (std::isnan(want)) return std::isnan(got) && std::signbit(got) == std::signbit(want);
  return to_bits(got) == to_bits(want);
}

void check_float_to_half(float f, Mismatches& m) {
  uint16_t got = float_to_half(f), want = ref_float_to_half(f);
  if (!same_16(got, want, is_half_nan)) {
    m.add(fmt::format("float_to_half({:a} = 0x{:08x}) = 0x{:04x}, want 0x{:04x}", f, to_bits(f), got, want));
  }
}

void check_float_to_bf16(float f, Mismatches& m) {
  uint16_t got = float_to_bf16(f), want = ref_float_to_bf16(f);
  if (!same_16(got, want, is_bf16_nan)) {
    m.add(fmt::format("float_to_bf16({:a} = 0x{:08x}) = 0x{:04x}, want 0x{:04x}", f, to_bits(f), got, want));
  }
}

// Edge cases shared by both formats' sweeps: zeros, infinities, NaNs, the float subnormal range and extremes.
std::vector<float> special_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,      -0.0f,        inf,         -inf,       FLT_MAX,  -FLT_MAX,
                          FLT_MIN,   -FLT_MIN,     0x1p-149f,   -0x1p-149f, 65504.0f, 65520.0f,
                          -65520.0f, 65519.996f,   65536.0f,    0x1p-24f,   0x1p-25f, 0x1.000002p-25f,
                          0x1p-14f,  0x1.ff8p-15f, 0x1.ffcp-15f};
  for (uint32_t b : {0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00000u, 0x7f808000u, 0x7fa00000u}) {
    v.push_back(from_bits(b));  // NaNs: signalling, quiet, with payload only in the low bits, negative
  }
  return v;
}

// --- binary16 --------------------------------------------------------------------------------------------

TEST(Half, ReferenceIsRoundToNearestEven) {
  // The default rounding mode, which std::nearbyint and the compiler's conversions use.
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  EXPECT_EQ(ref_float_to_half(1.0f + 0x1p-11f), 0x3c00);  // tie: stays even
  EXPECT_EQ(ref_float_to_half(1.0f + 0x3p-11f), 0x3c02);  // tie: rounds up to even
  EXPECT_EQ(ref_half_to_float(0x3555), 0x1.554p-2f);
}

TEST(Half, HalfToFloatKnownValues) {
  EXPECT_EQ(to_bits(half_to_float(0x0000)), to_bits(0.0f));
  EXPECT_EQ(to_bits(half_to_float(0x8000)), to_bits(-0.0f));
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(half_to_float(0x8001), -0x1p-24f);
  EXPECT_EQ(half_to_float(0x03ff), 0x1.ff8p-15f);  // largest subnormal: 1023 * 2^-24
  EXPECT_EQ(half_to_float(0x0400), 0x1p-14f);      // smallest normal
  EXPECT_EQ(half_to_float(0x2e66), 0x1.998p-4f);   // 0.0999755859375
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7c01)));  // signalling NaN stays NaN, not infinity
  EXPECT_TRUE(std::signbit(half_to_float(0xfe00)));
}

TEST(Half, HalfToFloatMatchesCompilerForAllPatterns) {
  Mismatches m;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float got = half_to_float(static_cast<uint16_t>(h)), want = ref_half_to_float(static_cast<uint16_t>(h));
    if (!same_float(got, want)) m.add(fmt::format("half_to_float(0x{:04x}) = {:a}, want {:a}", h, got, want));
  }
  EXPECT_EQ(m.count(), 0u) << m.examples();
}

TEST(Half, FloatToHalfKnownValues) {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float in;
    uint16_t want;
  };
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.1f, 0x2e66},
      {65504.0f, 0x7bff},
      {65519.996f, 0x7bff},
      {65520.0f, 0x7c00},  // tie: inf
      {-65520.0f, 0xfc00},
      {1e10f, 0x7c00},
      {FLT_MAX, 0x7c00},
      {inf, 0x7c00},
      {-inf, 0xfc00},
      {0x1p-24f, 0x0001},
      {0x1p-25f, 0x0000},  // tie: even (zero)
      {-0x1p-25f, 0x8000},
      {0x1.000002p-25f, 0x0001},
      {0x1.8p-24f, 0x0002},  // 1.5 units: up to 2
      {0x1.4p-23f, 0x0002},  // 2.5 units: down to 2
      {0x1.cp-23f, 0x0004},  // 3.5 units: up to 4
      {0x1.ff8p-15f, 0x03ff},
      {0x1.ffcp-15f, 0x0400},  // 1023.5 units: up to the smallest normal
      {0x1p-14f, 0x0400},
      {0x1p-149f, 0x0000},
      {-0x1p-149f, 0x8000},
      {1.0f + 0x1p-11f, 0x3c00},
      {1.0f + 0x3p-11f, 0x3c02},
      {0x1.002002p0f, 0x3c01},
      {2049.0f, 0x6800},
      {2051.0f, 0x6802},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_half(c.in), c.want) << fmt::format("{:a}", c.in);
    EXPECT_EQ(ref_float_to_half(c.in), c.want) << "reference disagrees on " << fmt::format("{:a}", c.in);
  }
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7f802000u}) {
    EXPECT_TRUE(is_half_nan(float_to_half(from_bits(nan_bits)))) << std::hex << nan_bits;
    EXPECT_TRUE(is_half_nan(float_to_half(from_bits(nan_bits | 0x80000000u)))) << std::hex << nan_bits;
    EXPECT_EQ(float_to_half(from_bits(nan_bits | 0x80000000u)) & 0x8000, 0x8000) << std::hex << nan_bits;
  }
}

TEST(Half, FloatToHalfMatchesCompilerOnStridedFloats) {
  Mismatches m;
  for (uint64_t b = 0; b <= 0xffffffffu; b += kHalfStride) check_float_to_half(from_bits(static_cast<uint32_t>(b)), m);
  for (float f : special_floats()) check_float_to_half(f, m);
  EXPECT_EQ(m.count(), 0u) << m.examples();
}

// Every tie between two adjacent finite binary16 values, and the floats on either side of it.
TEST(Half, FloatToHalfTiesAndNeighbours) {
  Mismatches m;
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    float lo = ref_half_to_float(static_cast<uint16_t>(h)), hi = ref_half_to_float(static_cast<uint16_t>(h + 1));
    float mid = (lo + hi) / 2;  // exact: binary16 values need 11 of float's 24 significant bits
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      check_float_to_half(f, m);
      check_float_to_half(-f, m);
    }
  }
  EXPECT_EQ(m.count(), 0u) << m.examples();
}

TEST(Half, RoundTripOfEveryNonNaNPattern) {
  Mismatches m;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    if (is_half_nan(static_cast<uint16_t>(h))) continue;
    uint16_t back = float_to_half(half_to_float(static_cast<uint16_t>(h)));
    if (back != h) m.add(fmt::format("0x{:04x} -> 0x{:04x}", h, back));
  }
  EXPECT_EQ(m.count(), 0u) << m.examples();
}

// --- bfloat16 --------------------------------------------------------------------------------------------

TEST(BFloat16, ReferenceKnownValues) {
  EXPECT_EQ(ref_float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(ref_float_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie: stays even
  EXPECT_EQ(ref_float_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie: rounds up to even
  EXPECT_EQ(ref_float_to_bf16(from_bits(0x00008001u)), 0x0001);  // subnormal
  EXPECT_EQ(ref_bf16_to_float(0x0001), 0x1p-133f);
  EXPECT_EQ(ref_bf16_to_float(0xc049), -0x1.92p1f);
}

TEST(BFloat16, Bf16ToFloatKnownValues) {
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xbf80), -1.0f);
  EXPECT_EQ(bf16_to_float(0x4049), 0x1.92p1f);  // 3.140625
  EXPECT_EQ(bf16_to_float(0x0001), 0x1p-133f);  // smallest subnormal
  EXPECT_EQ(bf16_to_float(0x0080), 0x1p-126f);  // smallest normal
  EXPECT_EQ(bf16_to_float(0x7f7f), 0x1.fep127f);
  EXPECT_EQ(to_bits(bf16_to_float(0x8000)), to_bits(-0.0f));
  EXPECT_EQ(bf16_to_float(0x7f80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16_to_float(0xff80), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7fc0)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7f81)));
}

TEST(BFloat16, Bf16ToFloatMatchesReferenceForAllPatterns) {
  Mismatches m;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float got = bf16_to_float(static_cast<uint16_t>(h)), want = ref_bf16_to_float(static_cast<uint16_t>(h));
    if (!same_float(got, want)) m.add(fmt::format("bf16_to_float(0x{:04x}) = {:a}, want {:a}", h, got, want));
  }
  EXPECT_EQ(m.count(), 0u) << m.examples();
}

TEST(BFloat16, FloatToBf16KnownValues) {
  struct Case {
    uint32_t in;
    uint16_t want;
    const char* what;
  };
  const Case cases[] = {
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x3f800000u, 0x3f80, "1"},
      {0xbf800000u, 0xbf80, "-1"},
      {0x40490fdbu, 0x4049, "pi"},
      {0x3f808000u, 0x3f80, "tie: stays even"},
      {0x3f818000u, 0x3f82, "tie: rounds up to even"},
      {0x3f808001u, 0x3f81, "above a tie"},
      {0x3f807fffu, 0x3f80, "below a tie"},
      {0x7f7f7fffu, 0x7f7f, "below the tie above the largest finite value"},
      {0x7f7f8000u, 0x7f80, "the tie above the largest finite value: infinity"},
      {0x7f7fffffu, 0x7f80, "FLT_MAX"},
      {0x7f800000u, 0x7f80, "infinity"},
      {0xff800000u, 0xff80, "-infinity"},
      {0x00000001u, 0x0000, "smallest float subnormal"},
      {0x00008000u, 0x0000, "tie at zero: even"},
      {0x00008001u, 0x0001, "above the tie at zero"},
      {0x00018000u, 0x0002, "subnormal tie: up to even"},
      {0x007fffffu, 0x0080, "largest float subnormal: up to the smallest normal"},
      {0x807fffffu, 0x8080, "negative largest float subnormal"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_bf16(from_bits(c.in)), c.want) << c.what;
    EXPECT_EQ(ref_float_to_bf16(from_bits(c.in)), c.want) << "reference disagrees on " << c.what;
  }
  // NaN stays NaN, also when the payload sits only in the 16 bits that are dropped.
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fffffffu}) {
    EXPECT_TRUE(is_bf16_nan(float_to_bf16(from_bits(nan_bits)))) << std::hex << nan_bits;
    uint16_t negative = float_to_bf16(from_bits(nan_bits | 0x80000000u));
    EXPECT_TRUE(is_bf16_nan(negative)) << std::hex << nan_bits;
    EXPECT_EQ(negative & 0x8000, 0x8000) << std::hex << nan_bits;
  }
}

TEST(BFloat16, FloatToBf16MatchesReferenceOnStridedFloats) {
  Mismatches m;
  for (uint64_t b = 0; b <= 0xffffffffu; b += kBf16Stride) check_float_to_bf16(from_bits(static_cast<uint32_t>(b)), m);
  for (float f : special_floats()) check_float_to_bf16(f, m);
  EXPECT_EQ(m.count(), 0u) << m.examples();
}

// Every tie between two adjacent finite bfloat16 values (and the one above the largest), with neighbours.
TEST(BFloat16, FloatToBf16TiesAndNeighbours) {
  Mismatches m;
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    double lo = ref_bf16_to_float(static_cast<uint16_t>(h));
    double hi = h + 1 == 0x7f80 ? 0x1p128 : static_cast<double>(ref_bf16_to_float(static_cast<uint16_t>(h + 1)));
    float mid = static_cast<float>((lo + hi) / 2);  // exact: 9 significant bits
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
      check_float_to_bf16(f, m);
      check_float_to_bf16(-f, m);
    }
  }
  EXPECT_EQ(m.count(), 0u) << m.examples();
}

TEST(BFloat16, RoundTripOfEveryNonNaNPattern) {
  Mismatches m;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    if (is_bf16_nan(static_cast<uint16_t>(h))) continue;
    uint16_t back = float_to_bf16(bf16_to_float(static_cast<uint16_t>(h)));
    if (back != h) m.add(fmt::format("0x{:04x} -> 0x{:04x}", h, back));
  }
  EXPECT_EQ(m.count(), 0u) << m.examples();
}

}  // namespace
}  // namespace symcomm::detail
