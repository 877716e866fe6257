"""symcomm.torch: the torch.distributed backend "symcomm" on CPU tensors, compared bit for bit with gloo.

The default process group is symcomm's (init_process_group(backend="symcomm")); a gloo group over the same ranks
runs every collective on the same inputs. run_ranks.py runs this file in its own symcomm-run job (torch's
store and symcomm's Communicator.from_env() both serve on MASTER_PORT). Skipped where torch is missing.
"""

import datetime
import importlib.util
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import values
from job_env import free_port

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import symcomm  # noqa: E402
import symcomm.torch as symcomm_torch  # noqa: E402

from torch_cases import DTYPES, NP, OPS, R, check_byte_dtypes, dname, seed_of  # noqa: E402

SIZES = [1, 7, 1000]


def inp(seed, n, dtype, op=None, rank=None):
    r = dist.get_rank() if rank is None else rank
    return torch.from_numpy(values(seed, r, n, NP[dtype], op).copy()).to(dtype)


def poisoned(shape, dtype):
    fill = float("nan") if dtype.is_floating_point else (111 if dtype == torch.uint8 else -111)
    return torch.full(shape, fill, dtype=dtype)


def wide(t):
    """gloo has no bfloat16: it runs such cases in float32 (exact for these inputs), converted back after."""
    return t.float() if t.dtype == torch.bfloat16 else t


def same(got, want, what=""):
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{tuple(got.shape)} vs " \
        f"{want.dtype}{tuple(want.shape)}"
    assert torch.equal(got, want), f"{what}: symcomm {got[:8]} ... differs from gloo {want[:8]} ..."


# A second symcomm group over every rank, made with the gloo group (the bucketer tests key buckets by group).
SECOND = []


@pytest.fixture(scope="module")
def gloo():
    if not dist.is_initialized():
        dist.init_process_group(backend="symcomm", timeout=datetime.timedelta(seconds=120))
    group = dist.new_group(backend="gloo")
    SECOND.append(dist.new_group(backend="symcomm"))
    yield group
    dist.barrier()
    dist.destroy_process_group()


def one_node_only():
    """Skips a test of what groups on one node only have (fused operations, symmetric tensors, a timeout of their
    own) where the job spans nodes (SYMCOMM_FAKE_NODE_SIZE: run_mpi_torch.py)."""
    if dist.distributed_c10d._get_default_group().spans_nodes:  # noqa: SLF001
        pytest.skip("this needs a group on one node (fused operations, symmetric tensors, its own timeout); this job "
                    "spans nodes")


def check_usable(gloo):
    x = inp(99, 33, torch.int32, "sum")
    y = x.clone()
    dist.all_reduce(x)
    dist.all_reduce(y, group=gloo)
    same(x, y, "all_reduce after an error")


def test_backend(gloo):
    assert dist.get_backend() == "symcomm"
    assert isinstance(dist.distributed_c10d._get_default_group(), symcomm_torch.ProcessGroupSymcomm)
    assert dist.get_world_size() >= 2


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("n", SIZES)
def test_all_reduce(gloo, dtype, op, n):
    x = inp(seed_of("ar", dname(dtype), op, n), n, dtype, op)
    y = wide(x.clone())
    dist.all_reduce(x, op=OPS[op])
    dist.all_reduce(y, op=OPS[op], group=gloo)
    same(x, y.to(dtype), "all_reduce")


def test_bool_and_float8(gloo):
    check_byte_dtypes("cpu", SIZES)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_all_reduce_avg(gloo, dtype):
    # gloo has no AVG: its SUM divided as symcomm divides (float16 in float32, integers truncating).
    n = 100
    x = inp(seed_of("avg", dname(dtype)), n, dtype, "avg")
    y = wide(x.clone())
    dist.all_reduce(x, op=R.AVG)
    dist.all_reduce(y, op=R.SUM, group=gloo)
    y = y.to(dtype)
    w = dist.get_world_size()
    if dtype in (torch.float16, torch.bfloat16):
        y = (y.float() / w).to(dtype)
    elif dtype.is_floating_point:
        y = y / w
    else:
        y = torch.div(y, w, rounding_mode="trunc")
    same(x, y, "all_reduce AVG")


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("n", SIZES)
def test_all_gather(gloo, dtype, n):
    w = dist.get_world_size()
    x = inp(seed_of("ag", dname(dtype), n), n, dtype)
    a = [poisoned((n,), dtype) for _ in range(w)]
    b = [wide(poisoned((n,), dtype)) for _ in range(w)]
    dist.all_gather(a, x)
    dist.all_gather(b, wide(x), group=gloo)
    b = [t.to(dtype) for t in b]
    for r in range(w):
        same(a[r], b[r], f"all_gather block {r}")
        same(a[r], inp(seed_of("ag", dname(dtype), n), n, dtype, rank=r), f"all_gather block {r} vs input")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8], ids=dname)
def test_all_gather_unequal_sizes(gloo, dtype):
    # Rank r's input has (2 r) % 5 elements (rank 0's none) plus a 1 MB-chunk-crossing one at the last rank; every
    # rank's output list holds tensors of those sizes (torch's NCCL process group takes such lists; gloo does not).
    w, me = dist.get_world_size(), dist.get_rank()

    def size(r):
        return (2 * r) % 5 + (3 << 18 if r == w - 1 else 0)

    def piece(r):
        return inp(seed_of("ag uneven", dname(dtype)), size(r), dtype, rank=r)

    for in_place in (False, True):
        outs = [poisoned((size(r),), dtype) for r in range(w)]
        x = piece(me)
        if in_place:  # the input is this rank's output tensor
            outs[me] = x
        dist.all_gather(outs, x)
        for r in range(w):
            same(outs[r], piece(r), f"all_gather of unequal sizes, block {r}, in_place={in_place}")
    check_usable(gloo)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("n", SIZES)
def test_all_gather_into_tensor(gloo, dtype, n):
    w = dist.get_world_size()
    x = inp(seed_of("agt", dname(dtype), n), n, dtype).reshape(1, n)
    a = poisoned((w, n), dtype)
    b = wide(poisoned((w, n), dtype))
    gather = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    gather(a, x)
    dist.all_gather(list(b.unbind(0)), wide(x).reshape(n), group=gloo)
    b = b.to(dtype)
    same(a, b, "all_gather_into_tensor")
    # in place: the input is this rank's block of the output
    c = a.clone()
    c[dist.get_rank()].fill_(0)
    c[dist.get_rank()].copy_(x.reshape(n))
    c2 = c.clone()
    for r in range(w):
        if r != dist.get_rank():
            c2[r] = poisoned((n,), dtype)
    gather(c2, c2[dist.get_rank()])
    same(c2, a, "all_gather_into_tensor in place")


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("n", [1, 300])
def test_reduce_scatter(gloo, dtype, op, n):
    w, me = dist.get_world_size(), dist.get_rank()
    full = inp(seed_of("rs", dname(dtype), op, n), w * n, dtype, op)
    want = wide(full.clone())
    dist.all_reduce(want, op=OPS[op], group=gloo)  # gloo 1.13 has no reduce_scatter
    want = want[me * n:(me + 1) * n].to(dtype)
    out = poisoned((n,), dtype)
    dist.reduce_scatter(out, list(full.chunk(w)), op=OPS[op])
    same(out, want, "reduce_scatter")
    out2 = poisoned((n,), dtype)
    scatter = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    scatter(out2, full, op=OPS[op])
    same(out2, want, "reduce_scatter_tensor")
    # in place: the output is this rank's block of the input
    inplace = full.clone()
    scatter(inplace[me * n:(me + 1) * n], inplace, op=OPS[op])
    same(inplace[me * n:(me + 1) * n], want, "reduce_scatter_tensor in place")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=dname)
