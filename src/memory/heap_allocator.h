#pragma once
// Deterministic first-fit allocator over [0, capacity): the same sequence of allocate/release calls yields the
// same offsets on every rank, which is what makes a host symmetric heap need no communication per alloc().

#include <cstddef>
#include <map>

namespace symcomm::detail {

class HeapAllocator {
 public:
  static constexpr size_t kAlignment = 256;
  explicit HeapAllocator(size_t capacity);
  /// Offset of a new block of at least `bytes` (rounded up to kAlignment); throws Error(kInvalidArgument)
  /// when the heap is exhausted.
  size_t allocate(size_t bytes);
  /// Releases the block at `offset`; throws Error(kInvalidArgument) if no block starts there.
  void release(size_t offset);
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  /// Start and size of the live block containing offset, if any.
  bool find(size_t offset, size_t* start, size_t* size) const;

 private:
  size_t capacity_;
  size_t used_ = 0;
  std::map<size_t, size_t> free_;  ///< offset -> size, coalesced
  std::map<size_t, size_t> live_;  ///< offset -> size
};

}  // namespace symcomm::detail
