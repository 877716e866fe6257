#pragma once
// The Open MPI side of symcomm-bench (compiled only with MPI: baseline_mpi.cc). Under mpirun the benchmark
// bootstraps its communicator through MPI and can time MPI's collectives on the same buffers.

#include <memory>

#include "bench.h"

namespace symcomm::bench::mpi {

/// True when this process was started by mpirun (Open MPI variables present).
bool launched_by_mpirun();
void init(int* argc, char*** argv);
void finalize();
std::unique_ptr<Communicator> create_communicator(const CommOptions& options);
/// Whether MPI has this collective/dtype/op (no 16-bit floats, no avg in MPI 4.1).
bool supports(Collective c, DataType d, ReduceOp op);
/// One collective on MPI_COMM_WORLD with symcomm's argument conventions.
void run(Collective c, const void* in, void* out, size_t count, DataType d, ReduceOp op, int root);
void barrier();

}  // namespace symcomm::bench::mpi
