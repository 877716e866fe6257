// What the recording mock NCCL (mock_nccl.cc) saw, shared by the mock and the tests that read it: each call's
// symbol name and the object representation of each argument, in parameter order.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

// Whether nccl_device.h declares ncclGinBarrierCreateRequirement (not every NCCL 2.28 header does).
#if __has_include(<nccl_device/gin_barrier.h>)
#define SYMCOMM_TEST_NCCL_GIN_BARRIER 1
#else
#define SYMCOMM_TEST_NCCL_GIN_BARRIER 0
#endif

namespace symcomm::nccl_mock {

struct Call {
  std::string name;                 ///< the symbol called: "pncclAllReduce", "ncclAllReduce", ...
  std::vector<unsigned char> args;  ///< each argument's bytes, in parameter order
  bool operator==(const Call&) const = default;
};

template <class T>
void append_bytes(std::vector<unsigned char>& out, const T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  const auto* p = reinterpret_cast<const unsigned char*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

template <class... A>
Call make_call(std::string name, const A&... args) {
  Call call{std::move(name), {}};
  (append_bytes(call.args, args), ...);
  return call;
}

// The values the mock answers with, besides the result code the test chooses (symcomm_nccl_mock_set_result).
inline constexpr int kMockVersion = 29917;          ///< written by ncclGetVersion; no NCCL release has it
inline constexpr char kMockUniqueIdByte = 0x5a;     ///< the bytes of the id ncclGetUniqueId writes
inline constexpr int kMockInt = 4711;               ///< ncclTeamRankToWorld, ncclTeamRankToLsa, ncclLLA2ACalcSlots
inline constexpr ncclTeam_t kMockTeam = {8, 3, 2};  ///< ncclTeamWorld, ncclTeamLsa, ncclTeamRail
inline constexpr const char* kMockLastError = "mock NCCL: last error";
inline ncclComm_t mock_comm() { return reinterpret_cast<ncclComm_t>(0x6d6f636bULL); }  ///< from ncclCommInitRank*

}  // namespace symcomm::nccl_mock

// Exported by the mock, found with dlsym: the calling thread's record of calls, and the result code its
// ncclResult_t functions return on the calling thread (ncclSuccess until set). Both thread-local, so that
// two threads' calls can be told apart.
extern "C" std::vector<symcomm::nccl_mock::Call>* symcomm_nccl_mock_calls();
extern "C" void symcomm_nccl_mock_set_result(ncclResult_t result);
// How many leading bytes of the id ncclGetUniqueId fills with kMockUniqueIdByte on the calling thread; the rest
// it sets to zero, as NCCL 2.28 leaves all but its first 40 (every byte until set).
extern "C" void symcomm_nccl_mock_set_id_bytes(size_t n);
// The mock's text for a result code (what its ncclGetErrorString returns).
extern "C" const char* symcomm_nccl_mock_error_string(ncclResult_t result);
