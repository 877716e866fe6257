#!/usr/bin/env python3
"""Runs the PyTorch cases of cases.py (this folder) without and with the NCCL drop-in library and compares them.

    python3 tests/nccl_shim/torch/run_cases.py --shim build-gpu/src/nccl_shim/libsymcomm_nccl.so --out DIR

Each case runs under `python3 -m torch.distributed.run --nproc-per-node N --master-port <free port>`, once per
mode of --modes (default forward-free,auto):
  forward-free   plain torch + NCCL: no LD_PRELOAD, no SYMCOMM_NCCL_* variables (the reference run)
  forward, auto, native-only
                 LD_PRELOAD=<shim>, SYMCOMM_NCCL_REAL_LIBRARY=<the nvidia-nccl wheel's libnccl.so.2>,
                 SYMCOMM_NCCL_SHIM=<mode>, SYMCOMM_NCCL_SHIM_STATS=1
Every run has NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 and
CUBLAS_WORKSPACE_CONFIG=:4096:8 in its environment.

Each drop-in run is compared with the forward-free run of the same case:
  every case      passed in both runs (every rank's DIR/<mode>/<case>-rank<r>.json has "passed": true)
  collectives, new_group, coalescing, graph
                  per rank, the checksum of every entry is the same in both runs: all entries at 2 ranks, the
                  entries compared exactly ("exact": true) at other sizes
  ddp             per rank, the loss of every step within 1e-4 relative (bit-identical is expected at 2 ranks:
                  the table says whether it is)
  abort           with the drop-in, the survivors saw the error and destroy_process_group returned; in auto or
                  native-only mode within 2 s of the kill (forward mode is plain NCCL's detection). The run
                  without the drop-in is reported, not required (reference_required())
With --share-gpus, --nproc ranks share the visible GPUs (rank r on GPU r mod G): each rank presents its own NCCL
host (NCCL_HOSTID, NCCL_SOCKET_IFNAME=lo), so NCCL takes ranks on one GPU and links them over loopback sockets, and
every run has SYMCOMM_SHARED_GPU=1; for correctness at more ranks than GPUs, not speed.
The stderr of each drop-in run is searched for the library's `symcomm_nccl:` statistics line(s), which are
printed (their absence is reported, not a failure).

Output: DIR/<mode>/<case>-rank<r>.json, DIR/<mode>/<case>.stdout and .stderr, DIR/summary.json, and a table
on stdout. Exit status 0 when every run and comparison passed, 1 otherwise, 2 on bad arguments.
"""

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time

from dropin_env import child_env, find_wheel_nccl, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_PY = os.path.join(HERE, "cases.py")
ALL_CASES = ["collectives", "new_group", "coalescing", "graph", "ddp", "abort"]
CHECKSUM_CASES = {"collectives", "new_group", "coalescing", "graph"}
REFERENCE_MODE = "forward-free"
DROP_IN_MODES = {"forward", "auto", "native-only"}

DDP_RTOL = 1e-4
ABORT_DETECT_LIMIT_S = 2.0
# The abort case's ranks end within 60 s of the end of their init_process_group (cases.py ABORT_DEADLINE_S; the
# init takes ~35 s for 4 ranks sharing one GPU); torchrun's agent looks at its workers only every
# --monitor-interval seconds and ends all of them once it sees one die, so it must not look before the survivors
# are done.
ABORT_MONITOR_INTERVAL_S = 150


class Run:
    """One case in one mode: how the launch ended and what the ranks wrote."""

    def __init__(self, case, mode):
        self.case = case
        self.mode = mode
        self.rc = None
        self.timed_out = False
        self.seconds = 0.0
        self.stdout_path = ""
        self.stderr_path = ""
        self.ranks = {}  # rank -> parsed result file
        self.stats_lines = []
        self.problems = []  # why the run did not pass

    @property
    def passed(self):
        return not self.problems

    def status(self):
        if self.timed_out:
            return "TIMEOUT"
        return "PASS" if self.passed else "FAIL"