@pytest.mark.parametrize("op", list(OPS))
def test_reduce_scatter_unequal_sizes(gloo, dtype, op):
    # Block r has (3 r) % 4 elements (rank 0's none): rank r gets the reduction of every rank's block r, against
    # gloo's all_reduce of the concatenated blocks (gloo has no reduce_scatter).
    w, me = dist.get_world_size(), dist.get_rank()
    sizes = [(3 * r) % 4 for r in range(w)]
    blocks = [inp(seed_of("rs uneven", dname(dtype), op, r), sizes[r], dtype, op) for r in range(w)]
    want = wide(torch.cat(blocks))
    dist.all_reduce(want, op=OPS[op], group=gloo)
    start = sum(sizes[:me])
    out = poisoned((sizes[me],), dtype)
    dist.reduce_scatter(out, blocks, op=OPS[op])
    same(out, want[start:start + sizes[me]].to(dtype), "reduce_scatter of unequal sizes")


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("n", SIZES)
def test_broadcast(gloo, dtype, n):
    for root in range(dist.get_world_size()):
        x = inp(seed_of("bc", dname(dtype), n), n, dtype)
        y = wide(x.clone())
        if dist.get_rank() != root:
            x = poisoned((n,), dtype)
            y = wide(poisoned((n,), dtype))
        dist.broadcast(x, src=root)
        dist.broadcast(y, src=root, group=gloo)
        same(x, y.to(dtype), f"broadcast from {root}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("rows", [1, 5])
def test_all_to_all_single(gloo, dtype, rows):
    w = dist.get_world_size()
    x = inp(seed_of("a2a", dname(dtype), rows), w * rows * 3, dtype).reshape(w * rows, 3)
    a = poisoned((w * rows, 3), dtype)
    b = wide(poisoned((w * rows, 3), dtype))
    dist.all_to_all_single(a, x)
    dist.all_to_all_single(b, wide(x), group=gloo)
    b = b.to(dtype)
    same(a, b, "all_to_all_single")
    c = poisoned((w * rows, 3), dtype)
    dist.all_to_all_single(c, x, output_split_sizes=[rows] * w, input_split_sizes=[rows] * w)
    same(c, b, "all_to_all_single with equal splits")


def _rows_between(src, dst):
    """Rows rank src sends rank dst in the unequal all-to-alls (some of them none)."""
    return (src + 2 * dst) % 3


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_all_to_all_single_unequal_splits(gloo, dtype):
    w, me = dist.get_world_size(), dist.get_rank()
    sends = [_rows_between(me, q) for q in range(w)]
    receives = [_rows_between(r, me) for r in range(w)]
    x = inp(seed_of("a2a uneven", dname(dtype)), sum(sends) * 3, dtype).reshape(sum(sends), 3)
    a = poisoned((sum(receives), 3), dtype)
    b = wide(poisoned((sum(receives), 3), dtype))
    dist.all_to_all_single(a, x, receives, sends)
    dist.all_to_all_single(b, wide(x), receives, sends, group=gloo)
    same(a, b.to(dtype), "all_to_all_single with unequal splits")
    # Output splits absent: equal blocks of the output's rows (rank q receives q % 2 + 1 rows from each rank).
    sends = [q % 2 + 1 for q in range(w)]
    x = inp(seed_of("a2a input splits", dname(dtype)), sum(sends) * 2, dtype).reshape(-1, 2)
    a = poisoned((w * (me % 2 + 1), 2), dtype)
    b = wide(poisoned((w * (me % 2 + 1), 2), dtype))
    dist.all_to_all_single(a, x, None, sends)
    dist.all_to_all_single(b, wide(x), None, sends, group=gloo)
    same(a, b.to(dtype), "all_to_all_single with input splits only")


def test_all_to_all_single_unequal_splits_of_several_chunks(gloo):
    # Rows of 1.5 MB: pieces of up to 3 MB pass the sends' 1 MB staging chunks (Config::p2p_chunk_bytes) in rounds.
    w, me, row = dist.get_world_size(), dist.get_rank(), 3 << 17
    sends = [_rows_between(me, q) for q in range(w)]
    receives = [_rows_between(r, me) for r in range(w)]
    x = inp(seed_of("a2a chunks"), sum(sends) * row, torch.float32).reshape(-1, row)
    a = poisoned((sum(receives), row), torch.float32)
    b = poisoned((sum(receives), row), torch.float32)
    dist.all_to_all_single(a, x, receives, sends)
    dist.all_to_all_single(b, x, receives, sends, group=gloo)
    same(a, b, "all_to_all_single of several chunks")


def test_all_to_all_single_unequal_splits_in_place(gloo):
    # Rank me sends (me + q) % 3 rows to q and receives as many from each rank as it sends it: in place works.
    w, me = dist.get_world_size(), dist.get_rank()
    splits = [(me + q) % 3 for q in range(w)]
    x = inp(seed_of("a2a in place"), sum(splits) * 4, torch.int64).reshape(-1, 4)
    want = poisoned(x.shape, torch.int64)
    dist.all_to_all_single(want, x, splits, splits, group=gloo)
    dist.all_to_all_single(x, x, splits, splits)
    same(x, want, "all_to_all_single in place")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8], ids=dname)
def test_all_to_all_unequal_sizes(gloo, dtype):
    # Tensor q of rank r's input list goes to rank q's output tensor r; sizes depend on (r, q), some are empty.
    w, me = dist.get_world_size(), dist.get_rank()

    def piece(src, dst):
        return inp(seed_of("a2a list uneven", dname(dtype), dst), 5 * _rows_between(src, dst), dtype, rank=src)

    ins = [piece(me, q) for q in range(w)]
    outs = [poisoned((5 * _rows_between(r, me),), dtype) for r in range(w)]
    work = dist.all_to_all(outs, ins, async_op=True)
    work.wait()
    for r in range(w):
        same(outs[r], piece(r, me), f"all_to_all tensor from rank {r}")
    check_usable(gloo)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("op", list(OPS))
