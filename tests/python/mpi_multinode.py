"""symcomm.MultiNodeCommunicator (symcomm._mpi) under mpirun, with fake nodes: every collective on each path, dtype
and op against the known result, point-to-point, layouts and argument errors.

    mpirun -np 4 python3 -m pytest tests/python/mpi_multinode.py          # 2 nodes of 2 ranks
    SYMCOMM_TEST_ROUND_ROBIN=1 mpirun -np 6 python3 -m pytest ...          # 3 nodes of 2, ranks dealt round-robin

Not named test_*.py: run_ranks.py runs this folder under symcomm-run, which is no MPI job.
"""

import os
import zlib

import numpy as np
import pytest

from conftest import DTYPES, OPS, Guarded, assert_same, reduce_expected, values

import symcomm
from symcomm.multinode import HIERARCHIES

FAKE_NODE_SIZE = int(os.environ.get("SYMCOMM_TEST_FAKE_NODE_SIZE", "2"))
ROUND_ROBIN = os.environ.get("SYMCOMM_TEST_ROUND_ROBIN") == "1"


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode())


@pytest.fixture(scope="module")
def mn():
    c = symcomm.MultiNodeCommunicator.create(fake_node_size=FAKE_NODE_SIZE, fake_round_robin=ROUND_ROBIN)
    yield c
    c.barrier()
    c.close()


def expected_path(mn, hierarchy):
    return {"hierarchical": "hierarchical", "flat": "flat"}.get(hierarchy)