def launch(case, mode, args, real_nccl):
    out_dir = os.path.join(args.out, mode)
    os.makedirs(out_dir, exist_ok=True)
    for stale in glob.glob(os.path.join(out_dir, f"{case}-rank*.json")):
        os.remove(stale)
    if case == "abort":
        for stale in glob.glob(os.path.join(out_dir, "abort-kill-time.txt*")):
            os.remove(stale)

    run = Run(case, mode)
    run.stdout_path = os.path.join(out_dir, f"{case}.stdout")
    run.stderr_path = os.path.join(out_dir, f"{case}.stderr")
    cmd = [sys.executable, "-m", "torch.distributed.run",
           "--nproc-per-node", str(args.nproc),
           "--master-addr", "127.0.0.1",
           "--master-port", str(free_port())]
    if case == "abort":
        cmd += ["--monitor-interval", str(ABORT_MONITOR_INTERVAL_S)]
    cmd += [CASES_PY, "--case", case, "--out", out_dir, "--seed", str(args.seed)]
    if args.share_gpus:
        cmd += ["--share-gpus"]
    print(f"== {case} [{mode}]: {' '.join(cmd)}", flush=True)

    start = time.time()
    with open(run.stdout_path, "w") as out, open(run.stderr_path, "w") as err:
        env = child_env(None if mode == REFERENCE_MODE else mode, args.shim, real_nccl)
        if args.share_gpus:
            env["SYMCOMM_SHARED_GPU"] = "1"
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            run.rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            run.timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # the process group started above: torchrun and its workers
            run.rc = proc.wait()
    run.seconds = time.time() - start

    for rank in range(args.nproc):
        path = os.path.join(out_dir, f"{case}-rank{rank}.json")
        try:
            with open(path) as f:
                run.ranks[rank] = json.load(f)
        except (OSError, ValueError) as e:
            run.ranks[rank] = None
            if not (case == "abort" and rank == args.nproc - 1 and args.nproc > 1):
                run.problems.append(f"rank {rank}: no result file ({type(e).__name__})")

    with open(run.stderr_path, errors="replace") as f:
        for line in f:
            at = line.find("symcomm_nccl:")
            if at >= 0:
                run.stats_lines.append(line[at:].rstrip())

    judge_run(run, args)
    print(f"   {run.status()} in {run.seconds:.1f} s (rc {run.rc})"
          + (f": {'; '.join(run.problems[:3])}" if run.problems else ""), flush=True)
    return run


def judge_run(run, args):
    """Fills run.problems from the exit status and the result files."""
    if run.timed_out:
        run.problems.append(f"timed out after {args.timeout:.0f} s (process group killed)")
    # In the abort case torchrun reports the killed rank as failed: its status says nothing.
    if run.case != "abort" and run.rc != 0 and not run.timed_out:
        run.problems.append(f"torchrun exited with status {run.rc}")
    for rank, data in sorted(run.ranks.items()):
        if data is None:
            continue
        if data.get("deadline_passed"):
            run.problems.append(f"rank {rank}: its deadline passed")
        if not data.get("passed"):
            failed = [e["name"] for e in data.get("entries", []) if not e.get("passed")]
            run.problems.append(f"rank {rank}: {len(failed)} failed: {', '.join(failed[:3])}")
    if run.case == "abort" and args.nproc > 1:
        for rank in range(args.nproc - 1):
            data = run.ranks.get(rank)
            if data is None:
                continue
            if not data.get("saw_error"):
                run.problems.append(f"rank {rank}: saw no error")
            if not data.get("destroy_returned"):
                run.problems.append(f"rank {rank}: destroy_process_group did not return")


# ---------------------------------------------------------------------------------------------------------
# Comparisons: each returns (passed, text)
# ---------------------------------------------------------------------------------------------------------


