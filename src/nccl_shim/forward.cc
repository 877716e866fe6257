// libsymcomm_nccl's exports: every function of the NCCL 2.28 API under both of its names, each forwarding its
// arguments unchanged to the real NCCL (docs/nccl-drop-in.md). pncclX is the definition and ncclX its weak
// alias, as in libnccl.so.2. The real NCCL calls some of its own public functions through the dynamic linker
// (ncclCommRegister, for one): those calls arrive here too, with NCCL's own communicators, and go back to it
// the same way.
//
// What a call that cannot be forwarded returns (no real library, a function it lacks, a mode this build does
// not have; ncclGetLastError then says which): the result code of real_nccl.cc for ncclResult_t functions, a
// team of zero ranks for ncclTeamWorld / ncclTeamLsa / ncclTeamRail, -1 for ncclTeamRankToWorld /
// ncclTeamRankToLsa / ncclLLA2ACalcSlots, nothing for ncclResetDebugInit.

#include <type_traits>
#include <utility>

#include "nccl_api.h"
#include "real_nccl.h"

namespace symcomm::nccl_shim {
namespace {

template <class Ret>
Ret failed(const Failure& why) noexcept {
  record_failure(why);
  if constexpr (std::is_same_v<Ret, ncclResult_t>) {
    return why.code;
  } else if constexpr (std::is_same_v<Ret, int>) {
    return -1;
  } else if constexpr (std::is_same_v<Ret, ncclTeam_t>) {
    return ncclTeam_t{0, 0, 0};
  } else {
    static_assert(std::is_void_v<Ret>);
  }
}

// Calls the real function `f` (of type Fn) with the caller's arguments as they are. A result that is an
// error makes the real library's text the thread's last error again (clear_shim_error()).
template <class Fn>
struct Real {
  void* f;
  template <class... A>
  auto operator()(A&&... args) const noexcept {
    using Ret = std::invoke_result_t<Fn, A...>;
    if constexpr (std::is_same_v<Ret, ncclResult_t>) {
      const ncclResult_t r = reinterpret_cast<Fn>(f)(std::forward<A>(args)...);
      if (r != ncclSuccess && r != ncclInProgress) [[unlikely]] {
        clear_shim_error();
      }
      return r;
    } else {
      return reinterpret_cast<Fn>(f)(std::forward<A>(args)...);
    }
  }
};

// The text of a result code where the real library is not there to give it.
const char* own_error_string(ncclResult_t result) noexcept {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

}  // namespace
}  // namespace symcomm::nccl_shim

using symcomm::nccl_shim::Failure;
using symcomm::nccl_shim::Target;

// ncclResetDebugInit is declared deprecated in nccl.h; it is defined here all the same, as NCCL exports it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define SYMCOMM_NCCL_FORWARDER(Ret, Name, Params, Args)                \
  extern "C" Ret pnccl##Name Params {                                  \
    Failure why;                                                       \
    void* const f = symcomm::nccl_shim::target(Target::k##Name, &why); \
    if (f == nullptr) [[unlikely]] {                                   \
      return symcomm::nccl_shim::failed<Ret>(why);                     \
    }                                                                  \
    return symcomm::nccl_shim::Real<Ret(*) Params>{f} Args;            \
  }                                                                    \
  extern "C" Ret nccl##Name Params __attribute__((weak, alias("pnccl" #Name)));

SYMCOMM_NCCL_API(SYMCOMM_NCCL_FORWARDER)

// The error strings come from the real library; without one, from the table above. Neither function changes
// the thread's last error: callers ask for both texts of one failure, in either order.
extern "C" const char* pncclGetErrorString(ncclResult_t result) {
  Failure why;
  if (void* f = symcomm::nccl_shim::target(Target::kGetErrorString, &why)) {
    return reinterpret_cast<decltype(&pncclGetErrorString)>(f)(result);
  }
  return symcomm::nccl_shim::own_error_string(result);
}
extern "C" const char* ncclGetErrorString(ncclResult_t result) __attribute__((weak, alias("pncclGetErrorString")));

// The thread's last error: the drop-in library's own where its most recent failure was one of the drop-in
// library's (no real library, a function it lacks, a mode this build does not have), else the real NCCL's.
extern "C" const char* pncclGetLastError(ncclComm_t comm) {
  if (const char* own = symcomm::nccl_shim::shim_error()) return own;
  Failure why;
  if (void* f = symcomm::nccl_shim::target(Target::kGetLastError, &why)) {
    return reinterpret_cast<decltype(&pncclGetLastError)>(f)(comm);
  }
  symcomm::nccl_shim::record_failure(why);
  return symcomm::nccl_shim::shim_error();
}
extern "C" const char* ncclGetLastError(ncclComm_t comm) __attribute__((weak, alias("pncclGetLastError")));

// Exported by libnccl.so.2 without a declaration in its headers: its pncclResetDebugInit calls it through the
// dynamic linker, so with this library loaded first that call arrives here.
extern "C" void ncclResetDebugInitInternal() {
  Failure why;
  if (void* f = symcomm::nccl_shim::target(Target::kResetDebugInitInternal, &why)) {
    reinterpret_cast<void (*)()>(f)();
    return;
  }
  symcomm::nccl_shim::record_failure(why);
}
