#pragma once
// Processes of this host: which ranks can watch each other's pids, and whether a pid has ended. The communicators
// that span nodes watch every rank on their own host this way (src/multinode).

#include <string>

namespace symcomm::detail {

/// What makes pids comparable: the same boot of the same machine and the same pid namespace ("<boot id>/<pid
/// namespace>"). Two processes with equal identities see each other's pids.
std::string host_identity();

/// NCCL_HOSTID, NCCL's own variable: the host NCCL sees this process on where set (empty where unset). Read here, not
/// through Config, since it belongs to NCCL (defined in src/core/config.cc, with the other environment reads).
std::string nccl_host_id();

/// True for a process that is gone or a zombie (killed, not yet reaped by its launcher).
bool process_gone(int pid);

}  // namespace symcomm::detail
