"""symcomm.torch on CUDA tensors (torch 2.x with NCCL, one GPU per rank), compared bit for bit with NCCL.

The default process group is symcomm's (init_process_group(backend="symcomm")); an NCCL group over the same ranks
runs every collective on the same inputs (small integers: every result is exact, so both must agree bit for bit
at any world size), and outputs start poisoned. Covers the collectives at sizes that reach each of symcomm's
kernel paths and its NCCL fallback, the coalescing manager in torch 2.x's styles, sends and receives, CUDA-graph
capture with 1000 replays, functional collectives under torch.compile(fullgraph=True), the reduce-scatter
bucketer, a DDP training step and the fused operations (against a float64 reference).

run_ranks.py runs this file in a job of its own; it skips itself (reported as skipped) without torch's CUDA and
NCCL, without symcomm's CUDA backend, or with fewer GPUs than ranks.
"""

import inspect
import os
import types
import warnings

import numpy as np
import pytest

from conftest import values

import symcomm

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
if not dist.is_available() or not dist.is_nccl_available() or not torch.cuda.is_available():
    pytest.skip("torch has no CUDA or NCCL here", allow_module_level=True)
if "cuda" not in symcomm.backends():
    pytest.skip("this build of symcomm has no CUDA backend", allow_module_level=True)
if torch.cuda.device_count() < WORLD:
    pytest.skip(f"{WORLD} ranks need {WORLD} GPUs, {torch.cuda.device_count()} seen", allow_module_level=True)

import symcomm.torch as symcomm_torch  # noqa: E402

from torch_cases import DTYPES, NP, OPS, R, check_byte_dtypes, dname, seed_of  # noqa: E402

# Elements: one, odd counts, and sizes on symcomm's LL, LL128, one-shot, two-shot and NCCL paths (bf16 bytes x2).
SIZES = [1, 1001, 16384 + 3, 262144, 1 << 21, 1 << 24]


def dev():
    return torch.device("cuda", torch.cuda.current_device())


def inp(seed, n, dtype, op=None, rank=None):
    r = dist.get_rank() if rank is None else rank
    return torch.from_numpy(values(seed, r, n, NP[dtype], op).copy()).to(dtype).to(dev())


def poisoned(shape, dtype):
    fill = float("nan") if dtype.is_floating_point else (111 if dtype == torch.uint8 else -111)
    return torch.full(shape if isinstance(shape, (tuple, list)) else (shape,), fill, dtype=dtype, device=dev())


def bits(t):
    """The bits of t, to compare floats bit for bit (NaN included)."""
    t = t.detach().contiguous().reshape(-1)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(got, want, what=""):
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{tuple(got.shape)} vs " \
        f"{want.dtype}{tuple(want.shape)}"
    torch.cuda.synchronize()
    if not torch.equal(bits(got), bits(want)):
        bad = (bits(got) != bits(want)).nonzero()
        i = int(bad[0])
        raise AssertionError(f"{what}: element {i} is {got.reshape(-1)[i].item()} against NCCL's "
                             f"{want.reshape(-1)[i].item()} ({bad.numel()} of {got.numel()} differ)")


def one_node_only():
    """Skips a test of what groups on one node only have (fused operations, symmetric tensors) where the job spans
    nodes (SYMCOMM_FAKE_NODE_SIZE, or LOCAL_WORLD_SIZE below the world size)."""
    if dist.distributed_c10d._get_default_group().spans_nodes:  # noqa: SLF001
        pytest.skip("fused operations and symmetric tensors need a group on one node; this job spans nodes")


def cpu_tensors_run():
    """Skips a test that also moves CPU tensors (torch's object collectives) where the job spans nodes without MPI:
    there only the group's CUDA tensors run."""
    pg = dist.distributed_c10d._get_default_group()  # noqa: SLF001
    if pg.spans_nodes and type(pg._comm).__name__ == "_HostUnavailable":  # noqa: SLF001
        pytest.skip("CPU tensors of a group that spans nodes need MPI (mpirun); this job has none")


@pytest.fixture(scope="module")
def nccl():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", dist.get_rank() if dist.is_initialized() else 0)))
    kwargs = {}
    if "device_id" in inspect.signature(dist.init_process_group).parameters:  # torch 2.3 on: bind the group's GPU
        kwargs["device_id"] = dev()
    dist.init_process_group(backend="symcomm", **kwargs)
    assert isinstance(dist.group.WORLD, symcomm_torch.ProcessGroupSymcomm)
    group = dist.new_group(backend="nccl")
    yield group
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_all_reduce(nccl, dtype, op, n):
    if n > 1 << 21 and dtype not in (torch.bfloat16, torch.float32):
        pytest.skip("the largest size in bfloat16 and float32 only")
    seed = seed_of("ar", dtype, op, n)
    x, ref = inp(seed, n, dtype, op), inp(seed, n, dtype, op)
    dist.all_reduce(x, op=OPS[op])
    dist.all_reduce(ref, op=OPS[op], group=nccl)
    same(x, ref, f"all_reduce {dname(dtype)} {op} n={n}")