def compare_checksums(ref, test, world):
    compared = 0
    differing = []
    informational = 0
    for rank in range(world):
        a = {e["name"]: e for e in (ref.ranks.get(rank) or {}).get("entries", [])}
        b = {e["name"]: e for e in (test.ranks.get(rank) or {}).get("entries", [])}
        for name in sorted(set(a) | set(b)):
            ea, eb = a.get(name), b.get(name)
            if ea is None or eb is None:
                differing.append(f"r{rank}:{name} (only in one run)")
                continue
            if not ea.get("checksum") and not eb.get("checksum"):
                continue
            required = world == 2 or (ea.get("exact") and eb.get("exact"))
            if ea["checksum"] == eb["checksum"]:
                compared += 1 if required else 0
                continue
            if required:
                differing.append(f"r{rank}:{name}")
            else:
                informational += 1
    if differing:
        return False, f"{len(differing)} checksums differ: {', '.join(differing[:4])}"
    text = f"{compared} checksums identical"
    if informational:
        text += f" ({informational} inexact entries differ, not compared)"
    return True, text


def compare_ddp(ref, test, world):
    max_abs = 0.0
    max_rel = 0.0
    steps = 0
    for rank in range(world):
        a = (ref.ranks.get(rank) or {}).get("losses") or []
        b = (test.ranks.get(rank) or {}).get("losses") or []
        if len(a) != len(b) or not a:
            return False, f"rank {rank}: {len(a)} vs {len(b)} losses"
        for x, y in zip(a, b):
            diff = abs(x - y)
            max_abs = max(max_abs, diff)
            max_rel = max(max_rel, diff / max(abs(x), 1e-30))
            steps += 1
    passed = max_rel <= DDP_RTOL
    if max_abs == 0.0:
        text = f"{steps} losses bit-identical"
    else:
        text = f"max diff {max_abs:.3g} (rel {max_rel:.3g}) over {steps} losses"
        if world == 2:
            text += "; not bit-identical at 2 ranks"
    return passed, text


def abort_seconds(run, world):
    """Largest detect_s of the survivors, or None where one has none."""
    values = []
    for rank in range(world - 1):
        value = (run.ranks.get(rank) or {}).get("detect_s")
        if value is None:
            return None
        values.append(value)
    return max(values) if values else None


def compare_abort(ref, test, world):
    if world < 2:
        return True, "skipped (1 rank)"
    ref_s = abort_seconds(ref, world)
    test_s = abort_seconds(test, world)
    ref_text = f"{ref_s:.2f} s" if ref_s is not None else "none"
    test_text = f"{test_s:.2f} s" if test_s is not None else "none"
    text = f"error after kill: without {ref_text}, with {test_text}"
    if test_s is None:
        return False, text
    if test.mode in ("auto", "native-only") and test_s > ABORT_DETECT_LIMIT_S:
        return False, text + f" (> {ABORT_DETECT_LIMIT_S:.0f} s)"
    return True, text


def reference_required(case):
    """Whether the run without the drop-in must pass too. Not for abort: with torch 2.11 and NCCL 2.28 alone
    the survivor sees the error only at the process group's timeout and destroy_process_group does not return
    (measured on 2 x H200); that run is the baseline the drop-in's numbers are reported against."""
    return case != "abort"


def compare(ref, test, world):
    if (reference_required(ref.case) and not ref.passed) or not test.passed:
        return False, "a run failed"
    if ref.case in CHECKSUM_CASES:
        return compare_checksums(ref, test, world)
    if ref.case == "ddp":
        return compare_ddp(ref, test, world)
    if ref.case == "abort":
        return compare_abort(ref, test, world)
    return True, ""


# ---------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------