def test_layout(mn):
    ws, r = mn.world_size, mn.rank
    nodes = -(-ws // FAKE_NODE_SIZE)
    assert mn.num_nodes == nodes
    if ROUND_ROBIN:
        assert (mn.node, mn.local_rank) == (r % nodes, r // nodes)
    else:
        assert (mn.node, mn.local_rank) == (r // FAKE_NODE_SIZE, r % FAKE_NODE_SIZE)
    sizes = mn.all_gather(np.array([mn.local_world_size], np.int32)).ravel()
    nodes_of = mn.all_gather(np.array([mn.node], np.int32)).ravel()
    assert all(sizes[p] == np.count_nonzero(nodes_of == nodes_of[p]) for p in range(ws))


@pytest.mark.parametrize("hierarchy", HIERARCHIES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_all_reduce(mn, dtype, op, hierarchy):
    seed = seed_of("ar", np.dtype(dtype).name, op, hierarchy)
    n = 1031
    x = values(seed, mn.rank, n, dtype, op)
    out = Guarded(n, dtype)
    got = mn.all_reduce(x, op=op, out=out.array, hierarchy=hierarchy)
    assert got is out.array
    assert_same(got, reduce_expected(seed, mn.world_size, n, dtype, op), f"all_reduce {op} {hierarchy}")
    assert out.guards_intact()
    want = expected_path(mn, hierarchy)
    assert want is None or mn.last_path == want


@pytest.mark.parametrize("hierarchy", HIERARCHIES)
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64], ids=lambda d: np.dtype(d).name)
def test_gathers_and_scatters(mn, dtype, hierarchy):
    ws, me, n = mn.world_size, mn.rank, 37
    seed = seed_of("moves", np.dtype(dtype).name, hierarchy)
    g = mn.all_gather(values(seed, me, n, dtype), hierarchy=hierarchy)
    assert g.shape == (ws, n)
    assert_same(g, np.stack([values(seed, r, n, dtype) for r in range(ws)]), "all_gather")
    out = Guarded((n,), dtype)
    mn.reduce_scatter(values(seed + 1, me, ws * n, dtype, "sum"), out=out.array, hierarchy=hierarchy)
    assert_same(out.array, reduce_expected(seed + 1, ws, n, dtype, "sum", offset=me * n), "reduce_scatter")
    assert out.guards_intact()
    for root in range(ws):
        b = values(seed + 2, me, n, dtype)
        got = mn.broadcast(b, root, hierarchy=hierarchy)
        assert got is b
        assert_same(b, values(seed + 2, root, n, dtype), f"broadcast from {root}")
    x = values(seed + 3, me, ws * n, dtype)
    a = mn.all_to_all(x, hierarchy="flat" if hierarchy == "hierarchical" else hierarchy)  # MPI's only
    want = np.concatenate([values(seed + 3, p, ws * n, dtype)[me * n:(me + 1) * n] for p in range(ws)])
    assert_same(a, want, "all_to_all")
    mn.barrier(hierarchy=hierarchy)


def test_large_all_reduce_in_place(mn):
    seed = seed_of("large")
    n = (3 << 20) + 5  # past the node scratch's rounds, with a tail the node count does not divide
    x = values(seed, mn.rank, n, np.float32, "sum")
    mn.all_reduce(x, out=x, hierarchy="hierarchical")
    assert_same(x, reduce_expected(seed, mn.world_size, n, np.float32, "sum"), "in place, 12 MB")


def test_send_recv_pairs(mn):
    me, ws = mn.rank, mn.world_size
    peer = me ^ 1
    if peer >= ws:
        pytest.skip("an odd world size leaves the last rank without a partner")
    mine = values(seed_of("p2p", me), me, 100003, np.int32)
    got = np.zeros(100003, np.int32)
    if me % 2 == 0:
        mn.send(mine, peer)
        mn.recv(got, peer)
    else:
        mn.recv(got, peer)
        mn.send(mine, peer)
    assert_same(got, values(seed_of("p2p", peer), peer, 100003, np.int32), "message")


def test_torch_cpu_tensors(mn):
    torch = pytest.importorskip("torch")
    t = torch.full((3, 5), float(mn.rank + 1))
    got = mn.all_reduce(t, hierarchy="hierarchical")
    assert isinstance(got, torch.Tensor)
    assert torch.equal(got, torch.full((3, 5), float(mn.world_size * (mn.world_size + 1) // 2)))


def test_argument_errors(mn):
    with pytest.raises(ValueError, match="hierarchy 'tree' is unknown"):
        mn.all_reduce(np.ones(4, np.float32), hierarchy="tree")
    with pytest.raises(ValueError, match="not divisible"):
        mn.reduce_scatter(np.ones(mn.world_size + 1, np.float32), out=np.ones(1, np.float32))
    with pytest.raises(TypeError, match="int16"):
        mn.all_gather(np.ones(4, np.int16))
    with pytest.raises(ValueError, match="elements, expected"):
        mn.all_reduce(np.ones(4, np.float32), out=np.ones(5, np.float32))
    with pytest.raises(symcomm.Error) as e:
        mn.broadcast(np.ones(4, np.float32), root=mn.world_size)
    assert e.value.code == "invalid_argument"
    with pytest.raises(symcomm.Error, match="all_to_all has no hierarchical path") as e:
        mn.all_to_all(np.ones(mn.world_size, np.float32), hierarchy="hierarchical")
    assert e.value.code == "invalid_argument"
    mn.barrier()  # still usable, in step


def test_communicators_over_some_ranks(mn):
    """ranks=: a communicator of the given MPI_COMM_WORLD ranks in that order, made by them only."""
    ws, me = mn.world_size, mn.rank
    backwards = symcomm.MultiNodeCommunicator.create(fake_node_size=FAKE_NODE_SIZE, ranks=range(ws - 1, -1, -1))
    assert (backwards.rank, backwards.world_size) == (ws - 1 - me, ws)
    rows = backwards.all_gather(np.array([me], np.int64), hierarchy="hierarchical")
    assert rows[:, 0].tolist() == list(range(ws - 1, -1, -1))
    backwards.close()
    evens = list(range(0, ws, 2))
    if me in evens:
        sub = symcomm.MultiNodeCommunicator.create(fake_node_size=1, ranks=evens)
        assert (sub.rank, sub.world_size, sub.num_nodes) == (me // 2, len(evens), len(evens))
        got = sub.all_reduce(np.array([me], np.int64))
        assert got[0] == sum(evens)
        sub.close()
    for bad, why in (([ws], "not a distinct rank"), ([0, 0] + list(range(1, ws)), "not a distinct rank"),
                     ([r for r in range(ws) if r != me], "not among them")):
        with pytest.raises(ValueError, match=why):
            symcomm.MultiNodeCommunicator.create(ranks=bad)
    assert symcomm.MultiNodeCommunicator.world_rank() == me
    mn.barrier()


def test_closed_communicator_refuses_calls(mn):
    other = symcomm.MultiNodeCommunicator.create(fake_node_size=FAKE_NODE_SIZE, fake_round_robin=ROUND_ROBIN)
    got = other.all_reduce(np.array([1], np.int64))
    assert got[0] == mn.world_size
    other.close()
    other.close()  # idempotent
    assert other.closed
    with pytest.raises(ValueError, match="closed"):
        other.barrier()


def test_async_calls_run_in_issue_order(mn):
    ws, me = mn.world_size, mn.rank
    seed = seed_of("async")
    works, outs = [], []
    for k in range(10):
        out = Guarded(257, np.int32)
        outs.append(out)
        # The input is referenced by the Work alone from here on.
        works.append(mn.all_reduce_async(values(seed + k, me, 257, np.int32, "sum"), out=out.array,
                                         hierarchy=HIERARCHIES[k % 3 if mn.num_nodes > 1 else 0]))
    ranks = mn.all_gather(np.array([me], np.int64))  # synchronous: runs after them
    assert_same(ranks.ravel(), np.arange(ws, dtype=np.int64), "all_gather after the async calls")
    for k, (w, out) in enumerate(zip(works, outs)):
        assert isinstance(w, symcomm.Work) and w.is_completed()
        assert w.wait() is out.array
        assert_same(out.array, reduce_expected(seed + k, ws, 257, np.int32, "sum"), f"async all_reduce {k}")
        assert out.guards_intact()
    b = values(seed + 20, me, 9, np.float64)
    assert mn.broadcast_async(b, root=ws - 1).wait() is b
    assert_same(b, values(seed + 20, ws - 1, 9, np.float64), "broadcast_async")
    assert mn.barrier_async().wait() is None


def test_group_runs_at_its_end(mn):
    ws, me = mn.world_size, mn.rank
    nxt, prv = (me + 1) % ws, (me + ws - 1) % ws
    seed = seed_of("group")
    outs = [Guarded(100, np.float32) for _ in range(3)]
    got = np.zeros(5000, np.uint8)
    to_self, from_self = np.arange(17, dtype=np.int64), np.zeros(17, np.int64)
    with mn.group():
        for k, out in enumerate(outs):
            mn.all_reduce(values(seed + k, me, 100, np.float32, "sum"), out=out.array)  # packed into one
        gathered = mn.all_gather(values(seed + 5, me, 4, np.int8))
        mn.send(values(seed + 6, me, 5000, np.uint8), nxt)
        mn.recv(got, prv)
        mn.send(to_self, me)
        mn.recv(from_self, me)
        assert np.isnan(outs[0].array).all(), "a call of an open group ran"
    for k, out in enumerate(outs):
        assert_same(out.array, reduce_expected(seed + k, ws, 100, np.float32, "sum"), f"grouped all_reduce {k}")
        assert out.guards_intact()
    assert_same(gathered, np.stack([values(seed + 5, r, 4, np.int8) for r in range(ws)]), "grouped all_gather")
    assert_same(got, values(seed + 6, prv, 5000, np.uint8), "ring message")
    assert_same(from_self, to_self, "message to itself")
    mn.group_start()
    out = mn.all_reduce(values(seed + 7, me, 33, np.int64, "max"), op="max")
    work = mn.group_end_async()
    assert work.wait() is None
    assert_same(out, reduce_expected(seed + 7, ws, 33, np.int64, "max"), "group_end_async")


def test_group_cancel_and_refusals(mn):
    out = np.zeros(4, np.float32)
    with pytest.raises(KeyError):
        with mn.group():
            work = mn.all_reduce_async(np.ones(4, np.float32), out=out)
            raise KeyError("leave the block")
    with pytest.raises(symcomm.Error) as e:
        work.wait()
    assert e.value.code == "invalid_argument"
    assert (out == 0).all(), "a cancelled call ran"
    with pytest.raises(symcomm.Error, match="without group_start"):
        mn.group_end()
    mn.group_start()
    mn.send(np.ones(3, np.int32), mn.rank)  # a send to itself without its receive
    with pytest.raises(symcomm.Error, match="itself"):
        mn.group_end()
    mn.group_cancel()  # the refused group stayed open
    with pytest.raises(symcomm.Error, match="itself outside a group"):
        mn.send(np.ones(3, np.int32), mn.rank)
    mn.barrier()
