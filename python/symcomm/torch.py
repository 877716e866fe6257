"""symcomm.torch: a torch.distributed backend named "symcomm" for CPU tensors (torch 1.13), on symcomm's host
backend.

    import torch, torch.distributed as dist
    import symcomm.torch  # registers the backend
    dist.init_process_group(backend="symcomm")          # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
    x = torch.full((4,), float(dist.get_rank()))
    dist.all_reduce(x)

Importing this module registers the backend with torch.distributed.Backend.register_backend(). The process
group, ProcessGroupSymcomm, is a Python subclass of torch's ProcessGroup; it implements allreduce, allgather,
_allgather_base, reduce_scatter, _reduce_scatter_base, broadcast, alltoall_base (equal splits) and barrier, on
contiguous CPU tensors of float16, bfloat16, float32, float64, int8, uint8, int32, int64. docs/python.md lists the rest.

Every rank of a symcomm process group makes its own symcomm communicator: rank 0 serves its store on a free
port of MASTER_ADDR's loopback (127.0.0.1) and passes the port and a fresh token to the other ranks through the
store torch.distributed gives the backend. All ranks must be on one node.
"""

import secrets

import torch as _torch
import torch.distributed as _dist
from torch._C._distributed_c10d import ProcessGroup as _ProcessGroup
from torch._C._distributed_c10d import ReduceOp as _TorchReduceOp
from torch._C._distributed_c10d import Work as _TorchWork

from . import _core

__all__ = ["BACKEND", "DTYPES", "ProcessGroupSymcomm", "Work"]

#: The name init_process_group() and new_group() take.
BACKEND = "symcomm"

#: Tensor dtypes the collectives accept (bfloat16 travels as its int16 bits, reduced by symcomm as bfloat16).
DTYPES = (_torch.float16, _torch.bfloat16, _torch.float32, _torch.float64, _torch.int8, _torch.uint8, _torch.int32,
          _torch.int64)


def _reduce_op(op):
    """symcomm's ReduceOp for torch's op (a ReduceOp or an AllreduceOptions / ReduceScatterOptions)."""
    if hasattr(op, "reduceOp"):
        op = op.reduceOp
    for theirs, ours in ((_TorchReduceOp.SUM, _core.ReduceOp.SUM), (_TorchReduceOp.PRODUCT, _core.ReduceOp.PROD),
                         (_TorchReduceOp.MIN, _core.ReduceOp.MIN), (_TorchReduceOp.MAX, _core.ReduceOp.MAX),
                         (_TorchReduceOp.AVG, _core.ReduceOp.AVG)):
        if op == theirs:
            return ours
    raise ValueError(f"symcomm: reduce op {op} is not supported (SUM, PRODUCT, MIN, MAX, AVG)")


def _array(t, what):
    """The NumPy view of a CPU tensor (sharing its memory); checks device, dtype and layout."""
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"symcomm: {what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"symcomm: {what}: tensors on {t.device} are not supported (CPU tensors only)")
    if t.layout != _torch.strided:
        raise ValueError(f"symcomm: {what}: layout {t.layout} is not supported (strided tensors only)")
    if t.dtype not in DTYPES:
        raise TypeError(f"symcomm: {what}: dtype {t.dtype} is not supported "
                        f"({', '.join(str(d).replace('torch.', '') for d in DTYPES)})")
    if not t.is_contiguous():
        raise ValueError(f"symcomm: {what}: the tensor is not contiguous")
    return _numpy(t)


def _numpy(t):
    """The NumPy view of a contiguous CPU tensor; bfloat16 as int16."""
    t = t.detach()
    return t.view(_torch.int16).numpy() if t.dtype == _torch.bfloat16 else t.numpy()


def _dtype(t):
    """The `dtype` argument of symcomm._core's collectives for tensor t."""
    return "bfloat16" if t.dtype == _torch.bfloat16 else ""


def _single(tensors, what):
    if not isinstance(tensors, (list, tuple)) or len(tensors) != 1:
        raise ValueError(f"symcomm: {what}: expected a list of one tensor")
    return tensors[0]


