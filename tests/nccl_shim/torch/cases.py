#!/usr/bin/env python3
"""PyTorch programs that reach NCCL through torch.distributed, for the NCCL drop-in library (libsymcomm_nccl.so).

One case per run, under torchrun; each rank writes DIR/<case>-rank<r>.json. run_cases.py (this folder) runs
every case once on plain NCCL and once with the drop-in library preloaded, and compares the two runs' files.

    torchrun --nproc-per-node N tests/nccl_shim/torch/cases.py --case NAME --out DIR

Cases (one function each, run_<case>):
  collectives  all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_gather (list form)
  new_group    collectives on groups made by dist.new_group
  coalescing   collectives batched by distributed_c10d._coalescing_manager
  graph        all_reduce captured in a CUDA graph, replayed 1000 times with changing input
  ddp          DistributedDataParallel training, the loss of every step
  abort        the last rank kills itself; the others must see an error and tear down

Result file: {"case", "rank", "world", "passed", "entries": [{"name", "passed", "exact", "checksum", "max_err",
"detail"}], ...keys of the case}. "exact": the result was compared for equality with the reference, else within
a tolerance ("max_err" is then the largest absolute difference). "checksum": a digest of the result's bytes,
the same in two runs when the bytes are the same.

Exit status: 0 when every entry of this rank passed, 1 when one failed, 3 when the case's deadline passed (the
result file then has "deadline_passed": true and "passed": false).

Inputs are made on the CPU with torch.Generator seeded from (--seed, case, dtype, size, rank), so every rank
computes the reference from all ranks' inputs itself. Only public torch.distributed API is used, plus
torch.distributed.distributed_c10d._coalescing_manager in the coalescing case.
"""

import argparse
import inspect
import json
import os
import signal
import sys
import threading
import time
import traceback
import zlib
from datetime import timedelta

# cuBLAS picks deterministic kernels only with a fixed workspace configuration, read when its handle is
# created; the ddp case needs run-to-run identical matmuls.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64]
NUMELS = [1, 7, 1024, 1000003, 4 << 20]

# Unit roundoff of each floating dtype, for the tolerance of reductions whose order is not fixed.
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}

ABORT_KILL_FILE = "abort-kill-time.txt"
ABORT_DEADLINE_S = 60.0  # from the end of init_process_group


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def reduce_ops():
    return {
        "sum": dist.ReduceOp.SUM,
        "max": dist.ReduceOp.MAX,
        "min": dist.ReduceOp.MIN,
        "avg": dist.ReduceOp.AVG,
        "product": dist.ReduceOp.PRODUCT,
    }


def ops_for(dtype):
    """The reductions tested on `dtype`. AVG on integers is left out: its rounding is NCCL's own choice."""
    if dtype.is_floating_point:
        return ["sum", "max", "min", "avg", "product"]
    return ["sum", "max", "min", "product"]


def value_kind(op):
    """Products take values near 1 (floats) or in [-3, 3] (integers) so that no product overflows."""
    return "product" if op == "product" else "general"


# ---------------------------------------------------------------------------------------------------------
# Inputs, references, checks
# ---------------------------------------------------------------------------------------------------------


def make_input(seed, tag, dtype, numel, kind, rank):
    """The CPU tensor that `rank` contributes under (tag, dtype, numel, kind); the same on every rank.

    General values: floats uniform in [-1, 1); int32 in [-2^27, 2^27); int64 in [-2^59, 2^59), so that the sum of
    up to 8 ranks does not overflow. Product values: floats in [0.5, 1.5), integers in [-3, 3].
    """
    key = f"{seed}|{tag}|{dtype_name(dtype)}|{numel}|{kind}|{rank}".encode()
    gen = torch.Generator()
    gen.manual_seed(zlib.crc32(key))
    if dtype.is_floating_point:
        values = torch.rand(numel, generator=gen, dtype=torch.float32)
        values = values + 0.5 if kind == "product" else values * 2 - 1
        return values.to(dtype)
    if kind == "product":
        low, high = -3, 4
    elif dtype == torch.int32:
        low, high = -(1 << 27), 1 << 27
    else:
        low, high = -(1 << 59), 1 << 59
    return torch.randint(low, high, (numel,), generator=gen, dtype=dtype)


def poison(dtype, numel, device):
    """An output buffer whose untouched elements fail the checks: NaN for floats, -7777 for integers."""
    fill = float("nan") if dtype.is_floating_point else -7777
    return torch.full((numel,), fill, dtype=dtype, device=device)


