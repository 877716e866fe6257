#include <fmt/format.h>

#include <array>
#include <random>

#include "base/check.h"
#include "symcomm/mpi.h"

namespace symcomm {
namespace {

void check_mpi(int rc, const char* what) {
  SYMCOMM_CHECK(rc == MPI_SUCCESS, kSystem, "{} failed with MPI error {}", what, rc);
}

}  // namespace

std::unique_ptr<Communicator> create_communicator_mpi(MPI_Comm comm, const CommOptions& options) {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  SYMCOMM_CHECK_ARG(initialized, "create_communicator_mpi: MPI is not initialised");
  Rendezvous rv;
  check_mpi(MPI_Comm_rank(comm, &rv.ranks.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &rv.ranks.world_size), "MPI_Comm_size");
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  SYMCOMM_CHECK(node_size == rv.ranks.world_size, kUnsupported,
                "symcomm communicators span one node, but this MPI communicator spans several ({} of {} ranks here)",
                node_size, rv.ranks.world_size);
  rv.ranks.local_rank = rv.ranks.rank;
  rv.ranks.local_world_size = rv.ranks.world_size;
  rv.store_host = "127.0.0.1";
  rv.store_port = 0;

  // Rank 0 broadcasts {port, token} once its server is up; the others receive them before creating.
  struct Announcement {
    int32_t port;
    char token[33];
  } ann{};
  if (rv.ranks.rank == 0) {
    std::random_device rd;
    std::string token;
    while (token.size() < 32) token += fmt::format("{:08x}", rd());
    std::snprintf(ann.token, sizeof(ann.token), "%s", token.c_str());
    rv.token = ann.token;
    rv.on_store_started = [&](uint16_t port) {
      ann.port = port;
      check_mpi(MPI_Bcast(&ann, sizeof(ann), MPI_BYTE, 0, comm), "MPI_Bcast");
    };
  } else {
    check_mpi(MPI_Bcast(&ann, sizeof(ann), MPI_BYTE, 0, comm), "MPI_Bcast");
    rv.store_port = static_cast<uint16_t>(ann.port);
    rv.token = ann.token;
  }
  return Communicator::create(rv, options);
}

}  // namespace symcomm