def _same(t, ref, what, numel):
    """Checks that `t` has ref's dtype and `numel` elements."""
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"symcomm: {what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != ref.dtype:
        raise TypeError(f"symcomm: {what}: dtype {t.dtype} differs from the input's {ref.dtype}")
    if t.numel() != numel:
        raise ValueError(f"symcomm: {what}: {t.numel()} elements, expected {numel}")


class Work(_TorchWork):
    """The Work of a symcomm collective: wait() blocks until it completes (raising its error), then runs the
    copies into the caller's tensors that the collective needs (allgather and reduce_scatter with lists)."""

    def __init__(self, core_work, outputs, finish=None):
        super().__init__()
        self._core = core_work  # None: completed already
        self._outputs = outputs
        self._finish = finish
        self._error = None
        self._future = None

    def _complete(self):
        if self._core is not None:
            core, self._core = self._core, None
            try:
                core.wait()
            except BaseException as e:
                self._error = e
                self._finish = None
                raise
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()

    def wait(self, timeout=None):
        if self._error is not None:
            raise self._error
        if timeout is not None and self._core is not None:
            seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
            if seconds > 0 and not self._core.wait_for(seconds):
                raise RuntimeError(f"symcomm: the collective did not complete within {seconds} s")
        self._complete()
        return True

    def is_completed(self):
        return self._core is None or self._core.is_completed()

    def is_success(self):
        if not self.is_completed():
            return False
        try:
            self.wait()
        except Exception:  # noqa: BLE001 - is_success() reports the error as False
            return False
        return True

    def exception(self):
        if self.is_completed():
            try:
                self.wait()
            except Exception:  # noqa: BLE001
                pass
        return self._error

    def result(self):
        self.wait()
        return self._outputs

    def synchronize(self):
        self.wait()

    def get_future(self):
        """A torch.futures.Future of the output tensors; completed once wait() has been called (it is called
        here)."""
        if self._future is None:
            self._future = _torch.futures.Future()
            try:
                self.wait()
            except Exception as e:  # noqa: BLE001
                self._future.set_exception(e)
            else:
                self._future.set_result(self._outputs)
        return self._future


