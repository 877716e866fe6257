"""Arrays other than numpy.ndarray (DLPack, __array_interface__), explicit rendezvous, split and group_end_async."""

import queue
import sys
import threading
import zlib

import numpy as np
import pytest

from conftest import DTYPES, OPS, Guarded, assert_same, reduce_expected, values

import symcomm


def case_seed(*parts):
    return zlib.crc32(repr(parts).encode())


class Interface:
    """An object that exposes another array only through __array_interface__."""

    def __init__(self, array):
        self.array = array
        self.__array_interface__ = array.__array_interface__


class DlpackOnly:
    """An object that exposes a NumPy array only through __dlpack__ (as JAX and CuPy arrays do)."""

    def __init__(self, array):
        self.array = array
        self.shape = array.shape
        self.ndim = array.ndim
        self.dtype = array.dtype

    def __dlpack__(self, stream=None):
        assert stream is None  # the host backend asks for no stream
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", OPS)
def test_dlpack_all_reduce(comm, dtype, op):
    seed = case_seed("dlpack", np.dtype(dtype).name, op)
    n = 1031
    x = DlpackOnly(values(seed, comm.rank, n, dtype, op))
    out = Guarded(n, dtype)
    got = comm.all_reduce(x, op=op, out=DlpackOnly(out.array))
    assert isinstance(got, DlpackOnly) and got.array is out.array
    assert_same(out.array, reduce_expected(seed, comm.world_size, n, dtype, op), f"DLPack all_reduce {op}")
    assert out.guards_intact()


def test_dlpack_output_allocated_as_numpy(comm):
    seed = case_seed("dlpack out")
    got = comm.all_gather(DlpackOnly(values(seed, comm.rank, 5, np.int64)))
    assert isinstance(got, np.ndarray) and got.shape == (comm.world_size, 5)
    assert_same(got, np.stack([values(seed, r, 5, np.int64) for r in range(comm.world_size)]), "allocated output")


def test_dlpack_tensor_is_released(comm):
    """The consumed DLPack tensor's deleter runs: NumPy's export holds a reference to the array until then."""
    x = values(7, comm.rank, 64, np.float32, "sum")
    out = np.empty_like(x)
    before = (sys.getrefcount(x), sys.getrefcount(out))
    comm.all_reduce(DlpackOnly(x), out=DlpackOnly(out))
    w = comm.all_reduce_async(DlpackOnly(x), out=DlpackOnly(out))
    w.wait()
    del w
    assert (sys.getrefcount(x), sys.getrefcount(out)) == before
    assert_same(out, reduce_expected(7, comm.world_size, 64, np.float32, "sum"), "async DLPack")


def test_array_interface_every_collective(comm):
    ws, me, n = comm.world_size, comm.rank, 13
    seed = case_seed("array interface")
    x = values(seed, me, n, np.int32, "max")
    out = np.full(n, -1, np.int32)
    got = comm.all_reduce(Interface(x), op="max", out=Interface(out))
    assert isinstance(got, Interface)
    assert_same(out, reduce_expected(seed, ws, n, np.int32, "max"), "all_reduce")
    gathered = np.full((ws, n), -1, np.int32)
    comm.all_gather(Interface(x), out=Interface(gathered))
    assert_same(gathered, np.stack([values(seed, r, n, np.int32, "max") for r in range(ws)]), "all_gather")
    y = values(seed + 1, me, ws * n, np.float64, "sum")
    block = np.full(n, np.nan)
    comm.reduce_scatter(Interface(y), out=Interface(block))
    assert_same(block, reduce_expected(seed + 1, ws, n, np.float64, "sum", offset=me * n), "reduce_scatter")
    auto = comm.all_reduce(Interface(x), op="min")  # out allocated like x: a NumPy array
    assert isinstance(auto, np.ndarray)
    assert_same(auto, reduce_expected(seed, ws, n, np.int32, "min"), "allocated out")


def test_array_interface_read_only_out_is_refused(comm):
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        comm.all_reduce(np.ones(4, np.float32), out=Interface(ro))
    comm.barrier()


def test_torch_cpu_tensors(comm):
    torch = pytest.importorskip("torch")
    ws, me = comm.world_size, comm.rank
    seed = case_seed("torch cpu")
    for dtype, np_dtype in [(torch.float32, np.float32), (torch.int64, np.int64), (torch.uint8, np.uint8)]:
        x = torch.from_numpy(values(seed, me, 257, np_dtype, "sum"))
        got = comm.all_reduce(x)
        assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.shape == x.shape
        assert_same(got.numpy(), reduce_expected(seed, ws, 257, np_dtype, "sum"), f"torch {dtype}")
    # bfloat16 travels natively through DLPack: small integers are exact.
    b = torch.from_numpy(values(seed, me, 100, np.int8, "sum").astype(np.float32)).to(torch.bfloat16)
    comm.all_reduce(b, out=b)
    want = reduce_expected(seed, ws, 100, np.int8, "sum").astype(np.float32)
    assert_same(b.float().numpy(), want, "bfloat16 tensor")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4) + me
    g = comm.all_gather(t)
    assert tuple(g.shape) == (ws, 3, 4)
    for r in range(ws):
        assert_same(g[r].numpy(), (torch.arange(12, dtype=torch.float32).reshape(3, 4) + r).numpy(), f"block {r}")
    with pytest.raises(ValueError, match="not C-contiguous"):
        comm.all_reduce(torch.ones(4, 4)[:, 1])
    with pytest.raises(TypeError, match="int16 is not supported"):
        comm.all_reduce(torch.ones(4, dtype=torch.int16))
    with pytest.raises(TypeError, match="differs from the input"):
        comm.all_reduce(torch.ones(4), out=torch.ones(4, dtype=torch.float64))
    comm.barrier()


