#!/usr/bin/env python3
"""torch.distributed collective timings, eager and in a CUDA graph, for comparing NCCL with the NCCL drop-in
library (bench/nccl_shim_torch_compare.py runs this script both ways).

    torchrun --nproc-per-node N bench/nccl_shim_torch_bench.py [--json-out FILE]

Collectives on bfloat16 (reductions: sum): all_reduce (in place), all_gather_into_tensor and
reduce_scatter_tensor (out of place). "bytes" is the size of the largest buffer of the call: the all_reduce
tensor, the all_gather output, the reduce_scatter input (per-rank part: bytes / (2 N) elements, rounded down).
Sizes 4 KiB to 256 MiB in powers of 4.

  eager  `iters` calls between two CUDA events on the current stream after warm-up; microseconds per call,
         median of --trials trials, each trial started after a barrier
  graph  --graph-ops calls captured in one CUDA graph (after eager warm-up on a side stream); the graph replayed
         between two events; microseconds per call, median of --trials trials
Each trial's time is the largest over the ranks. all_reduce works on zeros, so that repeating it in place keeps
the values finite.

Rank 0 prints the records as one JSON list on one line of stdout, [{"op", "bytes", "mode", "us"}, ...], and
writes it to --json-out when given.
"""

import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist

OPS = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"]
SIZES = [4096 * 4**k for k in range(9)]  # 4 KiB .. 256 MiB


def iterations_for(nbytes):
    """Eager calls per trial: 200 up to 320 KiB, then about 64 MiB of traffic per trial, at least 10."""
    return max(10, min(200, (64 << 20) // nbytes))


class Collective:
    """The buffers of one collective at one size and the call that runs it."""

    def __init__(self, op, nbytes, world, device):
        self.op = op
        per_rank = nbytes // (2 * world)
        if op == "all_reduce":
            self.tensor = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device=device)
        elif op == "all_gather_into_tensor":
            self.input = torch.randn(per_rank, device=device).to(torch.bfloat16)
            self.output = torch.empty(per_rank * world, dtype=torch.bfloat16, device=device)
        else:
            self.input = torch.randn(per_rank * world, device=device).to(torch.bfloat16)
            self.output = torch.empty(per_rank, dtype=torch.bfloat16, device=device)

    def __call__(self):
        if self.op == "all_reduce":
            dist.all_reduce(self.tensor)
        elif self.op == "all_gather_into_tensor":
            dist.all_gather_into_tensor(self.output, self.input)
        else:
            dist.reduce_scatter_tensor(self.output, self.input)


def slowest_rank(us, device):
    """The largest value of `us` over the ranks."""
    t = torch.tensor([us], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def median_us_per_op(run_once, repeats, ops_per_run, trials, device):
    """Median over `trials` of the slowest rank's µs per operation; a trial times `repeats` calls of run_once,
    each `ops_per_run` operations."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    results = []
    for _ in range(trials):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        for _ in range(repeats):
            run_once()
        end.record()
        end.synchronize()
        results.append(slowest_rank(start.elapsed_time(end) * 1000.0 / (repeats * ops_per_run), device))
    return statistics.median(results)


def time_eager(call, iters, trials, warmup, device):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    return median_us_per_op(call, iters, 1, trials, device)


def time_graph(call, ops_per_graph, replays, trials, device):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    # thread_local: calls of other threads (the process group's watchdog queries events) do not invalidate
    # the capture.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(ops_per_graph):
            call()
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    us = median_us_per_op(graph.replay, replays, ops_per_graph, trials, device)
    del graph
    return us


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated, default all")
    parser.add_argument("--modes", default="eager,graph", help="eager, graph or both")
    parser.add_argument("--min-bytes", type=int, default=SIZES[0])
    parser.add_argument("--max-bytes", type=int, default=SIZES[-1])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5, help="eager calls before the trials")
    parser.add_argument("--graph-ops", type=int, default=20, help="calls captured in the graph")
    parser.add_argument("--json-out", default=None, help="file for rank 0's JSON list")
    args = parser.parse_args()
    ops = [op for op in args.ops.split(",") if op]
    modes = [m for m in args.modes.split(",") if m]
    if any(op not in OPS for op in ops) or any(m not in ("eager", "graph") for m in modes):
        print(f"ops must be among {OPS}, modes among eager, graph", file=sys.stderr)
        return 2

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group(backend="nccl", device_id=device)
    rank = dist.get_rank()
    world = dist.get_world_size()

    records = []
    for nbytes in SIZES:
        if nbytes < args.min_bytes or nbytes > args.max_bytes:
            continue
        iters = iterations_for(nbytes)
        for op in ops:
            call = Collective(op, nbytes, world, device)
            for mode in modes:
                if mode == "eager":
                    us = time_eager(call, iters, args.trials, args.warmup, device)
                else:
                    replays = max(1, -(-iters // args.graph_ops))
                    us = time_graph(call, args.graph_ops, replays, args.trials, device)
                records.append({"op": op, "bytes": nbytes, "mode": mode, "us": round(us, 3)})
                if rank == 0:
                    print(f"{op:24s} {nbytes:>10d} B {mode:5s} {us:10.2f} us", file=sys.stderr, flush=True)
            del call
            torch.cuda.empty_cache()

    if rank == 0:
        text = json.dumps(records)
        print(text, flush=True)
        if args.json_out:
            with open(args.json_out, "w") as f:
                f.write(text + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
