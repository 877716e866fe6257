"""Every collective on NumPy arrays: every dtype x op of all_reduce, odd sizes, in place, shapes of `out`."""

import itertools
import zlib

import numpy as np
import pytest

from conftest import DTYPES, OPS, Guarded, assert_same, reduce_expected, values

import symcomm


def case_seed(*parts):
    """A seed that every rank derives alike from the test's parameters."""
    return zlib.crc32(repr(parts).encode())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", [0, 1, 7, 1031])
def test_all_reduce(comm, dtype, op, n):
    seed = case_seed("all_reduce", np.dtype(dtype).name, op, n)
    x = values(seed, comm.rank, n, dtype, op)
    x_before = x.copy()
    out = Guarded(n, dtype)
    got = comm.all_reduce(x, op=op, out=out.array)
    assert got is out.array
    assert_same(got, reduce_expected(seed, comm.world_size, n, dtype, op), f"all_reduce {op}")
    assert out.guards_intact()
    assert_same(x, x_before, "input")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["sum", "max", symcomm.ReduceOp.PROD, symcomm.ReduceOp.AVG], ids=str)
def test_all_reduce_in_place(comm, dtype, op):
    name = op if isinstance(op, str) else op.name.lower()
    seed = case_seed("all_reduce_in_place", np.dtype(dtype).name, name)
    n = 1031
    g = Guarded(n, dtype)
    g.array[...] = values(seed, comm.rank, n, dtype, name)
    got = comm.all_reduce(g.array, op=op, out=g.array)
    assert got is g.array
    assert_same(got, reduce_expected(seed, comm.world_size, n, dtype, name), "in place")
    assert g.guards_intact()


def test_all_reduce_large_and_shaped(comm):
    seed = case_seed("all_reduce_large")
    x = values(seed, comm.rank, 100003, np.float32, "sum").reshape(1, 100003)
    got = comm.all_reduce(x)
    assert got.shape == x.shape and got.dtype == x.dtype
    assert_same(got, reduce_expected(seed, comm.world_size, 100003, np.float32, "sum"), "100003 floats")
    y = values(seed, comm.rank, 6 * 35, np.int64, "max").reshape(6, 5, 7)
    got = comm.all_reduce(y, op="MAX")
    assert got.shape == (6, 5, 7)
    assert_same(got, reduce_expected(seed, comm.world_size, 210, np.int64, "max"), "3-d")
    z = np.array(values(seed, comm.rank, 1, np.float64, "sum")[0])  # 0-d
    got = comm.all_reduce(z)
    assert got.shape == ()
    assert_same(got, reduce_expected(seed, comm.world_size, 1, np.float64, "sum"), "0-d")


SIZES = [0, 1, 7, 1031, 100003]
# Every dtype at a small size, three at every size.
SIZE_DTYPES = [(7, d) for d in DTYPES] + [(n, d) for n, d in itertools.product(SIZES, [np.float32, np.int64,
                                                                                         np.uint8]) if n != 7]
SIZE_IDS = [f"{n}-{np.dtype(d).name}" for n, d in SIZE_DTYPES]


@pytest.mark.parametrize("n,dtype", SIZE_DTYPES, ids=SIZE_IDS)
def test_all_gather(comm, n, dtype):
    seed = case_seed("all_gather", n, np.dtype(dtype).name)
    ws = comm.world_size
    x = values(seed, comm.rank, n, dtype)
    want = np.stack([values(seed, r, n, dtype) for r in range(ws)])
    out = Guarded((ws, n), dtype)
    got = comm.all_gather(x, out=out.array)
    assert got is out.array
    assert_same(got, want, "all_gather")
    assert out.guards_intact()
    # Allocated: world_size x x's shape on a new leading axis.
    got = comm.all_gather(x)
    assert got.shape == (ws, n)
    assert_same(got, want, "all_gather, out allocated")
    # In place: x is this rank's row of out.
    out = Guarded((ws, n), dtype)
    out.array[comm.rank] = x
    got = comm.all_gather(out.array[comm.rank], out=out.array)
    assert_same(got, want, "all_gather in place")
    assert out.guards_intact()


