#pragma once
// Whether two byte ranges share a byte: the in-place and aliasing checks of the collectives.

#include <cstddef>
#include <cstdint>

namespace symcomm::detail {

/// True if [a, a + na) and [b, b + nb) share a byte.
inline bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && x < y + nb && y < x + na;
}

}  // namespace symcomm::detail
