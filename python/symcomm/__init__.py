"""symcomm: collectives between the processes of one node, for host arrays on the host backend (NumPy arrays,
anything with __array_interface__, CPU tensors with __dlpack__ such as torch's) and CUDA arrays (torch CUDA
tensors, CuPy arrays: anything with __cuda_array_interface__ or __dlpack__) on the CUDA backend.

    import numpy as np, symcomm
    with symcomm.Communicator.from_env() as comm:      # RANK, WORLD_SIZE, ... from symcomm-run or torchrun
        x = np.full(4, comm.rank, dtype=np.float32)
        comm.all_reduce(x, out=x)                       # in place: every rank holds the sum

    with symcomm.Communicator.from_env("cuda") as comm:  # the GPU of LOCAL_RANK
        x = cupy.full(4, comm.rank, dtype=cupy.float32)
        comm.all_reduce(x, out=x, stream=cupy.cuda.get_current_stream().ptr)

docs/python.md lists the API. Every collective must be called by every rank in the same order with matching
arguments; each returns its output array (the `*_async` forms return a Work whose wait() returns it).
"""

import contextlib
import pkgutil

# The compiled module may lie in another folder of sys.path (a build tree): take in every symcomm/ there.
__path__ = pkgutil.extend_path(__path__, __name__)

import numpy as _np  # noqa: E402

from ._core import Error, ReduceOp, Work, backends  # noqa: E402
from . import _core  # noqa: E402

__all__ = ["Communicator", "Error", "MultiNodeCommunicator", "ReduceOp", "ReduceScatterBucketer", "Work", "DTYPES",
           "OPS", "SPLIT_NOCOLOR", "backends"]

#: The color of a rank that joins none of the communicators Communicator.split() makes.
SPLIT_NOCOLOR = _core.SPLIT_NOCOLOR

#: NumPy dtypes the collectives accept (symcomm's bfloat16 has no NumPy dtype).
DTYPES = (_np.float16, _np.float32, _np.float64, _np.int8, _np.uint8, _np.int32, _np.int64)

#: Names accepted for `op`, with their ReduceOp; "avg" divides the sum by the world size (integer division,
#: truncating toward zero, for integer dtypes).
OPS = {
    "sum": ReduceOp.SUM,
    "prod": ReduceOp.PROD,
    "min": ReduceOp.MIN,
    "max": ReduceOp.MAX,
    "avg": ReduceOp.AVG,
}


def _reduce_op(op):
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str) and op.lower() in OPS:
        return OPS[op.lower()]
    raise ValueError(f"op {op!r} is not one of {', '.join(OPS)} or a symcomm.ReduceOp")


def _array(x, name="x"):
    """x as the compiled modules take it (they refuse NumPy scalars: buffers.h); TypeError for what holds no array."""
    if not (isinstance(x, _np.ndarray) or hasattr(x, "__cuda_array_interface__") or hasattr(x, "__array_interface__")
            or hasattr(x, "__dlpack__")):
        raise TypeError(f"{name}: expected a numpy.ndarray, an object with __array_interface__, "
                        f"__cuda_array_interface__ or __dlpack__, got {type(x).__name__}")
    if not hasattr(x, "shape") and hasattr(x, "__array_interface__"):
        return _np.asarray(x)  # a view, for the shape of outputs allocated here
    return x


def _empty(x, shape):
    """A new array of x's kind (torch, or the module of x's type, e.g. CuPy), dtype and device; NumPy for host arrays
    of other libraries."""
    if hasattr(x, "new_empty"):  # torch
        return x.new_empty(shape)
    if isinstance(x, _np.ndarray) or hasattr(x, "__array_interface__"):
        return _np.empty(shape, dtype=_np.asarray(x).dtype)
    if hasattr(x, "__dlpack_device__") and x.__dlpack_device__()[0] in (1, 3):  # kDLCPU, kDLCUDAHost
        return _np.empty(shape, dtype=_np.from_dlpack(x).dtype)
    import sys  # noqa: PLC0415 - only for CUDA arrays of other libraries
    module = sys.modules.get(type(x).__module__.split(".")[0])
    if module is None or not hasattr(module, "empty"):
        raise TypeError(f"cannot allocate an output like {type(x).__name__}: pass out=")
    return module.empty(shape, dtype=x.dtype)