def test_reduce(gloo, dtype, op):
    # The root's tensor against gloo's reduce; every other rank's tensor is left as it was.
    n = 7
    for root in range(dist.get_world_size()):
        x = inp(seed_of("reduce", dname(dtype), op, root), n, dtype, op)
        a = x.clone()
        b = wide(x.clone())
        dist.reduce(a, dst=root, op=OPS[op])
        dist.reduce(b, dst=root, op=OPS[op], group=gloo)
        same(a, b.to(dtype) if dist.get_rank() == root else x, f"reduce to {root}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("n", SIZES)
def test_gather(gloo, dtype, n):
    w = dist.get_world_size()
    for root in range(w):
        x = inp(seed_of("gather", dname(dtype), n, root), n, dtype)
        mine = dist.get_rank() == root
        a = [poisoned((n,), dtype) for _ in range(w)] if mine else None
        b = [wide(poisoned((n,), dtype)) for _ in range(w)] if mine else None
        dist.gather(x, a, dst=root)
        dist.gather(wide(x), b, dst=root, group=gloo)
        if mine:
            for r in range(w):
                same(a[r], b[r].to(dtype), f"gather to {root}, block {r}")
                same(a[r], inp(seed_of("gather", dname(dtype), n, root), n, dtype, rank=r), f"gather block {r}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("n", SIZES)
def test_scatter(gloo, dtype, n):
    w = dist.get_world_size()
    for root in range(w):
        # The root's blocks, which every rank can make.
        blocks = [inp(seed_of("scatter", dname(dtype), n, root, r), n, dtype, rank=root) for r in range(w)]
        mine = dist.get_rank() == root
        a = poisoned((n,), dtype)
        b = wide(poisoned((n,), dtype))
        dist.scatter(a, blocks if mine else None, src=root)
        dist.scatter(b, [wide(t) for t in blocks] if mine else None, src=root, group=gloo)
        same(a, b.to(dtype), f"scatter from {root}")
        same(a, blocks[dist.get_rank()], f"scatter from {root} vs the root's block")


@pytest.mark.filterwarnings("ignore:torch.distributed.all_reduce_coalesced will be deprecated")
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("op", list(OPS))
def test_all_reduce_coalesced(gloo, dtype, op):
    xs = [inp(seed_of("arc", dname(dtype), op, k), n, dtype, op).reshape(shape)
          for k, (n, shape) in enumerate([(1, (1,)), (6, (2, 3)), (1000, (1000,))])]
    a = [x.clone() for x in xs]
    b = [wide(x.clone()) for x in xs]
    dist.all_reduce_coalesced(a, op=OPS[op])
    dist.all_reduce_coalesced(b, op=OPS[op], group=gloo)
    for k in range(len(xs)):
        same(a[k], b[k].to(dtype), f"all_reduce_coalesced tensor {k}")


@pytest.mark.filterwarnings("ignore:torch.distributed.all_gather_coalesced will be deprecated")
@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("async_op", [False, True])
def test_all_gather_coalesced(gloo, dtype, async_op):
    # output_lists[r][j] gets rank r's input j; inputs of several shapes, one of them empty.
    w = dist.get_world_size()
    shapes = [(1,), (2, 3), (0,), (1000,)]
    xs = [inp(seed_of("agc", dname(dtype), j), max(1, math.prod(s)), dtype)[:math.prod(s)].reshape(s)
          for j, s in enumerate(shapes)]
    outs = [[poisoned(s, dtype) for s in shapes] for _ in range(w)]
    work = dist.all_gather_coalesced(outs, xs, async_op=async_op)
    if async_op:
        work.wait()
    for r in range(w):
        for j, s in enumerate(shapes):
            want = inp(seed_of("agc", dname(dtype), j), max(1, math.prod(s)), dtype, rank=r)[:math.prod(s)]
            same(outs[r][j], want.reshape(s), f"all_gather_coalesced output [{r}][{j}]")
    if dtype != torch.bfloat16:
        ref = [[poisoned(s, dtype) for s in shapes] for _ in range(w)]
        dist.all_gather_coalesced(ref, xs, group=gloo)
        for r in range(w):
            for j in range(len(shapes)):
                same(outs[r][j], ref[r][j], f"all_gather_coalesced output [{r}][{j}] against gloo")
    other = torch.int32 if dtype != torch.int32 else torch.int64
    pg = dist.distributed_c10d._get_default_group()  # noqa: SLF001 - torch checks the inputs' dtypes itself
    with pytest.raises(TypeError, match="dtype"):
        pg.allgather_coalesced([[poisoned((1,), dtype), poisoned((2,), other)] for _ in range(w)],
                               [xs[0], torch.zeros(2, dtype=other)])
    with pytest.raises(ValueError, match="elements"):
        dist.all_gather_coalesced([[poisoned((2,), dtype)] for _ in range(w)], [xs[0]])
    check_usable(gloo)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("n", SIZES)
def test_all_to_all(gloo, dtype, n):
    # Block q of rank r's input goes to rank q's output block r.
    w, me = dist.get_world_size(), dist.get_rank()
    ins = [inp(seed_of("a2a_list", dname(dtype), n, q), n, dtype) for q in range(w)]
    outs = [poisoned((n,), dtype) for _ in range(w)]
    dist.all_to_all(outs, ins)
    for r in range(w):
        same(outs[r], inp(seed_of("a2a_list", dname(dtype), n, me), n, dtype, rank=r), f"all_to_all block {r}")


def test_reduce_gather_scatter_errors(gloo):
    w = dist.get_world_size()
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.ReduceOptions()
    opts.rootRank = w
    with pytest.raises(ValueError, match="root"):
        pg.reduce([torch.ones(3)], opts)
    if dist.get_rank() == 0:
        with pytest.raises(ValueError, match="list of"):
            dist.gather(torch.ones(3), [torch.ones(3)] * (w + 1), dst=0)
        with pytest.raises(ValueError, match="elements"):
            dist.scatter(torch.ones(3), [torch.ones(2)] * w, src=0)
    with pytest.raises(TypeError, match="tensor 1"):  # torch checks this too, before the process group
        pg.allreduce_coalesced([torch.ones(2), torch.ones(2, dtype=torch.int32)], dist.AllreduceCoalescedOptions())
    with pytest.raises(TypeError, match="dtype"):  # torch checks this too, before the process group
        pg.alltoall([torch.ones(2)] * w, [torch.ones(2)] * (w - 1) + [torch.ones(3, dtype=torch.float64)],
                    dist.AllToAllOptions())
    check_usable(gloo)


def test_groups_spanning_nodes_take_the_path_asked_for(gloo):
    """Where the job declares fake nodes (run_mpi_torch.py), the group runs on a MultiNodeCommunicator: hierarchical
    from SYMCOMM_NODE_MIN_BYTES's sizes, else (these small sizes) flat on MPI; results as gloo's."""
    pg = dist.distributed_c10d._get_default_group()  # noqa: SLF001
    if not pg.spans_nodes:
        pytest.skip("the job runs on one node")
    forced = "all_reduce=0" in os.environ.get("SYMCOMM_NODE_MIN_BYTES", "")
    size, rank, comm = int(os.environ["SYMCOMM_FAKE_NODE_SIZE"]), dist.get_rank(), pg._comm  # noqa: SLF001
    assert comm.num_nodes == -(-dist.get_world_size() // size)
    round_robin = os.environ.get("SYMCOMM_FAKE_ROUND_ROBIN", "0") not in ("", "0")
    assert comm.node == (rank % comm.num_nodes if round_robin else rank // size)
    for what, call in (("all_reduce", lambda t, g: dist.all_reduce(t, group=g)),
                       ("broadcast", lambda t, g: dist.broadcast(t, src=dist.get_world_size() - 1, group=g))):
        x = inp(seed_of(what, 1), 1000, torch.int32, "sum")
        y = x.clone()
        call(x, None)
        assert pg._comm.last_path == ("hierarchical" if forced else "flat"), what  # noqa: SLF001
        call(y, gloo)
        same(x, y, what)
    with pytest.raises(RuntimeError, match="spans nodes"):
        symcomm_torch.empty(4)


NO_MPIRUN_PROBE = """
import torch
import torch.distributed as dist
import symcomm.torch
dist.init_process_group(backend="symcomm")
try:
    dist.all_reduce(torch.ones(4))
except RuntimeError as e:
    print("RAISED", e)
"""


def test_cpu_tensors_of_groups_spanning_nodes_need_mpirun(gloo):
    """Fake nodes declared in a job that mpirun did not start (each process its own MPI world): the group is made
    (its CUDA tensors would run without MPI), and every rank's first collective on a CPU tensor raises RuntimeError
    saying why; none hangs. Rank 0 runs a 2-rank job of its own."""
    if dist.get_rank() != 0 or dist.distributed_c10d._get_default_group().spans_nodes:  # noqa: SLF001
        pytest.skip("rank 0 of a one-node job runs the probe job")
    if importlib.util.find_spec("symcomm._mpi") is None:
        pytest.skip("symcomm._mpi is not built (no MPI)")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
               SYMCOMM_FAKE_NODE_SIZE="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    procs = [subprocess.Popen([sys.executable, "-c", NO_MPIRUN_PROBE], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the probe job did not end within 60 s")
        assert "RAISED" in out, f"rank {r}:\n{out}"
        assert "start the job with mpirun" in out, out


def test_barrier(gloo):
    dist.barrier()
    dist.barrier(async_op=True).wait()


def test_async(gloo):
    w, me = dist.get_world_size(), dist.get_rank()
    dtype, n = torch.float32, 257
    x = inp(seed_of("async"), n, dtype, "sum")
    ref = x.clone()
    dist.all_reduce(ref, group=gloo)
    ag = poisoned((w * n,), dtype)
    ag_list = [poisoned((n,), dtype) for _ in range(w)]
    rs = poisoned((n,), dtype)
    bc = x.clone() if me == 0 else poisoned((n,), dtype)
    a2a = poisoned((w * 4,), dtype)
    a2a_in = inp(seed_of("async a2a"), w * 4, dtype)
    works = [dist.all_reduce(x, async_op=True),
             dist.all_gather_into_tensor(ag, ref, async_op=True),
             dist.all_gather(ag_list, ref, async_op=True),
             dist.reduce_scatter_tensor(rs, ref.repeat(w), async_op=True),
             dist.broadcast(bc, src=0, async_op=True),
             dist.all_to_all_single(a2a, a2a_in, async_op=True),
             dist.barrier(async_op=True)]
    for work in works:
        assert work is not None
        assert work.wait()
        assert work.is_completed() and work.is_success() and work.exception() is None
    same(x, ref, "async all_reduce")
    same(ag, ref.repeat(w), "async all_gather_into_tensor")
    for r in range(w):
        same(ag_list[r], ref, f"async all_gather block {r}")
    same(rs, ref * w, "async reduce_scatter_tensor")
    want_bc = inp(seed_of("async"), n, dtype, "sum", rank=0)
    same(bc, want_bc, "async broadcast")
    want = poisoned((w * 4,), dtype)
    dist.all_to_all_single(want, a2a_in, group=gloo)
    same(a2a, want, "async all_to_all_single")
    fut = dist.all_reduce(torch.ones(3), async_op=True).get_future()
    assert torch.equal(fut.wait()[0], torch.full((3,), float(w)))


def test_group_timeout_is_its_communicators(gloo):
    # A timeout passed to new_group (other than torch's default) is the group's communicator timeout: a collective
    # that the last rank never joins fails on the others with symcomm's timeout error naming it, after about that
    # long, not after symcomm's default of 5 minutes. Groups that span nodes keep symcomm's own.
    one_node_only()
    w, me = dist.get_world_size(), dist.get_rank()
    g = dist.new_group(backend="symcomm", timeout=datetime.timedelta(seconds=2))
    if me != w - 1:
        t0 = time.monotonic()
        with pytest.raises(symcomm.Error) as e:
            dist.all_reduce(torch.ones(4), group=g)
        assert e.value.code == "timeout" and w - 1 in e.value.ranks, e.value
        assert time.monotonic() - t0 < 60
    dist.barrier(group=gloo)
    dist.destroy_process_group(g)
    check_usable(gloo)


def test_errors(gloo):
    w = dist.get_world_size()
    with pytest.raises(TypeError, match="int16"):
        dist.all_reduce(torch.zeros(4, dtype=torch.int16))
    with pytest.raises(ValueError, match="meta"):
        dist.all_reduce(torch.zeros(4, device="meta"))
    with pytest.raises(TypeError, match="bitwise"):
        dist.all_reduce(torch.zeros(4), op=R.BAND)
    with pytest.raises(ValueError, match="not supported"):
        dist.reduce_scatter_tensor(torch.zeros(4, dtype=torch.int32), torch.zeros(4 * w, dtype=torch.int32),
                                   op=R.BOR)
    with pytest.raises(ValueError, match="elements"):
        dist.all_gather_into_tensor(torch.zeros(w * 4 + 1), torch.zeros(4))
    with pytest.raises(TypeError, match="dtype"):
        dist.all_gather_into_tensor(torch.zeros(w * 4, dtype=torch.float64), torch.zeros(4))
    with pytest.raises(ValueError, match="elements"):  # this rank's output differs from its input, on every rank
        dist.all_gather([torch.zeros(5) if r == dist.get_rank() else torch.zeros(4) for r in range(w)],
                        torch.zeros(4))
    with pytest.raises(ValueError, match="list of"):
        dist.all_gather([torch.zeros(4)] * (w + 1), torch.zeros(4))
    with pytest.raises(ValueError):
        dist.reduce_scatter_tensor(torch.zeros(3), torch.zeros(3 * w + 1))
    with pytest.raises(ValueError, match="elements"):
        dist.reduce_scatter_tensor(torch.zeros(4), torch.zeros(3 * w))
    with pytest.raises(ValueError, match="elements"):  # this rank's block differs from its output, on every rank
        dist.reduce_scatter(torch.zeros(3), [torch.zeros(2) if r == dist.get_rank() else torch.zeros(3)
                                             for r in range(w)])
    with pytest.raises(ValueError, match="itself"):  # every rank sends itself other than it receives
        dist.all_to_all_single(torch.zeros(2 * w), torch.zeros(2 * w), input_split_sizes=[2 * w] + [0] * (w - 1))
    with pytest.raises(ValueError, match="add up"):
        dist.all_to_all_single(torch.zeros(2 * w), torch.zeros(2 * w), input_split_sizes=[1] * w)
    with pytest.raises(ValueError, match="add up"):
        dist.all_to_all_single(torch.zeros(2 * w), torch.zeros(2 * w), output_split_sizes=[2] * (w + 1))
    with pytest.raises(ValueError, match="rows"):
        dist.all_to_all_single(torch.zeros(2 * w, 3), torch.zeros(2 * w, 2),
                               input_split_sizes=[2 * w] + [0] * (w - 1))
    with pytest.raises(ValueError, match="divisible"):
        dist.all_to_all_single(torch.zeros(2 * w + 1), torch.zeros(2 * w + 1))
    with pytest.raises(ValueError, match="elements"):
        dist.all_to_all_single(torch.zeros(2 * w), torch.zeros(4 * w))
    check_usable(gloo)
    with pytest.raises(RuntimeError):  # symcomm.Error (invalid_argument): root outside the group
        opts = dist.BroadcastOptions()
        opts.rootRank = w
        dist.distributed_c10d._get_default_group().broadcast([torch.zeros(2)], opts)
    check_usable(gloo)


def test_complex_and_views(gloo):
    # torch.distributed reduces complex tensors as their real view; a contiguous slice is shared, not copied.
    x = torch.complex(inp(1, 8, torch.float32, "sum"), inp(2, 8, torch.float32, "sum"))
    y = x.clone()
    dist.all_reduce(x)
    dist.all_reduce(y, group=gloo)
    assert torch.equal(x, y)
    base = poisoned((20,), torch.int64)
    part = base[5:15]
    part.copy_(inp(3, 10, torch.int64, "sum"))
    want = part.clone()
    dist.all_reduce(part)
    dist.all_reduce(want, group=gloo)
    same(base[5:15], want, "all_reduce of a slice")
    assert bool((base[:5] == -111).all()) and bool((base[15:] == -111).all())


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.uint8, torch.int32, torch.int64], ids=dname)
def test_bitwise_ops(gloo, dtype):
    # BAND, BOR and BXOR in all_reduce and reduce, against gloo's, on inputs with every bit pattern of a byte.
    w, me = dist.get_world_size(), dist.get_rank()
    for op in (R.BAND, R.BOR, R.BXOR):
        for n in (1, 300):
            raw = torch.from_numpy(values(seed_of("bitwise", str(op), n), me, n, np.uint8, "max").copy())
            x = raw.to(dtype) if dtype != torch.bool else raw % 3 != 0
            a, b = x.clone(), x.to(torch.uint8 if dtype == torch.bool else dtype, copy=True)  # gloo has no bool
            dist.all_reduce(a, op=op)
            dist.all_reduce(b, op=op, group=gloo)
            same(a, b.to(dtype), f"all_reduce {op} n={n}")
            for root in (0, w - 1):
                a, b = x.clone(), x.to(torch.uint8 if dtype == torch.bool else dtype, copy=True)
                dist.reduce(a, dst=root, op=op)
                dist.reduce(b, dst=root, op=op, group=gloo)
                same(a, b.to(dtype) if me == root else x, f"reduce {op} to {root} n={n}")


def spaced(t):
    """t's values in a view that is not contiguous (every other element of a poisoned tensor), and that tensor."""
    base = poisoned((2 * t.numel(),), t.dtype)
    view = base[::2].view(t.shape)
    view.copy_(t)
    return view, base


def gaps_poisoned(base, what):
    """Whether a collective left the elements between spaced()'s view alone."""
    torch.testing.assert_close(base[1::2], poisoned((base.numel() // 2,), base.dtype), rtol=0, atol=0,
                               equal_nan=True, msg=f"{what}: the gaps of the view were written")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=dname)
def test_strided_tensors(gloo, dtype):
    # Views with gaps, transposed views and channels_last tensors give every collective their elements' results
    # (NOTE [strided tensors]); the references run on contiguous copies (gloo's, or from every rank's inputs).
    w, me, n = dist.get_world_size(), dist.get_rank(), 6

    def x_of(tag, count=n, rank=None, op=None):
        return inp(seed_of("strided", tag, dname(dtype)), count, dtype, op, rank)

    for async_op in (False, True):
        x = x_of("ar", op="sum")
        v, base = spaced(x)
        want = x.clone()
        dist.all_reduce(want, group=gloo)
        work = dist.all_reduce(v, async_op=async_op)
        if async_op:
            work.wait()
        same(v.clone(), want, f"all_reduce of a view with gaps, async_op={async_op}")
        gaps_poisoned(base, "all_reduce")
    x = x_of("ar t", 12, op="sum").reshape(3, 4)
    t = x.t().contiguous().t()  # x's values, transposed in memory
    want = x.clone()
    dist.all_reduce(want, op=R.MAX, group=gloo)
    dist.all_reduce(t, op=R.MAX)
    same(t.contiguous(), want, "all_reduce of a transposed view")
    x = x_of("ar cl", 24, op="sum").reshape(2, 3, 2, 2)
    cl = x.contiguous(memory_format=torch.channels_last)
    want = x.clone()
    dist.all_reduce(want, group=gloo)
    dist.all_reduce(cl)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    same(cl.contiguous(), want, "all_reduce of a channels_last tensor")

    v, base = spaced(x_of("bc") if me == 1 % w else poisoned((n,), dtype))
    dist.broadcast(v, src=1 % w)
    same(v.clone(), x_of("bc", rank=1 % w), "broadcast of a view with gaps")
    gaps_poisoned(base, "broadcast")

    gathered = torch.cat([x_of("ag", rank=r) for r in range(w)])
    v, _ = spaced(x_of("ag"))
    outs = [spaced(poisoned((n,), dtype)) for _ in range(w)]
    dist.all_gather([o for o, _ in outs], v)
    for r, (o, b) in enumerate(outs):
        same(o.clone(), gathered[r * n:(r + 1) * n], f"all_gather into views, block {r}")
        gaps_poisoned(b, "all_gather")
    o, b = spaced(poisoned((w * n,), dtype))
    dist.all_gather_into_tensor(o, v)
    same(o.clone(), gathered, "all_gather_into_tensor of views")
    gaps_poisoned(b, "all_gather_into_tensor")

    x = x_of("rs", w * n, op="sum")
    total = x.clone()
    dist.all_reduce(total, group=gloo)
    o, b = spaced(poisoned((n,), dtype))
    dist.reduce_scatter_tensor(o, spaced(x)[0])
    same(o.clone(), total[me * n:(me + 1) * n], "reduce_scatter_tensor of views")
    gaps_poisoned(b, "reduce_scatter_tensor")
    o, b = spaced(poisoned((n,), dtype))
    dist.reduce_scatter(o, [spaced(x[q * n:(q + 1) * n])[0] for q in range(w)])
    same(o.clone(), total[me * n:(me + 1) * n], "reduce_scatter of views")
    gaps_poisoned(b, "reduce_scatter")

    x = x_of("a2a", w * 2 * 3).reshape(w * 2, 3)
    want = poisoned((w * 2, 3), dtype)
    dist.all_to_all_single(want, x, group=gloo)
    o, b = spaced(poisoned((w * 2, 3), dtype))
    dist.all_to_all_single(o, spaced(x)[0])
    same(o.clone(), want, "all_to_all_single of views")
    gaps_poisoned(b, "all_to_all_single")
    sends = [_rows_between(me, q) for q in range(w)]
    receives = [_rows_between(r, me) for r in range(w)]
    x = x_of("a2a uneven", sum(sends) * 3).reshape(-1, 3)
    want = poisoned((sum(receives), 3), dtype)
    dist.all_to_all_single(want, x, receives, sends, group=gloo)
    o, b = spaced(poisoned((sum(receives), 3), dtype))
    dist.all_to_all_single(o, spaced(x)[0], receives, sends)
    same(o.clone(), want, "all_to_all_single of views with unequal splits")
    gaps_poisoned(b, "all_to_all_single with unequal splits")
    for sizes in ((lambda src, dst: n), _rows_between):
        outs = [spaced(poisoned((sizes(r, me),), dtype)) for r in range(w)]
        dist.all_to_all([o for o, _ in outs], [spaced(x_of(f"a2a list {q}", sizes(me, q)))[0] for q in range(w)])
        for r, (o, b) in enumerate(outs):
            same(o.clone(), x_of(f"a2a list {me}", sizes(r, me), rank=r), f"all_to_all into views, from {r}")
            gaps_poisoned(b, "all_to_all")

    root = w - 1
    x = x_of("reduce", op="sum")
    want = x.clone()
    dist.reduce(want, dst=root, group=gloo)
    v, base = spaced(x)
    dist.reduce(v, dst=root)
    same(v.clone(), want if me == root else x, "reduce of a view with gaps")
    gaps_poisoned(base, "reduce")
    outs = [spaced(poisoned((n,), dtype)) for _ in range(w)] if me == root else []
    dist.gather(spaced(x_of("gather"))[0], [o for o, _ in outs] if outs else None, dst=root)
    for r, (o, b) in enumerate(outs):
        same(o.clone(), x_of("gather", rank=r), f"gather into views, block {r}")
        gaps_poisoned(b, "gather")
    o, b = spaced(poisoned((n,), dtype))
    blocks = [spaced(x_of(f"scatter {r}", rank=root))[0] for r in range(w)]
    dist.scatter(o, blocks if me == root else None, src=root)
    same(o.clone(), x_of(f"scatter {me}", rank=root), "scatter into a view")
    gaps_poisoned(b, "scatter")

    o, b = spaced(poisoned((n,), dtype))
    ops = [dist.P2POp(dist.isend, spaced(x_of("p2p"))[0], (me + 1) % w),
           dist.P2POp(dist.irecv, o, (me - 1) % w)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    same(o.clone(), x_of("p2p", rank=(me - 1) % w), "irecv into a view")
    gaps_poisoned(b, "irecv")


@pytest.mark.filterwarnings("ignore:torch.distributed.all_reduce_coalesced will be deprecated")
def test_parameters_as_outputs(gloo):
    # Tensors that require grad (parameters, their views) are written as gloo writes them: their data, without an
    # autograd error and without bumping their version (a collective is not an autograd operation).
    w, me, n = dist.get_world_size(), dist.get_rank(), 6

    def param(tag, count=n, rank=None):
        return torch.nn.Parameter(inp(seed_of("param", tag), count, torch.float32, "sum", rank))

    def check(p, want, what, version):
        same(p.detach().clone(), want, what)
        assert p._version == version, f"{what}: the version went from {version} to {p._version}"

    for root in (0, w - 1):
        p = param(f"reduce {root}")
        want = p.detach().clone()
        dist.reduce(want, dst=root, group=gloo)
        v0 = p._version
        dist.reduce(p, dst=root)
        check(p, want if me == root else param(f"reduce {root}").detach(), f"reduce to {root}", v0)
    p = param("bc")
    t = p.view(2, 3).t()  # a view of the parameter, not contiguous
    v0 = p._version
    dist.broadcast(t, src=1 % w)
    check(p, param("bc", rank=1 % w).detach(), "broadcast into a transposed view of a parameter", v0)
    outs = [param(f"ag {r}") for r in range(w)]
    versions = [o._version for o in outs]
    dist.all_gather(outs, param("ag"))
    for r, o in enumerate(outs):
        check(o, param("ag", rank=r).detach(), f"all_gather into parameter {r}", versions[r])
    p = param("scatter")
    v0 = p._version
    blocks = [param(f"scatter {r}", rank=0).detach() for r in range(w)]
    dist.scatter(p, blocks if me == 0 else None, src=0)
    check(p, blocks[me], "scatter into a parameter", v0)
    ps = [param("arc 0"), param("arc 1", 3)]
    want = [x.detach().clone() for x in ps]
    dist.all_reduce_coalesced(want, group=gloo)
    versions = [x._version for x in ps]
    dist.all_reduce_coalesced(ps)
    for k, x in enumerate(ps):
        check(x, want[k], f"all_reduce_coalesced parameter {k}", versions[k])
    sends = [_rows_between(me, q) for q in range(w)]
    receives = [_rows_between(r, me) for r in range(w)]
    x = param("a2a", sum(sends))
    p = torch.nn.Parameter(poisoned((sum(receives),), torch.float32))
    want = poisoned((sum(receives),), torch.float32)
    dist.all_to_all_single(want, x.detach(), receives, sends, group=gloo)
    v0 = p._version
    dist.all_to_all_single(p, x, receives, sends)
    check(p, want, "all_to_all_single with splits into a parameter", v0)


def test_more_symcomm_groups(gloo):
    # new_group(backend="symcomm") makes another communicator: over every rank, then over ranks 0 and 1.
    everyone = dist.new_group(backend="symcomm")
    x = inp(5, 64, torch.int64, "sum")
    y = x.clone()
    dist.all_reduce(x, group=everyone)
    dist.all_reduce(y, group=gloo)
    same(x, y, "all_reduce on a second symcomm group")
    pair = dist.new_group(ranks=[0, 1], backend="symcomm")
    if dist.get_rank() < 2:
        z = torch.full((5,), dist.get_rank() + 1, dtype=torch.int32)
        dist.all_reduce(z, group=pair)
        assert torch.equal(z, torch.full((5,), 3, dtype=torch.int32))
        assert dist.get_world_size(pair) == 2
    # A group of every rank made after the pair's: the ranks have made different numbers of communicators.
    later = dist.new_group(backend="symcomm")
    w = inp(5, 64, torch.int64, "sum")
    v = w.clone()
    dist.all_reduce(w, group=later)
    dist.all_reduce(v, group=gloo)
    same(w, v, "all_reduce on a symcomm group made after a sub-group's")
    dist.barrier()
    dist.destroy_process_group(later)
    dist.destroy_process_group(pair)
    dist.destroy_process_group(everyone)
    check_usable(gloo)


def test_object_collectives(gloo):
    objs = [{"rank": dist.get_rank(), "s": "x" * dist.get_rank()}]
    got = [None] * dist.get_world_size()
    dist.all_gather_object(got, objs[0])
    assert got == [{"rank": r, "s": "x" * r} for r in range(dist.get_world_size())]
    box = [objs[0] if dist.get_rank() == 1 else None]
    dist.broadcast_object_list(box, src=1)
    assert box == [{"rank": 1, "s": "x"}]
    w, root = dist.get_world_size(), dist.get_world_size() - 1
    gathered = [None] * w if dist.get_rank() == root else None
    dist.gather_object(objs[0], gathered, dst=root)
    if dist.get_rank() == root:
        assert gathered == [{"rank": r, "s": "x" * r} for r in range(w)]
    mine = [None]
    dist.scatter_object_list(mine, [("to", r, "y" * r) for r in range(w)] if dist.get_rank() == 0 else None, src=0)
    assert mine == [("to", dist.get_rank(), "y" * dist.get_rank())]


def test_calls_from_torch_cpp(gloo):
    """torch's C++ calls the group's collectives and waits for their Works (NOTE [Works torch holds])."""
    me = dist.get_rank()
    pg = dist.distributed_c10d._get_default_group()  # noqa: SLF001
    ts = [inp(seed_of(f"coalesced {i}"), n, dtype) for i, (n, dtype) in
          enumerate([(5, torch.float32), (300, torch.int64), (1, torch.float64), (77, torch.float32)])]
    want = [inp(seed_of(f"coalesced {i}"), t.numel(), t.dtype, rank=1) for i, t in enumerate(ts)]
    # A 64-byte buffer puts each tensor in a broadcast of its own, two of them in flight at a time.
    dist._broadcast_coalesced(pg, ts, 64, 1)  # noqa: SLF001
    for i, (t, w) in enumerate(zip(ts, want)):
        same(t, w, f"_broadcast_coalesced tensor {i}")
    dist._verify_params_across_processes(pg, [torch.zeros(2, 3), torch.zeros(4)])  # noqa: SLF001
    # Each rank compares its shapes with rank 0's.
    if me == 0:
        dist._verify_params_across_processes(pg, [torch.zeros(2, 3)])  # noqa: SLF001
    else:
        with pytest.raises(RuntimeError, match="not to match sizes"):
            dist._verify_params_across_processes(pg, [torch.zeros(3, 2)])  # noqa: SLF001
    check_usable(gloo)


def test_works_are_held_until_they_complete(gloo, monkeypatch):
    """A Work is held (NOTE [Works torch holds]) until it completes; Works nobody waits for are dropped once held
    Works reach _PENDING_MAX."""
    monkeypatch.setattr(symcomm_torch, "_PENDING_MAX", 8)
    kept = dist.all_reduce(torch.ones(4), async_op=True)
    assert id(kept) in symcomm_torch._PENDING  # noqa: SLF001
    kept.wait()
    assert id(kept) not in symcomm_torch._PENDING  # noqa: SLF001
    for _ in range(40):
        dist.all_reduce(torch.ones(4), async_op=True)
    dist.all_reduce(torch.ones(4))  # the collectives run in order: the 40 have run when it returns
    last = dist.all_reduce(torch.ones(4), async_op=True)
    assert len(symcomm_torch._PENDING) <= 8  # noqa: SLF001
    last.wait()
    check_usable(gloo)


def _ddp_run(group, steps=5):
    """Parameters after `steps` DistributedDataParallel steps on `group` (every rank its own batches, one step's
    gradients accumulated under no_sync(), BatchNorm buffers broadcast), from the same initial model."""
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.BatchNorm1d(40),
                                torch.nn.Linear(40, 6))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=0.002)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(seed_of("ddp") + dist.get_rank())
    for step in range(steps):
        x, y = torch.randn(8, 24, generator=data), torch.randn(8, 6, generator=data)
        if step == 2:
            with ddp.no_sync():
                ((ddp(x) - y) ** 2).mean().backward()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_distributed_data_parallel(gloo):
    """DistributedDataParallel on the symcomm group trains as on gloo: the same parameters on every rank, equal to
    gloo's up to the order of the gradient sums (bit for bit at 2 ranks)."""
    ours, theirs = _ddp_run(None), _ddp_run(gloo)
    every = [torch.empty_like(ours) for _ in range(dist.get_world_size())]
    dist.all_gather(every, ours, group=gloo)
    for r, p in enumerate(every):
        same(p, every[0], f"DDP parameters of rank {r}")
    if dist.get_world_size() == 2:
        same(ours, theirs, "DDP parameters")
    else:
        assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6), (ours - theirs).abs().max()


