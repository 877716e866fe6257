// The NCCL 2.28 API that libsymcomm_nccl forwards, as one table: every function that nccl.h and nccl_device.h
// declare and libnccl.so.2 exports, under both of its names (ncclX and pncclX), except ncclGetErrorString and
// ncclGetLastError, whose forwarders also answer for the drop-in library's own failures (forward.cc).
//
// X(Ret, Name, Params, Args): the function pncclName / ncclName returns Ret, takes the parameters Params (as
// declared in nccl.h or nccl_device/*.h, in that order) and is called with Args (the parameter names, in the
// same order). forward.cc defines each function with these parameters where nccl.h's declaration is in scope,
// so a type that differs from the header's does not compile; the recording mock of tests/nccl_shim checks
// that Args pass every parameter in its place.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 0)
#error "libsymcomm_nccl declares the NCCL 2.28 API: it needs nccl.h of NCCL 2.28 or later"
#endif

// ncclGinBarrierCreateRequirement is declared only by the NCCL 2.28 headers that have nccl_device/gin_barrier.h
// (2.28.9 has it; the nccl_device.h installed on the H100 GPU machines, CUDA 13.0, has not). The drop-in library
// defines and exports it only where the header declares it.
#if __has_include(<nccl_device/gin_barrier.h>)
#define SYMCOMM_NCCL_GIN_BARRIER(X)                                                      \
  X(ncclResult_t, GinBarrierCreateRequirement,                                           \
    (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t* outHandle, \
     ncclDevResourceRequirements_t* outReq),                                             \
    (comm, team, nBarriers, outHandle, outReq))
#else
#define SYMCOMM_NCCL_GIN_BARRIER(X)
#endif

