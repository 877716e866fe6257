"""Runs test_torch.py (symcomm.torch on CPU tensors against gloo) under mpirun with the job declared as fake nodes
(SYMCOMM_FAKE_NODE_SIZE), so that every symcomm process group is a symcomm.MultiNodeCommunicator: symcomm inside
each fake node, MPI between them.

    run_mpi_torch.py --mpiexec mpirun --ranks 4 --fake-node-size 2 [--round-robin] [--min-bytes all_reduce=0,...]
                     [-- pytest args]

torch.distributed's env:// rendezvous gets MASTER_ADDR (the loopback) and MASTER_PORT (a port free when this script
looked) through mpirun's -x; conftest.py sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from Open MPI's
variables. Exit status: pytest's, or 77 (ctest: skipped) when this interpreter has no torch or pytest.
"""

import argparse
import os
import subprocess
import sys

from job_env import free_port


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--fake-node-size", type=int, default=2)
    parser.add_argument("--round-robin", action="store_true",
                        help="SYMCOMM_FAKE_ROUND_ROBIN=1: the fake nodes take the ranks round-robin")
    parser.add_argument("--min-bytes", default="",
                        help="SYMCOMM_NODE_MIN_BYTES: sizes from which calls go hierarchical ('' the compiled-in ones)")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    try:
        import pytest  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: {sys.executable} lacks {e.name} (apt-get install python3-pytest python3-torch)")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               SYMCOMM_FAKE_NODE_SIZE=str(args.fake_node_size), SYMCOMM_NODE_MIN_BYTES=args.min_bytes,
               SYMCOMM_FAKE_ROUND_ROBIN="1" if args.round_robin else "0")
    cmd = [args.mpiexec, "-np", str(args.ranks)]
    for name in ("MASTER_ADDR", "MASTER_PORT", "SYMCOMM_FAKE_NODE_SIZE", "SYMCOMM_NODE_MIN_BYTES",
                 "SYMCOMM_FAKE_ROUND_ROBIN"):
        cmd += ["-x", name]
    cmd += [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--color=no", "--rootdir", here,
            os.path.join(here, "test_torch.py"), *args.pytest_args]
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
