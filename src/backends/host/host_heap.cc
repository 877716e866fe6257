#include "backends/host/host_heap.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "base/check.h"

namespace symcomm::detail {
namespace {

constexpr uint32_t kTagHostSegment = 16;

struct SegmentInfo {
  uint64_t total;
  uint64_t scratch_half;
};

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static_assert(sizeof(HostPad) <= HostSegments::kP2pPadOffset, "the collectives' pad overlaps the mailboxes");
static_assert(HostSegments::kP2pPadOffset + sizeof(P2pPad) <= HostSegments::kPadBytes, "mailboxes exceed the pad");

}  // namespace

HostSegments::HostSegments(CommContext& ctx) : me_(ctx.ranks.rank), bases_(ctx.ranks.world_size, nullptr) {
  const int n = ctx.ranks.world_size;
  scratch_half_ = round_up(ctx.config.scratch_bytes / 2, 4096);
  p2p_chunk_ = round_up(ctx.config.p2p_chunk_bytes, 4096);
  p2p_bytes_ = static_cast<size_t>(n) * kP2pSlots * p2p_chunk_;
  heap_bytes_ = round_up(ctx.config.heap_bytes, 4096);
  total_ = kPadBytes + 2 * scratch_half_ + p2p_bytes_ + heap_bytes_;

  int fd = ::memfd_create("symcomm-host-segment", MFD_CLOEXEC);
  SYMCOMM_CHECK_SYS(fd, "memfd_create");
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  SYMCOMM_CHECK_SYS(::ftruncate(fd, static_cast<off_t>(total_)), "ftruncate(memfd)");
  try {
    void* mine = ::mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    SYMCOMM_CHECK(mine != MAP_FAILED, kSystem, "mmap of {} bytes failed: {}", total_, std::strerror(errno));
    bases_[me_] = static_cast<uint8_t*>(mine);
    new (pad(me_)) HostPad{};     // ready = 0: no step published yet
    new (p2p_pad(me_)) P2pPad{};  // nothing posted, consumed or refused

    SegmentInfo info{total_, scratch_half_};
    std::vector<uint8_t> payload(sizeof(info));
    std::memcpy(payload.data(), &info, sizeof(info));
    for (int p = 0; p < n; ++p) {
      if (p != me_) ctx.mesh->send(p, kTagHostSegment, payload, {fd});
    }
    for (int p = 0; p < n; ++p) {
      if (p == me_) continue;
      MeshMessage m = ctx.mesh->receive(p, kTagHostSegment, ctx.deadline(), &ctx.aborted);
      int peer_fd = m.fds.empty() ? -1 : m.fds[0];
      FdCloser peer_closer{peer_fd};
      SegmentInfo theirs{};
      SYMCOMM_CHECK(m.fds.size() == 1 && m.payload.size() == sizeof(theirs), kInternal,
                    "malformed segment message from rank {}", p);
      std::memcpy(&theirs, m.payload.data(), sizeof(theirs));
      SYMCOMM_CHECK(theirs.total == total_ && theirs.scratch_half == scratch_half_, kMismatch,
                    "rank {} has a {}-byte segment with {}-byte scratch halves, rank {} {} and {}: "
                    "SYMCOMM_HEAP_BYTES / SYMCOMM_SCRATCH_BYTES differ across ranks",
                    p, theirs.total, theirs.scratch_half, me_, total_, scratch_half_);
      void* addr = ::mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_SHARED, peer_fd, 0);
      SYMCOMM_CHECK(addr != MAP_FAILED, kSystem, "mmap of rank {}'s segment failed: {}", p, std::strerror(errno));
      bases_[p] = static_cast<uint8_t*>(addr);
    }
  } catch (...) {
    for (uint8_t*& b : bases_) {
      if (b) ::munmap(b, total_);
      b = nullptr;
    }
    throw;
  }
}

HostSegments::~HostSegments() {
  for (uint8_t* b : bases_) {
    if (b) ::munmap(b, total_);
  }
}

std::optional<size_t> HostSegments::own_heap_offset(const void* p, size_t bytes) const {
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto lo = reinterpret_cast<uintptr_t>(heap(me_));
  if (addr < lo || addr - lo > heap_bytes_ || bytes > heap_bytes_ - (addr - lo)) return std::nullopt;
  return heap_offset() + (addr - lo);
}

}  // namespace symcomm::detail