def print_table(rows):
    header = ["case", "without", "with", "compare", "notes"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    widths[-1] = min(widths[-1], 100)

    def line(cells):
        return "  ".join(str(c)[:widths[i]].ljust(widths[i]) for i, c in enumerate(cells)).rstrip()

    print(line(header))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shim", required=True, help="path of libsymcomm_nccl.so")
    parser.add_argument("--nproc", type=int, default=None, help="ranks (default: torch.cuda.device_count())")
    parser.add_argument("--cases", default=",".join(ALL_CASES), help="comma-separated, default all")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--modes", default=f"{REFERENCE_MODE},auto",
                        help="comma-separated: forward-free (no drop-in, the reference) and drop-in modes "
                             "(forward, auto, native-only)")
    parser.add_argument("--real-nccl", default=None,
                        help="libnccl.so.2 behind the drop-in library (default: the nvidia-nccl wheel's)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--share-gpus", action="store_true",
                        help="--nproc ranks share the GPUs round-robin, each its own NCCL_HOSTID (NCCL between them "
                             "over loopback sockets), SYMCOMM_SHARED_GPU=1: correctness on fewer GPUs, not speed")
    args = parser.parse_args()

    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in ALL_CASES]
    modes = [m for m in args.modes.split(",") if m]
    bad_modes = [m for m in modes if m != REFERENCE_MODE and m not in DROP_IN_MODES]
    if unknown or bad_modes or REFERENCE_MODE not in modes:
        print(f"unknown cases {unknown} or modes {bad_modes}; --modes must include {REFERENCE_MODE}",
              file=sys.stderr)
        return 2
    drop_in_modes = [m for m in modes if m != REFERENCE_MODE]
    args.shim = os.path.abspath(args.shim)
    if drop_in_modes and not os.path.isfile(args.shim):
        print(f"no drop-in library at {args.shim}", file=sys.stderr)
        return 2
    real_nccl = os.path.abspath(args.real_nccl) if args.real_nccl else find_wheel_nccl()
    if drop_in_modes and (real_nccl is None or not os.path.isfile(real_nccl)):
        print("no real libnccl.so.2: install the nvidia-nccl wheel or pass --real-nccl", file=sys.stderr)
        return 2
    if args.nproc is None:
        import torch

        args.nproc = torch.cuda.device_count()
    if args.nproc < 1:
        print("no GPU", file=sys.stderr)
        return 2
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    print(f"ranks {args.nproc}; drop-in {args.shim}; real NCCL {real_nccl}; modes {modes}", flush=True)

    runs = {}
    for case in cases:
        for mode in [REFERENCE_MODE] + drop_in_modes:
            runs[(case, mode)] = launch(case, mode, args, real_nccl)

    rows = []
    summary = {"nproc": args.nproc, "shim": args.shim, "real_nccl": real_nccl, "results": []}
    all_passed = True
    for case in cases:
        ref = runs[(case, REFERENCE_MODE)]
        if not drop_in_modes:
            all_passed &= ref.passed
            rows.append([case, ref.status(), "-", "-", "; ".join(ref.problems)[:200]])
            summary["results"].append({
                "case": case, "mode": REFERENCE_MODE, "passed": ref.passed,
                "without": {"status": ref.status(), "rc": ref.rc, "seconds": ref.seconds, "problems": ref.problems},
            })
            continue
        for mode in drop_in_modes:
            test = runs[(case, mode)]
            same, text = compare(ref, test, args.nproc)
            notes = text
            problems = [f"without: {p}" for p in ref.problems] + [f"with: {p}" for p in test.problems]
            if problems:
                notes = "; ".join(problems) + ("; " + text if text else "")
            passed = (ref.passed or not reference_required(case)) and test.passed and same
            all_passed &= passed
            rows.append([case, ref.status(), f"{test.status()} ({mode})", "PASS" if same else "FAIL", notes])
            summary["results"].append({
                "case": case, "mode": mode, "passed": passed, "compare": text,
                "without": {"status": ref.status(), "rc": ref.rc, "seconds": ref.seconds, "problems": ref.problems},
                "with": {"status": test.status(), "rc": test.rc, "seconds": test.seconds,
                         "problems": test.problems, "stats": test.stats_lines},
            })

    print()
    print_table(rows)
    print()
    for case in cases:
        for mode in drop_in_modes:
            run = runs[(case, mode)]
            if run.stats_lines:
                for stats in run.stats_lines:
                    print(f"stats {case} [{mode}]: {stats}")
            else:
                print(f"stats {case} [{mode}]: no 'symcomm_nccl:' line in {run.stderr_path}")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\n{'ALL PASSED' if all_passed else 'FAILED'}; details in {args.out}")
    return 0 if all_passed else 1


if __name__ == "__main__":
    sys.exit(main())
