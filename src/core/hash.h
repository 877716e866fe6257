#pragma once
// FNV-1a (64-bit): a stable hash for names derived from tokens and prefixes (socket names, derived tokens,
// argument fingerprints). Not cryptographic.

#include <cstdint>
#include <string_view>

namespace symcomm::detail {

inline uint64_t fnv1a(std::string_view s, uint64_t h = 14695981039346656037ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace symcomm::detail