def test_all_gather_shapes(comm):
    seed = case_seed("all_gather_shapes")
    ws = comm.world_size
    x = values(seed, comm.rank, 12, np.int32).reshape(3, 4)
    got = comm.all_gather(x)
    assert got.shape == (ws, 3, 4)
    assert_same(got, np.stack([values(seed, r, 12, np.int32).reshape(3, 4) for r in range(ws)]), "stacked")
    flat = np.empty(ws * 12, dtype=np.int32)  # any array of world_size * x.size elements
    assert comm.all_gather(x, out=flat) is flat
    assert_same(flat, got, "flat out")


@pytest.mark.parametrize("n,dtype", SIZE_DTYPES, ids=SIZE_IDS)
def test_reduce_scatter(comm, n, dtype):
    ws, me = comm.world_size, comm.rank
    for op in ["sum", "max"] if n > 7 else OPS:
        seed = case_seed("reduce_scatter", n, np.dtype(dtype).name, op)
        x = values(seed, me, ws * n, dtype, op)
        want = reduce_expected(seed, ws, n, dtype, op, offset=me * n)
        out = Guarded(n, dtype)
        got = comm.reduce_scatter(x, op=op, out=out.array)
        assert got is out.array
        assert_same(got, want, f"reduce_scatter {op}")
        assert out.guards_intact()
        got = comm.reduce_scatter(x.reshape(ws, n), op=op)
        assert got.shape == (1, n)
        assert_same(got, want, f"reduce_scatter {op}, out allocated")
        # In place: out is this rank's block of x.
        y = x.copy()
        got = comm.reduce_scatter(y, op=op, out=y[me * n:(me + 1) * n])
        assert_same(got, want, f"reduce_scatter {op} in place")


@pytest.mark.parametrize("n,dtype", SIZE_DTYPES, ids=SIZE_IDS)
def test_broadcast(comm, n, dtype):
    ws, me = comm.world_size, comm.rank
    for root in range(ws):
        seed = case_seed("broadcast", n, np.dtype(dtype).name, root)
        want = values(seed, root, n, dtype)
        x = values(seed, me, n, dtype)
        out = Guarded(n, dtype)
        got = comm.broadcast(x, root, out=out.array)
        assert got is out.array
        assert_same(got, want, f"broadcast from {root}")
        assert out.guards_intact()
        got = comm.broadcast(x, root=root)  # in place
        assert got is x
        assert_same(x, want, f"broadcast from {root} in place")


@pytest.mark.parametrize("n,dtype", SIZE_DTYPES, ids=SIZE_IDS)
def test_all_to_all(comm, n, dtype):
    ws, me = comm.world_size, comm.rank
    seed = case_seed("all_to_all", n, np.dtype(dtype).name)
    x = values(seed, me, ws * n, dtype)
    want = np.concatenate([values(seed, p, ws * n, dtype)[me * n:(me + 1) * n] for p in range(ws)])
    out = Guarded(ws * n, dtype)
    got = comm.all_to_all(x, out=out.array)
    assert got is out.array
    assert_same(got, want, "all_to_all")
    assert out.guards_intact()
    got = comm.all_to_all(x.reshape(ws, n))
    assert got.shape == (ws, n)
    assert_same(got, want, "all_to_all, out allocated")
    got = comm.all_to_all(x, out=x)  # in place
    assert got is x
    assert_same(x, want, "all_to_all in place")


def test_barrier(comm):
    assert comm.barrier() is None
    assert comm.rank in range(comm.world_size)
    assert comm.backend == "host"


