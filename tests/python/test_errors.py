"""Argument errors: each raises on every rank before anything runs, and the communicator stays usable."""

import numpy as np
import pytest

from conftest import check_usable, sentinel

import symcomm


def f32(n):
    return np.arange(n, dtype=np.float32)


def readonly(a):
    a.flags.writeable = False
    return a


class FakeCudaArray:
    """An object that describes itself as a CUDA array (the host backend must refuse it without reading it)."""

    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}
    shape, ndim = (4,), 1


# (name, exception, call(comm)); every call would run a collective if its arguments were accepted.
BAD_CALLS = [
    ("CUDA array on the host backend", TypeError, lambda c: c.all_reduce(f32(4), out=FakeCudaArray())),
    ("CUDA array input on the host backend", TypeError,
     lambda c: c._impl.all_gather(FakeCudaArray(), f32(4 * c.world_size), False)),
    ("(pointer, count) on the host backend", TypeError,
     lambda c: c._impl.all_reduce((f32(4).ctypes.data, 4), f32(4), symcomm.ReduceOp.SUM, False, "float32")),
    ("CUDA array without out", TypeError, lambda c: c.all_reduce(FakeCudaArray())),
    ("list input", TypeError, lambda c: c.all_reduce([1.0, 2.0])),
    ("scalar input", TypeError, lambda c: c.all_reduce(np.float32(1))),
    ("int16", TypeError, lambda c: c.all_reduce(np.zeros(4, np.int16))),
    ("bool", TypeError, lambda c: c.all_gather(np.zeros(4, bool))),
    ("complex64", TypeError, lambda c: c.broadcast(np.zeros(4, np.complex64), 0)),
    ("uint32", TypeError, lambda c: c.all_to_all(np.zeros(c.world_size, np.uint32))),
    ("big-endian float32", TypeError, lambda c: c.all_reduce(np.zeros(4, ">f4"))),
    ("strided input", ValueError, lambda c: c.all_reduce(f32(8)[::2])),
    ("Fortran-order input", ValueError, lambda c: c.all_reduce(np.asfortranarray(np.zeros((3, 4), np.float32)))),
    ("strided out", ValueError, lambda c: c.all_reduce(f32(4), out=np.zeros(8, np.float32)[::2])),
    ("read-only out", ValueError, lambda c: c.all_reduce(f32(4), out=readonly(np.zeros(4, np.float32)))),
    ("read-only in place", ValueError, lambda c: c.broadcast(readonly(f32(4)), 0)),
    ("out of another dtype", TypeError, lambda c: c.all_reduce(f32(4), out=np.zeros(4, np.float64))),
    ("out too small", ValueError, lambda c: c.all_reduce(f32(4), out=np.zeros(3, np.float32))),
    ("out too large", ValueError, lambda c: c.broadcast(f32(4), 0, out=np.zeros(5, np.float32))),
    ("out list", TypeError, lambda c: c.all_reduce(f32(4), out=[0.0] * 4)),
    ("all_gather out size", ValueError, lambda c: c.all_gather(f32(4), out=np.zeros(4 * c.world_size + 1, np.float32))),
    ("reduce_scatter indivisible", ValueError, lambda c: c.reduce_scatter(f32(c.world_size + 1))),
    ("reduce_scatter indivisible out", ValueError,
     lambda c: c.reduce_scatter(f32(c.world_size + 1), out=np.zeros(1, np.float32))),
    ("reduce_scatter 0-d", ValueError, lambda c: c.reduce_scatter(np.array(1.0, np.float32))),
    ("reduce_scatter out size", ValueError,
     lambda c: c.reduce_scatter(f32(2 * c.world_size), out=np.zeros(3, np.float32))),
    ("all_to_all indivisible", ValueError, lambda c: c.all_to_all(f32(c.world_size + 1))),
    ("all_to_all out size", ValueError, lambda c: c.all_to_all(f32(c.world_size), out=f32(2 * c.world_size))),
    ("unknown op", ValueError, lambda c: c.all_reduce(f32(4), op="mean")),
    ("op of another type", ValueError, lambda c: c.all_reduce(f32(4), op=3)),
    ("async bad out", ValueError, lambda c: c.all_reduce_async(f32(4), out=np.zeros(2, np.float32))),
    ("async bad dtype", TypeError, lambda c: c.all_gather_async(np.zeros(2, np.uint16))),
]