def _blocks(x, world_size, what):
    """Rows of x per rank, for the outputs of reduce_scatter and the blocks of all_to_all."""
    if x.ndim == 0 or x.shape[0] % world_size != 0:
        raise ValueError(f"{what}: the leading dimension of x {x.shape} is not divisible by the world size "
                         f"{world_size}")
    return x.shape[0] // world_size


# The output of each collective when the caller gives none (`out` None), for every communicator class.

def _out_like(x, out):
    return _empty(x, x.shape) if out is None else out


def _out_gathered(x, out, world_size):
    return _empty(x, (world_size,) + tuple(x.shape)) if out is None else out


def _out_scattered(x, out, world_size):
    if out is not None:
        return out
    return _empty(x, (_blocks(x, world_size, "reduce_scatter"),) + tuple(x.shape[1:]))


def _out_exchanged(x, out, world_size):
    if out is not None:
        return out
    _blocks(x, world_size, "all_to_all")
    return _empty(x, x.shape)


class _Handle:
    """What every communicator class has: the compiled object behind it, its place in the job, its state and its
    end (close() is collective; abort() local and non-blocking; check() raises the sticky error, never waits)."""

    def __init__(self, impl):
        self._impl = impl

    @property
    def rank(self):
        return self._impl.rank

    @property
    def world_size(self):
        return self._impl.world_size

    @property
    def closed(self):
        return self._impl.closed

    def check(self):
        """Raises the sticky error (a dead peer, a timeout, abort), if any; never waits."""
        self._impl.check()

    def close(self):
        """Waits for pending *_async calls, if any, and destroys the communicator; idempotent."""
        self._impl.close()

    def abort(self):
        """Local and non-blocking: pending and later calls raise symcomm.Error (code 'aborted')."""
        self._impl.abort()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _peer(self, peer):
        peer = int(peer)
        if not 0 <= peer < self.world_size:
            raise ValueError(f"peer {peer} is not a rank of this communicator (0-{self.world_size - 1})")
        return peer

    # The `*_async` forms: the collective with async_op=True (and the class's other keyword options), returning a
    # Work.

    def send_async(self, x, peer):
        return self.send(x, peer, async_op=True)

    def recv_async(self, out, peer):
        return self.recv(out, peer, async_op=True)

    def all_reduce_async(self, x, op="sum", out=None, **options):
        return self.all_reduce(x, op=op, out=out, async_op=True, **options)

    def all_gather_async(self, x, out=None, **options):
        return self.all_gather(x, out=out, async_op=True, **options)

    def reduce_scatter_async(self, x, op="sum", out=None, **options):
        return self.reduce_scatter(x, op=op, out=out, async_op=True, **options)

    def broadcast_async(self, x, root, out=None, **options):
        return self.broadcast(x, root, out=out, async_op=True, **options)

    def all_to_all_async(self, x, out=None, **options):
        return self.all_to_all(x, out=out, async_op=True, **options)

    def barrier_async(self, **options):
        return self.barrier(async_op=True, **options)

    # Coalescing.

    def group_start(self):
        self._impl.group_start()

    def group_end(self):
        self._impl.group_end()

    def group_cancel(self):
        self._impl.group_cancel()

    def group_end_async(self):
        """Ends the group like group_end() and returns one Work for all of its collectives (wait() returns None;
        the outputs hold their results once it has completed)."""
        return self._impl.group_end_async()

    @contextlib.contextmanager
    def group(self):
        """Collectives issued in the block are recorded and run together when it ends (group_start() ...
        group_end()); their outputs hold the results only after the block. If the block raises, the group is
        cancelled (group_cancel()): nothing recorded in it runs. Every rank must issue the same collectives in
        the group; sends and receives in it run after them, all together, and concern their two ranks only."""
        self._impl.group_start()
        try:
            yield self
        except BaseException:
            self._impl.group_cancel()
            raise
        self._impl.group_end()


