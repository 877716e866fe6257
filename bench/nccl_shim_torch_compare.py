#!/usr/bin/env python3
"""Runs bench/nccl_shim_torch_bench.py without and with the NCCL drop-in library and tabulates the two.

    python3 bench/nccl_shim_torch_compare.py --shim build-gpu/src/nccl_shim/libsymcomm_nccl.so --out DIR

Rounds (--rounds, default 2) alternate the order: round 1 runs without then with the drop-in library, round 2
with then without, and so on. Each row's time is the best (smallest) of the rounds. Runs use
`python3 -m torch.distributed.run --nproc-per-node N --master-port <free port>`; the run with the drop-in
library has LD_PRELOAD=<shim>, SYMCOMM_NCCL_REAL_LIBRARY=<the nvidia-nccl wheel's libnccl.so.2>,
SYMCOMM_NCCL_SHIM=<--with-mode, default auto> and SYMCOMM_NCCL_SHIM_STATS=1; the other has none of these.
Both have NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1.

Output: DIR/raw/round<k>-<without|with>.json (the benchmark's records) with .stdout/.stderr beside them,
DIR/table.md (the markdown table: op, bytes, mode, without us, with us, with/without, and "slower" where
with/without > 1.02), DIR/combined.json; the table and the drop-in library's `symcomm_nccl:` statistics lines
on stdout. Exit status 0 when every run succeeded and both sides have every row, 1 otherwise, 2 on bad
arguments. Slower rows are flagged, not failed.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "nccl_shim", "torch"))
from dropin_env import child_env, find_wheel_nccl, free_port  # noqa: E402

BENCH_PY = os.path.join(HERE, "nccl_shim_torch_bench.py")
SLOWER_RATIO = 1.02

def run_bench(label, round_index, args, real_nccl):
    """One benchmark run; returns (records or None, stats lines, problem text or "")."""
    raw = os.path.join(args.out, "raw")
    os.makedirs(raw, exist_ok=True)
    stem = os.path.join(raw, f"round{round_index}-{label}")
    json_path = stem + ".json"
    if os.path.exists(json_path):
        os.remove(json_path)
    cmd = [sys.executable, "-m", "torch.distributed.run",
           "--nproc-per-node", str(args.nproc),
           "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()),
           BENCH_PY, "--json-out", json_path] + args.bench_args.split()
    print(f"== round {round_index} {label}: {' '.join(cmd)}", flush=True)
    start = time.time()
    with open(stem + ".stdout", "w") as out, open(stem + ".stderr", "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=child_env(args.with_mode if label == "with" else None, args.shim, real_nccl),
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout)
            problem = "" if rc == 0 else f"exit status {rc}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the process group started above: torchrun and its workers
            proc.wait()
            problem = f"timed out after {args.timeout:.0f} s"
    print(f"   {'ok' if not problem else problem} in {time.time() - start:.1f} s", flush=True)

    stats = []
    with open(stem + ".stderr", errors="replace") as f:
        for line in f:
            at = line.find("symcomm_nccl:")
            if at >= 0:
                stats.append(line[at:].rstrip())
    records = None
    try:
        with open(json_path) as f:
            records = json.load(f)
    except (OSError, ValueError):
        if not problem:
            problem = "no JSON records"
    return records, stats, problem


def best_of(runs):
    """(op, bytes, mode) -> the smallest us over the runs' records."""
    best = {}
    for records in runs:
        for r in records or []:
            key = (r["op"], int(r["bytes"]), r["mode"])
            if key not in best or r["us"] < best[key]:
                best[key] = r["us"]
    return best