def test_create_with_explicit_rendezvous(comm):
    """Rank 0 serves a new store on a free port and hands the port to the others through `comm`."""
    me, ws = comm.rank, comm.world_size
    token = f"explicit-{case_seed('token', ws)}"
    made = queue.Queue()
    if me == 0:
        ports = queue.Queue()

        def make():
            try:
                made.put(symcomm.Communicator.create(0, ws, token, port=0, on_store_started=ports.put))
            except BaseException as e:  # noqa: BLE001 - handed to the test's thread
                ports.put(-1)
                made.put(e)

        thread = threading.Thread(target=make)
        thread.start()
        port = ports.get(timeout=60)
        comm.broadcast(np.array([port], np.int64), root=0)
        thread.join(timeout=120)
        result = made.get(timeout=1)
    else:
        port = int(comm.broadcast(np.zeros(1, np.int64), root=0)[0])
        result = symcomm.Communicator.create(me, ws, token, port=port)
    if isinstance(result, BaseException):
        raise result
    assert port > 0
    with result as explicit:
        assert (explicit.rank, explicit.world_size) == (me, ws)
        got = explicit.all_reduce(np.full(5, me + 1, np.int64))
        assert_same(got, np.full(5, ws * (ws + 1) // 2, np.int64), "explicit communicator")
        explicit.barrier()
    comm.barrier()


def test_create_refuses_bad_arguments():
    with pytest.raises(ValueError, match="outside"):
        symcomm.Communicator.create(2, 2, "t")
    with pytest.raises(ValueError, match="port"):
        symcomm.Communicator.create(0, 1, "t", port=70000)


def test_split(comm):
    me, ws = comm.rank, comm.world_size
    # Two colors; key reverses the order within each.
    sub = comm.split(me % 2, key=-me)
    members = [r for r in range(ws) if r % 2 == me % 2]
    assert sub.world_size == len(members)
    assert sub.rank == sorted(members, reverse=True).index(me)
    got = sub.all_reduce(np.array([me], np.int64))
    assert_same(got, np.array([sum(members)], np.int64), "sum over the color")
    sub.close()
    # A rank that passes SPLIT_NOCOLOR takes part and gets None.
    child = comm.split(symcomm.SPLIT_NOCOLOR if me == ws - 1 else 0)
    if me == ws - 1:
        assert child is None
    else:
        assert child.world_size == ws - 1 and child.rank == me
        assert_same(child.all_gather(np.array([me], np.int32)), np.arange(ws - 1, dtype=np.int32).reshape(ws - 1, 1),
                    "all_gather of the split")
        child.close()
    comm.barrier()


def test_split_refuses_a_color_below_nocolor(comm):
    with pytest.raises(symcomm.Error) as e:
        comm.split(-2)
    assert e.value.code == "invalid_argument"
    comm.barrier()


def test_group_end_async(comm):
    ws, me = comm.world_size, comm.rank
    seed = case_seed("group async")
    outs = [Guarded(31, np.float32) for _ in range(3)]
    comm.group_start()
    for k, out in enumerate(outs):
        comm.all_reduce(values(seed + k, me, 31, np.float32, "sum"), out=out.array)
    gathered = comm.all_gather(values(seed + 9, me, 5, np.uint8))
    work = comm.group_end_async()
    assert isinstance(work, symcomm.Work)
    assert work.wait() is None
    for k, out in enumerate(outs):
        assert_same(out.array, reduce_expected(seed + k, ws, 31, np.float32, "sum"), f"grouped all_reduce {k}")
        assert out.guards_intact()
    assert_same(gathered, np.stack([values(seed + 9, r, 5, np.uint8) for r in range(ws)]), "grouped all_gather")


def test_dlpack_device_memory_is_refused_on_the_host_backend(comm):
    class OnGpu:
        shape = (4,)

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

        def __dlpack__(self, stream=None):
            raise AssertionError("the host backend asked a GPU tensor for its memory")

    with pytest.raises(TypeError, match="device memory .*host backend needs host memory"):
        comm.all_reduce(OnGpu(), out=np.zeros(4, np.float32))
    comm.barrier()
