#pragma once
// FNV-1a (64-bit): a stable hash for names derived from tokens and prefixes (socket names, derived tokens) and
// for the op headers every rank compares before a collective moves data. Not cryptographic.

#include <cstdint>
#include <string_view>

namespace symcomm::detail {

inline constexpr uint64_t kFnvBasis = 14695981039346656037ull;
inline constexpr uint64_t kFnvPrime = 1099511628211ull;

constexpr uint64_t fnv1a(std::string_view s, uint64_t h = kFnvBasis) {
  for (unsigned char c : s) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

/// FNV-1a over a sequence of 64-bit words, each taken byte by byte from its least significant byte (the bytes
/// of the word in memory on a little-endian host), so that add(v) equals fnv1a over v's eight bytes there.
class Fnv1a {
 public:
  constexpr explicit Fnv1a(uint64_t h = kFnvBasis) : h_(h) {}
  constexpr Fnv1a& add(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= (v >> (8 * i)) & 0xff;
      h_ *= kFnvPrime;
    }
    return *this;
  }
  constexpr Fnv1a& add(std::string_view s) {
    h_ = fnv1a(s, h_);
    return *this;
  }
  constexpr uint64_t value() const { return h_; }
  /// value(), but never 0: an op header of 0 means "no header" to the kernels.
  constexpr uint64_t header() const { return h_ ? h_ : 1; }

 private:
  uint64_t h_;
};

}  // namespace symcomm::detail