// clang-format off
#define SYMCOMM_NCCL_API(X)                                                                                      \
  /* nccl.h: memory, version, communicators */                                                                   \
  X(ncclResult_t, MemAlloc, (void** ptr, size_t size), (ptr, size))                                               \
  X(ncclResult_t, MemFree, (void* ptr), (ptr))                                                                    \
  X(ncclResult_t, GetVersion, (int* version), (version))                                                          \
  X(ncclResult_t, GetUniqueId, (ncclUniqueId* uniqueId), (uniqueId))                                              \
  X(ncclResult_t, CommInitRankConfig,                                                                             \
    (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config),                          \
    (comm, nranks, commId, rank, config))                                                                         \
  X(ncclResult_t, CommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank),                    \
    (comm, nranks, commId, rank))                                                                                 \
  X(ncclResult_t, CommInitAll, (ncclComm_t* comm, int ndev, const int* devlist), (comm, ndev, devlist))           \
  X(ncclResult_t, CommFinalize, (ncclComm_t comm), (comm))                                                        \
  X(ncclResult_t, CommDestroy, (ncclComm_t comm), (comm))                                                         \
  X(ncclResult_t, CommAbort, (ncclComm_t comm), (comm))                                                           \
  X(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags))                            \
  X(ncclResult_t, CommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),    \
    (comm, color, key, newcomm, config))                                                                          \
  X(ncclResult_t, CommShrink,                                                                                     \
    (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,    \
     int shrinkFlags),                                                                                            \
    (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags))                                    \
  X(ncclResult_t, CommInitRankScalable,                                                                           \
    (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config),          \
    (newcomm, nranks, myrank, nId, commIds, config))                                                              \
  X(void, ResetDebugInit, (), ())                                                                                 \
  X(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError), (comm, asyncError))             \
  X(ncclResult_t, CommCount, (const ncclComm_t comm, int* count), (comm, count))                                  \
  X(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device), (comm, device))                             \
  X(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank), (comm, rank))                                 \
  X(ncclResult_t, CommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle),                  \
    (comm, buff, size, handle))                                                                                   \
  X(ncclResult_t, CommDeregister, (const ncclComm_t comm, void* handle), (comm, handle))                          \
  X(ncclResult_t, CommWindowRegister, (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags), \
    (comm, buff, size, win, winFlags))                                                                            \
  X(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win))                         \
  /* nccl.h: reduction operators */                                                                              \
  X(ncclResult_t, RedOpCreatePreMulSum,                                                                           \
    (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm),   \
    (op, scalar, datatype, residence, comm))                                                                      \
  X(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm))                                    \
  /* nccl.h: collectives, point to point, groups */                                                              \
  X(ncclResult_t, Reduce,                                                                                         \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,       \
     ncclComm_t comm, cudaStream_t stream),                                                                       \
    (sendbuff, recvbuff, count, datatype, op, root, comm, stream))                                                \
  X(ncclResult_t, Bcast,                                                                                          \
    (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),          \
    (buff, count, datatype, root, comm, stream))                                                                  \
  X(ncclResult_t, Broadcast,                                                                                      \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,      \
     cudaStream_t stream),                                                                                        \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                    \
  X(ncclResult_t, AllReduce,                                                                                      \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,                 \
     ncclComm_t comm, cudaStream_t stream),                                                                       \
    (sendbuff, recvbuff, count, datatype, op, comm, stream))                                                      \
  X(ncclResult_t, ReduceScatter,                                                                                  \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,             \
     ncclComm_t comm, cudaStream_t stream),                                                                       \
    (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))                                                  \
  X(ncclResult_t, AllGather,                                                                                      \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,            \
     cudaStream_t stream),                                                                                        \
    (sendbuff, recvbuff, sendcount, datatype, comm, stream))                                                      \
  X(ncclResult_t, AlltoAll,                                                                                       \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,                \
     cudaStream_t stream),                                                                                        \
    (sendbuff, recvbuff, count, datatype, comm, stream))                                                          \
  X(ncclResult_t, Gather,                                                                                         \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,      \
     cudaStream_t stream),                                                                                        \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                    \
  X(ncclResult_t, Scatter,                                                                                        \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,      \
     cudaStream_t stream),                                                                                        \
    (sendbuff, recvbuff, count, datatype, root, comm, stream))                                                    \
  X(ncclResult_t, Send,                                                                                           \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream), \
    (sendbuff, count, datatype, peer, comm, stream))                                                              \
  X(ncclResult_t, Recv,                                                                                           \
    (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream),      \
    (recvbuff, count, datatype, peer, comm, stream))                                                              \
  X(ncclResult_t, GroupStart, (), ())                                                                             \
  X(ncclResult_t, GroupEnd, (), ())                                                                               \
  X(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t* simInfo), (simInfo))                                         \
  /* nccl_device headers: device communicators, teams and their resources (host functions) */                    \
  X(ncclResult_t, DevCommCreate,                                                                                  \
    (ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* outDevComm),                          \
    (comm, reqs, outDevComm))                                                                                     \
  X(ncclResult_t, DevCommDestroy, (ncclComm_t comm, ncclDevComm_t const* devComm), (comm, devComm))               \
  X(ncclTeam_t, TeamWorld, (ncclComm_t comm), (comm))                                                             \
  X(ncclTeam_t, TeamLsa, (ncclComm_t comm), (comm))                                                               \
  X(ncclTeam_t, TeamRail, (ncclComm_t comm), (comm))                                                              \
  X(int, TeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank), (comm, team, rank))                       \
  X(int, TeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank), (comm, team, rank))                         \
  X(ncclResult_t, LsaBarrierCreateRequirement,                                                                    \
    (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq),   \
    (team, nBarriers, outHandle, outReq))                                                                         \
  SYMCOMM_NCCL_GIN_BARRIER(X)                                                                                     \
  X(int, LLA2ACalcSlots, (int maxElts, int maxEltSize), (maxElts, maxEltSize))                                    \
  X(ncclResult_t, LLA2ACreateRequirement,                                                                         \
    (int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq),               \
    (nBlocks, nSlots, outHandle, outReq))
// clang-format on