def checksum(tensor):
    """Digest of the tensor's bytes, computed on its device: dtype, element count, the sum of the bytes and the
    sum of each byte times ((its position mod 65521) + 1), in hexadecimal."""
    raw = tensor.detach().contiguous().view(-1).view(torch.uint8)
    total = raw.numel()
    plain = 0
    weighted = 0
    step = 1 << 24
    for start in range(0, total, step):
        part = raw[start:start + step].to(torch.int64)
        weights = torch.arange(start, start + part.numel(), device=part.device, dtype=torch.int64) % 65521 + 1
        plain += int(part.sum())
        weighted += int((part * weights).sum())
    return f"{dtype_name(tensor.dtype)}:{tensor.numel()}:{plain:x}:{weighted:x}"


def is_exact(op, dtype, world):
    """Whether the result of reducing `world` ranks' values with `op` is known to the bit: integer sums and
    products (no overflow by construction), max and min, and floating sums of at most two values (a + b is
    rounded once in any order)."""
    if not dtype.is_floating_point:
        return True
    if op in ("max", "min"):
        return True
    return op == "sum" and world <= 2


def exact_reference(xs, op):
    """The bit-exact reduction of the CPU tensors xs (see is_exact)."""
    dtype = xs[0].dtype
    if op == "max":
        return torch.stack(xs).amax(0)
    if op == "min":
        return torch.stack(xs).amin(0)
    if not dtype.is_floating_point:
        acc = xs[0].to(torch.int64)
        for x in xs[1:]:
            acc = acc + x.to(torch.int64) if op == "sum" else acc * x.to(torch.int64)
        return acc.to(dtype)
    if len(xs) == 1:
        return xs[0].clone()
    return xs[0] + xs[1]


def tolerant_reference(xs, op):
    """Float64 reference of a floating reduction and the allowed absolute error of each element: 2 (n + 1) u
    times the sum of magnitudes (sum, avg) or the magnitude of the product, plus 4 n subnormal steps."""
    dtype = xs[0].dtype
    world = len(xs)
    stacked = torch.stack([x.double() for x in xs])
    if op == "product":
        ref = stacked.prod(0)
        scale = ref.abs()
    else:
        ref = stacked.sum(0)
        scale = stacked.abs().sum(0)
        if op == "avg":
            ref = ref / world
            scale = scale / world
    u = UNIT_ROUNDOFF[dtype]
    smallest_subnormal = torch.finfo(dtype).tiny * 2 * u
    bound = 2 * (world + 1) * u * scale + 4 * world * smallest_subnormal
    return ref, bound


class Outcome:
    def __init__(self, passed, exact, checksum_text, max_err=0.0, detail=""):
        self.passed = passed
        self.exact = exact
        self.checksum = checksum_text
        self.max_err = max_err
        self.detail = detail


def judge_equal(out_dev, ref):
    """Outcome of comparing the device tensor out_dev with the CPU tensor ref for equality."""
    out = out_dev.cpu()
    if out.dtype != ref.dtype or out.shape != ref.shape:
        return Outcome(False, True, checksum(out_dev), detail=f"got {out.dtype} {tuple(out.shape)}, "
                       f"expected {ref.dtype} {tuple(ref.shape)}")
    mismatched = int((out != ref).sum())
    detail = "" if mismatched == 0 else f"{mismatched} of {ref.numel()} elements differ"
    return Outcome(mismatched == 0, True, checksum(out_dev), detail=detail)


def judge_reduction(out_dev, xs, op):
    """Outcome of out_dev (device) as the reduction with `op` of the CPU tensors xs, one per group rank."""
    dtype = xs[0].dtype
    if is_exact(op, dtype, len(xs)):
        return judge_equal(out_dev, exact_reference(xs, op))
    out = out_dev.cpu()
    ref, bound = tolerant_reference(xs, op)
    diff = (out.double() - ref).abs()
    bad = int((~(diff <= bound)).sum())  # NaN counts as bad
    max_err = float(diff.max()) if diff.numel() else 0.0
    if max_err != max_err:
        max_err = float("inf")
    detail = "" if bad == 0 else f"{bad} of {ref.numel()} elements outside the tolerance"
    return Outcome(bad == 0, False, checksum(out_dev), max_err, detail)


# ---------------------------------------------------------------------------------------------------------
# Result file, deadline
# ---------------------------------------------------------------------------------------------------------


