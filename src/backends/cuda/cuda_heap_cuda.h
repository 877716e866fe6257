#pragma once
// CudaHeap: symmetric device memory over the CUDA virtual memory API.
//
// NOTE [cuda heap] Every alloc() is collective. Each rank cuMemCreate's its own physical allocation
// (exportable as a POSIX file descriptor), sends the fd to every peer over the PeerMesh (SCM_RIGHTS; no
// pidfd_getfd, which fails in containers), imports the peers' fds, and maps all N allocations side by side
// in one reserved virtual range: [rank 0's | rank 1's | ...], each `stride` bytes. Its own part is the
// pointer returned, so peer_ptr(p, peer) = p + (peer - rank) * stride. Access is granted to this rank's
// device only. free() is local: it unmaps this process's view; a peer's physical memory lives on until the
// peer releases its handle and every importer unmaps it, so no rank ever touches freed memory.

#include <cuda.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "backends/backend.h"

namespace symcomm::detail {

class CudaHeap {
 public:
  /// `capacity`: the most bytes (rounded allocations) this heap hands out at once.
  CudaHeap(CommContext& ctx, int device, size_t capacity);
  ~CudaHeap();
  CudaHeap(const CudaHeap&) = delete;
  CudaHeap& operator=(const CudaHeap&) = delete;

  /// Collective: all ranks, same order, same bytes (a mismatch is Error(kMismatch)).
  void* alloc(size_t bytes);
  /// Local; ptr must be a pointer returned by alloc() (nullptr ignored).
  void free(void* ptr);

  /// The allocation containing [ptr, ptr+bytes): its own base and the peer stride; false if none. `place`, if
  /// given, gets where ptr lies in the heap as every rank sees it: a nonzero hash of the allocation's number
  /// (alloc() is collective, so the numbers agree) and the offset in it. Zero-copy paths fold it into their op
  /// headers (NOTE [heap keys]).
  bool find(const void* ptr, size_t bytes, char** base, size_t* stride, uint64_t* place = nullptr) const;
  /// Peer's mapping of ptr, or nullptr if ptr is not in the heap.
  void* peer_ptr(const void* ptr, int peer) const;

 private:
  struct Mapping {
    CUdeviceptr va = 0;                                 ///< start of the reserved range (rank 0's part)
    size_t stride = 0;                                  ///< bytes per rank (granularity-rounded)
    size_t requested = 0;                               ///< bytes asked for
    uint64_t id = 0;                                    ///< the allocation's number (the same on every rank)
    std::vector<CUmemGenericAllocationHandle> handles;  ///< one per rank (own + imported)
  };
  void unmap(Mapping& m);
  /// alloc()'s second exchange: sends whether this rank mapped every part of alloc `id`, returns the peers that
  /// did not (NOTE [failed symmetric alloc]).
  std::vector<int> exchange_mapped(uint64_t id, bool failed_here);

  CommContext& ctx_;
  int device_;
  size_t capacity_;
  size_t used_ = 0;
  size_t granularity_ = 0;
  uint64_t next_id_ = 0;
  mutable std::mutex mu_;
  std::map<uintptr_t, Mapping> live_;  ///< keyed by this rank's base pointer
};

}  // namespace symcomm::detail
