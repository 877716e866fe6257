// The real NCCL behind libsymcomm_nccl: finding and opening it, resolving its functions, and the text of the
// drop-in library's own failures (what ncclGetLastError returns for them).
#pragma once

#include <atomic>

#include "nccl_api.h"

namespace symcomm::nccl_shim {

// Whether this build has symcomm's own collectives (SYMCOMM_NCCL_SHIM=auto and native-only): built with
// symcomm's CUDA backend.
#ifdef SYMCOMM_NCCL_SHIM_NATIVE
inline constexpr bool kHasNative = true;
#else
inline constexpr bool kHasNative = false;
#endif

// Every function of the real library the drop-in library calls: the table's (nccl_api.h), then the three it
// forwards by hand.
// clang-format off
enum class Target : int {
#define SYMCOMM_NCCL_TARGET_ID(Ret, Name, Params, Args) k##Name,
  SYMCOMM_NCCL_API(SYMCOMM_NCCL_TARGET_ID)
#undef SYMCOMM_NCCL_TARGET_ID
  kGetErrorString,
  kGetLastError,
  kResetDebugInitInternal,  ///< exported by libnccl.so.2 under this name only (no header declares it)
  kCount,
};
// clang-format on

// Why a call could not be forwarded: the result code it returns and the function it wanted.
struct Failure {
  ncclResult_t code = ncclSuccess;
  Target target = Target::kCount;
};

namespace detail {
// Each target's function in the real library once resolved; nullptr until then (and while no real library is
// open), &g_missing where the real library has no such function or it resolves to a drop-in library.
extern std::atomic<void*> g_targets[static_cast<int>(Target::kCount)];
extern char g_missing;
void* resolve(Target t, Failure* why) noexcept;
}  // namespace detail

// The real library's function for `t`, resolved on the first call (thread-safe, without a lock: resolution
// gives the same answer on every thread). nullptr when the call cannot be forwarded; then *why says why, and
// nothing else changed (record_failure() makes it this thread's last error).
inline void* target(Target t, Failure* why) noexcept {
  void* f = detail::g_targets[static_cast<int>(t)].load(std::memory_order_acquire);
  if (f != nullptr && f != &detail::g_missing) [[likely]] {
    return f;
  }
  return detail::resolve(t, why);
}

// Makes `why` the calling thread's last error: shim_error() returns its text until the thread's next call
// that fails in the real library (clear_shim_error()) or in this one.
void record_failure(const Failure& why) noexcept;

// The calling thread's last error where the drop-in library made it, else nullptr. Thread-local: one thread's
// calls never change what another thread's ncclGetLastError returns.
const char* shim_error() noexcept;
// Makes `text` (copied, up to 1023 bytes) the calling thread's last error, as record_failure() does.
void record_text(const char* text) noexcept;
void clear_shim_error() noexcept;

}  // namespace symcomm::nccl_shim