class Record:
    """This rank's result file, DIR/<case>-rank<r>.json."""

    def __init__(self, case, rank, world, out_dir):
        self.path = os.path.join(out_dir, f"{case}-rank{rank}.json")
        self.lock = threading.Lock()
        self.data = {"case": case, "rank": rank, "world": world, "passed": False, "entries": []}

    def entry(self, name, outcome):
        with self.lock:
            self.data["entries"].append({
                "name": name,
                "passed": bool(outcome.passed),
                "exact": bool(outcome.exact),
                "checksum": outcome.checksum,
                "max_err": outcome.max_err,
                "detail": outcome.detail,
            })
        if not outcome.passed:
            print(f"[rank {self.data['rank']}] FAIL {name}: {outcome.detail}", file=sys.stderr, flush=True)

    def set(self, key, value):
        with self.lock:
            self.data[key] = value

    def failures(self):
        with self.lock:
            return [e["name"] for e in self.data["entries"] if not e["passed"]]

    def write(self, passed):
        with self.lock:
            self.data["passed"] = bool(passed)
            text = json.dumps(self.data, indent=1)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.path)


def attempt(record, name, body):
    """Runs body() -> Outcome and records it under `name`; an exception is recorded as a failure."""
    try:
        outcome = body()
    except Exception as e:  # a failed call is a result of the test, not the end of the case
        outcome = Outcome(False, False, "", detail=f"{type(e).__name__}: {e}"[:800])
        traceback.print_exc()
    record.entry(name, outcome)


def start_deadline(seconds, record):
    """A daemon thread that, after `seconds`, writes the result file with "deadline_passed" and ends the
    process with status 3, so that a hung collective cannot hang the run."""

    def fire():
        record.set("deadline_passed", True)
        record.set("deadline_s", seconds)
        try:
            record.write(passed=False)
        finally:
            print(f"[rank {record.data['rank']}] deadline of {seconds:.0f} s passed: exiting with status 3",
                  file=sys.stderr, flush=True)
            os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


class Context:
    def __init__(self, args, rank, world, gpu, device):
        self.seed = args.seed
        self.out = args.out
        self.rank = rank
        self.world = world
        self.gpu = gpu  # the CUDA device index
        self.device = device
        self.destroyed = False


# ---------------------------------------------------------------------------------------------------------
# collectives
# ---------------------------------------------------------------------------------------------------------


def run_collectives(record, ctx):
    """Every collective on every dtype and size, checked against the reference from all ranks' inputs."""
    check_all_reduce(record, ctx)
    check_all_gather_into_tensor(record, ctx)
    check_reduce_scatter_tensor(record, ctx)
    check_broadcast(record, ctx)
    check_all_gather_list(record, ctx)


def check_all_reduce(record, ctx):
    """all_reduce (in place: the public API has no other form) with each reduction on each dtype and size."""
    ops = reduce_ops()
    for dtype in DTYPES:
        for numel in NUMELS:
            for kind in ("general", "product"):
                xs = [make_input(ctx.seed, "all_reduce", dtype, numel, kind, r) for r in range(ctx.world)]
                for op in ops_for(dtype):
                    if value_kind(op) != kind:
                        continue

                    def body():
                        x = xs[ctx.rank].to(ctx.device)
                        dist.all_reduce(x, op=ops[op])
                        return judge_reduction(x, xs, op)

                    attempt(record, f"all_reduce/{op}/{dtype_name(dtype)}/{numel}", body)


def check_all_gather_into_tensor(record, ctx):
    """all_gather_into_tensor of `numel` elements per rank, out of place and in place (the input is the rank's
    slice of the output)."""
    for dtype in DTYPES:
        for numel in NUMELS:
            xs = [make_input(ctx.seed, "all_gather", dtype, numel, "general", r) for r in range(ctx.world)]
            ref = torch.cat(xs)

            def out_of_place():
                inp = xs[ctx.rank].to(ctx.device)
                out = poison(dtype, ctx.world * numel, ctx.device)
                dist.all_gather_into_tensor(out, inp)
                return judge_equal(out, ref)

            def in_place():
                out = poison(dtype, ctx.world * numel, ctx.device)
                mine = out.narrow(0, ctx.rank * numel, numel)
                mine.copy_(xs[ctx.rank])
                dist.all_gather_into_tensor(out, mine)
                return judge_equal(out, ref)

            name = f"all_gather_into_tensor/{dtype_name(dtype)}/{numel}"
            attempt(record, name + "/out_of_place", out_of_place)
            attempt(record, name + "/in_place", in_place)


