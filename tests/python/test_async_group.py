"""`*_async` calls and their Work; coalescing groups (`with comm.group():`)."""

import gc
import threading
import time

import numpy as np
import pytest

from conftest import DTYPES, Guarded, assert_same, check_usable, reduce_expected, sentinel, values

import symcomm


def test_async_all_reduce_many(comm):
    ws = comm.world_size
    works, outs = [], []
    for k in range(8):
        x = values(100 + k, comm.rank, 1031, np.int32, "sum")
        out = Guarded(1031, np.int32)
        outs.append(out)
        works.append(comm.all_reduce_async(x, out=out.array))  # x is referenced only by the Work
    del x
    gc.collect()
    comm.barrier()  # runs after the async calls: they are complete
    for k, (w, out) in enumerate(zip(works, outs)):
        assert isinstance(w, symcomm.Work)
        assert w.is_completed()
        assert w.wait() is out.array
        assert_same(out.array, reduce_expected(100 + k, ws, 1031, np.int32, "sum"), f"async {k}")
        assert out.guards_intact()


def test_async_every_collective(comm):
    ws, me = comm.world_size, comm.rank
    n = 7
    seed = 2024
    w_ar = comm.all_reduce_async(values(seed, me, n, np.float64, "prod"), op="prod")
    w_ag = comm.all_gather_async(values(seed + 1, me, n, np.int8))
    w_rs = comm.reduce_scatter_async(values(seed + 2, me, ws * n, np.uint8, "min"), op=symcomm.ReduceOp.MIN)
    b = values(seed + 3, me, n, np.float16)
    w_bc = comm.broadcast_async(b, root=ws - 1)
    w_aa = comm.all_to_all_async(values(seed + 4, me, ws * n, np.int64))
    w_ba = comm.barrier_async()
    w_ar_opt = comm.all_reduce(values(seed + 5, me, n, np.float32, "max"), op="max", async_op=True)
    assert w_ba.wait() is None
    assert_same(w_ar.wait(), reduce_expected(seed, ws, n, np.float64, "prod"), "all_reduce_async")
    assert_same(w_ag.wait(), np.stack([values(seed + 1, r, n, np.int8) for r in range(ws)]), "all_gather_async")
    assert_same(w_rs.wait(), reduce_expected(seed + 2, ws, n, np.uint8, "min", offset=me * n), "reduce_scatter_async")
    assert w_bc.wait() is b
    assert_same(b, values(seed + 3, ws - 1, n, np.float16), "broadcast_async")
    want = np.concatenate([values(seed + 4, p, ws * n, np.int64)[me * n:(me + 1) * n] for p in range(ws)])
    assert_same(w_aa.wait(), want, "all_to_all_async")
    assert w_ar_opt.wait_for(60.0)
    assert_same(w_ar_opt.result(), reduce_expected(seed + 5, ws, n, np.float32, "max"), "async_op=True")


def test_async_discarded_work(comm):
    # A Work dropped before completion keeps its arrays alive until the collective is over.
    for k in range(4):
        comm.all_reduce_async(values(300 + k, comm.rank, 100003, np.float32, "sum"))
    gc.collect()
    comm.barrier()
    check_usable(comm)


def test_group_of_all_reduces(comm):
    ws = comm.world_size
    cases = [(DTYPES[k % len(DTYPES)], op, n) for k, (op, n) in
             enumerate([("sum", 1), ("max", 7), ("min", 1031), ("sum", 33), ("prod", 5), ("avg", 7), ("sum", 0),
                        ("sum", 100003)])]
    ins, outs = [], []
    with comm.group() as g:
        assert g is comm
        for k, (dtype, op, n) in enumerate(cases):
            ins.append(values(500 + k, comm.rank, n, dtype, op))
            outs.append(Guarded(n, dtype))
            comm.all_reduce(ins[-1], op=op, out=outs[-1].array)
    for k, (dtype, op, n) in enumerate(cases):
        assert_same(outs[k].array, reduce_expected(500 + k, ws, n, dtype, op), f"group member {k}")
        assert outs[k].guards_intact()


def test_group_mixed_with_async(comm):
    ws, me = comm.world_size, comm.rank
    with comm.group():
        w = comm.all_reduce_async(values(600, me, 64, np.float32, "sum"))  # only the Work holds x
        gathered = comm.all_gather(values(601, me, 5, np.int32))
        x = values(602, me, 9, np.int64, "max")
        comm.all_reduce(x, op="max", out=x)
    assert_same(w.wait(), reduce_expected(600, ws, 64, np.float32, "sum"), "async in a group")
    assert_same(gathered, np.stack([values(601, r, 5, np.int32) for r in range(ws)]), "all_gather in a group")
    assert_same(x, reduce_expected(602, ws, 9, np.int64, "max"), "in place in a group")


def test_group_cancelled_when_the_block_raises(comm):
    out = Guarded(7, np.float32)
    with pytest.raises(KeyError):
        with comm.group():
            comm.all_reduce(values(700, comm.rank, 7, np.float32, "sum"), out=out.array)
            raise KeyError("leave the block")
    assert np.isnan(out.array).all(), "a cancelled group ran"
    assert out.guards_intact()
    check_usable(comm)


def test_group_argument_error_cancels(comm):
    # An argument error inside the block leaves it: the group is cancelled on every rank alike.
    out = np.full(3, sentinel(np.int32), dtype=np.int32)
    with pytest.raises(ValueError):
        with comm.group():
            comm.all_reduce(values(701, comm.rank, 3, np.int32, "sum"), out=out)
            comm.all_reduce(np.zeros(4, np.int32), out=np.zeros(5, np.int32))
    assert (out == sentinel(np.int32)).all()
    check_usable(comm)


def test_nested_groups(comm):
    ws = comm.world_size
    a = values(800, comm.rank, 11, np.float64, "sum")
    b = values(801, comm.rank, 11, np.float64, "sum")
    with comm.group():
        comm.all_reduce(a, out=a)
        with comm.group():
            comm.all_reduce(b, out=b)
    assert_same(a, reduce_expected(800, ws, 11, np.float64, "sum"), "outer")
    assert_same(b, reduce_expected(801, ws, 11, np.float64, "sum"), "inner")


def test_gil_released_while_a_collective_waits(comm):
    # Rank 0 arrives 0.5 s late; meanwhile a Python thread of every other rank keeps counting.
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        if comm.rank == 0:
            time.sleep(0.5)
        before = count[0]
        comm.barrier()
        during = count[0] - before
    finally:
        stop.set()
        t.join()
    if comm.rank != 0:
        assert during > 1000, f"the counting thread advanced {during} times during the barrier"