def test_bool_and_float8(nccl):
    check_byte_dtypes(dev(), SIZES[:4])


def test_hot_path_takes_the_plain_call_only(nccl):
    """allreduce's hot path (NOTE [torch hot path]) enqueues dist.all_reduce's call of one contiguous tensor of a
    native dtype on the group's GPU with an op it knows, outside groups, and leaves every other call to the general
    path (None, nothing enqueued); both give NCCL's result."""
    pg = dist.group.WORLD
    seed = seed_of("hot", 1001)
    x, ref = inp(seed, 1001, torch.float32), inp(seed, 1001, torch.float32)
    dist.all_reduce(x)  # makes the CUDA communicator
    dist.all_reduce(ref, group=nccl)
    same(x, ref, "all_reduce before")
    hot = pg._hot  # noqa: SLF001
    if hot is None:
        pytest.skip("this group has no hot path (it spans nodes, or torch lacks a raw stream query)")

    def options(op=R.SUM, async_op=None):
        o = dist.AllreduceOptions()
        o.reduceOp = op
        if async_op is not None and hasattr(o, "asyncOp"):
            o.asyncOp = async_op
        return o

    has_async = hasattr(dist.AllreduceOptions(), "asyncOp")
    y = inp(seed, 1001, torch.float32)
    assert hot([y], options(async_op=True)) is True
    assert hot([y], options(R.MAX, async_op=False)) is (not has_async)
    y2 = inp(seed, 1001, torch.float32)
    dist.all_reduce(y2, group=nccl)
    dist.all_reduce(y2, op=R.MAX, group=nccl)
    same(y, y2, "hot path")

    ints = inp(seed, 64, torch.int32)
    not_hot = {
        "non-contiguous": ([inp(seed, 64, torch.float32)[::2]], options()),
        "bool": ([inp(seed, 64, torch.uint8).bool()], options()),
        "CPU tensor": ([torch.ones(64)], options()),
        "meta tensor": ([torch.ones(64, device="meta")], options()),
        "two tensors": ([y, y], options()),
        "a tuple": ((y,), options()),
        "a tensor subclass": ([torch.nn.Parameter(y.clone())], options()),
        "channels-last": ([torch.ones(2, 3, 4, 5, device=dev()).to(memory_format=torch.channels_last)], options()),
        "sparse": ([torch.ones(4, device=dev()).to_sparse()], options()),
        "BAND": ([ints], options(R.BAND)),
        "no options": ([y], None),
        "options of another type": ([y], types.SimpleNamespace(reduceOp=R.SUM, asyncOp=False)),
    }
    for what, (tensors, opts) in not_hot.items():
        assert hot(tensors, opts) is None, what
    comm = pg._cuda  # noqa: SLF001
    comm.group_start()
    try:
        assert hot([y], options()) is None, "inside a group"
    finally:
        comm.group_cancel()
    # The calls it leaves run on the general path (NCCL's takes no non-contiguous tensor: its copy is).
    z, zref = inp(seed, 64, torch.float32), inp(seed, 64, torch.float32)
    dist.all_reduce(torch.nn.Parameter(z, requires_grad=False))
    dist.all_reduce(zref, group=nccl)
    same(z, zref, "all_reduce of a Parameter")
    half = zref[::2].contiguous()
    dist.all_reduce(z[::2])
    dist.all_reduce(half, group=nccl)
    zref[::2] = half
    same(z, zref, "all_reduce of a non-contiguous tensor")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=dname)
def test_all_reduce_avg(nccl, dtype):
    for n in SIZES[:5]:
        seed = seed_of("avg", dtype, n)
        x, ref = inp(seed, n, dtype, "sum"), inp(seed, n, dtype, "sum")
        dist.all_reduce(x, op=R.AVG)
        dist.all_reduce(ref, op=R.AVG, group=nccl)
        torch.testing.assert_close(x, ref, rtol=0, atol=0, msg=f"avg n={n}")


