#include "memory/heap_allocator.h"

#include "base/check.h"

namespace symcomm::detail {

HeapAllocator::HeapAllocator(size_t capacity) : capacity_(capacity / kAlignment * kAlignment) {
  if (capacity_ > 0) free_[0] = capacity_;
}

size_t HeapAllocator::allocate(size_t bytes) {
  SYMCOMM_CHECK_ARG(bytes <= capacity_, "alloc({}) exceeds the symmetric heap of {} bytes (SYMCOMM_HEAP_BYTES)", bytes,
                    capacity_);
  size_t need = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (need == 0) need = kAlignment;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    size_t off = it->first, rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[off + need] = rest;
    live_[off] = need;
    used_ += need;
    return off;
  }
  SYMCOMM_THROW(kInvalidArgument,
                "symmetric heap exhausted: alloc({}) with {} of {} bytes in use "
                "(raise SYMCOMM_HEAP_BYTES)",
                bytes, used_, capacity_);
}

void HeapAllocator::release(size_t offset) {
  auto it = live_.find(offset);
  SYMCOMM_CHECK_ARG(it != live_.end(), "free() of a pointer that alloc() did not return (heap offset {})", offset);
  size_t size = it->second;
  live_.erase(it);
  used_ -= size;
  auto [pos, inserted] = free_.emplace(offset, size);
  // Coalesce with the following and the preceding free block.
  auto next = std::next(pos);
  if (next != free_.end() && pos->first + pos->second == next->first) {
    pos->second += next->second;
    free_.erase(next);
  }
  if (pos != free_.begin()) {
    auto prev = std::prev(pos);
    if (prev->first + prev->second == pos->first) {
      prev->second += pos->second;
      free_.erase(pos);
    }
  }
}

bool HeapAllocator::find(size_t offset, size_t* start, size_t* size) const {
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return false;
  --it;
  if (offset >= it->first + it->second) return false;
  *start = it->first;
  *size = it->second;
  return true;
}

}  // namespace symcomm::detail
