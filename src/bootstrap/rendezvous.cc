// Rendezvous::from_env: torchrun-compatible and Open MPI variables.

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "base/check.h"
#include "base/hash.h"
#include "base/logging.h"
#include "symcomm/communicator.h"

namespace symcomm {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

int env_int(const char* name, int fallback, bool required) {
  const char* v = env(name);
  if (v == nullptr) {
    SYMCOMM_CHECK_ARG(!required, "environment variable {} is not set", name);
    return fallback;
  }
  // Digits only, like Config's variables: strtol alone also takes " 1" and "+1".
  char* end = nullptr;
  long x = std::isdigit(static_cast<unsigned char>(v[0])) ? std::strtol(v, &end, 10) : -1;
  SYMCOMM_CHECK_ARG(end != nullptr && end != v && *end == '\0' && x >= 0 && x <= 1 << 30,
                    "{}='{}' is not a non-negative integer", name, v);
  return static_cast<int>(x);
}

}  // namespace

Rendezvous Rendezvous::from_env() {
  Rendezvous rv;
  bool torchrun = env("RANK") != nullptr;
  bool ompi = !torchrun && env("OMPI_COMM_WORLD_RANK") != nullptr;
  SYMCOMM_CHECK_ARG(torchrun || ompi,
                    "no launcher environment: set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun, symcomm-run) "
                    "or run under mpirun");
  if (torchrun) {
    rv.ranks.rank = env_int("RANK", 0, true);
    rv.ranks.world_size = env_int("WORLD_SIZE", 0, true);
    rv.ranks.local_rank = env_int("LOCAL_RANK", rv.ranks.rank, false);
    rv.ranks.local_world_size = env_int("LOCAL_WORLD_SIZE", rv.ranks.world_size, false);
  } else {
    rv.ranks.rank = env_int("OMPI_COMM_WORLD_RANK", 0, true);
    rv.ranks.world_size = env_int("OMPI_COMM_WORLD_SIZE", 0, true);
    rv.ranks.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", rv.ranks.rank, false);
    rv.ranks.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", rv.ranks.world_size, false);
    SYMCOMM_CHECK_ARG(env("MASTER_ADDR") && env("MASTER_PORT"),
                      "under mpirun without MASTER_ADDR/MASTER_PORT, create the communicator with "
                      "symcomm::create_communicator_mpi() (symcomm/mpi.h)");
  }
  const char* addr = env("MASTER_ADDR");
  SYMCOMM_CHECK_ARG(addr != nullptr, "environment variable MASTER_ADDR is not set");
  rv.store_host = addr == std::string("localhost") ? "127.0.0.1" : addr;
  int port = env_int("MASTER_PORT", 0, true);
  SYMCOMM_CHECK_ARG(port > 0 && port < 65536, "MASTER_PORT={} is not a TCP port", port);
  rv.store_port = static_cast<uint16_t>(port);
  if (const char* token = env("SYMCOMM_TOKEN")) {
    rv.token = token;
  } else {
    const char* run_id = env("TORCHELASTIC_RUN_ID");
    rv.token = fmt::format("derived-{:016x}", detail::fnv1a(fmt::format("{}|{}|{}", run_id ? run_id : "", addr, port)));
    SYMCOMM_LOG_WARN(
        "SYMCOMM_TOKEN is not set: using a token derived from the job's address and run id; "
        "set SYMCOMM_TOKEN (symcomm-run does) so that other local users cannot join the store");
  }
  return rv;
}

}  // namespace symcomm
