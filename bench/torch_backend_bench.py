#!/usr/bin/env python3
"""symcomm.torch on CUDA beside NCCL in one run: the cost of a torch.distributed all-reduce through the "symcomm"
backend against the same call through symcomm._core and through torch's NCCL, eager and in a CUDA graph, and
fused_all_gather_matmul against the matmul alone.

    symcomm-run -n 2 -- python3 bench/torch_backend_bench.py [--json FILE]     (or torchrun; one GPU per rank)

All-reduce of bfloat16 zeros (sum, in place), 4 KiB to 1 MiB:
  host   microseconds of host time per call: `iters` calls issued back to back, the clock read before the first
         and after the last call returns (no synchronisation inside)
  host least  the same for runs of 1000 calls, the least of 7 on this rank (other load only adds host time; short
         runs vary by up to 2 x on the GPU machines); symcomm.torch's overhead is this minus _core's
  eager  microseconds per call between two CUDA events around the `iters` calls (host and device together)
  graph  `iters` calls captured in one CUDA graph, replayed between two events; microseconds per call
Each figure is the median of --trials trials, each the largest over the ranks, each after a barrier.
fused: fused_all_gather_matmul of A [M, K] gathered along rows from M / world rows per rank, B [K, N], bfloat16,
against torch.matmul of the whole A with B on one GPU (the work the fused operation hides its all-gather in);
milliseconds, median of --trials trials.

Rank 0 prints a table and one JSON line [{"what", "bytes", "mode", "us"}, ...] (written to --json too).
"""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch_bench_common import emit, slowest

import symcomm.torch as symcomm_torch

SIZES = [4096, 16384, 65536, 262144, 1 << 20]
SUM = symcomm_torch._core.ReduceOp.SUM  # noqa: SLF001


def trial(fn, iters):
    """(host µs per call, event µs per call) of `iters` calls of fn."""
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    host = (time.perf_counter() - t0) / iters * 1e6
    end.record()
    end.synchronize()
    return slowest(host), slowest(start.elapsed_time(end) * 1e3 / iters)


def graph_trial(graph, iters):
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return slowest(start.elapsed_time(end) * 1e3 / iters)


def host_us(fn, iters):
    """Microseconds of host time per call of fn, the least of 7 runs of `iters` calls (this rank only; the least,
    as for any host-time microbenchmark: other load only adds time)."""
    runs = []
    for _ in range(7):
        torch.cuda.synchronize()  # an empty queue: no run waits for the device
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        runs.append((time.perf_counter() - t0) / iters * 1e6)
    torch.cuda.synchronize()
    return min(runs)


def breakdown(x, nccl, iters):
    """Where the host time of dist.all_reduce(x) on the symcomm group goes: the whole call, the process group's
    allreduce() and Work.wait() without torch.distributed's wrapper, and each piece of the process group's call
    alone; NCCL's whole call beside them. [(piece, us)] of this rank."""
    pg = dist.group.WORLD
    core = pg._cuda  # noqa: SLF001 - symcomm.torch's CUDA communicator
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    sync = dist.AllreduceOptions()  # dist.all_reduce's options for async_op=False (torch 2.x: no Work comes back)
    if hasattr(opts, "asyncOp"):
        opts.asyncOp, sync.asyncOp = True, False
    ptr, index = (x.data_ptr(), x.numel()), x.get_device()
    raw = torch._C._cuda_getCurrentRawStream  # noqa: SLF001
    work = pg.allreduce([x], opts)
    pieces = {
        "dist.all_reduce (symcomm)": lambda: dist.all_reduce(x),
        "dist.all_reduce (nccl)": lambda: dist.all_reduce(x, group=nccl),
        "pg.allreduce + wait": lambda: pg.allreduce([x], opts).wait(),
        "pg.allreduce": lambda: pg.allreduce([x], opts),
        "pg.allreduce, synchronous": lambda: pg.allreduce([x], sync),
        "pg.allreduce, general path": lambda: pg.allreduce([x]),
        "_core all_reduce": lambda: core.all_reduce(ptr, ptr, SUM, False, "bfloat16", raw(index)),
        "AllreduceOptions()": dist.AllreduceOptions,
        "opts.reduceOp = SUM": lambda: setattr(opts, "reduceOp", dist.ReduceOp.SUM),
        "_reduce_op": lambda: symcomm_torch._reduce_op(opts, x),  # noqa: SLF001
        "_checked": lambda: symcomm_torch._checked(x, ""),  # noqa: SLF001
        "_numpy": lambda: symcomm_torch._numpy(x),  # noqa: SLF001
        "_stream": lambda: symcomm_torch._stream(x),  # noqa: SLF001
        "raw stream query": lambda: raw(index),
        "Work()": lambda: symcomm_torch.Work(None, [x], None, False, core),
        "Work.wait()": work.wait,
        "comm.check()": core.check,
        "x.get_device()": x.get_device,
        "x.data_ptr()": x.data_ptr,
    }
    timed = [(name, host_us(fn, iters)) for name, fn in pieces.items()]
    # torch.distributed.all_reduce's own Python: the call with the group's allreduce a no-op.
    pg.allreduce = lambda tensors, opts: None
    try:
        timed.append(("dist.all_reduce, no-op group", host_us(lambda: dist.all_reduce(x), iters)))
    finally:
        del pg.allreduce
    return timed