def check_reduce_scatter_tensor(record, ctx):
    """reduce_scatter_tensor to `numel` elements per rank with each reduction, out of place and in place (the
    output is the rank's slice of the input)."""
    ops = reduce_ops()
    for dtype in DTYPES:
        for numel in NUMELS:
            for kind in ("general", "product"):
                xs = [make_input(ctx.seed, "reduce_scatter", dtype, ctx.world * numel, kind, r)
                      for r in range(ctx.world)]
                chunks = [x[ctx.rank * numel:(ctx.rank + 1) * numel] for x in xs]
                for op in ops_for(dtype):
                    if value_kind(op) != kind:
                        continue

                    def out_of_place():
                        inp = xs[ctx.rank].to(ctx.device)
                        out = poison(dtype, numel, ctx.device)
                        dist.reduce_scatter_tensor(out, inp, op=ops[op])
                        return judge_reduction(out, chunks, op)

                    def in_place():
                        buf = xs[ctx.rank].to(ctx.device)
                        out = buf.narrow(0, ctx.rank * numel, numel)
                        dist.reduce_scatter_tensor(out, buf, op=ops[op])
                        return judge_reduction(out, chunks, op)

                    name = f"reduce_scatter_tensor/{op}/{dtype_name(dtype)}/{numel}"
                    attempt(record, name + "/out_of_place", out_of_place)
                    attempt(record, name + "/in_place", in_place)


def check_broadcast(record, ctx):
    """broadcast from each root; the other ranks' buffers start poisoned."""
    for root in range(ctx.world):
        for dtype in DTYPES:
            for numel in NUMELS:
                src = make_input(ctx.seed, f"broadcast/{root}", dtype, numel, "general", root)

                def body():
                    x = src.to(ctx.device) if ctx.rank == root else poison(dtype, numel, ctx.device)
                    dist.broadcast(x, src=root)
                    return judge_equal(x, src)

                attempt(record, f"broadcast/root{root}/{dtype_name(dtype)}/{numel}", body)


def check_all_gather_list(record, ctx):
    """all_gather into a list: separate output tensors, a list holding the input tensor itself at this rank's
    place, and a list of views of one buffer."""
    for dtype in DTYPES:
        for numel in NUMELS:
            xs = [make_input(ctx.seed, "all_gather_list", dtype, numel, "general", r) for r in range(ctx.world)]
            ref = torch.cat(xs)
            for variant in ("separate", "input_in_list", "views"):

                def body():
                    inp = xs[ctx.rank].to(ctx.device)
                    if variant == "views":
                        buf = poison(dtype, ctx.world * numel, ctx.device)
                        outs = list(buf.chunk(ctx.world))
                    else:
                        outs = [poison(dtype, numel, ctx.device) for _ in range(ctx.world)]
                        if variant == "input_in_list":
                            outs[ctx.rank] = inp
                    dist.all_gather(outs, inp)
                    return judge_equal(torch.cat(outs), ref)

                attempt(record, f"all_gather_list/{variant}/{dtype_name(dtype)}/{numel}", body)


# ---------------------------------------------------------------------------------------------------------
# new_group
# ---------------------------------------------------------------------------------------------------------


def run_new_group(record, ctx):
    """Groups from dist.new_group: all ranks, rank 0 alone, and ranks 1..N-1. Every rank calls new_group for
    every group, members or not; members run all_reduce (sum int32 and float32, max bfloat16),
    all_gather_into_tensor and broadcast on the group. Then the default group runs an all_reduce again."""
    specs = [("all", list(range(ctx.world))), ("rank0", [0])]
    if ctx.world > 1:
        specs.append(("rest", list(range(1, ctx.world))))
    groups = []
    for label, ranks in specs:
        groups.append((label, ranks, dist.new_group(ranks=ranks)))
    record.set("groups", {label: ranks for label, ranks, _ in groups})
    ops = reduce_ops()
    for label, ranks, group in groups:
        if ctx.rank not in ranks:
            continue
        me = ranks.index(ctx.rank)
        record.set(f"group_rank/{label}", dist.get_rank(group))
        for dtype, op in ((torch.int32, "sum"), (torch.float32, "sum"), (torch.bfloat16, "max")):
            for numel in (1, 1024, 1000003):
                xs = [make_input(ctx.seed, f"new_group/{label}", dtype, numel, "general", r) for r in ranks]

                def reduce_body():
                    x = xs[me].to(ctx.device)
                    dist.all_reduce(x, op=ops[op], group=group)
                    return judge_reduction(x, xs, op)

                attempt(record, f"new_group/{label}/all_reduce/{op}/{dtype_name(dtype)}/{numel}", reduce_body)

        xs = [make_input(ctx.seed, f"new_group/{label}/gather", torch.float32, 4097, "general", r) for r in ranks]

        def gather_body():
            out = poison(torch.float32, len(ranks) * 4097, ctx.device)
            dist.all_gather_into_tensor(out, xs[me].to(ctx.device), group=group)
            return judge_equal(out, torch.cat(xs))

        attempt(record, f"new_group/{label}/all_gather_into_tensor/float32/4097", gather_body)

        root = ranks[-1]
        src = make_input(ctx.seed, f"new_group/{label}/broadcast", torch.int64, 1000, "general", root)

        def broadcast_body():
            x = src.to(ctx.device) if ctx.rank == root else poison(torch.int64, 1000, ctx.device)
            dist.broadcast(x, src=root, group=group)  # src: the global rank
            return judge_equal(x, src)

        attempt(record, f"new_group/{label}/broadcast/root{root}/int64/1000", broadcast_body)

    xs = [make_input(ctx.seed, "new_group/world_after", torch.int32, 65536, "general", r) for r in range(ctx.world)]

    def world_body():
        x = xs[ctx.rank].to(ctx.device)
        dist.all_reduce(x)
        return judge_reduction(x, xs, "sum")

    attempt(record, "new_group/world_after/all_reduce/sum/int32/65536", world_body)


