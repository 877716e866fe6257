"""Runs the Python tests (pytest, this folder) under symcomm-run at each given number of ranks: test_torch.py
and test_torch_cuda.py each in a job of its own, the other files in another.

    run_ranks.py --launcher build/tools/symcomm-run --ranks 2 3 [-- extra pytest arguments]

Exit status: 0 all passed, 1 a run failed, 77 (ctest: skipped) when this interpreter has no pytest or numpy.
test_torch.py and test_torch_cuda.py are left out, with a message, where it has no torch; test_torch_cuda.py
skips itself (reported by pytest) without CUDA, NCCL or a GPU per rank.
PYTHONPATH must reach the package symcomm and its compiled module (python/CMakeLists.txt sets it for ctest).
"""

import argparse
import os
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", required=True, help="path of symcomm-run")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--timeout", type=float, default=400, help="seconds per run (symcomm-run --timeout)")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    try:
        import numpy  # noqa: F401
        import pytest  # noqa: F401
    except ImportError as e:
        print(f"python tests skipped: {sys.executable} lacks {e.name} (apt-get install python3-pytest python3-numpy)")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    failed = []
    torch_tests = os.path.join(here, "test_torch.py")
    torch_cuda_tests = os.path.join(here, "test_torch_cuda.py")
    # The torch files run in jobs of their own: torch.distributed's store and symcomm's Communicator.from_env()
    # both serve on MASTER_PORT, and each file makes its default process group once.
    runs = [("python tests", [here, "--ignore", torch_tests, "--ignore", torch_cuda_tests])]
    try:
        import torch.distributed  # noqa: F401
        runs.append(("python torch tests", [torch_tests]))
        runs.append(("python torch CUDA tests", [torch_cuda_tests, "-rs"]))
    except ImportError as e:
        print(f"python torch tests skipped: {sys.executable} lacks {e.name or 'torch'} "
              "(apt-get install python3-torch)")
    for n in args.ranks:
        for name, paths in runs:
            cmd = [args.launcher, "-n", str(n), "--timeout", str(args.timeout), "--", sys.executable, "-m",
                   "pytest", "-q", "-x", "-p", "no:cacheprovider", "--rootdir", here] + paths + args.pytest_args
            print(f"{name} at {n} ranks: {' '.join(cmd)}", flush=True)
            rc = subprocess.call(cmd)
            if rc == 5 and paths[0] == torch_cuda_tests:  # pytest: nothing collected, the file skipped itself
                print(f"{name} at {n} ranks: skipped (the reason is above)", flush=True)
                continue
            print(f"{name} at {n} ranks: {'passed' if rc == 0 else f'FAILED (exit code {rc})'}", flush=True)
            if rc != 0:
                failed.append(f"{name} at {n} ranks")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
