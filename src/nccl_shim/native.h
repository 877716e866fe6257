// The native layer of libsymcomm_nccl (built with symcomm's CUDA backend): the NCCL functions it hooks, each
// with NCCL's signature. A hook runs symcomm's part and forwards the rest (forward_call); none throws.
//
// NOTE [drop-in communicators]
// A communicator made through the drop-in library is the real NCCL's, returned to the caller unchanged;
// where every rank agrees that symcomm can serve it, a symcomm communicator over the same ranks and GPUs lives
// beside it (registry in native.cc), and the collectives that native_plan.h picks run on that one, on the
// caller's stream, reading and writing the caller's buffers. The agreement is two all-reduces (min) over the
// real NCCL communicator, right after its creation: (1) every rank has a stamped id (NOTE [id stamp]) made on
// its own host, a world of 2-64 ranks and the same drop-in settings; (2) every rank created its symcomm
// communicator. Any "no" leaves the communicator forward-only on every rank. Creations that a process groups
// with others (one process driving several GPUs) take part in (1) with "no".
#pragma once

#include "forward.h"
#include "nccl_api.h"

namespace symcomm::nccl_shim::native {

ncclResult_t GetUniqueId(ncclUniqueId* uniqueId) noexcept;
ncclResult_t CommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) noexcept;
ncclResult_t CommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                ncclConfig_t* config) noexcept;
ncclResult_t CommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                  ncclConfig_t* config) noexcept;
ncclResult_t CommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) noexcept;
ncclResult_t CommDestroy(ncclComm_t comm) noexcept;
ncclResult_t CommAbort(ncclComm_t comm) noexcept;
ncclResult_t CommRevoke(ncclComm_t comm, int revokeFlags) noexcept;
ncclResult_t CommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) noexcept;
ncclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                       ncclComm_t comm, cudaStream_t stream) noexcept;
ncclResult_t AllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                       cudaStream_t stream) noexcept;
ncclResult_t ReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) noexcept;
ncclResult_t Broadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream) noexcept;
ncclResult_t Bcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                   cudaStream_t stream) noexcept;
ncclResult_t GroupStart() noexcept;
ncclResult_t GroupEnd() noexcept;

}  // namespace symcomm::nccl_shim::native

namespace symcomm::nccl_shim {

#define SYMCOMM_NCCL_NATIVE_HOOK(Name)            \
  template <>                                     \
  struct Hook<Target::k##Name> : std::true_type { \
    static constexpr auto call = &native::Name;   \
  };
SYMCOMM_NCCL_NATIVE_HOOK(GetUniqueId)
SYMCOMM_NCCL_NATIVE_HOOK(CommInitRank)
SYMCOMM_NCCL_NATIVE_HOOK(CommInitRankConfig)
SYMCOMM_NCCL_NATIVE_HOOK(CommInitRankScalable)
SYMCOMM_NCCL_NATIVE_HOOK(CommSplit)
SYMCOMM_NCCL_NATIVE_HOOK(CommDestroy)
SYMCOMM_NCCL_NATIVE_HOOK(CommAbort)
SYMCOMM_NCCL_NATIVE_HOOK(CommRevoke)
SYMCOMM_NCCL_NATIVE_HOOK(CommGetAsyncError)
SYMCOMM_NCCL_NATIVE_HOOK(AllReduce)
SYMCOMM_NCCL_NATIVE_HOOK(AllGather)
SYMCOMM_NCCL_NATIVE_HOOK(ReduceScatter)
SYMCOMM_NCCL_NATIVE_HOOK(Broadcast)
SYMCOMM_NCCL_NATIVE_HOOK(Bcast)
SYMCOMM_NCCL_NATIVE_HOOK(GroupStart)
SYMCOMM_NCCL_NATIVE_HOOK(GroupEnd)
#undef SYMCOMM_NCCL_NATIVE_HOOK

}  // namespace symcomm::nccl_shim
