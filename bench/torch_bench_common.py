"""Pieces shared by the torch.distributed benchmarks of this folder (torch_backend_bench.py, torch_cpu_bench.py),
which run beside it (python3 bench/<script>.py puts this folder on sys.path)."""

import json

import torch
import torch.distributed as dist


def slowest(value):
    """The largest of every rank's value (an all-reduce of a CPU tensor on the default group)."""
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def emit(records, path):
    """Prints the records as one JSON line and writes that line to `path` when given."""
    line = json.dumps(records)
    print(line)
    if path:
        with open(path, "w") as f:
            f.write(line + "\n")