# ---------------------------------------------------------------------------------------------------------
# coalescing
# ---------------------------------------------------------------------------------------------------------

COALESCED_NUMELS = [1, 7, 1024, 65536, 1000003]

# (collective, reduction, dtype, pass device=, async_ops): each block coalesces one tensor of each size. With
# device= given the blocks are asynchronous: torch versions differ in whether _end_coalescing(device) returns a
# work object, and the synchronous form calls wait() on it.
COALESCED_BLOCKS = [
    ("all_reduce", "sum", torch.int32, True, True),
    ("all_reduce", "sum", torch.float32, False, True),
    ("all_reduce", "sum", torch.bfloat16, False, False),
    ("all_reduce", "max", torch.bfloat16, True, True),
    ("all_gather_into_tensor", None, torch.float32, True, True),
    ("all_gather_into_tensor", None, torch.bfloat16, False, False),
    ("reduce_scatter_tensor", "sum", torch.int64, True, True),
    ("reduce_scatter_tensor", "sum", torch.float32, False, False),
    ("reduce_scatter_tensor", "max", torch.float16, False, True),
]


def run_coalescing(record, ctx):
    """Collectives issued inside torch.distributed.distributed_c10d._coalescing_manager, which hands them to
    the process group as one batch (one NCCL group). Signature in torch 2.x:
        _coalescing_manager(group=None, device=None, async_ops=False)
    with async_ops=True the block's work is kept in the manager and cm.wait() waits for it. Each block below
    coalesces one collective on one dtype over tensors of several sizes, with device= given or not."""
    from torch.distributed.distributed_c10d import _coalescing_manager

    record.set("coalescing_manager_signature", str(inspect.signature(_coalescing_manager)))
    for index, (collective, op, dtype, with_device, async_ops) in enumerate(COALESCED_BLOCKS):
        block = (f"coalesced{index}/{collective}/{op or 'gather'}/{dtype_name(dtype)}/"
                 f"{'device' if with_device else 'nodevice'}/{'async' if async_ops else 'sync'}")
        run_coalesced_block(record, ctx, block, collective, op, dtype, with_device, async_ops, _coalescing_manager)


