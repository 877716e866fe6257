// libsymcomm_nccl's exports: every function of the NCCL 2.28 API under both of its names, each forwarding its
// arguments unchanged to the real NCCL (docs/nccl-drop-in.md), except those the native layer hooks (native.h)
// in a build with symcomm's CUDA backend. pncclX is the definition and ncclX its weak alias, as in
// libnccl.so.2. The real NCCL calls some of its own public functions through the dynamic linker
// (ncclCommRegister, for one): those calls arrive here too, with NCCL's own communicators, and go back to it
// the same way.

#include "forward.h"

#include "nccl_api.h"
#include "real_nccl.h"
#ifdef SYMCOMM_NCCL_SHIM_NATIVE
#include "native.h"
#endif

namespace symcomm::nccl_shim {
namespace {

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

// A function with a Hook (native.h) goes to it; the hook forwards what symcomm does not run itself.
#define SYMCOMM_NCCL_FORWARDER(Ret, Name, Params, Args)                                                           \
  extern "C" Ret pnccl##Name Params { return symcomm::nccl_shim::dispatch<Target::k##Name, Ret(*) Params> Args; } \
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
