"""Shared pieces of the Python tests. Every rank runs the same tests in the same order (symcomm-run starts one
pytest per rank), so their collectives match; run_ranks.py runs them at several world sizes.

Inputs are small integers built from (seed, rank, index), chosen per reduce op so that every result is exact
in every dtype (sums of [-3, 3], products of {-1, 1, 2}, min/max of [-50, 50]; unsigned: [0, 3], {1, 2},
[0, 100]); the expected result is computed here with NumPy from every rank's inputs and compared bit for bit.
"""

import numpy as np
import pytest
from job_env import ranks_from_open_mpi

import symcomm

ranks_from_open_mpi()  # under mpirun (run_mpi_torch.py)

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64]
OPS = ["sum", "prod", "min", "max", "avg"]

# Elements of guard on each side of every output (checked unchanged after the call).
GUARD = 16


@pytest.fixture(scope="session")
def comm():
    c = symcomm.Communicator.from_env()
    yield c
    if not c.closed:
        c.barrier()
        c.close()


def _mix(seed, rank, n):
    """splitmix64 of (seed, rank, index) for index < n."""
    with np.errstate(over="ignore"):
        h = (np.uint64(seed) * np.uint64(1000003) + np.uint64(rank) * np.uint64(7919) +
             np.arange(n, dtype=np.uint64))
        h = h + np.uint64(0x9E3779B97F4A7C15)
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def values(seed, rank, n, dtype, op=None):
    """Rank `rank`'s input of n elements for a case `seed` (op None: a collective without reduction)."""
    h = _mix(seed, rank, n)
    signed = np.dtype(dtype) != np.uint8
    if op in ("sum", "avg"):
        v = (h % np.uint64(7)).astype(np.int64) - 3 if signed else (h % np.uint64(4)).astype(np.int64)
    elif op == "prod":
        k = (h % np.uint64(3)).astype(np.int64)
        v = np.where(k == 0, -1 if signed else 1, k)
    else:
        v = (h % np.uint64(101)).astype(np.int64) - (50 if signed else 0)
    return v.astype(dtype)


def reduce_expected(seed, world_size, n, dtype, op, offset=0):
    """op over the inputs of every rank, elements [offset, offset + n), in the dtype's arithmetic."""
    ins = [values(seed, r, offset + n, dtype, op)[offset:].astype(np.int64) for r in range(world_size)]
    if op in ("sum", "avg"):
        acc = np.sum(ins, axis=0, dtype=np.int64)
    elif op == "prod":
        acc = np.prod(ins, axis=0, dtype=np.int64)
    elif op == "min":
        acc = np.min(ins, axis=0)
    else:
        acc = np.max(ins, axis=0)
    if op != "avg":
        return acc.astype(dtype)
    if np.dtype(dtype).kind == "f":
        # float16 is reduced in float32 and rounded once; the others divide in their own precision.
        work = np.float32 if np.dtype(dtype) == np.float16 else dtype
        return (acc.astype(work) / work(world_size)).astype(dtype)
    return np.trunc(acc / world_size).astype(dtype)  # integer division truncates toward zero


def sentinel(dtype):
    d = np.dtype(dtype)
    if d.kind == "f":
        return np.nan
    return {1: 111 if d == np.uint8 else -111, 4: -123456, 8: -123456789}[d.itemsize]


class Guarded:
    """An output array of `shape` inside a larger buffer, all poisoned; check() tests the guards."""

    def __init__(self, shape, dtype):
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        n = int(np.prod(shape, dtype=np.int64))
        self.buf = np.full(n + 2 * GUARD, sentinel(dtype), dtype=dtype)
        self.array = self.buf[GUARD:GUARD + n].reshape(shape)
        self.dtype = dtype

    def guards_intact(self):
        s = np.full(GUARD, sentinel(self.dtype), dtype=self.dtype)
        return self.buf[:GUARD].tobytes() == s.tobytes() and self.buf[-GUARD:].tobytes() == s.tobytes()


def assert_same(got, want, what=""):
    """Bitwise equality of two arrays of one dtype, naming the first differing element."""
    got = np.ascontiguousarray(got).reshape(-1)
    want = np.ascontiguousarray(want, dtype=got.dtype).reshape(-1)
    assert got.shape == want.shape, f"{what}: {got.shape} elements, expected {want.shape}"
    if got.tobytes() != want.tobytes():
        bad = np.nonzero(got.view(np.uint8).reshape(got.size, -1) != want.view(np.uint8).reshape(want.size, -1))[0]
        i = int(bad[0])
        raise AssertionError(f"{what}: element {i} of {got.size} is {got[i]!r}, expected {want[i]!r} "
                             f"({len(set(bad.tolist()))} elements differ)")


def check_usable(comm, seed=424242):
    """One correct all-reduce (after an argument error: the communicator must still work)."""
    x = values(seed, comm.rank, 33, np.int32, "sum")
    out = comm.all_reduce(x)
    assert_same(out, reduce_expected(seed, comm.world_size, 33, np.int32, "sum"), "all_reduce after an error")