class Communicator(_Handle):
    """A communicator of every rank of the job (symcomm::Communicator).

    Create it with Communicator.from_env(); close() (or leaving a `with` block) destroys it. Arguments are
    checked before anything runs: TypeError for a non-array or a dtype outside DTYPES, ValueError for a
    non-C-contiguous array, a read-only `out`, or an `out` of the wrong size; TypeError for an `out` of another
    dtype. Failures of the library raise symcomm.Error.

    CUDA backend: arrays are CUDA arrays on the communicator's device; each call is enqueued on `stream` (an int
    cudaStream_t, 0 the legacy default stream; None: the input's __cuda_array_interface__ stream, else 0) and
    returns without waiting, like NCCL; Work.wait() waits for the device work. Sends and receives are not
    available there (symcomm.Error, code 'unsupported').
    """

    @classmethod
    def from_env(cls, backend="host", device=-1):
        """Collective: creates the communicator from torchrun / symcomm-run variables (RANK, WORLD_SIZE,
        LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, SYMCOMM_TOKEN) and SYMCOMM_* settings. backend
        "cuda" uses GPU `device` (-1: LOCAL_RANK), which becomes the calling thread's current device."""
        return cls(_core.Communicator.from_env(backend, int(device)))

    @classmethod
    def create(cls, rank, world_size, token, host="127.0.0.1", port=0, on_store_started=None, backend="host",
               device=-1):
        """Collective: creates the communicator from explicit rendezvous arguments. Rank 0 serves the store at
        host:port (port 0: a free port, which it passes to on_store_started(port) once the store is up, so that it
        can be handed to the other ranks); every rank connects there with the same `token` (a shared secret of the
        job). backend and device as in from_env()."""
        return cls(_core.Communicator.create(int(rank), int(world_size), str(token), host=str(host), port=int(port),
                                             on_store_started=on_store_started, backend=backend, device=int(device)))

    def split(self, color, key=None):
        """Collective over every rank, like ncclCommSplit: the ranks that pass the same color (>= 0) form a new
        Communicator, ranked by key (None: this rank's rank), ties by rank; a rank that passes SPLIT_NOCOLOR (-1)
        takes part and gets None. The new communicator is independent of this one: either may be closed first."""
        impl = self._impl.split(int(color), None if key is None else int(key))
        return None if impl is None else Communicator(impl)

    @property
    def backend(self):
        return self._impl.backend

    @property
    def device(self):
        """The CUDA device of a CUDA communicator; -1 on the host backend."""
        return self._impl.device

    # Collectives. `out` None allocates the output; `out is x` runs in place (all_reduce, broadcast,
    # all_to_all). async_op=True (or the *_async methods) returns a Work. `stream`: CUDA backend only.
    # `algorithm` forces a path ("one_shot", "two_shot", "direct", "copy_engine", "nccl"; symcomm.Error with code
    # "invalid_argument" where it cannot run the call); `contention="low"` asks for the copy engine (CUDA).

    def all_reduce(self, x, op="sum", out=None, async_op=False, stream=None, algorithm="", contention=""):
        """out = op over the ranks of x, element by element; out has x's shape."""
        x = _array(x)
        op = _reduce_op(op)
        out = _out_like(x, out)
        return self._impl.all_reduce(x, out, op, async_op, stream=stream, algorithm=algorithm,
                                   contention=contention)

    def all_gather(self, x, out=None, async_op=False, stream=None, algorithm="", contention=""):
        """out[r] = x of rank r: shape (world_size, *x.shape), or any array of world_size * x.size elements."""
        x = _array(x)
        out = _out_gathered(x, out, self.world_size)
        return self._impl.all_gather(x, out, async_op, stream=stream, algorithm=algorithm,
                                   contention=contention)

    def reduce_scatter(self, x, op="sum", out=None, async_op=False, stream=None, algorithm="", contention=""):
        """out = block `rank` (along the leading dimension) of op over the ranks of x; out has shape
        (x.shape[0] // world_size, *x.shape[1:]). In place: out = that block of x (a view)."""
        x = _array(x)
        op = _reduce_op(op)
        out = _out_scattered(x, out, self.world_size)
        return self._impl.reduce_scatter(x, out, op, async_op, stream=stream, algorithm=algorithm,
                                   contention=contention)

    def broadcast(self, x, root, out=None, async_op=False, stream=None, algorithm="", contention=""):
        """out = x of rank `root`. Without out, x itself receives the result (in place)."""
        x = _array(x)
        if out is None:
            out = x
        return self._impl.broadcast(x, out, int(root), async_op, stream=stream, algorithm=algorithm,
                                   contention=contention)

    def all_to_all(self, x, out=None, async_op=False, stream=None, algorithm="", contention=""):
        """Block p of out (along the leading dimension) is block `rank` of rank p's x; out has x's shape."""
        x = _array(x)
        out = _out_exchanged(x, out, self.world_size)
        return self._impl.all_to_all(x, out, async_op, stream=stream, algorithm=algorithm,
                                   contention=contention)

    def barrier(self, async_op=False, stream=None):
        """Returns (host) or completes on `stream` (CUDA) once every rank has arrived."""
        return self._impl.barrier(async_op, stream=stream)

    # Point-to-point (host backend), with NCCL's semantics: the k-th send from A to B matches the k-th receive on
    # B from A, whose count and dtype must agree. Exchanges (each rank sends to and receives from the same peer)
    # go in a group: a send larger than its pair's two staging chunks waits for the receive to run.

    def send(self, x, peer, async_op=False):
        """Sends x's elements to rank `peer`."""
        return self._impl.send(_array(x), self._peer(peer), async_op)

    def recv(self, out, peer, async_op=False):
        """Receives rank `peer`'s message into `out` (same element count and dtype as the send); returns out."""
        return self._impl.recv(_array(out, "out"), self._peer(peer), async_op)

    # Symmetric heap (collective, in the same order with the same sizes on every rank; nothing is freed by garbage
    # collection): a HeapBuffer describes its bytes with __array_interface__ (host) or __cuda_array_interface__
    # (CUDA), so numpy.asarray(), torch.as_tensor() or cupy.asarray() view it; collectives on heap buffers run
    # zero-copy.

    def alloc(self, nbytes):
        """`nbytes` bytes of the symmetric heap, as a HeapBuffer (uint8)."""
        return self._impl.alloc(int(nbytes))

    def free(self, buffer):
        """Returns a HeapBuffer (or the int address alloc() gave) to the heap."""
        self._impl.free(buffer)

    def peer_buffer(self, buffer, peer, nbytes=None):
        """Rank `peer`'s copy of this rank's heap bytes (a HeapBuffer, or an int address inside one with nbytes),
        mapped in this process."""
        return self._impl.peer_buffer(buffer, int(peer), nbytes)