def test_unsupported_collectives(gloo):
    pg = dist.distributed_c10d._get_default_group()
    with pytest.raises(RuntimeError, match="does not support monitoredBarrier"):
        pg.monitored_barrier(datetime.timedelta(seconds=5), False)
    # PREMUL_SUM's factor is bound into the op where only NCCL reads it: CUDA tensors go there, CPU ones are
    # refused, as gloo refuses them.
    premul = dist._make_nccl_premul_sum(2.0)
    x = torch.ones(4)
    with pytest.raises(ValueError, match="PREMUL_SUM reduces CUDA tensors only"):
        dist.all_reduce(x, op=premul)
    with pytest.raises(ValueError, match="PREMUL_SUM"):
        dist.reduce_scatter_tensor(torch.empty(1), torch.ones(dist.get_world_size()), op=premul)
    with pytest.raises(ValueError, match="PREMUL_SUM"):
        dist.reduce(x, dst=0, op=premul)
    same(x, torch.ones(4), "the refused PREMUL_SUM's tensor")
    check_usable(gloo)


# Coalescing: torch 1.13's _coalescing_manager(group, reqs) calls the process group's _start_coalescing() and
# _end_coalescing(reqs); symcomm.torch.coalescing_manager(group, async_ops) is the same block with torch 2.x's
# usage. The collectives of a block run together at its end: inside it, inputs are unchanged.

