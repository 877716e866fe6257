#pragma once
/// \file mpi.h
/// Creating a communicator under mpirun (library symcomm::symcomm_mpi, built when MPI is found).

#include <mpi.h>

#include <memory>

#include "symcomm/communicator.h"

namespace symcomm {

/// Collective over `comm`, whose ranks must all run on one node: rank 0 starts the rendezvous store on a
/// free loopback port with a fresh random token and broadcasts both through MPI; every rank then creates
/// the communicator (rank r of `comm` is symcomm rank r). MPI must be initialised.
std::unique_ptr<Communicator> create_communicator_mpi(MPI_Comm comm, const CommOptions& options = {});

}  // namespace symcomm