class ReduceScatterBucketer:
    """symcomm::ReduceScatterBucketer of a Communicator: many small reduce-scatters packed into few.

    reduce_scatter_async(x, callback_fn) records a reduce-scatter of x (world_size * k elements, block r for rank
    r); when its bucket is flushed (it filled, or flush()), callback_fn(result) gets this rank's k reduced
    elements: a NumPy array on the host backend, a HeapBuffer of the bytes on the CUDA backend, valid until the
    bucket is flushed again (copy it to keep it). An input larger than a bucket is reduced at once. x stays in use
    until its result has been delivered. The bucket memory is freed collectively: close() on every rank, or the
    communicator's close(). Every rank must make the same calls."""

    def __init__(self, comm, bucket_cap_mb=25.0):
        self._impl = comm._impl.bucketer(float(bucket_cap_mb))  # noqa: SLF001 - the package's own communicator

    def reduce_scatter_async(self, x, callback_fn, op="sum", stream=None):
        self._impl.reduce_scatter_async(_array(x), callback_fn, _reduce_op(op), stream=stream)

    def flush(self):
        """Runs every pending reduce-scatter, then the callbacks (the first exception of one is raised after the
        others ran)."""
        self._impl.flush()

    def teardown(self):
        """Frees the buckets (collective); nothing may be pending (flush first). The next call makes them again."""
        self._impl.teardown()

    def close(self):
        """Frees the bucketer's memory (collective); results not yet delivered are dropped. Idempotent."""
        self._impl.close()

    @property
    def pending(self):
        return self._impl.pending

    @property
    def closed(self):
        return self._impl.closed

    @property
    def bucket_bytes_per_rank(self):
        return self._impl.bucket_bytes_per_rank

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


from .multinode import MultiNodeCommunicator  # noqa: E402 - uses the helpers above