COALESCED = [(torch.float32, "sum", 1), (torch.int64, "max", 7), (torch.bfloat16, "sum", 300),
             (torch.float16, "min", 33), (torch.int8, "prod", 5), (torch.float64, "sum", 1000),
             (torch.uint8, "max", 0), (torch.int32, "sum", 4097)]


def coalesced_cases(tag):
    return [inp(seed_of(tag, k), n, dtype, op) for k, (dtype, op, n) in enumerate(COALESCED)]


def gloo_reference(xs, gloo):
    want = []
    for x, (dtype, op, _) in zip(xs, COALESCED):
        y = wide(x.clone())
        dist.all_reduce(y, op=OPS[op], group=gloo)
        want.append(y.to(dtype))
    return want


def coalesced_block(xs, tag, async_op, group=None):
    """Issues the all-reduces of xs, an all_gather_into_tensor and an all_gather (list) on `group`; returns the
    Works (async_op) and the all-gather outputs, checking that nothing ran yet."""
    w = dist.get_world_size()
    before = [x.clone() for x in xs]
    reqs = []
    for x, (dtype, op, _) in zip(xs, COALESCED):
        work = dist.all_reduce(x, op=OPS[op], group=group, async_op=async_op)
        if async_op:
            assert not work.is_completed()
            reqs.append(work)
    g = inp(seed_of(tag, "ag"), 9, torch.int32)
    ag = poisoned((w * 9,), torch.int32)
    ag_list = [poisoned((9,), torch.float64) for _ in range(w)]
    for work in (dist.all_gather_into_tensor(ag, g, group=group, async_op=async_op),
                 dist.all_gather(ag_list, g.double(), group=group, async_op=async_op)):
        if async_op:
            reqs.append(work)
    for x, b in zip(xs, before):
        assert torch.equal(x, b), "a coalesced collective ran before the end of its block"
    assert bool((ag == -111).all())
    return reqs, g, ag, ag_list