class ProcessGroupSymcomm(_ProcessGroup):
    """torch.distributed process group over a symcomm communicator (host backend, CPU tensors)."""

    def __init__(self, store, rank, size, timeout=None):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        key_port, key_token = "symcomm/port", "symcomm/token"
        if rank == 0:
            token = secrets.token_hex(16)
            store.set(key_token, token)
            self._comm = _core.Communicator.create(rank, size, token, "127.0.0.1", 0,
                                                   lambda port: store.set(key_port, str(port)))
        else:
            token = store.get(key_token).decode()
            port = int(store.get(key_port).decode())
            self._comm = _core.Communicator.create(rank, size, token, "127.0.0.1", port)

    def getBackendName(self):  # noqa: N802 - torch's name
        return BACKEND

    def _submit(self, call, outputs, finish=None):
        """Runs `call(async_op=True)` and returns its Work."""
        return Work(call(True), outputs, finish)

    def close(self):
        """Waits for pending collectives and destroys the communicator (destroy_process_group() drops the
        process group; this frees it at once)."""
        self._comm.close()

    def __del__(self):
        comm = getattr(self, "_comm", None)
        if comm is not None:
            try:
                comm.close()
            except Exception:  # noqa: BLE001 - nothing to report to in a destructor
                pass

    # Collectives, with the signatures torch 1.13's torch.distributed calls them with.

    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, _torch.Tensor):
            tensors = [tensors]
        t = _single(tensors, "allreduce")
        op = _reduce_op(opts if opts is not None else _TorchReduceOp.SUM)
        x = _array(t, "allreduce")
        return self._submit(lambda a: self._comm.all_reduce(x, x, op, a, _dtype(t)), [t])

    def allgather(self, output_lists, input_tensors, opts=None):
        if isinstance(input_tensors, _torch.Tensor):
            input_tensors, output_lists = [input_tensors], [output_lists]
        t = _single(input_tensors, "allgather input")
        outs = _single(output_lists, "allgather output")
        if not isinstance(outs, (list, tuple)) or len(outs) != self._size:
            raise ValueError(f"symcomm: allgather: expected a list of {self._size} output tensors")
        for i, o in enumerate(outs):
            _same(o, t, f"allgather output {i}", t.numel())
        x = _array(t, "allgather input")
        flat = _torch.empty(self._size * t.numel(), dtype=t.dtype)

        def finish():
            for i, o in enumerate(outs):
                o.copy_(flat[i * t.numel():(i + 1) * t.numel()].view(o.shape))

        return self._submit(lambda a: self._comm.all_gather(x, _numpy(flat), a, _dtype(t)), [list(outs)], finish)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        _same(output, input, "_allgather_base output", self._size * input.numel())
        x = _array(input, "_allgather_base input")
        out = _array(output, "_allgather_base output")
        return self._submit(lambda a: self._comm.all_gather(x, out, a, _dtype(input)), [output])

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        t = _single(output_tensors, "reduce_scatter output")
        ins = _single(input_lists, "reduce_scatter input")
        op = _reduce_op(opts if opts is not None else _TorchReduceOp.SUM)
        if not isinstance(ins, (list, tuple)) or len(ins) != self._size:
            raise ValueError(f"symcomm: reduce_scatter: expected a list of {self._size} input tensors")
        for i, x in enumerate(ins):
            _same(x, t, f"reduce_scatter input {i}", t.numel())
            _array(x, f"reduce_scatter input {i}")
        out = _array(t, "reduce_scatter output")
        flat = _torch.cat([x.reshape(-1) for x in ins]) if t.numel() else _torch.empty(0, dtype=t.dtype)
        return self._submit(lambda a: self._comm.reduce_scatter(_numpy(flat), out, op, a, _dtype(t)), [t])

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        op = _reduce_op(opts if opts is not None else _TorchReduceOp.SUM)
        _same(output, input, "_reduce_scatter_base output", input.numel() // self._size)
        if input.numel() % self._size:
            raise ValueError(f"symcomm: _reduce_scatter_base: {input.numel()} input elements are not divisible "
                             f"by the world size {self._size}")
        x = _array(input, "_reduce_scatter_base input")
        out = _array(output, "_reduce_scatter_base output")
        return self._submit(lambda a: self._comm.reduce_scatter(x, out, op, a, _dtype(input)), [output])

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, _torch.Tensor):  # broadcast(tensor, root)
            tensors, root = [tensors], int(opts)
        else:
            root = opts.rootRank if opts is not None else 0
            if opts is not None and opts.rootTensor != 0:
                raise ValueError("symcomm: broadcast: rootTensor must be 0")
        t = _single(tensors, "broadcast")
        x = _array(t, "broadcast")
        return self._submit(lambda a: self._comm.broadcast(x, x, root, a, _dtype(t)), [t])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        _same(output, input, "alltoall_base output", input.numel())
        rows = input.shape[0] if input.dim() else 1
        if rows % self._size:
            raise ValueError(f"symcomm: alltoall_base: the leading dimension {rows} is not divisible by the "
                             f"world size {self._size}")
        for name, splits in (("output_split_sizes", output_split_sizes), ("input_split_sizes", input_split_sizes)):
            if splits and list(splits) != [rows // self._size] * self._size:
                raise ValueError(f"symcomm: alltoall_base: {name} {list(splits)}: only equal splits are supported")
        x = _array(input, "alltoall_base input")
        out = _array(output, "alltoall_base output")
        return self._submit(lambda a: self._comm.all_to_all(x, out, a, _dtype(input)), [output])

    def barrier(self, opts=None):
        return self._submit(lambda a: self._comm.barrier(a), [])


def _create(store, rank, size, timeout):
    return ProcessGroupSymcomm(store, rank, size, timeout)


if BACKEND.upper() not in _dist.Backend._plugins:  # noqa: SLF001 - torch keeps its plugins there
    _dist.Backend.register_backend(BACKEND, _create)
