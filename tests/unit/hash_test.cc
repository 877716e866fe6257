// FNV-1a (src/base/hash.h) against the published 64-bit test vectors, and Fnv1a's word folding against the
// byte-wise hash of the same bytes.
#include "base/hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace symcomm::detail {
namespace {

TEST(Fnv1a, PublishedVectors) {
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
  static_assert(fnv1a("") == kFnvBasis);
}

TEST(Fnv1a, WordsFoldAsTheirLittleEndianBytes) {
  const uint64_t words[] = {0, 1, 0x0123456789abcdefull, ~uint64_t{0}, uint64_t{1} << 63};
  std::string bytes;
  Fnv1a h;
  for (uint64_t w : words) {
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((w >> (8 * i)) & 0xff));
    h.add(w);
    EXPECT_EQ(h.value(), fnv1a(bytes)) << "after word " << w;
  }
  EXPECT_EQ(Fnv1a().add("foo").add("bar").value(), fnv1a("foobar"));
  EXPECT_NE(Fnv1a().add(1).value(), Fnv1a().add(2).value());
}

TEST(Fnv1a, HeaderIsNeverZero) {
  EXPECT_EQ(Fnv1a(0).header(), 1u) << "0 means no header to the kernels";
  EXPECT_EQ(Fnv1a(5).header(), 5u);
}

}  // namespace
}  // namespace symcomm::detail
