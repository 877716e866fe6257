#!/usr/bin/env python3
"""symcomm.torch on CPU tensors beside gloo in one run: torch.distributed.all_reduce of float32 (sum, in place) on
the "symcomm" default group and on a gloo group over the same ranks.

    symcomm-run -n 2 -- python3 bench/torch_cpu_bench.py [--json FILE]

Sizes 64 KiB to 64 MiB in powers of 4; for each, `iters` calls after warm-up, microseconds per call, the median of
--trials trials, each the slowest rank's and started after a barrier. Rank 0 prints a table with gloo / symcomm
(the speed-up) and one JSON line [{"backend", "bytes", "us"}, ...] (written to --json too).
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch_bench_common import emit, slowest

import symcomm.torch  # noqa: F401 - registers the backend

SIZES = [65536 * 4**k for k in range(6)]  # 64 KiB .. 64 MiB


def iterations_for(nbytes):
    return max(5, min(200, (256 << 20) // nbytes))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    dist.init_process_group(backend="symcomm")
    gloo = dist.new_group(backend="gloo")
    records = []
    for nbytes in SIZES:
        x = torch.zeros(nbytes // 4)
        iters = iterations_for(nbytes)
        for backend, group in (("symcomm", None), ("gloo", gloo)):
            for _ in range(3):
                dist.all_reduce(x, group=group)
            times = []
            for _ in range(args.trials):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(x, group=group)
                times.append(slowest((time.perf_counter() - t0) / iters * 1e6))
            records.append({"backend": backend, "bytes": nbytes, "us": round(statistics.median(times), 2)})
    if dist.get_rank() == 0:
        by = {(r["backend"], r["bytes"]): r["us"] for r in records}
        print(f"{'bytes':>10} {'symcomm us':>12} {'gloo us':>12} {'gloo/symcomm':>13}")
        for nbytes in SIZES:
            s, g = by[("symcomm", nbytes)], by[("gloo", nbytes)]
            print(f"{nbytes:>10} {s:>12.1f} {g:>12.1f} {g / s:>13.2f}")
        emit(records, args.json)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
