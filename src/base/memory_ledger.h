#pragma once
// The ledger behind symcomm::cuda_memory_use(): every site that allocates or maps memory for a CUDA device
// records it here when it succeeds and takes it back when it frees (process-wide, per device, thread-safe).

#include <cstddef>
#include <functional>

#include "symcomm/memory.h"

namespace symcomm::detail {

enum class MemoryKind { kDevice, kPeerMapped, kPinnedHost };

void ledger_add(int device, MemoryKind kind, size_t bytes);
/// Takes back what ledger_add recorded. Taking back more than was recorded is a bug in symcomm: it is
/// logged and clamps the count at zero (teardown paths call this and must not throw).
void ledger_remove(int device, MemoryKind kind, size_t bytes);
/// A holding that is measured rather than counted call by call (a memory pool's reserve): cuda_memory_use()
/// calls `read` (under the ledger's lock: it must not call the ledger) and counts what it returns, as one
/// allocation while it is not zero. A second call with the same `key` replaces the reader; a null `read`
/// removes it.
void ledger_set_reader(const void* key, int device, MemoryKind kind, std::function<size_t()> read);

}  // namespace symcomm::detail
