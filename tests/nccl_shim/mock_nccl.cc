// A recording mock of libnccl.so.2 for the tests of libsymcomm_nccl: it exports the NCCL 2.28 API under both
// names, as the real library does, and each function records the name it was called by and the bytes of its
// arguments (mock_record.h) into the calling thread's record, then returns the result code the thread chose.
// Every parameter list and the order of each record are written here from nccl.h and nccl_device/*.h, not
// taken from src/nccl_shim/nccl_api.h, so that a mistake there cannot cancel itself out. nccl.h's declarations
// are in scope: a parameter type that differs from the header's does not compile.
//
// Built twice: symcomm_nccl_mock, complete, and (SYMCOMM_NCCL_MOCK_PARTIAL) symcomm_nccl_mock_partial, which
// lacks ncclCommShrink under both names and has ncclAllReduce only under its plain name: what an older or
// different NCCL looks like to the drop-in library.

#include <cstring>
#include <vector>

#include "mock_record.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using symcomm::nccl_mock::Call;
using symcomm::nccl_mock::kMockInt;
using symcomm::nccl_mock::kMockTeam;
using symcomm::nccl_mock::make_call;

thread_local std::vector<Call> t_calls;
thread_local ncclResult_t t_result = ncclSuccess;
thread_local size_t t_id_bytes = sizeof(ncclUniqueId);

template <class... A>
void record(const char* sym, const A&... args) {
  t_calls.push_back(make_call(sym, args...));
}

template <class... A>
ncclResult_t rec(const char* sym, const A&... args) {
  record(sym, args...);
  return t_result;
}

// The bytes of *config (all zero for nullptr): recorded after the pointer, so that the tests see the struct
// arrive as it was passed.
ncclConfig_t config_of(const ncclConfig_t* config) {
  ncclConfig_t c;
  std::memset(&c, 0, sizeof c);
  if (config != nullptr) std::memcpy(&c, config, sizeof c);
  return c;
}

}  // namespace

extern "C" std::vector<Call>* symcomm_nccl_mock_calls() { return &t_calls; }
extern "C" void symcomm_nccl_mock_set_result(ncclResult_t result) { t_result = result; }
extern "C" void symcomm_nccl_mock_set_id_bytes(size_t n) {
  t_id_bytes = n < sizeof(ncclUniqueId) ? n : sizeof(ncclUniqueId);
}
extern "C" const char* symcomm_nccl_mock_error_string(ncclResult_t result) {
  static const char* const kText[] = {"mock: success",        "mock: cuda error",       "mock: system error",
                                      "mock: internal error", "mock: invalid argument", "mock: invalid usage",
                                      "mock: remote error",   "mock: in progress"};
  const int r = static_cast<int>(result);
  return r >= 0 && r < 8 ? kText[r] : "mock: unknown";
}

// Both names of one function; `sym` is the name called.
#define MOCK(Ret, Name, Params, ...)                        \
  extern "C" Ret pnccl##Name Params {                       \
    [[maybe_unused]] const char* const sym = "pnccl" #Name; \
    __VA_ARGS__                                             \
  }                                                         \
  extern "C" Ret nccl##Name Params {                        \
    [[maybe_unused]] const char* const sym = "nccl" #Name;  \
    __VA_ARGS__                                             \
  }
// The plain name only.
#define MOCK_PLAIN(Ret, Name, Params, ...)                 \
  extern "C" Ret nccl##Name Params {                       \
    [[maybe_unused]] const char* const sym = "nccl" #Name; \
    __VA_ARGS__                                            \
  }

#ifdef SYMCOMM_NCCL_MOCK_PARTIAL
#define MOCK_ALL_REDUCE MOCK_PLAIN
#else
#define MOCK_ALL_REDUCE MOCK
#endif

MOCK(ncclResult_t, MemAlloc, (void** ptr, size_t size), return rec(sym, ptr, size);)
MOCK(ncclResult_t, MemFree, (void* ptr), return rec(sym, ptr);)
MOCK(ncclResult_t, GetVersion, (int* version), {
  if (version != nullptr) *version = symcomm::nccl_mock::kMockVersion;
  return rec(sym, version);
})
MOCK(ncclResult_t, GetUniqueId, (ncclUniqueId * uniqueId), {
  if (uniqueId != nullptr) {
    std::memset(uniqueId->internal, 0, sizeof *uniqueId);
    std::memset(uniqueId->internal, symcomm::nccl_mock::kMockUniqueIdByte, t_id_bytes);
  }
  return rec(sym, uniqueId);
})
MOCK(ncclResult_t, CommInitRankConfig,
     (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config), {
       if (comm != nullptr) *comm = symcomm::nccl_mock::mock_comm();
       return rec(sym, comm, nranks, commId, rank, config, config_of(config));
     })
MOCK(ncclResult_t, CommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank), {
  if (comm != nullptr) *comm = symcomm::nccl_mock::mock_comm();
  return rec(sym, comm, nranks, commId, rank);
})
MOCK(ncclResult_t, CommInitAll, (ncclComm_t * comm, int ndev, const int* devlist),
     return rec(sym, comm, ndev, devlist);)
MOCK(ncclResult_t, CommFinalize, (ncclComm_t comm), return rec(sym, comm);)
MOCK(ncclResult_t, CommDestroy, (ncclComm_t comm), return rec(sym, comm);)
MOCK(ncclResult_t, CommAbort, (ncclComm_t comm), return rec(sym, comm);)
MOCK(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags), return rec(sym, comm, revokeFlags);)
MOCK(ncclResult_t, CommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),
     return rec(sym, comm, color, key, newcomm, config, config_of(config));)
