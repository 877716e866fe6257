"""symcomm.ReduceScatterBucketer (the C++ bucketer) on NumPy arrays: results against the known reduction, buckets
that fill, inputs larger than a bucket, callback errors, lifetimes and closing."""

import gc
import zlib

import numpy as np
import pytest

from conftest import assert_same, reduce_expected, values

import symcomm


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode())


def test_results_of_many_inputs(comm):
    ws, me = comm.world_size, comm.rank
    got = {}
    # 4 KiB buckets: 4096 / ws bytes of output per rank; float32 blocks of 1 to 700 elements: some share a bucket,
    # some fill it, some are larger than a whole bucket (reduced at once).
    sizes = [1, 7, 64, 100, 300, 700, 3, 129, 255, 513, 2, 1000]
    with symcomm.ReduceScatterBucketer(comm, bucket_cap_mb=4096 / 2**20) as b:
        assert 4096 // ws - 16 < b.bucket_bytes_per_rank <= 4096 // ws  # rounded down to 16 bytes
        for k, n in enumerate(sizes):
            x = values(seed_of("b", k), me, ws * n, np.float32, "sum")
            b.reduce_scatter_async(x, lambda r, k=k: got.__setitem__(k, r.copy()))
            del x  # the bucketer keeps it until its result has been delivered
        gc.collect()
        b.flush()
        assert b.pending == 0
    for k, n in enumerate(sizes):
        want = reduce_expected(seed_of("b", k), ws, n, np.float32, "sum", offset=me * n)
        assert_same(got[k], want, f"input {k} of {n} elements per rank")


@pytest.mark.parametrize("op", ["sum", "max", "avg"])
def test_ops_and_dtypes(comm, op):
    ws, me = comm.world_size, comm.rank
    got = []
    with symcomm.ReduceScatterBucketer(comm) as b:
        for dtype in (np.int32, np.float64, np.int8):
            x = values(seed_of(op, np.dtype(dtype).name), me, ws * 33, dtype, op)
            b.reduce_scatter_async(x, lambda r, d=dtype: got.append((d, r.copy())), op=op)
        b.flush()
    assert len(got) == 3
    for dtype, r in got:
        assert r.dtype == dtype
        assert_same(r, reduce_expected(seed_of(op, np.dtype(dtype).name), ws, 33, dtype, op, offset=me * 33), op)


def test_callback_errors_are_raised_after_the_others_ran(comm):
    ws, me = comm.world_size, comm.rank
    ran = []

    def bad(r):
        ran.append("bad")
        raise KeyError("from a callback")

    with symcomm.ReduceScatterBucketer(comm) as b:
        b.reduce_scatter_async(np.ones(ws * 4, np.float32), bad)
        b.reduce_scatter_async(np.ones(ws * 4, np.float32), lambda r: ran.append(float(r[0])))
        with pytest.raises(KeyError):
            b.flush()
    assert sorted(ran, key=str) == [float(ws), "bad"]


def test_refusals_and_closing(comm):
    ws = comm.world_size
    b = symcomm.ReduceScatterBucketer(comm, bucket_cap_mb=1)
    with pytest.raises(TypeError, match="callable"):
        b.reduce_scatter_async(np.ones(ws, np.float32), 5)
    with pytest.raises(ValueError, match="not divisible"):
        b.reduce_scatter_async(np.ones(ws + 1, np.float32), lambda r: None)
    with pytest.raises(TypeError):
        b.reduce_scatter_async([1.0] * ws, lambda r: None)
    assert b.pending == 0
    b.reduce_scatter_async(np.ones(ws, np.float32), lambda r: None)
    with pytest.raises(symcomm.Error) as e:
        b.teardown()  # an input is pending
    assert e.value.code == "invalid_argument"
    b.flush()
    b.teardown()
    dropped = []
    b.reduce_scatter_async(np.ones(ws * 2, np.float32), dropped.append)
    b.close()  # with an input pending: dropped, its callback never runs
    b.close()
    assert dropped == []
    assert b.closed
    with pytest.raises(ValueError, match="closed"):
        b.flush()
    with pytest.raises(symcomm.Error) as e:
        symcomm.ReduceScatterBucketer(comm, bucket_cap_mb=0)
    assert e.value.code == "invalid_argument"
    comm.barrier()


def test_closing_the_communicator_closes_its_bucketers(comm):
    ws, me = comm.world_size, comm.rank
    sub = comm.split(0)
    b = symcomm.ReduceScatterBucketer(sub)
    got = []
    b.reduce_scatter_async(np.full(ws * 2, me + 1, np.int64), got.append)
    b.flush()
    assert_same(got[0], np.full(2, ws * (ws + 1) // 2, np.int64), "result on a split communicator")
    b.reduce_scatter_async(np.ones(ws * 3, np.int64), got.append)  # pending when the communicator closes: dropped
    sub.close()
    assert len(got) == 1
    assert b.closed
    with pytest.raises(ValueError, match="closed"):
        b.reduce_scatter_async(np.ones(ws, np.float32), got.append)
    b.close()  # nothing left to free
    comm.barrier()
