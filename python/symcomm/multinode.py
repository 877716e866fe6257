"""symcomm.MultiNodeCommunicator: a communicator that spans nodes, for host arrays, in a job started by mpirun.

    mpirun -np 8 python3 train.py          # inside: symcomm inside each node, MPI between the nodes
    with symcomm.MultiNodeCommunicator.create() as comm:
        comm.all_reduce(x, out=x)

It is symcomm::MultiNodeCommunicator (symcomm/multinode.h, docs/design/multinode.md) through symcomm._mpi, which
exists where symcomm was built with MPI.
"""

from . import _array, _Handle, _out_exchanged, _out_gathered, _out_like, _out_scattered, _reduce_op

#: `hierarchy` values: "auto" picks by size from the thresholds (the same on every rank), "hierarchical" runs
#: symcomm inside the nodes and MPI between them, "flat" runs the whole call on MPI.
HIERARCHIES = ("auto", "hierarchical", "flat")


def _mpi():
    try:
        from . import _mpi as module  # noqa: PLC0415 - only where MPI is used
    except ImportError as e:
        raise ImportError("symcomm.MultiNodeCommunicator needs symcomm._mpi, which is built where CMake finds MPI "
                          f"(apt-get install libopenmpi-dev): {e}") from e
    return module


class MultiNodeCommunicator(_Handle):
    """Every rank of MPI_COMM_WORLD, split into nodes (real ones, or fake ones of `fake_node_size` ranks so that one
    machine runs the multi-node paths). Collectives take the arrays and follow the rules of Communicator on the
    host backend (docs/python.md), with `*_async` forms and groups; `hierarchy` chooses the path (HIERARCHIES).
    All-to-all, send and recv run on MPI. Errors: symcomm.Error (a rank that dies on this host: code "peer_dead"
    naming it)."""

    @classmethod
    def create(cls, fake_node_size=0, fake_round_robin=False, min_bytes=None, ranks=None):
        """Collective over MPI_COMM_WORLD (MPI is initialised here if the program has not done it, and finalised
        at exit), or over the MPI_COMM_WORLD ranks `ranks` only, ranked in that order (the others do not call it).
        fake_node_size: nodes of that many consecutive ranks (round-robin with fake_round_robin), 0 the real nodes.
        min_bytes: "all_reduce=64K,..." sizes from which "auto" goes hierarchical, equal on every rank (None: the
        compiled-in table)."""
        if ranks is not None:
            ranks = [int(r) for r in ranks]
        return cls(_mpi().MultiNodeCommunicator.create(int(fake_node_size), bool(fake_round_robin), min_bytes,
                                                       ranks))

    @staticmethod
    def world_rank():
        """This process's rank in MPI_COMM_WORLD (MPI is initialised here if it is not yet)."""
        return _mpi().world_rank()

    @property
    def node(self):
        """This rank's node; nodes are numbered by their lowest rank."""
        return self._impl.node

    @property
    def num_nodes(self):
        return self._impl.num_nodes

    @property
    def local_rank(self):
        return self._impl.local_rank

    @property
    def local_world_size(self):
        return self._impl.local_world_size

    @property
    def last_path(self):
        """The path of the last collective: "none", "node", "hierarchical" or "flat"."""
        return self._impl.last_path

    # Collectives: as on Communicator, with `hierarchy` (HIERARCHIES) instead of stream and algorithm. async_op=True
    # (or the *_async forms) returns a Work; the calls run on the communicator's progress thread in issue order.

    def all_reduce(self, x, op="sum", out=None, async_op=False, hierarchy="auto"):
        x = _array(x)
        return self._impl.all_reduce(x, _out_like(x, out), _reduce_op(op), hierarchy, async_op)

    def all_gather(self, x, out=None, async_op=False, hierarchy="auto"):
        x = _array(x)
        return self._impl.all_gather(x, _out_gathered(x, out, self.world_size), hierarchy, async_op)

    def reduce_scatter(self, x, op="sum", out=None, async_op=False, hierarchy="auto"):
        x = _array(x)
        return self._impl.reduce_scatter(x, _out_scattered(x, out, self.world_size), _reduce_op(op), hierarchy,
                                         async_op)

    def broadcast(self, x, root, out=None, async_op=False, hierarchy="auto"):
        x = _array(x)
        return self._impl.broadcast(x, x if out is None else out, int(root), hierarchy, async_op)

    def all_to_all(self, x, out=None, async_op=False, hierarchy="auto"):
        x = _array(x)
        return self._impl.all_to_all(x, _out_exchanged(x, out, self.world_size), hierarchy, async_op)

    def barrier(self, async_op=False, hierarchy="auto"):
        return self._impl.barrier(hierarchy, async_op)

    def send(self, x, peer, async_op=False):
        """Sends x's elements to rank `peer` (MPI; NCCL's matching); returns once x may be reused. In a group a rank
        may send to itself."""
        return self._impl.send(_array(x), self._peer(peer), async_op)

    def recv(self, out, peer, async_op=False):
        """Receives rank `peer`'s message into `out`; returns out."""
        return self._impl.recv(_array(out, "out"), self._peer(peer), async_op)
