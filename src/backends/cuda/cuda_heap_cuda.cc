#include "backends/cuda/cuda_heap_cuda.h"

#include <cuda_runtime_api.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <string>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/debug_fault.h"
#include "base/driver_api_cuda.h"
#include "base/logging.h"
#include "base/memory_ledger.h"

namespace symcomm::detail {
namespace {

constexpr uint32_t kTagCudaHeap = 32;

struct AllocMsg {
  uint64_t id;
  uint64_t stride;
  uint64_t requested;
  uint64_t failed;  ///< nonzero: this rank could not make its part (no fd follows); NOTE [failed symmetric alloc]
};

/// The second message of every alloc: whether the sender mapped every part (NOTE [failed symmetric alloc]).
struct MappedMsg {
  uint64_t id;
  uint64_t failed;
};

CUmemAllocationProp allocation_prop(int device) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Closes an fd on scope exit.
struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

CudaHeap::CudaHeap(CommContext& ctx, int device, size_t capacity) : ctx_(ctx), device_(device), capacity_(capacity) {
  CUmemAllocationProp prop = allocation_prop(device_);
  SYMCOMM_CU_CHECK(driver().mem_get_granularity(&granularity_, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (granularity_ == 0) granularity_ = size_t{2} << 20;
}

CudaHeap::~CudaHeap() {
  std::lock_guard lock(mu_);
  for (auto& [base, m] : live_) unmap(m);
  live_.clear();
}

void CudaHeap::unmap(Mapping& m) {
  const DriverApi& d = driver();
  int n = static_cast<int>(m.handles.size());
  // Best effort: teardown must not throw; a failure here leaks address space, not peers' memory.
  for (int p = 0; p < n; ++p) {
    if (m.handles[p] == 0) continue;
    d.mem_unmap(m.va + p * m.stride, m.stride);
    d.mem_release(m.handles[p]);
    ledger_remove(device_, p == ctx_.ranks.rank ? MemoryKind::kDevice : MemoryKind::kPeerMapped, m.stride);
  }
  if (m.va) d.mem_address_free(m.va, m.stride * ctx_.ranks.world_size);
  m.handles.clear();
  m.va = 0;
}

// NOTE [failed symmetric alloc] alloc() is collective, and a rank can fail its own part (out of device memory
// is the usual case: ranks on one GPU, or GPUs with other tenants). Every rank therefore sends every peer a
// message for every allocation, {failed} without an fd when its part could not be made, and receives every
// peer's before it decides. So all ranks fail the same allocation, none waits out the deadline for an fd
// that will not come, and the next allocation finds no stale message (the communicator stays usable). The
// rank that failed throws its own error; the others throw one naming it (kCuda, ranks() = the failed ranks).
// Importing or mapping a peer's part can fail too, after the first exchange (the driver, page tables under
// memory pressure), on one rank only: so every rank then sends every peer a second message, whether it mapped
// every part, receives all of the peers', and all ranks fail that allocation alike in the same way. The
// second exchange costs one more round trip per alloc(), which runs at set-up, not per collective.
// Out of memory is reported with the request, what the driver says is free, and what symcomm already holds.
void* CudaHeap::alloc(size_t bytes) {
  SYMCOMM_CHECK_ARG(bytes > 0, "alloc(0)");
  const DriverApi& d = driver();
  const int n = ctx_.ranks.world_size, me = ctx_.ranks.rank;
  size_t stride = (bytes + granularity_ - 1) / granularity_ * granularity_;
  std::lock_guard lock(mu_);
  SYMCOMM_CHECK_ARG(used_ + stride <= capacity_,
                    "symmetric heap exhausted: {} bytes in use, {} requested, capacity {} (Config::heap_bytes)", used_,
                    stride, capacity_);
  DeviceScope on_device(device_);
  Mapping m;
  m.stride = stride;
  m.requested = bytes;
  m.handles.assign(n, 0);
  uint64_t id = next_id_++;
  m.id = id;
  try {
    // This rank's part. A failure is sent to the peers before it is thrown.
    std::exception_ptr own_error;
    FdGuard own;
    try {
      CUmemAllocationProp prop = allocation_prop(device_);
      const CUresult made = d.mem_create(&m.handles[me], stride, &prop, 0);
      if (made == CUDA_ERROR_OUT_OF_MEMORY) {
        size_t free = 0, total = 0;
        if (cudaMemGetInfo(&free, &total) != cudaSuccess) cudaGetLastError();
        throw Error(ErrorCode::kCuda,
                    fmt::format("rank {}: out of GPU memory on device {} for symmetric alloc #{} of {} bytes ({} with "
                                "the heap's rounding): the driver reports {} of {} bytes free; symcomm already holds "
                                "{} there",
                                me, device_, id, bytes, stride, free, total, to_string(cuda_memory_use(device_))),
                    __FILE__, __LINE__, {me});
      }
      SYMCOMM_CU_CHECK(made);
      ledger_add(device_, MemoryKind::kDevice, stride);  // unmap() takes back every handle it releases
      SYMCOMM_CU_CHECK(d.mem_export(&own.fd, m.handles[me], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      SYMCOMM_CU_CHECK(d.mem_address_reserve(&m.va, stride * n, granularity_, 0, 0));
      SYMCOMM_CU_CHECK(d.mem_map(m.va + me * stride, stride, 0, m.handles[me], 0));
    } catch (...) {
      own_error = std::current_exception();
    }

    AllocMsg msg{id, stride, bytes, own_error ? 1u : 0u};
    std::vector<uint8_t> payload(sizeof(msg));
    std::memcpy(payload.data(), &msg, sizeof(msg));
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      if (own_error) {
        ctx_.mesh->send(p, kTagCudaHeap, payload);
      } else {
        ctx_.mesh->send(p, kTagCudaHeap, payload, {own.fd});
      }
    }
    // Every peer's message, whatever came before (NOTE [failed symmetric alloc]); peers' parts are mapped only
    // while everything so far went well.
    std::vector<int> failed;
    std::string mismatch;
    int mismatched = -1;
    std::exception_ptr map_error;  // importing or mapping a peer's part failed here
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      MeshMessage r = ctx_.mesh->receive(p, kTagCudaHeap, ctx_.deadline(), &ctx_.aborted);
      FdGuard peer;
      if (!r.fds.empty()) peer.fd = r.fds[0];
      for (size_t i = 1; i < r.fds.size(); ++i) ::close(r.fds[i]);
      AllocMsg pm{};
      if (r.payload.size() == sizeof(pm)) std::memcpy(&pm, r.payload.data(), sizeof(pm));
      if (r.payload.size() == sizeof(pm) && pm.id == id && pm.failed) {
        failed.push_back(p);
        continue;
      }
      if (r.payload.size() != sizeof(pm) || pm.id != id || pm.requested != bytes || pm.stride != stride ||
          peer.fd < 0) {
        if (mismatched < 0) {
          mismatched = p;
          mismatch = fmt::format("rank {}: symmetric alloc #{} of {} bytes does not match rank {}'s (#{} of {} bytes)",
                                 me, id, bytes, p, pm.id, pm.requested);
        }
        continue;
      }
      if (own_error || !failed.empty() || mismatched >= 0 || map_error) continue;
      try {
        SYMCOMM_CHECK(!debug_fault("heap_import", me), kCuda,
                      "rank {}: cannot import rank {}'s part of symmetric alloc #{} (SYMCOMM_DEBUG_FAULT)", me, p, id);
        SYMCOMM_CU_CHECK(d.mem_import(&m.handles[p], reinterpret_cast<void*>(static_cast<uintptr_t>(peer.fd)),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        ledger_add(device_, MemoryKind::kPeerMapped, stride);
        SYMCOMM_CU_CHECK(d.mem_map(m.va + p * stride, stride, 0, m.handles[p], 0));
      } catch (...) {
        map_error = std::current_exception();
      }
    }
    if (!own_error && failed.empty() && mismatched < 0 && !map_error) {
      try {
        CUmemAccessDesc access;
        std::memset(&access, 0, sizeof(access));
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = device_;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        SYMCOMM_CU_CHECK(d.mem_set_access(m.va, stride * n, &access, 1));
      } catch (...) {
        map_error = std::current_exception();
      }
    }
    // The second exchange: whether each rank mapped every part (NOTE [failed symmetric alloc]).
    const std::vector<int> unmapped = exchange_mapped(id, map_error != nullptr);
    if (own_error) std::rethrow_exception(own_error);
    if (mismatched >= 0) throw Error(ErrorCode::kMismatch, mismatch, __FILE__, __LINE__, {mismatched});
    if (!failed.empty()) {
      throw Error(ErrorCode::kCuda,
                  fmt::format("rank {}: symmetric alloc #{} of {} bytes failed: rank(s) {} could not allocate their "
                              "part (see their errors)",
                              me, id, bytes, fmt::join(failed, ", ")),
                  __FILE__, __LINE__, failed);
    }
    if (map_error) std::rethrow_exception(map_error);
    if (!unmapped.empty()) {
      throw Error(ErrorCode::kCuda,
                  fmt::format("rank {}: symmetric alloc #{} of {} bytes failed: rank(s) {} could not map the peers' "
                              "parts (see their errors)",
                              me, id, bytes, fmt::join(unmapped, ", ")),
                  __FILE__, __LINE__, unmapped);
    }
  } catch (...) {
    unmap(m);
    throw;
  }
  char* base = reinterpret_cast<char*>(m.va + me * stride);
  used_ += stride;
  live_.emplace(reinterpret_cast<uintptr_t>(base), std::move(m));
  SYMCOMM_LOG_DEBUG("cuda heap: alloc #{} {} bytes at {} (stride {})", id, bytes, static_cast<void*>(base), stride);
  return base;
}

std::vector<int> CudaHeap::exchange_mapped(uint64_t id, bool failed_here) {
  const MappedMsg msg{id, failed_here ? 1u : 0u};
  std::vector<uint8_t> payload(sizeof(msg));
  std::memcpy(payload.data(), &msg, sizeof(msg));
  const auto all = ctx_.mesh_all_gather(kTagCudaHeap, payload);
  std::vector<int> failed;
  for (int p = 0; p < static_cast<int>(all.size()); ++p) {
    MappedMsg pm{};
    SYMCOMM_CHECK(all[p].size() == sizeof(pm), kInternal,
                  "rank {}: symmetric alloc #{}: rank {} sent a {}-byte message where its mapping result belongs",
                  ctx_.ranks.rank, id, p, all[p].size());
    std::memcpy(&pm, all[p].data(), sizeof(pm));
    SYMCOMM_CHECK(pm.id == id, kInternal, "rank {}: symmetric alloc #{}: rank {} reported on alloc #{}",
                  ctx_.ranks.rank, id, p, pm.id);
    if (pm.failed && p != ctx_.ranks.rank) failed.push_back(p);
  }
  return failed;
}

void CudaHeap::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  SYMCOMM_CHECK_ARG(it != live_.end(), "free({}): not a pointer returned by alloc()", ptr);
  used_ -= it->second.stride;
  unmap(it->second);
  live_.erase(it);
}

bool CudaHeap::find(const void* ptr, size_t bytes, char** base, size_t* stride, uint64_t* place) const {
  uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(mu_);
  auto it = live_.upper_bound(p);
  if (it == live_.begin()) return false;
  --it;
  if (p < it->first || p + bytes > it->first + it->second.requested) return false;
  *base = reinterpret_cast<char*>(it->first);
  *stride = it->second.stride;
  if (place) {
    // splitmix64's finaliser over the number, then over that and the offset
    auto mix = [](uint64_t z) {
      z += 0x9e3779b97f4a7c15ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return z ^ (z >> 31);
    };
    const uint64_t z = mix(mix(it->second.id) ^ (p - it->first));
    *place = z ? z : 1;
  }
  return true;
}

void* CudaHeap::peer_ptr(const void* ptr, int peer) const {
  char* base = nullptr;
  size_t stride = 0;
  if (peer < 0 || peer >= ctx_.ranks.world_size || !find(ptr, 0, &base, &stride)) return nullptr;
  return const_cast<char*>(static_cast<const char*>(ptr)) +
         (static_cast<ptrdiff_t>(peer) - ctx_.ranks.rank) * static_cast<ptrdiff_t>(stride);
}

}  // namespace symcomm::detail