def profile(fn, iters):
    """cProfile's table (functions by own time, the first 25) of `iters` calls of fn: where torch.distributed's
    Python spends the host time of a call."""
    import cProfile  # noqa: PLC0415 - only with --breakdown
    import io  # noqa: PLC0415
    import pstats  # noqa: PLC0415

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(iters):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def capture(fn, iters):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    return graph


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--fused", default="8192,8192,8192", help="M,K,N of the fused all-gather + matmul ('' skips)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the pieces of a 4 KiB dist.all_reduce on this rank (host time)")
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dev = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group(backend="symcomm")
    nccl = dist.new_group(backend="nccl")
    world = dist.get_world_size()
    records = []

    def add(what, nbytes, mode, us):
        records.append({"what": what, "bytes": nbytes, "mode": mode, "us": round(us, 3)})

    for nbytes in SIZES:
        x = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device=dev)
        dist.all_reduce(x)  # makes the CUDA communicator
        core = dist.group.WORLD._cuda  # noqa: SLF001 - symcomm.torch's CUDA communicator
        ptr = (x.data_ptr(), x.numel())
        index = dev.index
        calls = {  # _core with torch's cheapest query of the current stream
            "symcomm._core": lambda: core.all_reduce(ptr, ptr, SUM, False, "bfloat16",
                                                     torch._C._cuda_getCurrentRawStream(index)),  # noqa: SLF001
            "symcomm.torch": lambda: dist.all_reduce(x),
            "nccl": lambda: dist.all_reduce(x, group=nccl),
        }
        for name, fn in calls.items():
            for _ in range(1000):  # warm: the first calls of a size pay for caches, allocations and clocks
                fn()
            results = [trial(fn, args.iters) for _ in range(args.trials)]
            add(name, nbytes, "host", statistics.median(r[0] for r in results))
            add(name, nbytes, "host least", host_us(fn, 1000))
            add(name, nbytes, "eager", statistics.median(r[1] for r in results))
            graph = capture(fn, args.iters)
            add(name, nbytes, "graph", statistics.median(graph_trial(graph, args.iters) for _ in range(args.trials)))
            del graph

    pieces = []
    if args.breakdown:
        x = torch.zeros(2048, dtype=torch.bfloat16, device=dev)
        pieces = breakdown(x, nccl, 2000)
        table = profile(lambda: dist.all_reduce(x), 20000)
        if dist.get_rank() == 0:
            print(table)
        for name, us in pieces:
            add(f"piece: {name}", 4096, "host", us)

    if args.fused:
        m, k, n = (int(v) for v in args.fused.split(","))
        gen = torch.Generator(device=dev).manual_seed(dist.get_rank())
        a_shard = torch.randn(m // world, k, device=dev, generator=gen).to(torch.bfloat16)
        a_full = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
        b = torch.randn(k, n, device=dev, generator=gen).to(torch.bfloat16)
        name = dist.group.WORLD.group_name
        for what, fn in (("matmul", lambda: torch.matmul(a_full, b)),
                         ("fused_all_gather_matmul",
                          lambda: symcomm_torch.fused_all_gather_matmul(a_shard, [b], 0, name, return_A=False))):
            for _ in range(3):
                fn()
            times = []
            for _ in range(args.trials):
                times.append(trial(fn, 5)[1])
            add(what, m * k * 2, f"{m}x{k}x{n}", statistics.median(times))

    if dist.get_rank() == 0:
        print(f"{'what':26} {'bytes':>9} {'mode':>16} {'us':>10}")
        for r in records:
            print(f"{r['what']:26} {r['bytes']:>9} {r['mode']:>16} {r['us']:>10.2f}")
        by = {(r["what"], r["bytes"], r["mode"]): r["us"] for r in records}
        print("\nsymcomm.torch: host overhead over _core (us), and time / NCCL's")
        for nbytes in SIZES:
            over = by[("symcomm.torch", nbytes, "host least")] - by[("symcomm._core", nbytes, "host least")]
            eager = by[("symcomm.torch", nbytes, "eager")] / by[("nccl", nbytes, "eager")]
            graph = by[("symcomm.torch", nbytes, "graph")] / by[("nccl", nbytes, "graph")]
            print(f"  {nbytes:>8} B: overhead {over:6.2f} us, eager {eager:5.2f}, graph {graph:5.2f}")
        fused = [r for r in records if r["what"] == "fused_all_gather_matmul"]
        if fused:
            ratio = fused[0]["us"] / by[("matmul", fused[0]["bytes"], fused[0]["mode"])]
            print(f"  fused_all_gather_matmul {fused[0]['mode']} / matmul alone: {ratio:.3f}")
        if pieces:
            print("\nhost time of the pieces of a 4 KiB dist.all_reduce, rank 0 (us per call)")
            for name, us in pieces:
                print(f"  {name:28} {us:8.2f}")
        emit(records, args.json)
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