@pytest.mark.parametrize("n", SIZES[:5])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int8, torch.int64], ids=dname)
def test_gathers_and_scatters(nccl, dtype, n):
    seed = seed_of("ag", dtype, n)
    x = inp(seed, n, dtype)
    out, ref = poisoned(WORLD * n, dtype), poisoned(WORLD * n, dtype)
    dist.all_gather_into_tensor(out, x)
    dist.all_gather_into_tensor(ref, x, group=nccl)
    same(out, ref, "all_gather_into_tensor")
    outs, refs = [poisoned(n, dtype) for _ in range(WORLD)], [poisoned(n, dtype) for _ in range(WORLD)]
    dist.all_gather(outs, x)
    dist.all_gather(refs, x, group=nccl)
    same(torch.cat(outs), torch.cat(refs), "all_gather (list)")
    big = inp(seed + 1, WORLD * n, dtype, "sum")
    rs, rs_ref = poisoned(n, dtype), poisoned(n, dtype)
    dist.reduce_scatter_tensor(rs, big)
    dist.reduce_scatter_tensor(rs_ref, big, group=nccl)
    same(rs, rs_ref, "reduce_scatter_tensor")
    rs, rs_ref = poisoned(n, dtype), poisoned(n, dtype)
    dist.reduce_scatter(rs, list(big.chunk(WORLD)), op=R.MAX)
    dist.reduce_scatter(rs_ref, list(big.chunk(WORLD)), op=R.MAX, group=nccl)
    same(rs, rs_ref, "reduce_scatter (list, max)")
    for root in range(WORLD):
        b, b_ref = inp(seed + 2, n, dtype), inp(seed + 2, n, dtype)
        dist.broadcast(b, src=root)
        dist.broadcast(b_ref, src=root, group=nccl)
        same(b, b_ref, f"broadcast root {root}")
    # all_gather_coalesced (NCCL has none): each input against NCCL's all_gather of it alone.
    ins = [x, inp(seed + 3, 2 * n, dtype).view(2, n)]
    agc = [[poisoned(t.shape, dtype) for t in ins] for _ in range(WORLD)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "all_gather_coalesced will be deprecated"
        dist.all_gather_coalesced(agc, ins)
    for j, t in enumerate(ins):
        refs = [poisoned(t.shape, dtype) for _ in range(WORLD)]
        dist.all_gather(refs, t, group=nccl)
        same(torch.stack([agc[r][j] for r in range(WORLD)]), torch.stack(refs), f"all_gather_coalesced input {j}")
    a2a, a2a_ref = poisoned(WORLD * n, dtype), poisoned(WORLD * n, dtype)
    dist.all_to_all_single(a2a, big)
    dist.all_to_all_single(a2a_ref, big, group=nccl)
    same(a2a, a2a_ref, "all_to_all_single")


def test_uneven_all_to_all_goes_to_nccl(nccl):
    me = dist.get_rank()
    ins = [i + 1 + me for i in range(WORLD)]  # rank r sends i + 1 + r elements to rank i
    outs = [me + 1 + r for r in range(WORLD)]
    x = inp(seed_of("a2av"), sum(ins), torch.float32)
    out, ref = poisoned(sum(outs), torch.float32), poisoned(sum(outs), torch.float32)
    dist.all_to_all_single(out, x, outs, ins)
    dist.all_to_all_single(ref, x, outs, ins, group=nccl)
    same(out, ref, "all_to_all_single with uneven splits")


def test_uneven_all_gather_goes_to_nccl(nccl):
    me = dist.get_rank()
    sizes = [(2 * r) % 5 + 1000 * r for r in range(WORLD)]  # rank 0's input is empty
    x = inp(seed_of("agv"), sizes[me], torch.bfloat16)
    outs = [poisoned(n, torch.bfloat16) for n in sizes]
    refs = [poisoned(n, torch.bfloat16) for n in sizes]
    dist.all_gather(outs, x)
    dist.all_gather(refs, x, group=nccl)
    for r in range(WORLD):
        same(outs[r], refs[r], f"all_gather of unequal sizes, block {r}")
        same(outs[r], inp(seed_of("agv"), sizes[r], torch.bfloat16, rank=r), f"all_gather block {r}")


def test_uneven_reduce_scatter_goes_to_nccl(nccl):
    me = dist.get_rank()
    sizes = [(3 * r) % 4 + 1000 * r for r in range(WORLD)]  # rank 0's block is empty
    blocks = [inp(seed_of("rsv", r), sizes[r], torch.float32, "sum") for r in range(WORLD)]
    out, ref = poisoned(sizes[me], torch.float32), poisoned(sizes[me], torch.float32)
    dist.reduce_scatter(out, blocks)
    dist.reduce_scatter(ref, blocks, group=nccl)
    same(out, ref, "reduce_scatter of unequal sizes")


def test_premul_sum_goes_to_nccl(nccl):
    # PREMUL_SUM (the factor is bound into the op, where NCCL alone reads it): the same as NCCL's on its own group,
    # and, in float32, the sum of every rank's input times the factor, computed here (small integers and a factor
    # of 0.5: exact). The factor reaches NCCL as a double; in bfloat16 torch 2.11's NCCL group gave 0 * x at 1 rank
    # on 1 x H100, and its reduce-scatter at 1 rank returns the input unscaled.
    me, n = dist.get_rank(), 4096 * WORLD + 1024 * WORLD
    blk = slice(me * (n // WORLD), (me + 1) * (n // WORLD))

    def x_of(rank, dtype):
        return ((torch.arange(n, device=dev()) * 7 + 3 * rank) % 19 - 9).to(dtype)

    want = sum(x_of(r, torch.float64) for r in range(WORLD)) * 0.5
    for dtype in (torch.float32, torch.bfloat16):
        premul = dist._make_nccl_premul_sum(0.5)
        exact = dtype == torch.float32
        a, ref = x_of(me, dtype), x_of(me, dtype)
        dist.all_reduce(a, op=premul)
        dist.all_reduce(ref, op=premul, group=nccl)
        same(a, ref, f"all_reduce PREMUL_SUM {dname(dtype)} against NCCL's")
        if exact:
            same(a, want.to(dtype), "all_reduce PREMUL_SUM")
        out, ref = poisoned(n // WORLD, dtype), poisoned(n // WORLD, dtype)
        dist.reduce_scatter_tensor(out, x_of(me, dtype), op=premul)
        dist.reduce_scatter_tensor(ref, x_of(me, dtype), op=premul, group=nccl)
        same(out, ref, f"reduce_scatter_tensor PREMUL_SUM {dname(dtype)} against NCCL's")
        if exact and WORLD > 1:
            same(out, want.to(dtype)[blk], "reduce_scatter_tensor PREMUL_SUM")
        a, ref = x_of(me, dtype), x_of(me, dtype)
        dist.reduce(a, dst=WORLD - 1, op=premul)
        dist.reduce(ref, dst=WORLD - 1, op=premul, group=nccl)
        if me == WORLD - 1:
            same(a, ref, f"reduce PREMUL_SUM {dname(dtype)} against NCCL's")
            if exact:
                same(a, want.to(dtype), "reduce PREMUL_SUM")


@pytest.mark.parametrize("async_ops", [False, True], ids=["sync", "async"])
def test_nccl_calls_in_a_coalescing_block(nccl, async_ops):
    # Calls that go to NCCL (PREMUL_SUM all-reduces, which torch passes as one allreduce_coalesced, and an
    # all_gather of unequal sizes) inside a coalescing block: the block's Work orders the stream after them.
    me = dist.get_rank()
    sizes = [(2 * r) % 5 + 100000 * r + 1 for r in range(WORLD)]
    x = inp(seed_of("cm nccl"), sizes[me], torch.float32)
    outs = [poisoned(n, torch.float32) for n in sizes]

    def y_of(rank, n, dtype):
        return ((torch.arange(n, device=dev()) * 5 + rank) % 13 - 6).to(dtype)

    ys = [y_of(me, n, torch.float32) for n in (7, 300001)]
    premul = dist._make_nccl_premul_sum(0.5)
    with dist._coalescing_manager(group=dist.group.WORLD, device=dev(), async_ops=async_ops) as cm:  # noqa: SLF001
        for y in ys:
            dist.all_reduce(y, op=premul)
        dist.all_gather(outs, x)
    if async_ops:
        cm.wait()
    for y in ys:
        want = sum(y_of(r, y.numel(), torch.float64) for r in range(WORLD)) * 0.5
        same(y, want.to(torch.float32), "PREMUL_SUM all_reduce in a coalescing block")
    for r in range(WORLD):
        same(outs[r], inp(seed_of("cm nccl"), sizes[r], torch.float32, rank=r), f"all_gather block {r}")


def test_reduce_gather_scatter(nccl):
    n, dtype = 4099, torch.float32
    for root in range(WORLD):
        x, ref = inp(seed_of("red", root), n, dtype, "sum"), inp(seed_of("red", root), n, dtype, "sum")
        dist.reduce(x, dst=root)
        dist.reduce(ref, dst=root, group=nccl)
        if dist.get_rank() == root:
            same(x, ref, "reduce")
        g = inp(seed_of("gat", root), n, dtype)
        outs = [poisoned(n, dtype) for _ in range(WORLD)] if dist.get_rank() == root else None
        dist.gather(g, outs, dst=root)
        if outs is not None:
            want = torch.cat([inp(seed_of("gat", root), n, dtype, rank=r) for r in range(WORLD)])
            same(torch.cat(outs), want, "gather")
        s = poisoned(n, dtype)
        src = [inp(seed_of("sca", root), n, dtype, rank=r) for r in range(WORLD)]
        dist.scatter(s, src if dist.get_rank() == root else None, src=root)
        same(s, inp(seed_of("sca", root), n, dtype, rank=dist.get_rank()), "scatter")


@pytest.mark.parametrize("device_style", [False, True], ids=["fast-path", "with-device"])
@pytest.mark.parametrize("async_ops", [False, True], ids=["sync", "async"])
def test_coalescing_manager(nccl, async_ops, device_style):
    sizes = [5, 4096, 70000, 300000]
    xs = [inp(seed_of("cm", i), n, torch.bfloat16) for i, n in enumerate(sizes)]
    refs = [x.clone() for x in xs]
    kw = {"device": dev()} if device_style else {}
    with dist._coalescing_manager(group=dist.group.WORLD, async_ops=async_ops, **kw) as cm:  # noqa: SLF001
        for x in xs:
            dist.all_reduce(x)
    if async_ops:
        cm.wait()
    for r in refs:
        dist.all_reduce(r, group=nccl)
    for i, (x, r) in enumerate(zip(xs, refs)):
        same(x, r, f"coalesced all_reduce {i}")
    outs = [poisoned(WORLD * n, torch.bfloat16) for n in sizes]
    with dist._coalescing_manager(group=dist.group.WORLD, async_ops=async_ops, **kw) as cm:  # noqa: SLF001
        for o, x in zip(outs, refs):
            dist.all_gather_into_tensor(o, x)
    if async_ops:
        cm.wait()
    for i, (o, x) in enumerate(zip(outs, refs)):
        ref = poisoned(o.numel(), o.dtype)
        dist.all_gather_into_tensor(ref, x, group=nccl)
        same(o, ref, f"coalesced all_gather_into_tensor {i}")


@pytest.mark.parametrize("n", [1000, 1 << 24])
def test_batch_isend_irecv_exchange(nccl, n):
    me = dist.get_rank()
    to, frm = (me + 1) % WORLD, (me - 1) % WORLD
    x = inp(seed_of("p2p", n), n, torch.float32)
    got = poisoned(n, torch.float32)
    ops = [dist.P2POp(dist.isend, x, to), dist.P2POp(dist.irecv, got, frm)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same(got, inp(seed_of("p2p", n), n, torch.float32, rank=frm), "batch_isend_irecv")


def test_cuda_graph_replays(nccl):
    """1000 replays of a captured all-reduce and all-gather whose inputs change between replays."""
    n, dtype = 65536, torch.bfloat16
    x = torch.zeros(n, dtype=dtype, device=dev())
    y = torch.zeros(n, dtype=dtype, device=dev())
    g_out = torch.zeros(WORLD * n, dtype=dtype, device=dev())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up outside the capture
            y.copy_(x)
            dist.all_reduce(y)
            dist.all_gather_into_tensor(g_out, x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y.copy_(x)
        dist.all_reduce(y)
        dist.all_gather_into_tensor(g_out, x)
    for i in range(1000):
        if i % 100 == 0 or i == 999:
            x.copy_(inp(seed_of("graph", i), n, dtype, "sum"))
        y.fill_(float("nan"))
        graph.replay()
        if i % 100 == 0 or i == 999:
            ref = x.clone()
            dist.all_reduce(ref, group=nccl)
            same(y, ref, f"graph all_reduce, replay {i}")
            ref_g = poisoned(WORLD * n, dtype)
            dist.all_gather_into_tensor(ref_g, x, group=nccl)
            same(g_out, ref_g, f"graph all_gather, replay {i}")


def test_functional_collectives_compiled(nccl):
    funcol = pytest.importorskip("torch.distributed._functional_collectives")
    group = dist.group.WORLD

    def step(t):
        return funcol.all_reduce(t * 2, "sum", group) + 1

    compiled = torch.compile(step, fullgraph=True)
    x = inp(seed_of("compile"), 4096, torch.float32, "sum")
    got = compiled(x)
    ref = x * 2
    dist.all_reduce(ref, group=nccl)
    same(got, ref + 1, "compiled functional all_reduce")
    eager = step(x)
    same(eager, ref + 1, "functional all_reduce")


def test_bucketer_callbacks(nccl):
    bucketer = symcomm_torch.ReduceScatterBucketer(bucket_cap_mb=1)
    results = []
    inputs = []
    for i, n in enumerate([7, 1000, 65536, 300000]):  # the last exceeds a 1 MiB bucket's shard: at once
        ins = [inp(seed_of("bk", i, r), n, torch.float32, "sum") for r in range(WORLD)]
        inputs.append(ins)
        bucketer.reduce_scatter_async(ins, group=dist.group.WORLD, callback_fn=lambda out, i=i: results.append((i, out)))
    bucketer.flush()
    bucketer.teardown()
    assert sorted(i for i, _ in results) == [0, 1, 2, 3]
    for i, out in results:
        ref = poisoned(inputs[i][0].numel(), torch.float32)
        dist.reduce_scatter_tensor(ref, torch.cat(inputs[i]), group=nccl)
        same(out.reshape(-1), ref, f"bucketer input {i}")


def test_ddp_step_matches_nccl(nccl):
    """Ten steps of a small model under DDP on each process group: the same losses and weights."""
    def train(group):
        torch.manual_seed(1234)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to(dev())
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev().index], process_group=group,
                                                        bucket_cap_mb=0.05)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        gen = torch.Generator(device="cpu").manual_seed(99 + dist.get_rank())
        losses = []
        for _ in range(10):
            data = torch.randn(32, 64, generator=gen).to(dev())
            target = torch.randn(32, 8, generator=gen).to(dev())
            loss = torch.nn.functional.mse_loss(ddp(data), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().clone() for p in model.parameters()]

    ours, theirs = train(dist.group.WORLD), train(nccl)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5)
    for a, b in zip(ours[1], theirs[1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=dname)
def test_fused_ops_against_float64(nccl, dtype):
    one_node_only()
    group_name = dist.group.WORLD.group_name
    gen = torch.Generator(device="cpu").manual_seed(7 + dist.get_rank())
    m, k, n = 256, 512, 384
    a_shard = torch.randn(m, k, generator=gen).to(dtype).to(dev())
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(5)).to(dtype).to(dev())
    gathered, outs = symcomm_torch.fused_all_gather_matmul(a_shard, [b], 0, group_name, return_A=True)
    want_a = poisoned(WORLD * m * k, dtype).view(WORLD * m, k)
    dist.all_gather_into_tensor(want_a, a_shard, group=nccl)
    same(gathered, want_a, "fused_all_gather_matmul: A")
    ref = (want_a.double() @ b.double()).to(dtype)
    torch.testing.assert_close(outs[0], ref, rtol=2e-2 if dtype == torch.bfloat16 else 1e-4, atol=1e-2)
    a = torch.randn(WORLD * m, k, generator=gen).to(dtype).to(dev())
    part = symcomm_torch.fused_matmul_reduce_scatter(a, b, "sum", 0, group_name)
    every_a = poisoned(WORLD * a.numel(), dtype).view(WORLD, WORLD * m, k)
    dist.all_gather_into_tensor(every_a.view(-1), a.reshape(-1), group=nccl)
    # symcomm's rounding: each rank's partial product rounded to the dtype once, the partials summed in float32
    # and the sum rounded once; a partial may land one unit of the dtype's precision from the float64 one.
    partials = [(every_a[r].double() @ b.double()).to(dtype).double() for r in range(WORLD)]
    rows = slice(dist.get_rank() * m, (dist.get_rank() + 1) * m)
    want = sum(p[rows] for p in partials).to(dtype)
    eps = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-23
    scale = max(p[rows].abs().max().item() for p in partials)
    torch.testing.assert_close(part, want, rtol=2 * eps, atol=2 * WORLD * eps * scale)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64], ids=dname)
def test_bitwise_ops(nccl, dtype):
    # BAND, BOR and BXOR (NCCL has none) against the bitwise reduction of every rank's input, computed here.
    me, n = dist.get_rank(), 1001
    for op, fn in ((R.BAND, torch.bitwise_and), (R.BOR, torch.bitwise_or), (R.BXOR, torch.bitwise_xor)):
        def x_of(rank):
            raw = torch.from_numpy(values(seed_of("bitwise", dname(dtype)), rank, n, np.uint8, "max").copy())
            return (raw.to(dtype) if dtype != torch.bool else raw % 3 != 0).to(dev())

        want = x_of(0)
        for r in range(1, WORLD):
            want = fn(want, x_of(r))
        a = x_of(me)
        dist.all_reduce(a, op=op)
        same(a, want, f"all_reduce {op}")
        a = x_of(me)
        dist.reduce(a, dst=WORLD - 1, op=op)
        same(a, want if me == WORLD - 1 else x_of(me), f"reduce {op}")


def spaced(t):
    """t's values in a view that is not contiguous (every other element of a poisoned tensor), and that tensor."""
    base = poisoned(2 * t.numel(), t.dtype)
    view = base[::2].view(t.shape)
    view.copy_(t)
    return view, base


def gaps_poisoned(base, what):
    """Whether a collective left the elements between spaced()'s view alone."""
    same(base[1::2], poisoned(base.numel() // 2, base.dtype), f"{what}: the gaps of the view")


@pytest.mark.parametrize("n", [1001, 1 << 20])
def test_strided_tensors(nccl, n):
    # Views with gaps and channels_last tensors: their elements' results (NOTE [strided tensors]), in stream order
    # without wait() and inside a CUDA graph; the references are NCCL's on contiguous copies.
    me, dtype = dist.get_rank(), torch.bfloat16
    x = inp(seed_of("strided ar", n), n, dtype, "sum")
    ref = x.clone()
    dist.all_reduce(ref, group=nccl)
    v, base = spaced(x)
    dist.all_reduce(v, async_op=True)  # no wait(): the copy back follows on the stream
    same(v.contiguous(), ref, "all_reduce of a view with gaps")
    gaps_poisoned(base, "all_reduce")
    cl = x[:n - n % 12].reshape(-1, 3, 2, 2).contiguous(memory_format=torch.channels_last)
    dist.all_reduce(cl)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    same(cl.contiguous().reshape(-1), ref[:n - n % 12], "all_reduce of a channels_last tensor")
    v, base = spaced(torch.zeros_like(x))
    graph = torch.cuda.CUDAGraph()
    src = torch.zeros_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        v.copy_(src)
        dist.all_reduce(v)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        v.copy_(src)
        dist.all_reduce(v)
    src.copy_(x)
    graph.replay()
    same(v.contiguous(), ref, "all_reduce of a view with gaps in a CUDA graph")
    gaps_poisoned(base, "all_reduce in a CUDA graph")

    gathered = poisoned(WORLD * n, dtype)
    dist.all_gather_into_tensor(gathered, x, group=nccl)
    o, base = spaced(poisoned(WORLD * n, dtype))
    dist.all_gather_into_tensor(o, spaced(x)[0])
    same(o.contiguous(), gathered, "all_gather_into_tensor of views")
    gaps_poisoned(base, "all_gather_into_tensor")
    xs = inp(seed_of("strided rs", n), WORLD * n, dtype, "sum")
    ref = poisoned(n, dtype)
    dist.reduce_scatter_tensor(ref, xs, group=nccl)
    o, base = spaced(poisoned(n, dtype))
    dist.reduce_scatter_tensor(o, spaced(xs)[0])
    same(o.contiguous(), ref, "reduce_scatter_tensor of views")
    gaps_poisoned(base, "reduce_scatter_tensor")
    v, base = spaced(x if me == 0 else poisoned(n, dtype))
    dist.broadcast(v, src=0)
    same(v.contiguous(), inp(seed_of("strided ar", n), n, dtype, "sum", rank=0), "broadcast of a view with gaps")
    gaps_poisoned(base, "broadcast")
    rows = WORLD * 2
    xa = inp(seed_of("strided a2a", n), rows * 5, dtype).reshape(rows, 5)
    ref = poisoned((rows, 5), dtype)
    dist.all_to_all_single(ref, xa, group=nccl)
    o, base = spaced(poisoned((rows, 5), dtype))
    dist.all_to_all_single(o, spaced(xa)[0])
    same(o.contiguous(), ref, "all_to_all_single of views")
    gaps_poisoned(base, "all_to_all_single")
    to, frm = (me + 1) % WORLD, (me - 1) % WORLD
    o, base = spaced(poisoned(n, dtype))
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, spaced(x)[0], to), dist.P2POp(dist.irecv, o, frm)]):
        w.wait()
    same(o.contiguous(), inp(seed_of("strided ar", n), n, dtype, "sum", rank=frm), "irecv into a view")
    gaps_poisoned(base, "irecv")


