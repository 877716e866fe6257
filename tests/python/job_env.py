"""What the Python tests' launchers and jobs share: a free loopback port for a rendezvous, and the rendezvous
variables of a rank that mpirun started (taken from Open MPI's)."""

import os
import socket


def free_port():
    """A loopback TCP port that was free when asked (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ranks_from_open_mpi():
    """Sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from Open MPI's variables, where mpirun started this
    process and RANK is not set (torch.distributed's env:// rendezvous reads them)."""
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" not in os.environ:
        return
    for ours, theirs in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                         ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
                         ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")):
        os.environ[ours] = os.environ[theirs]
