// Tests of store_element / load_element (src/algos/elements.h): the bytes each dtype writes, checked against
// values laid out by hand (little-endian, IEEE encodings written as literals), at misaligned offsets.

#include "algos/elements.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace symcomm::detail {
namespace {

struct Known {
  DataType dtype;
  double value;
  std::vector<uint8_t> bytes;  // the element's encoding, little-endian
};

TEST(Elements, StoreWritesTheEncodingAndLoadReadsItBack) {
  const std::vector<Known> known = {
      {DataType::kFloat32, 1.5, {0x00, 0x00, 0xc0, 0x3f}},
      {DataType::kFloat32, -2.0, {0x00, 0x00, 0x00, 0xc0}},
      {DataType::kFloat64, 1.5, {0, 0, 0, 0, 0, 0, 0xf8, 0x3f}},
      {DataType::kFloat16, 1.5, {0x00, 0x3e}},
      {DataType::kFloat16, -2.0, {0x00, 0xc0}},
      {DataType::kBFloat16, 1.5, {0xc0, 0x3f}},
      {DataType::kBFloat16, -2.0, {0x00, 0xc0}},
      {DataType::kInt8, -3, {0xfd}},
      {DataType::kUInt8, 200, {0xc8}},
      {DataType::kInt32, -2, {0xfe, 0xff, 0xff, 0xff}},
      {DataType::kInt64, 258, {0x02, 0x01, 0, 0, 0, 0, 0, 0}},
  };
  for (const Known& k : known) {
    for (size_t offset : {0, 1, 3}) {  // misaligned elements too
      const size_t es = dtype_size(k.dtype);
      std::vector<uint8_t> buf(offset + 3 * es, 0xab);
      store_element(k.dtype, buf.data() + offset, 1, k.value);
      for (size_t b = 0; b < buf.size(); ++b) {
        const bool in_element = b >= offset + es && b < offset + 2 * es;
        const uint8_t want = in_element ? k.bytes[b - offset - es] : 0xab;
        EXPECT_EQ(buf[b], want) << to_string(k.dtype) << " " << k.value << " offset " << offset << " byte " << b;
      }
      EXPECT_EQ(load_element(k.dtype, buf.data() + offset, 1), k.value) << to_string(k.dtype);
    }
  }
}

TEST(Elements, SixteenBitFloatsRoundToNearestEven) {
  uint16_t h = 0;
  store_element(DataType::kBFloat16, &h, 0, 1.0 + 0x1p-8);  // halfway between 1 and 1 + 2^-7: to even (1)
  EXPECT_EQ(h, 0x3f80);
  store_element(DataType::kBFloat16, &h, 0, 1.0 + 3 * 0x1p-8);  // halfway, to even (1 + 2^-6)
  EXPECT_EQ(h, 0x3f82);
  store_element(DataType::kFloat16, &h, 0, 1.0 + 0x1p-11);  // halfway between 1 and 1 + 2^-10: to even (1)
  EXPECT_EQ(h, 0x3c00);
  EXPECT_TRUE(std::isnan(load_element(static_cast<DataType>(200), &h, 0)));
}

}  // namespace
}  // namespace symcomm::detail