def run_coalesced_block(record, ctx, block, collective, op, dtype, with_device, async_ops, coalescing_manager):
    ops = reduce_ops()
    world, rank = ctx.world, ctx.rank
    inputs = []  # per tensor: the CPU inputs of every rank
    outs = []  # per tensor: the device tensor holding this rank's result
    issue = []  # per tensor: a function issuing the collective
    for numel in COALESCED_NUMELS:
        if collective == "all_reduce":
            xs = [make_input(ctx.seed, block, dtype, numel, "general", r) for r in range(world)]
            x = xs[rank].to(ctx.device)
            inputs.append(xs)
            outs.append(x)
            issue.append(lambda x=x: dist.all_reduce(x, op=ops[op]))
        elif collective == "all_gather_into_tensor":
            xs = [make_input(ctx.seed, block, dtype, numel, "general", r) for r in range(world)]
            x = xs[rank].to(ctx.device)
            out = poison(dtype, world * numel, ctx.device)
            inputs.append(xs)
            outs.append(out)
            issue.append(lambda x=x, out=out: dist.all_gather_into_tensor(out, x))
        else:
            xs = [make_input(ctx.seed, block, dtype, world * numel, "general", r) for r in range(world)]
            x = xs[rank].to(ctx.device)
            out = poison(dtype, numel, ctx.device)
            inputs.append([full[rank * numel:(rank + 1) * numel] for full in xs])
            outs.append(out)
            issue.append(lambda x=x, out=out: dist.reduce_scatter_tensor(out, x, op=ops[op]))

    try:
        device = ctx.device if with_device else None
        with coalescing_manager(group=None, device=device, async_ops=async_ops) as cm:
            for call in issue:
                call()
        if async_ops:
            record.set(f"{block}/works", len(cm.works))
            cm.wait()
        # The device-wide synchronisation also covers the process group's stream where the manager kept no work.
        torch.cuda.synchronize()
    except Exception as e:
        traceback.print_exc()
        for numel in COALESCED_NUMELS:
            record.entry(f"{block}/{numel}", Outcome(False, False, "", detail=f"{type(e).__name__}: {e}"[:800]))
        return

    for numel, xs, out in zip(COALESCED_NUMELS, inputs, outs):
        if collective == "all_gather_into_tensor":
            attempt(record, f"{block}/{numel}", lambda xs=xs, out=out: judge_equal(out, torch.cat(xs)))
        else:
            attempt(record, f"{block}/{numel}", lambda xs=xs, out=out: judge_reduction(out, xs, op))


# ---------------------------------------------------------------------------------------------------------
# graph
# ---------------------------------------------------------------------------------------------------------

GRAPH_BYTES = [4 << 10, 256 << 10, 1 << 20]
GRAPH_REPLAYS = 1000


def graph_delta(i):
    """The value added to every input element before replay i: an integer in [-8, 8]."""
    return (i * 7) % 17 - 8


def run_graph(record, ctx):
    """all_reduce (sum) of a bfloat16 tensor captured in a CUDA graph together with the copy of its input:
        x.copy_(src); dist.all_reduce(x)
    Warm-up runs eagerly on a side stream before the capture, as torch.cuda.graph requires. Before each of the
    1000 replays src is set, outside the graph, to the rank's base values plus a per-replay integer; inputs are
    integers in [-16, 16], so every sum of up to 8 ranks is exact in bfloat16 and each replay's result is checked
    exactly (on the GPU, counted without synchronising), and the last one also against the CPU reference."""
    for nbytes in GRAPH_BYTES:
        attempt(record, f"graph/all_reduce/sum/bfloat16/{nbytes}B", lambda nbytes=nbytes: graph_one(ctx, nbytes))


def graph_one(ctx, nbytes):
    numel = nbytes // 2
    bases = []
    for r in range(ctx.world):
        gen = torch.Generator()
        gen.manual_seed(zlib.crc32(f"{ctx.seed}|graph|{numel}|{r}".encode()))
        bases.append(torch.randint(-8, 9, (numel,), generator=gen).to(torch.bfloat16))
    base_sum = torch.stack([b.float() for b in bases]).sum(0).to(ctx.device)
    base = bases[ctx.rank].to(ctx.device)
    src = base.clone()
    x = torch.empty_like(src)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            x.copy_(src)
            dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    # thread_local: calls of other threads (the process group's watchdog queries events) do not invalidate
    # the capture.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        x.copy_(src)
        dist.all_reduce(x)
    torch.cuda.synchronize()

    bad = torch.zeros((), dtype=torch.int64, device=ctx.device)
    for i in range(GRAPH_REPLAYS):
        src.copy_(base)
        src.add_(graph_delta(i))
        graph.replay()
        expected = base_sum + ctx.world * graph_delta(i)
        bad += (x.float() != expected).sum()
    torch.cuda.synchronize()
    bad_count = int(bad)

    last = GRAPH_REPLAYS - 1
    ref = (torch.stack([b.float() for b in bases]).sum(0) + ctx.world * graph_delta(last)).to(torch.bfloat16)
    final = judge_equal(x, ref)
    del graph
    detail = final.detail
    if bad_count:
        detail = f"{bad_count} element results wrong over {GRAPH_REPLAYS} replays; " + detail
    return Outcome(final.passed and bad_count == 0, True, final.checksum, detail=detail)


# ---------------------------------------------------------------------------------------------------------
# ddp
# ---------------------------------------------------------------------------------------------------------

DDP_STEPS = 50