@pytest.mark.parametrize("n,dtype", SIZE_DTYPES + [(3 * 2**20 // 4 + 5, np.float32)],
                         ids=SIZE_IDS + ["3MiB+_float32"])
def test_send_recv_exchange_in_a_group(comm, n, dtype):
    """Every rank sends to rank + 1 and receives from rank - 1 in one group (an exchange at any size: the largest
    case is more than two staging chunks), then sends to itself."""
    ws, me = comm.world_size, comm.rank
    seed = case_seed("send_recv", n, np.dtype(dtype).name)
    nxt, prv = (me + 1) % ws, (me - 1) % ws
    x = values(seed, me, n, dtype)
    out, mine = Guarded(n, dtype), Guarded(n, dtype)
    with comm.group():
        comm.send(x, nxt)
        comm.recv(out.array, prv)
        comm.send(x, me)
        comm.recv(mine.array, me)
    assert_same(out.array, values(seed, prv, n, dtype), f"from rank {prv}")
    assert_same(mine.array, x, "from itself")
    assert out.guards_intact() and mine.guards_intact()


def test_send_recv_between_two_ranks_leaves_the_others_alone(comm):
    """Rank 0 sends rank 1 two messages (blocking send, async receives, order kept); the other ranks only run the
    collectives around them, which still match on every rank."""
    ws, me = comm.world_size, comm.rank
    seed = case_seed("send_recv_pair")
    a, b = values(seed, 0, 1031, np.int32), values(seed + 1, 0, 17, np.float64)
    if me == 0:
        comm.send(a, 1)
        comm.send_async(b, 1).wait()
    elif me == 1:
        ra, rb = np.zeros(1031, np.int32), np.zeros(17, np.float64)
        wa, wb = comm.recv_async(ra, 0), comm.recv_async(rb, 0)
        assert_same(wb.wait(), b, "second message")
        assert_same(wa.wait(), a, "first message")
        assert_same(ra, a, "first message, in the array passed")
        assert_same(rb, b, "second message, in the array passed")
    got = comm.all_reduce(np.full(5, me, np.int64))
    assert_same(got, np.full(5, ws * (ws - 1) // 2, np.int64), "all_reduce after the messages")


def test_send_recv_bad_arguments(comm):
    ws = comm.world_size
    with pytest.raises(ValueError):
        comm.send(np.zeros(4, np.float32), ws)
    with pytest.raises(ValueError):
        comm.recv(np.zeros(4, np.float32), -1)
    with pytest.raises(TypeError):
        comm.recv([0.0] * 4, 0)
    comm.barrier()


def test_host_backend_ignores_streams(comm):
    """`stream` concerns the CUDA backend; the host backend runs the call as without it."""
    assert comm.device == -1 and comm.backend == "host" and "host" in symcomm.backends()
    seed = 2718
    x = values(seed, comm.rank, 100, np.float32, "sum")
    out = comm.all_reduce(x, stream=12345)
    assert_same(out, reduce_expected(seed, comm.world_size, 100, np.float32, "sum"), "all_reduce with a stream")
    comm.barrier(stream=1)
    comm.check()


@pytest.mark.parametrize("algorithm", ["one_shot", "two_shot"])
def test_forced_algorithm(comm, algorithm):
    seed = 1618
    x = values(seed, comm.rank, 1000, np.int32, "sum")
    assert_same(comm.all_reduce(x, algorithm=algorithm), reduce_expected(seed, comm.world_size, 1000, np.int32, "sum"),
                f"all_reduce forced to {algorithm}")


def test_forced_algorithm_errors(comm):
    x = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="algorithm"):
        comm.all_reduce(x, algorithm="carrier_pigeon")
    with pytest.raises(ValueError, match="contention"):
        comm.all_reduce(x, contention="some")
    with pytest.raises(symcomm.Error) as info:  # the host backend has no NCCL
        comm.all_reduce(x, algorithm="nccl")
    assert info.value.code == "invalid_argument"
    assert_same(comm.all_reduce(x), np.full(8, comm.world_size, np.float32), "all_reduce after the errors")


def test_heap_buffers(comm):
    """alloc() / peer_buffer() / free() on the host backend: a zero-copy all-reduce and the peers' bytes."""
    buf = comm.alloc(4 * 256)
    x = np.asarray(buf).view(np.float32)
    seed = 31337
    x[:] = values(seed, comm.rank, 256, np.float32, "sum")
    comm.all_reduce(x, out=x)
    assert_same(x, reduce_expected(seed, comm.world_size, 256, np.float32, "sum"), "all_reduce in the heap")
    x[:] = comm.rank
    comm.barrier()
    for q in range(comm.world_size):
        assert_same(np.asarray(comm.peer_buffer(buf, q)).view(np.float32), np.full(256, q, np.float32), f"rank {q}")
    comm.barrier()
    with pytest.raises(ValueError):
        comm.free(comm.peer_buffer(buf, 0))
    comm.free(buf)