def test_argument_errors(nccl):
    with pytest.raises(TypeError):
        dist.all_reduce(torch.ones(4, dtype=torch.int16, device=dev()))
    with pytest.raises(TypeError, match="bitwise"):
        dist.all_reduce(torch.ones(4, device=dev()), op=dist.ReduceOp.BAND)
    if torch.cuda.device_count() > WORLD:
        other = (dev().index + 1) % torch.cuda.device_count()
        with pytest.raises(ValueError):
            dist.all_reduce(torch.ones(4, device=torch.device("cuda", other)))
    x = inp(seed_of("after"), 100, torch.float32, "sum")
    ref = x.clone()
    dist.all_reduce(x)
    dist.all_reduce(ref, group=nccl)
    same(x, ref, "all_reduce after argument errors")


@pytest.mark.parametrize("n", [2048, 1 << 20])
def test_symmetric_memory_ops(nccl, n):
    """torch.ops.symcomm.*: one-shot / two-shot all-reduce and the copy-engine all-gather and reduce-scatter."""
    name = dist.group.WORLD.group_name
    x = inp(seed_of("symm", n), WORLD * n, torch.bfloat16, "sum").view(WORLD, n)
    ref = x.clone()
    dist.all_reduce(ref, group=nccl)
    same(torch.ops.symcomm.one_shot_all_reduce(x, "sum", name), ref, "one_shot_all_reduce")
    y = x.clone()
    assert torch.ops.symcomm.two_shot_all_reduce_(y, "sum", name).data_ptr() == y.data_ptr()
    same(y, ref, "two_shot_all_reduce_")
    ag_ref = poisoned(WORLD * x.numel(), x.dtype)
    dist.all_gather_into_tensor(ag_ref, x, group=nccl)
    same(torch.ops.symcomm._low_contention_all_gather(x, name).reshape(-1), ag_ref, "_low_contention_all_gather")
    rs_ref = poisoned(n, x.dtype)
    dist.reduce_scatter_tensor(rs_ref, x.reshape(-1), group=nccl)
    same(torch.ops.symcomm._low_contention_reduce_scatter(x, "sum", name).reshape(-1), rs_ref,
         "_low_contention_reduce_scatter")