#ifndef SYMCOMM_NCCL_MOCK_PARTIAL
MOCK(ncclResult_t, CommShrink,
     (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,
      int shrinkFlags),
     return rec(sym, comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);)
#endif
MOCK(ncclResult_t, CommInitRankScalable,
     (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config),
     return rec(sym, newcomm, nranks, myrank, nId, commIds, config);)
MOCK(const char*, GetErrorString, (ncclResult_t result), {
  record(sym, result);
  return symcomm_nccl_mock_error_string(result);
})
MOCK(const char*, GetLastError, (ncclComm_t comm), {
  record(sym, comm);
  return symcomm::nccl_mock::kMockLastError;
})
MOCK(void, ResetDebugInit, (), record(sym);)
extern "C" void ncclResetDebugInitInternal() { record("ncclResetDebugInitInternal"); }
MOCK(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError), return rec(sym, comm, asyncError);)
MOCK(ncclResult_t, CommCount, (const ncclComm_t comm, int* count), return rec(sym, comm, count);)
MOCK(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device), return rec(sym, comm, device);)
MOCK(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank), return rec(sym, comm, rank);)
MOCK(ncclResult_t, CommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle),
     return rec(sym, comm, buff, size, handle);)
MOCK(ncclResult_t, CommDeregister, (const ncclComm_t comm, void* handle), return rec(sym, comm, handle);)
MOCK(ncclResult_t, CommWindowRegister, (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags),
     return rec(sym, comm, buff, size, win, winFlags);)
MOCK(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), return rec(sym, comm, win);)
MOCK(ncclResult_t, RedOpCreatePreMulSum,
     (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm),
     return rec(sym, op, scalar, datatype, residence, comm);)
MOCK(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), return rec(sym, op, comm);)
MOCK(ncclResult_t, Reduce,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
      ncclComm_t comm, cudaStream_t stream),
     return rec(sym, sendbuff, recvbuff, count, datatype, op, root, comm, stream);)
MOCK(ncclResult_t, Bcast,
     (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),
     return rec(sym, buff, count, datatype, root, comm, stream);)
MOCK(ncclResult_t, Broadcast,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
      cudaStream_t stream),
     return rec(sym, sendbuff, recvbuff, count, datatype, root, comm, stream);)
MOCK_ALL_REDUCE(ncclResult_t, AllReduce,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                 ncclComm_t comm, cudaStream_t stream),
                return rec(sym, sendbuff, recvbuff, count, datatype, op, comm, stream);)
MOCK(ncclResult_t, ReduceScatter,
     (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
      cudaStream_t stream),
     return rec(sym, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);)
MOCK(ncclResult_t, AllGather,
     (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
      cudaStream_t stream),
     return rec(sym, sendbuff, recvbuff, sendcount, datatype, comm, stream);)
MOCK(ncclResult_t, AlltoAll,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
      cudaStream_t stream),
     return rec(sym, sendbuff, recvbuff, count, datatype, comm, stream);)
MOCK(ncclResult_t, Gather,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
      cudaStream_t stream),
     return rec(sym, sendbuff, recvbuff, count, datatype, root, comm, stream);)
MOCK(ncclResult_t, Scatter,
     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
      cudaStream_t stream),
     return rec(sym, sendbuff, recvbuff, count, datatype, root, comm, stream);)
MOCK(ncclResult_t, Send,
     (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),
     return rec(sym, sendbuff, count, datatype, peer, comm, stream);)
MOCK(ncclResult_t, Recv,
     (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),
     return rec(sym, recvbuff, count, datatype, peer, comm, stream);)
MOCK(ncclResult_t, GroupStart, (), return rec(sym);)
MOCK(ncclResult_t, GroupEnd, (), return rec(sym);)
MOCK(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t * simInfo), return rec(sym, simInfo);)
MOCK(ncclResult_t, DevCommCreate, (ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* outDevComm),
     return rec(sym, comm, reqs, outDevComm);)
MOCK(ncclResult_t, DevCommDestroy, (ncclComm_t comm, ncclDevComm_t const* devComm), return rec(sym, comm, devComm);)
MOCK(ncclTeam_t, TeamWorld, (ncclComm_t comm), {
  record(sym, comm);
  return kMockTeam;
})
MOCK(ncclTeam_t, TeamLsa, (ncclComm_t comm), {
  record(sym, comm);
  return kMockTeam;
})
MOCK(ncclTeam_t, TeamRail, (ncclComm_t comm), {
  record(sym, comm);
  return kMockTeam;
})
MOCK(int, TeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank), {
  record(sym, comm, team, rank);
  return kMockInt;
})
MOCK(int, TeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank), {
  record(sym, comm, team, rank);
  return kMockInt;
})
MOCK(ncclResult_t, LsaBarrierCreateRequirement,
     (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq),
     return rec(sym, team, nBarriers, outHandle, outReq);)
#if SYMCOMM_TEST_NCCL_GIN_BARRIER
MOCK(ncclResult_t, GinBarrierCreateRequirement,
     (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t* outHandle,
      ncclDevResourceRequirements_t* outReq),
     return rec(sym, comm, team, nBarriers, outHandle, outReq);)
#endif
MOCK(int, LLA2ACalcSlots, (int maxElts, int maxEltSize), {
  record(sym, maxElts, maxEltSize);
  return kMockInt;
})
MOCK(ncclResult_t, LLA2ACreateRequirement,
     (int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq),
     return rec(sym, nBlocks, nSlots, outHandle, outReq);)