@pytest.mark.parametrize("name,exc,call", BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_bad_arguments(comm, name, exc, call):
    if "indivisible" in name and comm.world_size == 1:
        pytest.skip("every size is divisible by a world size of 1")
    with pytest.raises(exc):
        call(comm)
    check_usable(comm)


@pytest.mark.parametrize("root", [-1, "world_size"])
def test_broadcast_root_outside(comm, root):
    root = comm.world_size if root == "world_size" else root
    x = np.full(4, sentinel(np.int32), dtype=np.int32)
    with pytest.raises(symcomm.Error) as info:
        comm.broadcast(x, root)
    e = info.value
    assert e.code == "invalid_argument"
    assert e.ranks == []
    assert isinstance(e, RuntimeError)
    assert "root" in e.message and "root" in str(e)
    assert (x == sentinel(np.int32)).all()
    check_usable(comm)


# Input and output that overlap other than in place (NOTE [in place]): (name, call(comm, buffer)); the buffer holds
# 8 * world_size + 8 float32 elements.
OVERLAPS = [
    ("all_reduce", lambda c, b: c.all_reduce(b[0:8], out=b[2:10])),
    ("all_gather, input not at this rank's block", lambda c, b: c.all_gather(
        b[c.rank * 4 + 1:c.rank * 4 + 5], out=b[0:4 * c.world_size])),
    ("reduce_scatter, output not at this rank's block",
     lambda c, b: c.reduce_scatter(b[0:4 * c.world_size], out=b[c.rank * 4 + 2:c.rank * 4 + 6])),
    ("all_to_all", lambda c, b: c.all_to_all(b[0:4 * c.world_size], out=b[3:4 * c.world_size + 3])),
]


@pytest.mark.parametrize("name,call", OVERLAPS, ids=[o[0] for o in OVERLAPS])
def test_overlap_other_than_in_place(comm, name, call):
    b = np.arange(8 * comm.world_size + 8, dtype=np.float32)
    before = b.copy()
    with pytest.raises(symcomm.Error) as info:
        call(comm, b)
    assert info.value.code == "invalid_argument"
    np.testing.assert_array_equal(b, before, "written before the refusal")
    check_usable(comm)


def test_broadcast_overlap_refused_on_the_root_only(comm):
    # The root refuses its overlapping buffers, then broadcasts others; the other ranks do not read their input,
    # so the same overlapping buffers are theirs to pass, and they receive the root's second broadcast.
    b = np.arange(16, dtype=np.float32) + 1000 * comm.rank
    if comm.rank == 0:
        before = b.copy()
        with pytest.raises(symcomm.Error) as info:
            comm.broadcast(b[0:8], 0, out=b[1:9])
        assert info.value.code == "invalid_argument"
        np.testing.assert_array_equal(b, before)
        comm.broadcast(b[0:8], 0, out=b[8:16])
        np.testing.assert_array_equal(b[8:16], np.arange(8, dtype=np.float32))
    else:
        comm.broadcast(b[0:8], 0, out=b[1:9])
        np.testing.assert_array_equal(b[1:9], np.arange(8, dtype=np.float32))
    check_usable(comm)


def test_in_place_forms_are_accepted(comm):
    w, r = comm.world_size, comm.rank
    b = np.arange(4 * w, dtype=np.float32) + 100 * r
    comm.all_gather(b[4 * r:4 * r + 4], out=b)
    want = np.concatenate([np.arange(4 * p, 4 * p + 4, dtype=np.float32) + 100 * p for p in range(w)])
    np.testing.assert_array_equal(b, want)
    x = np.arange(4 * w, dtype=np.float32) + r
    comm.reduce_scatter(x, out=x[4 * r:4 * r + 4])
    np.testing.assert_array_equal(x[4 * r:4 * r + 4], sum(np.arange(4 * r, 4 * r + 4, dtype=np.float32) + p
                                                          for p in range(w)))
    check_usable(comm)


def test_group_end_without_start(comm):
    with pytest.raises(symcomm.Error) as info:
        comm.group_end()
    assert info.value.code == "invalid_argument"
    check_usable(comm)


def test_backend_from_python(comm):
    if "cuda" not in symcomm.backends():  # refused on every rank before the rendezvous
        with pytest.raises(symcomm.Error) as info:
            symcomm.Communicator.from_env(backend="cuda")
        assert info.value.code == "unsupported"
    with pytest.raises(ValueError):
        symcomm.Communicator.from_env(backend="cuda", device=-2)
    with pytest.raises(ValueError):
        symcomm.Communicator.from_env(backend="carrier-pigeon")
    check_usable(comm)


def test_cuda_multi_node_arguments(comm):
    """symcomm._core.CudaMultiNodeCommunicator: bad arguments raise ValueError; a build without the CUDA backend
    raises symcomm.Error (unsupported) before serving a store."""
    create = symcomm._core.CudaMultiNodeCommunicator.create  # noqa: SLF001
    for bad in ({"rank": 2}, {"port": 70000}, {"device": -2}, {"fake_node_size": -1}, {"token": ""}):
        args = {"rank": 0, "world_size": 2, "local_rank": 0, "token": "t", "host": "127.0.0.1", "port": 0,
                "on_store_started": None, **bad}
        with pytest.raises(ValueError):
            create(**args)
    if "cuda" not in symcomm.backends():
        with pytest.raises(symcomm.Error) as info:
            create(0, 1, 0, "t", "127.0.0.1", 0, lambda port: pytest.fail("a store was served"))
        assert info.value.code == "unsupported"
    check_usable(comm)


def test_error_class():
    assert issubclass(symcomm.Error, RuntimeError)
    assert symcomm.Error.__module__ == "symcomm"
    e = symcomm.Error("made here")
    assert e.code is None and e.ranks == []