def test_ops_compiled_and_captured(nccl):
    """The ops under torch.compile(fullgraph=True) and in a replayed CUDA graph give the eager results."""
    one_node_only()
    name = dist.group.WORLD.group_name

    def step(t, w):
        s = torch.ops.symcomm.one_shot_all_reduce(t * 2, "sum", name)
        _, (y,) = torch.ops.symcomm.fused_all_gather_matmul(s, [w], 0, name, return_A=False)
        return y + 1

    x = inp(seed_of("opc"), 64 * 32, torch.float32, "sum").view(64, 32)
    w = inp(seed_of("opc-w", 0), 32 * 16, torch.float32, "sum", rank=0).view(32, 16)
    eager = step(x, w)
    compiled = torch.compile(step, fullgraph=True)
    same(compiled(x, w), eager, "compiled")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(x, w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(x, w)
    for _ in range(20):
        out.fill_(float("nan"))
        graph.replay()
    same(out, eager, "graph replay")


@pytest.mark.parametrize("n", [4096, 1 << 22])
def test_symmetric_tensors(nccl, n):
    """empty() on the GPU: zero-copy collectives against NCCL, peers' copies read directly, free()."""
    one_node_only()
    r = dist.get_rank()
    t = symcomm_torch.empty(WORLD, n, dtype=torch.bfloat16, device=dev())
    assert t.is_cuda and t.shape == (WORLD, n)
    x = inp(seed_of("cuda-heap", n), t.numel(), torch.bfloat16, "sum").view(t.shape)
    t.copy_(x)
    ref = x.clone()
    dist.all_reduce(ref, group=nccl)
    dist.all_reduce(t)
    same(t, ref, "all_reduce of a heap tensor")
    out = symcomm_torch.empty(WORLD * WORLD * n, dtype=torch.bfloat16, device=dev())
    dist.all_gather_into_tensor(out, t)
    ag_ref = poisoned(WORLD * t.numel(), t.dtype)
    dist.all_gather_into_tensor(ag_ref, t, group=nccl)
    same(out, ag_ref, "all_gather into a heap tensor")
    t.fill_(r + 1)
    torch.cuda.synchronize()
    dist.barrier()
    for q in range(WORLD):
        same(symcomm_torch.peer_tensor(t, q), torch.full(t.shape, q + 1, dtype=t.dtype, device=dev()),
             f"rank {q}'s copy")
    dist.barrier()
    symcomm_torch.free(out)
    symcomm_torch.free(t)


def test_object_collectives_barrier_and_blocking_p2p(nccl):
    cpu_tensors_run()
    me = dist.get_rank()
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": me, "name": f"r{me}"})
    assert objs == [{"rank": r, "name": f"r{r}"} for r in range(WORLD)]
    box = [me * 10 if me == 0 else None]
    dist.broadcast_object_list(box, src=0)
    assert box == [0]
    dist.barrier(device_ids=[dev().index])
    x = inp(seed_of("blocking"), 70000, torch.float32)
    got = poisoned(70000, torch.float32)
    if WORLD < 2:
        return
    if me == 0:
        dist.send(x, 1)
    elif me == 1:
        dist.recv(got, 0)
        same(got, inp(seed_of("blocking"), 70000, torch.float32, rank=0), "send / recv")


def test_subgroup_of_one_rank(nccl):
    solo = dist.new_group(ranks=[0], backend="symcomm")
    if dist.get_rank() == 0:
        x = inp(seed_of("solo"), 1000, torch.float32, "sum")
        want = x.clone()
        dist.all_reduce(x, group=solo)
        same(x, want, "all_reduce on a group of one rank")
    dist.barrier()


class DlpackOnly:
    """A CUDA tensor seen only through __dlpack__, as JAX arrays are: _core must take the DLPack path."""

    def __init__(self, t):
        self.t, self.shape, self.streams = t, t.shape, []

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_core_takes_dlpack_cuda_tensors(nccl):
    dist.all_reduce(torch.zeros(1, device=dev()))  # makes the group's CUDA communicator
    core = dist.group.WORLD._cuda  # noqa: SLF001 - symcomm.torch's _core communicator
    for dtype in (torch.bfloat16, torch.float32, torch.int64):
        seed = seed_of("dlpack", dtype)
        x, ref = inp(seed, 4099, dtype, "sum"), inp(seed, 4099, dtype, "sum")
        out = poisoned(4099, dtype)
        wx, wout = DlpackOnly(x), DlpackOnly(out)
        core.all_reduce(wx, wout, symcomm.ReduceOp.SUM, False)  # stream None: the legacy default stream
        assert wx.streams == [1] and wout.streams == [1]
        dist.all_reduce(ref, group=nccl)
        same(out, ref, f"DLPack all_reduce {dname(dtype)}")
    side = torch.cuda.Stream()
    x = inp(seed_of("dlpack stream"), 1001, torch.float32, "sum")
    ref = x.clone()
    out = poisoned(1001, torch.float32)
    wx = DlpackOnly(x)
    core.all_reduce(wx, DlpackOnly(out), symcomm.ReduceOp.SUM, False, stream=side.cuda_stream)
    assert wx.streams == [side.cuda_stream]
    side.synchronize()
    dist.all_reduce(ref, group=nccl)
    same(out, ref, "DLPack all_reduce on a side stream")
    with pytest.raises(TypeError, match="host backend needs host memory|CUDA backend needs GPU memory"):
        core.all_reduce(torch.ones(4), torch.ones(4), symcomm.ReduceOp.SUM, False)


def test_core_bucketer_on_cuda_tensors(nccl):
    dist.all_reduce(torch.zeros(1, device=dev()))  # makes the group's CUDA communicator
    comm = symcomm.Communicator(dist.group.WORLD._cuda)  # noqa: SLF001 - symcomm.torch's _core communicator
    results = {}
    inputs = [inp(seed_of("cuda bucketer", k), WORLD * n, torch.float32, "sum") for k, n in enumerate([5, 1000, 70000])]
    with symcomm.ReduceScatterBucketer(comm, bucket_cap_mb=0.25) as b:
        for k, x in enumerate(inputs):
            b.reduce_scatter_async(x, lambda hb, k=k: results.__setitem__(
                k, torch.as_tensor(hb, device=dev()).view(torch.float32).clone()))
        b.flush()
    for k, x in enumerate(inputs):
        ref = torch.empty(x.numel() // WORLD, device=dev())
        dist.reduce_scatter_tensor(ref, x.clone(), group=nccl)
        same(results[k], ref, f"bucketed input {k}")