def check_coalesced(xs, want, g, ag, ag_list, gloo, what):
    w = dist.get_world_size()
    for k, (x, y) in enumerate(zip(xs, want)):
        same(x, y, f"{what}: all_reduce {k}")
    ref = [poisoned((9,), torch.int32) for _ in range(w)]
    dist.all_gather(ref, g, group=gloo)
    same(ag, torch.cat(ref), f"{what}: all_gather_into_tensor")
    for r in range(w):
        same(ag_list[r], ref[r].double(), f"{what}: all_gather block {r}")


@pytest.mark.parametrize("explicit_group", [False, True], ids=["default", "explicit"])
def test_torch_coalescing_manager_sync(gloo, explicit_group):
    from torch.distributed.distributed_c10d import _coalescing_manager
    pg = dist.distributed_c10d._get_default_group() if explicit_group else None
    xs = coalesced_cases("cm sync")
    want = gloo_reference(xs, gloo)
    reqs = []
    held = len(symcomm_torch._PENDING)  # noqa: SLF001
    with _coalescing_manager(pg, reqs):
        _, g, ag, ag_list = coalesced_block(xs, "cm sync", False, pg)
    assert reqs == []
    check_coalesced(xs, want, g, ag, ag_list, gloo, "_coalescing_manager, synchronous calls")
    assert len(symcomm_torch._PENDING) == held, "the block's Works are held after it ended"  # noqa: SLF001


def test_torch_coalescing_manager_async(gloo):
    from torch.distributed.distributed_c10d import _coalescing_manager
    xs = coalesced_cases("cm async")
    want = gloo_reference(xs, gloo)
    reqs = []
    with _coalescing_manager(None, reqs):
        got, g, ag, ag_list = coalesced_block(xs, "cm async", True)
        reqs.extend(got)
    assert len(reqs) == len(COALESCED) + 2
    for r in reqs:
        assert r.is_completed()
        assert r.wait()
        assert r.is_success() and r.exception() is None
    check_coalesced(xs, want, g, ag, ag_list, gloo, "_coalescing_manager, async_op=True")


@pytest.mark.parametrize("async_ops", [False, True])
def test_symcomm_coalescing_manager(gloo, async_ops):
    xs = coalesced_cases(("scm", async_ops))
    want = gloo_reference(xs, gloo)
    with symcomm_torch.coalescing_manager(async_ops=async_ops) as cm:
        coalesced_block(xs, ("scm", async_ops), False)
        rs_in = inp(seed_of("scm rs", async_ops), 5 * dist.get_world_size(), torch.int64, "sum")
        rs = poisoned((5,), torch.int64)
        dist.reduce_scatter_tensor(rs, rs_in)
        bc = inp(seed_of("scm bc", async_ops), 11, torch.float16)
        bc_want = inp(seed_of("scm bc", async_ops), 11, torch.float16, rank=dist.get_world_size() - 1)
        dist.broadcast(bc, src=dist.get_world_size() - 1)
        a2a_in = inp(seed_of("scm a2a", async_ops), 3 * dist.get_world_size(), torch.int32)
        a2a = poisoned((3 * dist.get_world_size(),), torch.int32)
        dist.all_to_all_single(a2a, a2a_in)
        dist.barrier()
    assert len(cm.works) == len(COALESCED) + 6
    if async_ops:
        cm.wait()
    for x, y in zip(xs, want):
        same(x, y, "coalescing_manager all_reduce")
    full = rs_in.clone()
    dist.all_reduce(full, group=gloo)
    me = dist.get_rank()
    same(rs, full[me * 5:(me + 1) * 5], "coalescing_manager reduce_scatter_tensor")
    same(bc, bc_want, "coalescing_manager broadcast")
    a2a_want = poisoned((3 * dist.get_world_size(),), torch.int32)
    dist.all_to_all_single(a2a_want, a2a_in, group=gloo)
    same(a2a, a2a_want, "coalescing_manager all_to_all_single")
    with pytest.raises(TypeError, match="not a symcomm"):
        with symcomm_torch.coalescing_manager(gloo):
            pass


def test_coalescing_nested_and_cancelled(gloo):
    from torch.distributed.distributed_c10d import _coalescing_manager
    xs = coalesced_cases("nested")
    want = gloo_reference(xs, gloo)
    before = [x.clone() for x in xs]
    reqs = []
    with _coalescing_manager(None, reqs):
        reqs.append(dist.all_reduce(xs[0], op=OPS[COALESCED[0][1]], async_op=True))
        with symcomm_torch.coalescing_manager():  # an inner level: the outer block's end runs it
            for x, (_, op, _) in list(zip(xs, COALESCED))[1:]:
                dist.all_reduce(x, op=OPS[op])
        assert not reqs[0].is_completed()
        for x, b in zip(xs, before):
            assert torch.equal(x, b), "an inner block ran before the outer block ended"
    for x, y in zip(xs, want):
        same(x, y, "nested blocks")
    # A block that raises runs nothing (every rank raises alike): torch's manager and symcomm's.
    for manager in ("torch", "symcomm"):
        x = inp(seed_of("cancel", manager), 17, torch.int32, "sum")
        before = x.clone()
        reqs = []
        with pytest.raises(KeyError):
            if manager == "torch":
                with _coalescing_manager(None, reqs):
                    reqs.append(dist.all_reduce(x, async_op=True))
                    raise KeyError("inside the block")
            else:
                with symcomm_torch.coalescing_manager():
                    reqs.append(dist.all_reduce(x, async_op=True))
                    raise KeyError("inside the block")
        same(x, before, f"{manager}: cancelled block")
        with pytest.raises(RuntimeError, match="cancelled"):
            reqs[0].wait()
        check_usable(gloo)
    # Entered while another exception is being handled: that one does not cancel the block.
    x = inp(seed_of("in except"), 17, torch.int32, "sum")
    y = x.clone()
    dist.all_reduce(y, group=gloo)
    try:
        raise KeyError("outside")
    except KeyError:
        with _coalescing_manager(None, []):
            dist.all_reduce(x)
    same(x, y, "block inside an except clause")


