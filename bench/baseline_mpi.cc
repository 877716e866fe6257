#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "mpi_support.h"
#include "symcomm/mpi.h"

namespace symcomm::bench::mpi {
namespace {

MPI_Datatype to_mpi(DataType d) {
  switch (d) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    default: throw std::invalid_argument("MPI has no 16-bit float type");
  }
}

MPI_Op to_mpi(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kProd: return MPI_PROD;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    default: throw std::invalid_argument("MPI has no avg reduction");
  }
}

const void* in_or_in_place(const void* in, const void* out) { return in == out ? MPI_IN_PLACE : in; }

}  // namespace

bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_RANK") != nullptr; }

void init(int* argc, char*** argv) { MPI_Init(argc, argv); }
void finalize() { MPI_Finalize(); }

std::unique_ptr<Communicator> create_communicator(const CommOptions& options) {
  return create_communicator_mpi(MPI_COMM_WORLD, options);
}

bool supports(Collective c, DataType d, ReduceOp op) {
  if (d == DataType::kFloat16 || d == DataType::kBFloat16) return false;
  bool reduces = c == Collective::kAllReduce || c == Collective::kReduceScatter;
  return !reduces || op != ReduceOp::kAvg;
}

void run(Collective c, const void* in, void* out, size_t count, DataType d, ReduceOp op, int root) {
  int n = static_cast<int>(count);
  switch (c) {
    case Collective::kAllReduce:
      MPI_Allreduce(in_or_in_place(in, out), out, n, to_mpi(d), to_mpi(op), MPI_COMM_WORLD);
      break;
    case Collective::kAllGather: MPI_Allgather(in, n, to_mpi(d), out, n, to_mpi(d), MPI_COMM_WORLD); break;
    case Collective::kReduceScatter: MPI_Reduce_scatter_block(in, out, n, to_mpi(d), to_mpi(op), MPI_COMM_WORLD); break;
    case Collective::kBroadcast: {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank == root && in != out) std::memcpy(out, in, count * dtype_size(d));
      MPI_Bcast(out, n, to_mpi(d), root, MPI_COMM_WORLD);
      break;
    }
    case Collective::kAllToAll: MPI_Alltoall(in, n, to_mpi(d), out, n, to_mpi(d), MPI_COMM_WORLD); break;
    case Collective::kBarrier: MPI_Barrier(MPI_COMM_WORLD); break;
  }
}

void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

}  // namespace symcomm::bench::mpi