def size_text(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def make_table(without, with_, args):
    """Markdown table lines and the number of slower rows and of rows missing a side."""
    lines = [
        f"torch.distributed on {args.nproc} ranks, bfloat16; best of {args.rounds} rounds; "
        f"drop-in mode {args.with_mode}",
        "",
        "| op | bytes | mode | without µs | with µs | with/without | |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    order = {"all_reduce": 0, "all_gather_into_tensor": 1, "reduce_scatter_tensor": 2}
    keys = sorted(set(without) | set(with_), key=lambda k: (order.get(k[0], 9), k[2], k[1]))
    slower = 0
    missing = 0
    for op, nbytes, mode in keys:
        a = without.get((op, nbytes, mode))
        b = with_.get((op, nbytes, mode))
        if a is None or b is None:
            missing += 1
            lines.append(f"| {op} | {size_text(nbytes)} | {mode} | {a if a is not None else '-'} | "
                         f"{b if b is not None else '-'} | - | missing |")
            continue
        ratio = b / a if a > 0 else float("inf")
        flag = "slower" if ratio > SLOWER_RATIO else ""
        slower += 1 if flag else 0
        lines.append(f"| {op} | {size_text(nbytes)} | {mode} | {a:.2f} | {b:.2f} | {ratio:.3f} | {flag} |")
    return lines, slower, missing


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shim", required=True, help="path of libsymcomm_nccl.so")
    parser.add_argument("--nproc", type=int, default=None, help="ranks (default: torch.cuda.device_count())")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--real-nccl", default=None,
                        help="libnccl.so.2 behind the drop-in library (default: the nvidia-nccl wheel's)")
    parser.add_argument("--with-mode", default="auto", choices=["auto", "forward", "native-only"],
                        help="SYMCOMM_NCCL_SHIM of the run with the drop-in library")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=540.0, help="seconds per benchmark run")
    parser.add_argument("--bench-args", default="",
                        help="extra arguments of nccl_shim_torch_bench.py as one string, "
                             "e.g. --bench-args=\"--max-bytes 1048576\"")
    args = parser.parse_args()

    args.shim = os.path.abspath(args.shim)
    if not os.path.isfile(args.shim):
        print(f"no drop-in library at {args.shim}", file=sys.stderr)
        return 2
    real_nccl = os.path.abspath(args.real_nccl) if args.real_nccl else find_wheel_nccl()
    if real_nccl is None or not os.path.isfile(real_nccl):
        print("no real libnccl.so.2: install the nvidia-nccl wheel or pass --real-nccl", file=sys.stderr)
        return 2
    if args.nproc is None:
        import torch

        args.nproc = torch.cuda.device_count()
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    print(f"ranks {args.nproc}; drop-in {args.shim} ({args.with_mode}); real NCCL {real_nccl}", flush=True)

    results = {"without": [], "with": []}
    stats_lines = []
    problems = []
    for round_index in range(1, args.rounds + 1):
        order = ["without", "with"] if round_index % 2 == 1 else ["with", "without"]
        for label in order:
            records, stats, problem = run_bench(label, round_index, args, real_nccl)
            results[label].append(records)
            if label == "with":
                stats_lines.extend(f"round {round_index}: {s}" for s in stats)
            if problem:
                problems.append(f"round {round_index} {label}: {problem}")

    without = best_of(results["without"])
    with_ = best_of(results["with"])
    lines, slower, missing = make_table(without, with_, args)
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    combined = {
        "nproc": args.nproc, "with_mode": args.with_mode, "rounds": args.rounds, "real_nccl": real_nccl,
        "rows": [{"op": k[0], "bytes": k[1], "mode": k[2], "without_us": without.get(k), "with_us": with_.get(k)}
                 for k in sorted(set(without) | set(with_))],
        "problems": problems,
        "stats": stats_lines,
    }
    with open(os.path.join(args.out, "combined.json"), "w") as f:
        json.dump(combined, f, indent=1)

    print()
    print(table)
    if stats_lines:
        for line in stats_lines:
            print(f"stats {line}")
    else:
        print("stats: no 'symcomm_nccl:' line in the stderr of the runs with the drop-in library")
    print(f"{slower} rows slower than {SLOWER_RATIO:.2f}x with the drop-in library; {missing} rows missing a side")
    for problem in problems:
        print(f"problem: {problem}")
    return 0 if not problems and missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
