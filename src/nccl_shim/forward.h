// Forwarding one call to the real NCCL, for the exports (forward.cc) and for the native layer (native.cc), which
// forwards what symcomm does not run itself.
#pragma once

#include <type_traits>
#include <utility>

#include "real_nccl.h"

namespace symcomm::nccl_shim {

// The native layer's replacement of an export (native.h specialises it: value true and a static call()).
template <Target T>
struct Hook : std::false_type {};

// What a call that cannot be forwarded returns (no real library, a function it lacks, a refused mode;
// ncclGetLastError then says which): the result code of real_nccl.cc for ncclResult_t functions, a team of zero
// ranks for ncclTeamWorld / ncclTeamLsa / ncclTeamRail, -1 for ncclTeamRankToWorld / ncclTeamRankToLsa /
// ncclLLA2ACalcSlots, nothing for ncclResetDebugInit.
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

// Calls the real function for T (of type Fn) with the caller's arguments as they are. A result that is an error
// makes the real library's text the thread's last error again (clear_shim_error()).
template <Target T, class Fn, class... A>
auto forward_call(A&&... args) noexcept {
  using Ret = std::invoke_result_t<Fn, A...>;
  Failure why;
  void* const f = target(T, &why);
  if (f == nullptr) [[unlikely]] {
    return failed<Ret>(why);
  }
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

// An export's body: the hook where there is one, else forward_call.
template <Target T, class Fn, class... A>
auto dispatch(A&&... args) noexcept {
  if constexpr (Hook<T>::value) {
    return Hook<T>::call(std::forward<A>(args)...);
  } else {
    return forward_call<T, Fn>(std::forward<A>(args)...);
  }
}

}  // namespace symcomm::nccl_shim
