"""symcomm.torch: the torch.distributed backend "symcomm" on CPU tensors, compared bit for bit with gloo.

The default process group is symcomm's (init_process_group(backend="symcomm")); a gloo group over the same ranks
runs every collective on the same inputs. run_ranks.py runs this file in its own symcomm-run job (torch's
store and symcomm's Communicator.from_env() both serve on MASTER_PORT). Skipped where torch is missing.
"""

import datetime
import zlib

import numpy as np
import pytest

from conftest import values

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import symcomm.torch as symcomm_torch  # noqa: E402

R = dist.ReduceOp
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32,
          torch.int64]
# NumPy dtypes the inputs are made in (bfloat16: small integers, exact in float32 and bfloat16).
NP = {torch.float16: np.float16, torch.bfloat16: np.float32, torch.float32: np.float32, torch.float64: np.float64,
      torch.int8: np.int8, torch.uint8: np.uint8, torch.int32: np.int32, torch.int64: np.int64}
OPS = {"sum": R.SUM, "prod": R.PRODUCT, "min": R.MIN, "max": R.MAX}
SIZES = [1, 7, 1000]


def dname(d):
    return str(d).replace("torch.", "")


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode())


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


@pytest.fixture(scope="module")
def gloo():
    if not dist.is_initialized():
        dist.init_process_group(backend="symcomm", timeout=datetime.timedelta(seconds=120))
    group = dist.new_group(backend="gloo")
    yield group
    dist.barrier()
    dist.destroy_process_group()


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


def test_errors(gloo):
    w = dist.get_world_size()
    with pytest.raises(ValueError, match="contiguous"):
        dist.all_reduce(torch.zeros(4, 6).t())
    check_usable(gloo)
    with pytest.raises(TypeError, match="bool"):
        dist.all_reduce(torch.zeros(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="int16"):
        dist.all_reduce(torch.zeros(4, dtype=torch.int16))
    with pytest.raises(ValueError, match="meta"):
        dist.all_reduce(torch.zeros(4, device="meta"))
    with pytest.raises(ValueError, match="not supported"):
        dist.all_reduce(torch.zeros(4, dtype=torch.int32), op=R.BAND)
    with pytest.raises(ValueError, match="elements"):
        dist.all_gather_into_tensor(torch.zeros(w * 4 + 1), torch.zeros(4))
    with pytest.raises(TypeError, match="dtype"):
        dist.all_gather_into_tensor(torch.zeros(w * 4, dtype=torch.float64), torch.zeros(4))
    with pytest.raises(ValueError, match="elements"):
        dist.all_gather([torch.zeros(4)] * (w - 1) + [torch.zeros(5)], torch.zeros(4))
    with pytest.raises(ValueError, match="list of"):
        dist.all_gather([torch.zeros(4)] * (w + 1), torch.zeros(4))
    with pytest.raises(ValueError):
        dist.reduce_scatter_tensor(torch.zeros(3), torch.zeros(3 * w + 1))
    with pytest.raises(ValueError, match="elements"):
        dist.reduce_scatter_tensor(torch.zeros(4), torch.zeros(3 * w))
    with pytest.raises(ValueError, match="elements"):
        dist.reduce_scatter(torch.zeros(3), [torch.zeros(3)] * (w - 1) + [torch.zeros(2)])
    with pytest.raises(ValueError, match="contiguous"):
        dist.broadcast(torch.zeros(4, 6).t(), src=0)
    with pytest.raises(ValueError, match="equal splits"):
        dist.all_to_all_single(torch.zeros(2 * w), torch.zeros(2 * w), input_split_sizes=[2 * w] + [0] * (w - 1))
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
    dist.barrier()
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


def test_unsupported_collectives(gloo):
    with pytest.raises(RuntimeError, match="does not support reduce"):
        dist.reduce(torch.ones(2), dst=0)
    check_usable(gloo)