# ReduceScatterBucketer (fairscale's API): random call sequences, results bit for bit equal to one
# dist.reduce_scatter per call (random floats) and to gloo's all_reduce then slice (exact small integers),
# callbacks in the order fairscale's bucketing gives.

BUCKET_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8]


def shard_elements(cap_mb, dtype, w):
    if cap_mb <= 0:
        return 0
    return int(cap_mb * 1024 * 1024 / torch.tensor([], dtype=dtype).element_size() // w)


def random_inputs(rng, seed, n, dtype, w, exact):
    """input_list of this rank: w tensors of n elements (2-D where n is even)."""
    shape = (2, n // 2) if n % 2 == 0 and n else (n,)
    if exact:
        flat = inp(seed, w * n, dtype, "sum")
    else:
        g = torch.Generator().manual_seed(seed * 31 + dist.get_rank())
        if dtype.is_floating_point:
            flat = (torch.randn(w * n, generator=g, dtype=torch.float64) * 100).to(dtype)
        else:
            flat = torch.randint(0, 50, (w * n,), generator=g).to(dtype)
    return [t.reshape(shape) for t in flat.chunk(w)] if n else [torch.empty(shape, dtype=dtype) for _ in range(w)]


@pytest.mark.parametrize("cap_mb", [25, 0, -1, 0.0001, 0.002, 0.02])
@pytest.mark.parametrize("exact", [True, False], ids=["vs_gloo", "vs_one_by_one"])
def test_bucketer_random(gloo, cap_mb, exact):
    import random
    w, me = dist.get_world_size(), dist.get_rank()
    groups = [None, SECOND[0]]
    rng = random.Random(seed_of("bucketer", cap_mb, exact))  # the same calls on every rank
    bucketer = symcomm_torch.ReduceScatterBucketer(bucket_cap_mb=cap_mb)
    fired, results, expected_order = [], {}, []
    model = {}  # (dtype, group index) -> [offset, [call ids]], in creation order
    wants = {}
    for rounds in range(2):  # the second round reuses the bucketer after teardown()
        for call in range(rng.randint(20, 45)):
            cid = (rounds, call)
            dtype = rng.choice(BUCKET_DTYPES)
            n = rng.choice([0, 1, 3, 8, 13, 64, 100, 257, 1000, 3000])
            gi = rng.randrange(2)
            ins = random_inputs(rng, seed_of("in", cap_mb, exact, cid), n, dtype, w, exact)
            if exact:
                full = wide(torch.cat([t.reshape(-1) for t in ins]))
                dist.all_reduce(full, group=gloo)
                wants[cid] = full[me * n:(me + 1) * n].to(dtype).reshape(ins[0].shape)
            else:
                want = poisoned(ins[0].shape, dtype)
                dist.reduce_scatter(want, ins, group=groups[gi])
                wants[cid] = want
            copies = [t.clone() for t in ins]

            def callback(result, cid=cid):
                fired.append(cid)
                results[cid] = result

            bucketer.reduce_scatter_async(ins, groups[gi], callback_fn=callback)
            for t, c in zip(ins, copies):
                assert torch.equal(t, c), "reduce_scatter_async changed its input"
            shard = shard_elements(cap_mb, dtype, w)
            if cap_mb <= 0 or n > shard:
                expected_order.append(cid)
            else:
                b = model.setdefault((dtype, gi), [0, []])
                if n > shard - b[0]:
                    expected_order.extend(b[1])
                    b[0], b[1] = 0, []
                b[0] += n
                b[1].append(cid)
            assert fired == expected_order, f"callbacks after call {cid}"
        if rounds == 0:
            bucketer.flush()
        else:
            bucketer.teardown()
            assert bucketer.buckets == {}
        for b in model.values():
            expected_order.extend(b[1])
            b[0], b[1] = 0, []
        assert fired == expected_order
    assert len(fired) == len(wants)
    # On a group that spans nodes a packed reduce-scatter may take the hierarchical path where the calls one by one
    # went flat: floating-point sums of inputs that do not add exactly then round in another order.
    spans = dist.distributed_c10d._get_default_group().spans_nodes  # noqa: SLF001
    for cid, want in wants.items():
        got, what = results[cid], f"bucketed reduce_scatter {cid} (cap {cap_mb} MB)"
        if spans and not exact and want.dtype.is_floating_point and want.numel():
            eps = torch.finfo(want.dtype).eps
            torch.testing.assert_close(got.double(), want.double(), rtol=2 * w * eps,
                                       atol=2 * w * eps * want.double().abs().max().item(), msg=what)
        else:
            same(got, want, what)
    bucketer.flush()  # nothing pending: no collective, no callback
    assert len(fired) == len(wants)
    check_usable(gloo)


def test_bucketer_errors_and_no_callback(gloo):
    w = dist.get_world_size()
    bucketer = symcomm_torch.ReduceScatterBucketer(bucket_cap_mb=1)
    with pytest.raises(ValueError, match="list of"):
        bucketer.reduce_scatter_async([torch.ones(4)] * (w + 1), None)
    with pytest.raises(ValueError, match="differs"):
        bucketer.reduce_scatter_async([torch.ones(4)] * (w - 1) + [torch.ones(4, dtype=torch.float64)], None)
    with pytest.raises(ValueError, match="differs"):
        bucketer.reduce_scatter_async([torch.ones(4)] * (w - 1) + [torch.ones(5)], None)
    # Without a callback the result is dropped; non-contiguous inputs are copied into the bucket.
    bucketer.reduce_scatter_async([torch.ones(4, 6).t() for _ in range(w)], None)
    got = []
    bucketer.reduce_scatter_async([torch.full((3,), float(dist.get_rank()))] * w, None, got.append)
    bucketer.teardown()
    assert len(got) == 1
    same(got[0], torch.full((3,), float(sum(range(w)))), "bucketer after a call without callback")
    check_usable(gloo)


# ---- fused GEMM + collective (torch.distributed._symmetric_memory's names and signatures) ----
# Inputs are integers in {-1, 0, 1}: every product and sum below is exact in float32, float16 and bfloat16, so the
# results are compared bit for bit with torch.cat and a float64 matmul (avg over 3 ranks: within one rounding).

FUSED = [torch.bfloat16, torch.float16, torch.float32]


def small_ints(seed, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-1, 2, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", FUSED, ids=dname)
@pytest.mark.parametrize("gather_dim", [0, 1, -2])
@pytest.mark.parametrize("return_a", [True, False], ids=["return_A", "no_A"])
def test_fused_all_gather_matmul(gloo, dtype, gather_dim, return_a):
    one_node_only()
    w, r = dist.get_world_size(), dist.get_rank()
    shard_shape = (2, 3, 8)  # [batch, M_local, K]
    shards = [small_ints(seed_of("ag", q), shard_shape, dtype) for q in range(w)]
    bs = [small_ints(seed_of("ag-b", i), (8, n), dtype) for i, n in enumerate((5, 1, 12))]
    a, outs = symcomm_torch.fused_all_gather_matmul(shards[r], bs, gather_dim, dist.group.WORLD.group_name,
                                                    return_A=return_a)
    want_a = torch.cat(shards, dim=gather_dim)
    if return_a:
        same(a, want_a, "A")
    else:
        assert a is None
    assert len(outs) == len(bs)
    for i, (o, b) in enumerate(zip(outs, bs)):
        same(o, (want_a.double() @ b.double()).to(dtype), f"out {i}")


@pytest.mark.parametrize("dtype", FUSED, ids=dname)
@pytest.mark.parametrize("scatter_dim", [0, 1, -2])
@pytest.mark.parametrize("reduce_op", ["sum", "avg"])
def test_fused_matmul_reduce_scatter(gloo, dtype, scatter_dim, reduce_op):
    one_node_only()
    w, r = dist.get_world_size(), dist.get_rank()
    a_shape = (2 * w, 3 * w, 6)  # [batch, M, K_local]: both leading extents divisible by the world size
    parts = [(small_ints(seed_of("rs", q), a_shape, dtype), small_ints(seed_of("rs-b", q), (6, 7), dtype))
             for q in range(w)]
    out = symcomm_torch.fused_matmul_reduce_scatter(parts[r][0], parts[r][1], reduce_op, scatter_dim,
                                                    dist.group.WORLD.group_name)
    total = sum(a.double() @ b.double() for a, b in parts)
    if reduce_op == "avg":
        total = total / w
    want = total.chunk(w, dim=scatter_dim)[r].to(dtype)
    if reduce_op == "sum" or w in (1, 2, 4):
        same(out, want, "reduce-scatter")
    else:
        assert out.dtype == want.dtype and out.shape == want.shape
        eps = torch.finfo(dtype).eps
        assert torch.allclose(out.double(), want.double(), rtol=eps, atol=0), f"{out} vs {want}"


def test_fused_ops_with_transposed_weights_and_a_group_object(gloo):
    one_node_only()
    w, r = dist.get_world_size(), dist.get_rank()
    shard = small_ints(seed_of("t", r), (4, 8), torch.float32)
    b_t = small_ints(seed_of("t-b"), (5, 8), torch.float32)  # B = b_t.t(): a non-contiguous [8, 5] view
    _, (out,) = symcomm_torch.fused_all_gather_matmul(shard, [b_t.t()], 0, dist.group.WORLD)
    shards = [small_ints(seed_of("t", q), (4, 8), torch.float32) for q in range(w)]
    same(out, (torch.cat(shards).double() @ b_t.t().double()).float(), "out")


def test_fused_ops_errors(gloo):
    one_node_only()
    name = dist.group.WORLD.group_name
    a = torch.ones(2, 4, 8)
    with pytest.raises(ValueError, match="no process group is named"):
        symcomm_torch.fused_all_gather_matmul(a, [torch.ones(8, 2)], 0, "no such group")
    with pytest.raises(TypeError, match="not a symcomm process group"):
        symcomm_torch.fused_all_gather_matmul(a, [torch.ones(8, 2)], 0, gloo)
    with pytest.raises(TypeError, match="not supported by the fused operations"):
        symcomm_torch.fused_all_gather_matmul(a.double(), [torch.ones(8, 2).double()], 0, name)
    with pytest.raises(TypeError, match="differs from the first input"):
        symcomm_torch.fused_all_gather_matmul(a, [torch.ones(8, 2).half()], 0, name)
    with pytest.raises(ValueError, match="other than its last"):
        symcomm_torch.fused_all_gather_matmul(a, [torch.ones(8, 2)], 2, name)
    with pytest.raises(ValueError, match="expected"):
        symcomm_torch.fused_all_gather_matmul(a, [torch.ones(7, 2)], 0, name)
    with pytest.raises(ValueError, match="'sum' or 'avg'"):
        symcomm_torch.fused_matmul_reduce_scatter(a, torch.ones(8, 2), "max", 0, name)
    if dist.get_world_size() > 1:
        with pytest.raises(ValueError, match="not divisible by the world size"):
            symcomm_torch.fused_matmul_reduce_scatter(torch.ones(1, 1, 8), torch.ones(8, 2), "sum", 0, name)
    check_usable(gloo)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=dname)
def test_symmetric_memory_ops(gloo, dtype):
    """torch.ops.symcomm.*: the one-shot / two-shot all-reduce and the low-contention all-gather and
    reduce-scatter against gloo on the same inputs, and the fused ops against their Python functions."""
    w, r = dist.get_world_size(), dist.get_rank()
    name = dist.group.WORLD.group_name
    x = inp(seed_of("symm", dtype), 6 * w, dtype, "sum").view(2 * w, 3)
    want = wide(x.clone())
    dist.all_reduce(want, group=gloo)
    want = want.to(dtype)
    same(torch.ops.symcomm.one_shot_all_reduce(x, "sum", name), want, "one_shot_all_reduce")
    y = x.clone()
    ret = torch.ops.symcomm.two_shot_all_reduce_(y, "sum", name)
    assert ret.data_ptr() == y.data_ptr()
    same(y, want, "two_shot_all_reduce_ (in place)")
    gathered = [torch.empty_like(wide(x)) for _ in range(w)]
    dist.all_gather(gathered, wide(x), group=gloo)
    same(torch.ops.symcomm._low_contention_all_gather(x, name), torch.cat(gathered).to(dtype),
         "_low_contention_all_gather")
    same(torch.ops.symcomm._low_contention_reduce_scatter(x, "sum", name), want[2 * r:2 * r + 2],
         "_low_contention_reduce_scatter")
    with pytest.raises(ValueError, match="reduce_op"):
        torch.ops.symcomm.one_shot_all_reduce(x, "bxor", name)
    check_usable(gloo)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=dname)
def test_symmetric_tensors(gloo, dtype):
    """empty() / peer_tensor() / free(): collectives on heap tensors (zero-copy) against gloo, and every rank
    reading its peers' copies directly."""
    one_node_only()
    w, r = dist.get_world_size(), dist.get_rank()
    t = symcomm_torch.empty(3, 5 * w, dtype=dtype)
    assert t.shape == (3, 5 * w) and t.dtype == dtype and t.is_contiguous()
    x = inp(seed_of("heap", dtype), t.numel(), dtype, "sum").view(t.shape)
    t.copy_(x)
    want = wide(x.clone())
    dist.all_reduce(want, group=gloo)
    dist.all_reduce(t)
    same(t, want.to(dtype), "all_reduce of a heap tensor")
    t.fill_(r + 1)
    dist.barrier()
    for q in range(w):
        same(symcomm_torch.peer_tensor(t, q), torch.full(t.shape, q + 1, dtype=dtype), f"rank {q}'s copy")
    dist.barrier()
    symcomm_torch.free(t)
    with pytest.raises(ValueError, match="empty"):
        symcomm_torch.free(torch.ones(2))
    check_usable(gloo)


def test_fused_torch_ops(gloo):
    one_node_only()
    name = dist.group.WORLD.group_name
    w, r = dist.get_world_size(), dist.get_rank()
    shard = small_ints(seed_of("op", r), (4, 8), torch.float32)
    b = small_ints(seed_of("op-b"), (8, 5), torch.float32)
    a, outs = torch.ops.symcomm.fused_all_gather_matmul(shard, [b], 0, name, return_A=True)
    a2, outs2 = symcomm_torch.fused_all_gather_matmul(shard, [b], 0, name)
    same(a, a2, "A")
    same(outs[0], outs2[0], "A @ B")
    none, _ = torch.ops.symcomm.fused_all_gather_matmul(shard, [b], 0, name, return_A=False)
    assert none is None
    big = small_ints(seed_of("op-rs", r), (2 * w, 8), torch.float32)
    same(torch.ops.symcomm.fused_matmul_reduce_scatter(big, b, "sum", 0, name),
         symcomm_torch.fused_matmul_reduce_scatter(big, b, "sum", 0, name), "fused_matmul_reduce_scatter")


# Point-to-point: isend / irecv outside any group (as torch.distributed calls them) are held and run together, so
# an exchange completes at any size; the largest size is more than two of symcomm's 1 MiB staging chunks.
P2P_SIZES = [1, 1000, 3 * 2**20 // 4 + 5]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8], ids=dname)
@pytest.mark.parametrize("n", P2P_SIZES)
def test_isend_irecv_ring(gloo, dtype, n):
    w, me = dist.get_world_size(), dist.get_rank()
    nxt, prv = (me + 1) % w, (me - 1) % w
    seed = seed_of("ring", dname(dtype), n)
    x = inp(seed, n, dtype)
    out = poisoned((n,), dtype)
    for req in [dist.isend(x, nxt), dist.irecv(out, prv)]:
        req.wait()
    same(out, inp(seed, n, dtype, rank=prv), "irecv from the previous rank")
    if dtype != torch.bfloat16:  # gloo has no bfloat16
        ref = poisoned((n,), dtype)
        for req in [dist.isend(x, nxt, group=gloo), dist.irecv(ref, prv, group=gloo)]:
            req.wait()
        same(out, ref, "irecv against gloo")


def test_batch_isend_irecv_every_pair(gloo):
    w, me = dist.get_world_size(), dist.get_rank()
    n = 300007
    ops, outs = [], {}
    for p in range(w):
        if p != me:
            ops.append(dist.P2POp(dist.isend, inp(seed_of("batch", me, p), n, torch.float32), p))
            outs[p] = poisoned((n,), torch.float32)
            ops.append(dist.P2POp(dist.irecv, outs[p], p))
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    for p, got in outs.items():
        same(got, inp(seed_of("batch", p, me), n, torch.float32, rank=p), f"from rank {p}")


def test_send_recv_between_two_ranks(gloo, monkeypatch):
    """Blocking send and recv between ranks 0 and 1, two messages in order (the second with a tag, which matching
    ignores, with one warning per process); every rank then runs a collective."""
    me = dist.get_rank()
    monkeypatch.setattr(symcomm_torch, "_TAG_WARNED", False)
    a, b = inp(seed_of("pair-a"), 1031, torch.int32, rank=0), inp(seed_of("pair-b"), 17, torch.float64, rank=0)
    if me == 0:
        dist.send(a, 1)
        with pytest.warns(RuntimeWarning, match="tags of sends and receives are ignored"):
            dist.send(b, 1, tag=7)
    elif me == 1:
        ra, rb = poisoned((1031,), torch.int32), poisoned((17,), torch.float64)
        assert dist.recv(ra, 0) == 0
        with pytest.warns(RuntimeWarning, match="tags of sends and receives are ignored"):
            dist.recv(rb, 0, tag=7)
        same(ra, a, "first message")
        same(rb, b, "second message")
    check_usable(gloo)


@pytest.mark.parametrize("async_ops", [False, True])
def test_send_recv_in_a_coalescing_block(gloo, async_ops):
    w, me = dist.get_world_size(), dist.get_rank()
    n = 5000
    x = inp(seed_of("coalesced-p2p"), n, torch.float32)
    out = poisoned((n,), torch.float32)
    with symcomm_torch.coalescing_manager(async_ops=async_ops) as cm:
        dist.isend(x, (me + 1) % w)
        dist.irecv(out, (me - 1) % w)
    if async_ops:
        cm.wait()
    same(out, inp(seed_of("coalesced-p2p"), n, torch.float32, rank=(me - 1) % w), "coalesced irecv")


def test_send_recv_errors(gloo):
    w = dist.get_world_size()
    t = torch.zeros(4)
    pg = dist.distributed_c10d._get_default_group()
    with pytest.raises(ValueError, match="not in this group"):
        pg.send([t], w, 0)
    with pytest.raises(ValueError, match="not in this group"):
        pg.recv([t], -1, 0)
    with pytest.raises(RuntimeError, match="any source"):
        dist.recv(t)
    check_usable(gloo)