def run_ddp(record, ctx):
    """A 256-512-10 MLP (seed 1234) in DistributedDataParallel (bucket_cap_mb 0.25), 50 SGD steps (lr 0.05,
    momentum 0.9) on synthetic batches of 64 drawn per rank from a generator seeded by the rank. Records each
    step's loss on this rank and the checksum of the final parameters, which must be equal on all ranks."""
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(ctx.device)
    ddp = DistributedDataParallel(model, device_ids=[ctx.gpu], bucket_cap_mb=0.25)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator()
    gen.manual_seed(4321 + ctx.rank)
    losses = []
    for _ in range(DDP_STEPS):
        data = torch.randn(64, 256, generator=gen).to(ctx.device)
        target = torch.randint(0, 10, (64,), generator=gen).to(ctx.device)
        loss = F.cross_entropy(ddp(data), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    record.set("losses", losses)

    finite = all(v == v and abs(v) != float("inf") for v in losses)
    record.entry("ddp/losses_finite", Outcome(finite, True, "", detail="" if finite else "a loss is not finite"))

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def same_params():
        gathered = torch.empty(ctx.world * flat.numel(), dtype=flat.dtype, device=ctx.device)
        dist.all_gather_into_tensor(gathered, flat)
        copies = gathered.view(ctx.world, -1)
        differing = [r for r in range(ctx.world) if not torch.equal(copies[r], flat)]
        detail = "" if not differing else f"parameters differ from ranks {differing}"
        return Outcome(not differing, True, checksum(flat), detail=detail)

    attempt(record, "ddp/parameters_equal_on_all_ranks", same_params)


# ---------------------------------------------------------------------------------------------------------
# abort
# ---------------------------------------------------------------------------------------------------------


def configure_abort_environment():
    """Process-group settings of the abort case, set before init_process_group (ProcessGroupNCCL reads them
    when it is made).

    TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (CleanUpOnly): when the watchdog thread finds a failed or timed-out
    collective it aborts the communicators and leaves the process running, so the error reaches the caller as
    an exception. The default, 3 (SkipCleanUp), and 1 (TearDown) end the process from the watchdog thread, and
    the survivor would never observe the error; 0 leaves a hung communicator in place.
    TORCH_NCCL_DUMP_ON_TIMEOUT=0 and TORCH_NCCL_ENABLE_MONITORING=0: no flight-recorder dump after the error,
    and no heartbeat-monitor thread, which ends the process after such a dump.
    TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=500: a watchdog that finds a failed collective still signals a dump and
    waits this long for it (15 s by default, with nothing to dump it), and destroy_process_group waits for the
    watchdog; seen on torch 2.11 with 4 ranks, where the survivors whose error the watchdog found returned from
    destroy_process_group only after that wait.
    The collective's own wait has a timeout (Work.wait(timeout)), so the calling thread polls the work for an
    error (ncclCommGetAsyncError) and throws it itself."""
    os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "2"
    os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "0"
    os.environ["TORCH_NCCL_ENABLE_MONITORING"] = "0"
    os.environ["TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"] = "500"


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_kill_time(path):
    """The victim's time.time() just before it killed itself, or None when the file does not appear within 2 s."""
    deadline = time.time() + 2.0
    while time.time() < deadline:
        try:
            with open(path) as f:
                return float(f.read().strip())
        except (OSError, ValueError):
            time.sleep(0.01)
    return None


def run_abort(record, ctx):
    """All ranks run one all_reduce; then rank N-1 writes time.time() to DIR/abort-kill-time.txt and sends
    itself SIGKILL. The survivors call all_reduce in a loop, each waited for with Work.wait(timeout=30 s), until
    one raises; they record the seconds from the kill to the exception ("detect_s"), then call
    dist.destroy_process_group() and record that it returned ("destroy_returned", "destroy_s").
    The process group's timeout is 30 s (init_process_group(timeout=...)); a 60 s deadline ends a hung rank.
    Under torchrun, run this case with --monitor-interval longer than that deadline (run_cases.py does): the
    agent ends every worker soon after it sees one die."""
    world, rank = ctx.world, ctx.rank
    if world < 2:
        record.set("skipped", "needs 2 ranks")
        record.entry("abort/skipped", Outcome(True, True, "", detail="skipped: needs 2 ranks"))
        return
    kill_path = os.path.join(ctx.out, ABORT_KILL_FILE)
    victim = world - 1
    record.set("victim", victim)

    t = torch.full((1024,), float(rank + 1), device=ctx.device)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    expected = world * (world + 1) / 2
    first_ok = bool((t == expected).all())
    record.entry("abort/first_all_reduce", Outcome(first_ok, True, checksum(t),
                                                   detail="" if first_ok else "wrong sum"))

    if rank == victim:
        now = time.time()
        record.set("killed", True)
        record.set("kill_time", now)
        record.write(passed=first_ok)
        write_atomically(kill_path, repr(now))
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(ABORT_DEADLINE_S)  # not reached

    iterations = 0
    error = None
    error_time = None
    loop_end = time.time() + 45.0
    while time.time() < loop_end:
        try:
            work = dist.all_reduce(t, async_op=True)
            work.wait(timeout=timedelta(seconds=30))
            iterations += 1
        except Exception as e:  # the error this case waits for
            error_time = time.time()
            error = e
            break
    kill_time = read_kill_time(kill_path)
    record.set("iterations_before_error", iterations)
    record.set("saw_error", error is not None)
    if error is not None:
        record.set("error_type", type(error).__name__)
        record.set("error_text", str(error)[:1000])
    detect_s = None
    if error is not None and kill_time is not None:
        detect_s = error_time - kill_time
    record.set("kill_time", kill_time)
    record.set("detect_s", detect_s)
    detail = f"detected {detect_s:.3f} s after the kill" if detect_s is not None else "no error within 45 s"
    if error is not None and kill_time is None:
        detail = "error seen but the victim's kill time is missing"
    record.entry("abort/survivor_saw_error", Outcome(error is not None and kill_time is not None, True, "",
                                                     detail=detail))
    print(f"[rank {rank}] {detail}: {type(error).__name__ if error else '-'}", file=sys.stderr, flush=True)

    start = time.time()
    try:
        dist.destroy_process_group()
    except Exception as e:  # it returned, with an error
        record.set("destroy_error", f"{type(e).__name__}: {e}"[:500])
    ctx.destroyed = True
    destroy_s = time.time() - start
    record.set("destroy_returned", True)
    record.set("destroy_s", destroy_s)
    record.entry("abort/destroy_process_group_returned", Outcome(True, True, "", detail=f"{destroy_s:.3f} s"))


# ---------------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------------

CASES = {
    "collectives": run_collectives,
    "new_group": run_new_group,
    "coalescing": run_coalescing,
    "graph": run_graph,
    "ddp": run_ddp,
    "abort": run_abort,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    parser.add_argument("--out", required=True, help="folder of the result files")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--deadline", type=float, default=210.0,
                        help="seconds after which a rank gives up (abort: 60 s from the end of init_process_group)")
    parser.add_argument("--share-gpus", action="store_true",
                        help="rank r on GPU r mod G, each rank its own NCCL_HOSTID (correctness on fewer GPUs)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    record = Record(args.case, rank, world, args.out)
    # The abort case's own deadline counts from the end of init_process_group (which takes ~35 s for 4 ranks
    # sharing one GPU, NCCL over loopback sockets).
    deadline = start_deadline(args.deadline, record)

    gpu = local_rank
    if args.share_gpus:
        # Ranks share the GPUs round-robin; NCCL takes two ranks on one GPU only where each presents a host of its
        # own, and then links them through its socket transport on loopback.
        gpu = local_rank % torch.cuda.device_count()
        os.environ["NCCL_HOSTID"] = f"symcomm-shared-gpu-rank-{rank}"
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    torch.cuda.set_device(gpu)
    device = torch.device("cuda", gpu)
    init_kwargs = {"backend": "nccl", "device_id": device}
    if args.case == "abort":
        configure_abort_environment()
        init_kwargs["timeout"] = timedelta(seconds=30)
    dist.init_process_group(**init_kwargs)
    if args.case == "abort":
        deadline.cancel()
        start_deadline(ABORT_DEADLINE_S, record)
    record.set("torch", torch.__version__)
    nccl_version = torch.cuda.nccl.version()
    if isinstance(nccl_version, tuple):
        nccl_version = ".".join(str(v) for v in nccl_version)
    record.set("nccl", str(nccl_version))
    ctx = Context(args, rank, world, gpu, device)

    started = time.time()
    try:
        CASES[args.case](record, ctx)
    except Exception as e:
        traceback.print_exc()
        record.entry(f"{args.case}/uncaught", Outcome(False, False, "", detail=f"{type(e).__name__}: {e}"[:800]))
    record.set("seconds", time.time() - started)

    failures = record.failures()
    passed = not failures
    record.write(passed)
    entries = len(record.data["entries"])
    print(f"[rank {rank}] case {args.case}: {entries - len(failures)}/{entries} passed", file=sys.stderr, flush=True)
    if not ctx.destroyed:
        dist.destroy_process_group()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
