"""symcomm.torch: a torch.distributed backend named "symcomm" (torch 1.13 and 2.x): CPU tensors on symcomm's host
backend, CUDA tensors on its CUDA backend.

    import torch, torch.distributed as dist
    import symcomm.torch  # registers the backend
    dist.init_process_group(backend="symcomm")          # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
    x = torch.full((4,), float(dist.get_rank()))
    dist.all_reduce(x)
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    y = torch.ones(1 << 20, device="cuda", dtype=torch.bfloat16)
    dist.all_reduce(y)                                  # on the current stream, like NCCL

Importing this module registers the backend with torch.distributed.Backend.register_backend(). The process
group, ProcessGroupSymcomm, is a Python subclass of torch's ProcessGroup; it implements allreduce, allgather,
_allgather_base, reduce_scatter, _reduce_scatter_base, broadcast, alltoall_base and alltoall (other than equal
splits: CPU tensors as sends and receives, CUDA tensors on NCCL), reduce, gather, scatter, allreduce_coalesced,
allgather_coalesced, allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced, barrier, send and recv (isend, irecv,
batch_isend_irecv), on contiguous tensors of float16, bfloat16, float32, float64, int8, uint8, int32, int64.
docs/python.md lists the rest.

CUDA tensors: the group's first collective on a CUDA tensor makes a symcomm communicator on that tensor's device
(every later CUDA tensor of the group must be on it). Each collective is enqueued on the current stream of that
device and returns; its Work's wait() returns at once (the results are ordered on the stream) and raises the
communicator's error (a dead peer, a timeout), if any. CUDA-graph capture records the collectives. Sends and
receives of CUDA tensors run on torch's NCCL, in one NCCL group per batch.

Coalescing: the process group implements _start_coalescing() and _end_coalescing(), which torch's
torch.distributed.distributed_c10d._coalescing_manager calls: the collectives issued on the group in the block are
recorded in one symcomm group (group_start() ... group_end()) and run together when it ends.
coalescing_manager(group=None, async_ops=False) is the same block with torch 2.x's usage. ReduceScatterBucketer
packs many small reduce-scatters into few large ones, with fairscale's API.

Every rank of a symcomm process group makes its own symcomm communicators: rank 0 serves each one's store on a free
port of the loopback (127.0.0.1) and passes the port and a fresh token to the other ranks through the store
torch.distributed gives the backend. All ranks must be on one node.
"""

import contextlib
import datetime
import functools
import math
import os
import secrets
import sys
import warnings

import torch as _torch
import torch.distributed as _dist
from torch._C._distributed_c10d import ProcessGroup as _ProcessGroup
from torch._C._distributed_c10d import ReduceOp as _TorchReduceOp
from torch._C._distributed_c10d import Work as _TorchWork

from . import _core

__all__ = ["BACKEND", "DTYPES", "FUSED_DTYPES", "ProcessGroupSymcomm", "ReduceScatterBucketer", "Work",
           "coalescing_manager", "empty", "free", "fused_all_gather_matmul", "fused_matmul_reduce_scatter",
           "peer_tensor"]

#: The name init_process_group() and new_group() take.
BACKEND = "symcomm"

#: One-byte dtypes that travel as their bytes (uint8): bool, and the float8 types this torch has. Reductions of
#: bool follow torch's NCCL process group (SUM is a logical or, PRODUCT a logical and, MIN and MAX as they are, AVG
#: refused); float8 tensors are moved, not reduced (symcomm has no float8 arithmetic: TypeError).
_BYTE_DTYPES = (_torch.bool,) + tuple(
    getattr(_torch, name) for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                       "float8_e8m0fnu") if hasattr(_torch, name))

#: Tensor dtypes the collectives accept (bfloat16 travels as its int16 bits, reduced by symcomm as bfloat16).
DTYPES = (_torch.float16, _torch.bfloat16, _torch.float32, _torch.float64, _torch.int8, _torch.uint8, _torch.int32,
          _torch.int64) + _BYTE_DTYPES

#: Tensor dtypes the fused GEMM + collective operations accept.
FUSED_DTYPES = (_torch.bfloat16, _torch.float16, _torch.float32)


#: torch's reduce ops that symcomm runs, with symcomm's.
_OP_PAIRS = ((_TorchReduceOp.SUM, _core.ReduceOp.SUM), (_TorchReduceOp.PRODUCT, _core.ReduceOp.PROD),
             (_TorchReduceOp.MIN, _core.ReduceOp.MIN), (_TorchReduceOp.MAX, _core.ReduceOp.MAX),
             (_TorchReduceOp.AVG, _core.ReduceOp.AVG))


#: torch's bitwise reduce ops, with the torch function of each. symcomm's kernels have none: the process group gathers
#: every rank's tensor and reduces the blocks with the function, on the tensor's device (_bitwise_all_reduce).
_BITWISE = tuple((getattr(_TorchReduceOp, name), fn) for name, fn in
                 (("BAND", _torch.bitwise_and), ("BOR", _torch.bitwise_or), ("BXOR", _torch.bitwise_xor))
                 if hasattr(_TorchReduceOp, name))


def _bitwise(op, t):
    """The torch function of a bitwise reduce op (BAND, BOR, BXOR; op may be an options object) for tensor t of
    an integer or bool dtype; None for every other op."""
    op = getattr(op, "reduceOp", op)
    fn = next((f for theirs, f in _BITWISE if op == theirs), None)
    if fn is not None and isinstance(t, _torch.Tensor) and (t.is_floating_point() or t.is_complex()):
        raise TypeError(f"symcomm: bitwise reduce ops need integer or bool tensors, got {t.dtype}")
    return fn


#: torch's PREMUL_SUM (None where torch has none): the sum of every rank's tensor times a factor that
#: torch._make_nccl_premul_sum(factor) binds into the op, where Python cannot read it. CUDA tensors go to NCCL, which
#: can; CPU tensors are refused, as gloo refuses them.
_PREMUL_SUM = getattr(_TorchReduceOp, "PREMUL_SUM", None)


def _is_premul(op):
    """Whether op (a ReduceOp or an options object holding one) is a PREMUL_SUM."""
    op = getattr(op, "reduceOp", op)
    return _PREMUL_SUM is not None and isinstance(op, _OP_TYPES) and op == _PREMUL_SUM


def _op_by_hash():
    """symcomm's ReduceOp for the hash of each of torch's ReduceOps that symcomm runs (torch hashes a ReduceOp as
    its operator's number); None where torch's ops do not hash to distinct values."""
    others = [getattr(_TorchReduceOp, name) for name in ("BAND", "BOR", "BXOR", "PREMUL_SUM") if hasattr(_TorchReduceOp, name)]
    try:
        hashes = [hash(o) for o in [theirs for theirs, _ in _OP_PAIRS] + others]
    except TypeError:
        return None
    if len(set(hashes)) != len(hashes):
        return None
    return {hash(theirs): ours for theirs, ours in _OP_PAIRS}


_OP_BY_HASH = _op_by_hash()
_OP_TYPES = (_TorchReduceOp, type(_TorchReduceOp.SUM))  # a ReduceOp, and the operator type of its constants (2.x)


def _reduce_op(op, t):
    """symcomm's ReduceOp for torch's op (a ReduceOp or an AllreduceOptions / ReduceScatterOptions) on tensors of
    t's dtype."""
    op = getattr(op, "reduceOp", op)
    ours = None
    if _OP_BY_HASH is not None and isinstance(op, _OP_TYPES):
        ours = _OP_BY_HASH.get(hash(op))
    if ours is None:
        ours = next((o for theirs, o in _OP_PAIRS if op == theirs), None)
    if ours is None:
        raise ValueError(f"symcomm: reduce op {op} is not supported here (SUM, PRODUCT, MIN, MAX, AVG; BAND, BOR "
                         "and BXOR in all_reduce and reduce)")
    return _op_for_dtype(ours, t)


def _op_for_dtype(op, t):
    """The op that reduces tensors of t's dtype as torch's op `op` does (bool and float8 travel as bytes)."""
    if isinstance(t, _torch.Tensor) and t.dtype in _BYTE_DTYPES:
        if t.dtype != _torch.bool:
            raise TypeError(f"symcomm: {t.dtype} tensors cannot be reduced (they can be gathered, scattered, "
                            "broadcast and sent)")
        if op == _core.ReduceOp.AVG:
            raise ValueError("symcomm: AVG is not defined for bool tensors")
        op = _BOOL_OPS.get(op, op)
    return op


#: The reduce op that gives torch's result on bool tensors carried as their bytes (0 or 1).
_BOOL_OPS = {_core.ReduceOp.SUM: _core.ReduceOp.MAX, _core.ReduceOp.PROD: _core.ReduceOp.MIN}


#: symcomm's name of each of DTYPES (what symcomm._core takes with a CUDA tensor's (pointer, count)).
_DTYPE_NAMES = {_torch.float16: "float16", _torch.bfloat16: "bfloat16", _torch.float32: "float32",
                _torch.float64: "float64", _torch.int8: "int8", _torch.uint8: "uint8", _torch.int32: "int32",
                _torch.int64: "int64", **{d: "uint8" for d in _BYTE_DTYPES}}


def _checked(t, what):
    """Tensor t, checked for symcomm: a strided CPU or CUDA tensor of one of DTYPES (any strides)."""
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"symcomm: {what}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda and t.device.type != "cpu":
        raise ValueError(f"symcomm: {what}: tensors on {t.device} are not supported (CPU and CUDA tensors)")
    if t.layout != _torch.strided:
        raise ValueError(f"symcomm: {what}: layout {t.layout} is not supported (strided tensors only)")
    if t.dtype not in DTYPES:
        raise TypeError(f"symcomm: {what}: dtype {t.dtype} is not supported "
                        f"({', '.join(str(d).replace('torch.', '') for d in DTYPES)})")
    return t


# NOTE [strided tensors]
# symcomm's collectives take contiguous buffers. A tensor of any other strides (a transposed or sliced view,
# channels_last) is staged: the collective runs on a contiguous copy of its elements, and where it writes the tensor
# the Work copies the result back (_copy_back) when the collective completes: on CUDA on the current stream right
# after it, as NCCL's process group copies the outputs of a list all_gather; on CPU when the Work is waited for, as
# every CPU output is valid only then. So every view gets the result its elements would get if it were contiguous
# (gloo reads and writes a non-dense view's storage as if it were contiguous, and torch's NCCL refuses it).


def _dense(t, what, backs=None):
    """Tensor t, checked, as the contiguous tensor a collective takes (NOTE [strided tensors]): t itself if it is
    contiguous, else a contiguous copy of its elements; if the collective writes t (`backs` a list), (t, copy) is
    appended to `backs` for the Work to copy the result into t."""
    _checked(t, what)
    if t.is_contiguous():
        return t
    c = t.detach().contiguous()
    if backs is not None:
        backs.append((t, c))
    return c


def _copy_back(backs, finish=None):
    """The `finish` of a Work that writes the tensors of `backs` (from _dense): `finish`, then each staged
    result copied into the caller's tensor; just `finish` if nothing was staged."""
    if not backs:
        return finish

    def run():
        if finish is not None:
            finish()
        for t, c in backs:
            t.data.copy_(c)

    return run


def _copy_blocks(outs, blocks):
    """Copies each block (a flat tensor) into the tensor of `outs` at its index, shaped as that tensor."""
    for o, b in zip(outs, blocks):
        o.data.copy_(b.view(o.shape))


class _Pointer(tuple):
    """The (data pointer, element count) argument of symcomm._core for a contiguous CUDA tensor, holding the
    tensor: a staged copy (_dense) has no other owner, and its memory must outlive the argument (a freed block goes
    to the next allocation, an output's staged copy say, before the collective reads it)."""

    def __new__(cls, t):
        p = super().__new__(cls, (t.data_ptr(), t.numel()))
        p.tensor = t
        return p


def _numpy(t):
    """The argument of symcomm._core for a contiguous tensor: the NumPy view of a CPU tensor (bfloat16 as
    int16; it holds the tensor), the _Pointer of a CUDA tensor."""
    if t.is_cuda:
        return _Pointer(t)
    t = t.detach()
    if t.dtype == _torch.bfloat16:
        return t.view(_torch.int16).numpy()
    return t.view(_torch.uint8).numpy() if t.dtype in _BYTE_DTYPES else t.numpy()


def _dtype(t):
    """The `dtype` argument of symcomm._core's collectives for tensor t."""
    if t.is_cuda:
        return _DTYPE_NAMES[t.dtype]
    return "bfloat16" if t.dtype == _torch.bfloat16 else ""


def _shaped(t):
    """Like _numpy(t), with t's shape: a CUDA tensor as (data pointer, shape)."""
    return (t.data_ptr(), tuple(t.shape)) if t.is_cuda else _numpy(t)


# torch's cheapest query of a device's current stream (a cudaStream_t as an int), where it has one.
_RAW_STREAM = getattr(_torch._C, "_cuda_getCurrentRawStream", None)  # noqa: SLF001

# NOTE [torch hot path]
# dist.all_reduce of a small CUDA tensor is bound by host time (the kernel takes a few microseconds), so
# ProcessGroupSymcomm.allreduce has a fast path for the common call: one contiguous tensor of a dtype reduced as
# itself, AllreduceOptions, an op torch hashes to a known value, the group's device, no coalescing block or held
# send open, a one-node group. symcomm._core._TorchAllReduce (NOTE [python torch hot path] in python/src/module.cc)
# makes the general path's checks in C++, in their cheapest form, and enqueues the collective; every other call
# takes the general path, which raises the errors. A synchronous call (torch 2.x's AllreduceOptions.asyncOp False,
# which dist.all_reduce sets for async_op=False) gets no Work, as from torch's NCCL process group: the collective is
# on the current stream, and the check its wait() would make (the communicator's errors) is the next call's first
# step (CudaBackend::run); an asynchronous one gets an _EnqueuedWork. Host time above the _core call, 1 x H100 with
# torch 2.11 (bench/torch_backend_bench.py --breakdown): 1.7 us (2.5-2.7 us with the checks written in Python);
# torch.distributed.all_reduce's own Python, which NCCL's process group pays too, costs 2.5 us more.

#: The dtypes the hot path takes, with symcomm's names (the byte-carried dtypes take the general path).
_NATIVE_NAMES = {d: n for d, n in _DTYPE_NAMES.items() if d not in _BYTE_DTYPES}

_AllreduceOptions = _dist.AllreduceOptions


def _hot_all_reduce(comm, device):
    """The hot path of allreduce on CUDA communicator `comm` of `device` (NOTE [torch hot path]); None where torch
    has no raw stream query, its ops do not hash to distinct values or the group spans nodes."""
    if _RAW_STREAM is None or not _OP_BY_HASH or not isinstance(comm, _core.Communicator):
        return None
    return _core._TorchAllReduce(  # noqa: SLF001 - symcomm's own
        comm, device, _torch.Tensor, _AllreduceOptions, _torch.strided, _NATIVE_NAMES, _OP_BY_HASH, _RAW_STREAM,
        hasattr(_AllreduceOptions(), "asyncOp"))


def _stream(t):
    """The `stream` argument of symcomm._core for tensor t: the current stream of its device (None for CPU)."""
    if not t.is_cuda:
        return None
    if _RAW_STREAM is not None:
        return _RAW_STREAM(t.get_device())
    return _torch.cuda.current_stream(t.device).cuda_stream


def _overlap(a, b):
    """Whether the memory of contiguous tensors a and b overlaps."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def _tensors(outputs):
    """The tensors of a Work's outputs (a list of tensors and lists of tensors)."""
    for o in outputs:
        if isinstance(o, _torch.Tensor):
            yield o
        elif isinstance(o, (list, tuple)):
            yield from _tensors(o)


#: Whether _ignored_tag has warned in this process.
_TAG_WARNED = False


def _ignored_tag(tag, t):
    """Warns, once per process, where a send or receive of a CPU tensor carries a tag: gloo matches messages by
    tag, symcomm (as NCCL, which CUDA tensors go to) by their order on each pair of ranks."""
    global _TAG_WARNED  # noqa: PLW0603 - one warning per process
    if tag and not _TAG_WARNED and isinstance(t, _torch.Tensor) and not t.is_cuda:
        _TAG_WARNED = True
        warnings.warn("symcomm: tags of sends and receives are ignored: the k-th send from rank A to rank B "
                      "matches the k-th receive on B from A, as in NCCL", RuntimeWarning, stacklevel=3)


def _single(tensors, what):
    if not isinstance(tensors, (list, tuple)) or len(tensors) != 1:
        raise ValueError(f"symcomm: {what}: expected a list of one tensor")
    return tensors[0]


def _same(t, ref, what, numel=None):
    """Checks that `t` is a tensor of ref's dtype, with `numel` elements unless that is None."""
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"symcomm: {what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != ref.dtype:
        raise TypeError(f"symcomm: {what}: dtype {t.dtype} differs from the input's {ref.dtype}")
    if numel is not None and t.numel() != numel:
        raise ValueError(f"symcomm: {what}: {t.numel()} elements, expected {numel}")


# NOTE [Works torch holds]
# torch's C++ calls a process group's collectives too (DistributedDataParallel's parameter check, buffer broadcasts
# and gradient buckets; torch.distributed._broadcast_coalesced) and then waits for the Work it got, or takes its
# future. A Work of a Python class reaches C++ as its C++ part; pybind calls the Python wait() and get_future() for
# it only while the Python object is alive, and torch 1.13 does not keep it alive: once the collective returned,
# C++ held the bare C++ part, whose wait() never returns (DistributedDataParallel's constructor hung in
# _verify_param_shape_across_processes, torch 1.13, 2 ranks on the CI machine). So _PENDING holds every Work from
# its creation until it completes (wait(), get_future(), the end of its coalescing block). Works that nobody waits
# for are dropped once their collectives have run, oldest first, when _PENDING_MAX are held.

#: The Works not completed yet, by id().
_PENDING = {}
_PENDING_MAX = 4096


def _hold(work):
    """Keeps `work` alive until it completes (NOTE [Works torch holds])."""
    if len(_PENDING) >= _PENDING_MAX:
        excess = len(_PENDING) - _PENDING_MAX // 2
        for key, w in list(_PENDING.items()):
            if excess <= 0:
                break
            if w._settled():  # noqa: SLF001 - the Works of this module
                del _PENDING[key]
                excess -= 1
    _PENDING[id(work)] = work


class Work(_TorchWork):
    """The Work of a symcomm collective: wait() blocks until it completes (raising its error), then runs the
    copies into the caller's tensors that the collective needs (lists of tensors, NOTE [strided tensors]).

    A collective issued inside a coalescing block runs when the block ends: until then its Work's wait()
    returns True at once without waiting (torch.distributed's synchronous calls wait() inside the block) and
    is_completed() is False; the block's end completes it."""

    # Defaults of the attributes that __init__ leaves to most Works (one assignment less per call).
    _error = None
    _future = None
    _held_by = None  # the process group holding this send or receive until it issues them (_flush_p2p)
    _call = None  # a CUDA call recorded in a coalescing block, held until the block ends (_submit)

    def __init__(self, core_work, outputs, finish=None, in_group=False, device_comm=None, held=True):
        super().__init__()
        self._core = core_work  # None: completed already (or, on CUDA, enqueued on the stream)
        self._outputs = outputs
        self._finish = finish
        self._in_group = in_group  # recorded in a coalescing block that has not ended
        self._device_comm = device_comm  # a CUDA collective's communicator: wait() raises its sticky error
        if held:
            _hold(self)

    def _issue_held(self):
        """Runs the held sends and receives (this one among them); a failure of theirs is kept in self._error."""
        if self._held_by is not None:
            try:
                self._held_by._flush_p2p()  # noqa: SLF001 - the process group of this module
            except BaseException:
                if self._error is None:
                    raise

    def _group_ended(self, error=None):
        """Called by the process group when the outermost coalescing block ends: completes the Work, or fails
        it with `error` (the block was cancelled or its group failed)."""
        self._in_group, self._call = False, None
        if error is not None:
            self._core, self._finish, self._error = None, None, error
            _PENDING.pop(id(self), None)
            return
        try:
            self._complete()
        except BaseException:  # noqa: BLE001 - kept in self._error, raised by wait()
            pass

    def _complete(self):
        try:
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
        finally:
            _PENDING.pop(id(self), None)

    def _settled(self):
        """Whether the collective has run (its Work may not have been waited for)."""
        return not self._in_group and self._held_by is None and (self._core is None or self._core.is_completed())

    def wait(self, timeout=None):
        self._issue_held()
        if self._error is not None:
            raise self._error
        if self._in_group:
            return True
        if timeout is not None and self._core is not None:
            seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
            if seconds > 0 and not self._core.wait_for(seconds):
                raise RuntimeError(f"symcomm: the collective did not complete within {seconds} s")
        self._complete()
        if self._device_comm is not None:
            self._device_comm.check()
        return True

    def is_completed(self):
        self._issue_held()
        if self._in_group:
            return False
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
        if self._in_group:
            raise RuntimeError("symcomm: get_future() of a collective whose coalescing block has not ended")
        if self._future is None:
            devices = sorted({t.device for t in _tensors(self._outputs) if t.is_cuda}, key=str)
            self._future = _torch.futures.Future(devices=devices) if devices else _torch.futures.Future()
            try:
                self.wait()
            except Exception as e:  # noqa: BLE001
                self._future.set_exception(e)
            else:
                self._future.set_result(self._outputs)
        return self._future


class _EnqueuedWork(Work):
    """The Work of a CUDA collective enqueued outside coalescing blocks with nothing to finish: Work(None,
    outputs, device_comm=comm) built with the fewest steps (the hot path of allreduce)."""

    _core = None
    _finish = None
    _in_group = False

    def __init__(self, outputs, comm):  # noqa: D107 - Work's, with fewer steps
        _TorchWork.__init__(self)  # pylint: disable=non-parent-init-called
        self._outputs = outputs
        self._device_comm = comm
        _hold(self)


class _ForwardedWork:
    """The symcomm._core.Work interface over a torch Work of the NCCL process group (the CUDA calls NCCL runs):
    wait() orders the current stream after it, as NCCL's Work does."""

    def __init__(self, work):
        self._work = work

    def wait(self):
        self._work.wait()

    def wait_for(self, seconds):
        del seconds
        self._work.wait()
        return True

    def is_completed(self):
        return self._work.is_completed()


class _BackendView:
    """What torch 2.x asks of a process group's backend for a device (ProcessGroup._get_backend(device)): this
    process group serves every device itself, without splitting (ncclCommSplit-style eager creation) or NCCL-style
    coalescing; anything else is the process group's."""

    supports_splitting = False
    supports_coalescing = False
    supports_time_estimate = False

    def __init__(self, pg):
        self._pg = pg

    def __getattr__(self, name):
        return getattr(self._pg, name)


def _node_layout():
    """How symcomm.torch's groups span nodes, from the job's environment (the same on every rank): None where the job
    runs on one node; else the fake_node_size of symcomm.MultiNodeCommunicator (SYMCOMM_FAKE_NODE_SIZE: nodes of that
    many consecutive ranks on one machine; 0: the real nodes, where LOCAL_WORLD_SIZE or Open MPI's local size is
    below the world size)."""
    fake = os.environ.get("SYMCOMM_FAKE_NODE_SIZE", "").strip()
    if fake:
        try:
            size = int(fake)
        except ValueError:
            raise ValueError(f"symcomm: SYMCOMM_FAKE_NODE_SIZE={fake!r} is not a whole number") from None
        if size < 0:
            raise ValueError(f"symcomm: SYMCOMM_FAKE_NODE_SIZE={size} is negative")
        if size > 0:
            return size
    for local, world in (("LOCAL_WORLD_SIZE", "WORLD_SIZE"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE")):
        if os.environ.get(local, "").isdigit() and os.environ.get(world, "").isdigit():
            if int(os.environ[local]) < int(os.environ[world]):
                return 0
    return None


class _MultiNodeComm:
    """The calls ProcessGroupSymcomm makes on a symcomm._core.Communicator, on a communicator of a group whose ranks
    span nodes: symcomm._mpi.MultiNodeCommunicator for CPU tensors, symcomm._core.CudaMultiNodeCommunicator for CUDA
    tensors (enqueued on the call's stream). The hierarchy is chosen by size ("auto"); a forced algorithm or
    contention, which name one-node paths, are not passed on. What a group on one node only has (fused operations,
    the symmetric heap) raises RuntimeError."""

    def __init__(self, impl, cuda=False):
        self._impl = impl
        self._cuda = cuda

    # The calls that are the same on both: handed to the multi-node communicator as they are.
    _SAME = frozenset({"group_start", "group_end", "group_end_async", "group_cancel", "check", "abort", "close",
                       "closed", "rank", "world_size", "node", "num_nodes", "last_path", "device"})

    def _stream(self, stream):
        """The stream argument the communicator takes last: the CUDA one's; none for MPI's."""
        return (stream,) if self._cuda else ()

    def __getattr__(self, name):
        if name in _MultiNodeComm._SAME:
            return getattr(self._impl, name)
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(f"symcomm: {name} needs a process group on one node; this group spans nodes "
                           "(SYMCOMM_FAKE_NODE_SIZE, or ranks on several nodes)")

    def all_reduce(self, x, out, op, async_op, dtype="", stream=None, algorithm="", contention=""):
        del algorithm, contention
        return self._impl.all_reduce(x, out, op, "auto", async_op, dtype, *self._stream(stream))

    def all_gather(self, x, out, async_op, dtype="", stream=None, algorithm="", contention=""):
        del algorithm, contention
        return self._impl.all_gather(x, out, "auto", async_op, dtype, *self._stream(stream))

    def reduce_scatter(self, x, out, op, async_op, dtype="", stream=None, algorithm="", contention=""):
        del algorithm, contention
        return self._impl.reduce_scatter(x, out, op, "auto", async_op, dtype, *self._stream(stream))

    def broadcast(self, x, out, root, async_op, dtype="", stream=None, algorithm="", contention=""):
        del algorithm, contention
        return self._impl.broadcast(x, out, root, "auto", async_op, dtype, *self._stream(stream))

    def all_to_all(self, x, out, async_op, dtype="", stream=None, algorithm="", contention=""):
        del algorithm, contention
        return self._impl.all_to_all(x, out, "auto", async_op, dtype, *self._stream(stream))

    def barrier(self, async_op, stream=None):
        return self._impl.barrier("auto", async_op, *self._stream(stream))

    def send(self, x, peer, async_op, dtype=""):
        return self._impl.send(x, peer, async_op, dtype)

    def recv(self, out, peer, async_op, dtype=""):
        return self._impl.recv(out, peer, async_op, dtype)


class _NoMpi(RuntimeError):
    """Why the CPU tensors of a group that spans nodes cannot run: MPI is missing (symcomm built without it, or a job
    not started by mpirun). The same on every rank of the group."""


class _HostUnavailable:
    """The host communicator of a group that spans nodes in a job without MPI: the group is made, its CUDA tensors run
    on their own communicator (NCCL between the nodes), and a call on CPU tensors raises the RuntimeError that says
    why. Group, check and close calls, which the process group makes on every communicator, do nothing."""

    closed = False

    def __init__(self, why):
        self._why = why

    def _nothing(self):
        pass

    group_start = group_end = group_cancel = check = abort = close = _nothing

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise _NoMpi(self._why)


def _mpi_module():
    """symcomm._mpi (symcomm.multinode's import of it); _NoMpi where symcomm was built without MPI."""
    from .multinode import _mpi  # noqa: PLC0415 - only for groups that span nodes
    try:
        return _mpi()
    except ImportError as e:
        raise _NoMpi(f"symcomm: the CPU tensors of a process group that spans nodes run on MPI, in a job started by "
                     f"mpirun: {e}") from e


class ProcessGroupSymcomm(_ProcessGroup):
    """torch.distributed process group over symcomm communicators: CPU tensors on a host-backend communicator
    made with the group, CUDA tensors on a CUDA-backend communicator made at the group's first collective on a
    CUDA tensor (on that tensor's device; every later CUDA tensor must be on it), and CUDA sends and receives on
    an NCCL process group made beside it."""

    def __init__(self, store, rank, size, timeout=None):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._store = store
        self._timeout_ms = _timeout_ms(timeout)
        self._fake_node_size = _node_layout()  # None: the group's ranks are on one node
        try:
            self._comm = self._make_comm("symcomm", "host", -1)
        except _NoMpi as e:  # a group that spans nodes without MPI: CUDA tensors only
            self._comm = _HostUnavailable(str(e))
        self._cuda = None  # the CUDA communicator, made by the first CUDA collective (_cuda_comm)
        self._cuda_device = -1  # its device
        self._hot = None  # the hot path of allreduce on it (NOTE [torch hot path])
        self._nccl_pg = None  # the NCCL process group of CUDA sends and receives, made by the first (_nccl)
        # Coalescing blocks open on this group, innermost last: for each, the Works recorded in it and the
        # exception being handled when it started.
        self._coalescing = []
        # Sends and receives issued outside a coalescing block and not yet run: (Work, call, tensor, peer, is_send)
        # in issue order.
        self._p2p_held = []
        # Tensors made by empty() on this group: their data pointer -> (HeapBuffer, communicator).
        self._heap = {}

    @property
    def spans_nodes(self):
        """True where this group runs on communicators that span nodes (the job spans nodes, or declares fake ones
        with SYMCOMM_FAKE_NODE_SIZE): CPU tensors on a symcomm.MultiNodeCommunicator (MPI between the nodes), CUDA
        tensors on a symcomm._core.CudaMultiNodeCommunicator (NCCL between the nodes); no fused operations or
        symmetric tensors."""
        return self._fake_node_size is not None

    def _make_comm(self, prefix, backend, device):
        """A symcomm communicator of this group's ranks: rank 0 serves its store on a free loopback port and
        passes the port and a fresh token to the others through torch's store, under keys `prefix`/...; where the
        job spans nodes, a MultiNodeCommunicator for the host (_multi_node_comm) and a CudaMultiNodeCommunicator for
        CUDA (_cuda_multi_node_comm), each behind a _MultiNodeComm."""
        if self._fake_node_size is not None and backend == "host":
            return self._multi_node_comm(prefix)
        key_port, key_token = f"{prefix}/port", f"{prefix}/token"
        if self._rank == 0:
            token = secrets.token_hex(16)
            self._store.set(key_token, token)
            started = lambda port: self._store.set(key_port, str(port))  # noqa: E731 - one line, used below
            port = 0
        else:
            token = self._store.get(key_token).decode()
            port = int(self._store.get(key_port).decode())
            started = None
        if self._fake_node_size is not None:
            return _MultiNodeComm(self._cuda_multi_node_comm(token, port, started, device), cuda=True)
        return _core.Communicator.create(self._rank, self._size, token, "127.0.0.1", port, started, backend, device,
                                         self._timeout_ms)

    def _cuda_multi_node_comm(self, token, port, started, device):
        """A symcomm._core.CudaMultiNodeCommunicator of this group's ranks on `device`: symcomm inside each node,
        NCCL between the nodes (real ones: the ranks of one host; or SYMCOMM_FAKE_NODE_SIZE's), its store served by
        rank 0 on `host`:`port` as for a one-node group. No MPI. Jobs that span hosts set MASTER_ADDR to rank 0's
        address: the store is served there."""
        host = "127.0.0.1" if self._fake_node_size else os.environ.get("MASTER_ADDR", "127.0.0.1")
        min_bytes = os.environ.get("SYMCOMM_NODE_MIN_BYTES") or None
        round_robin = bool(self._fake_node_size) and os.environ.get("SYMCOMM_FAKE_ROUND_ROBIN", "0") not in ("", "0")
        return _core.CudaMultiNodeCommunicator.create(self._rank, self._size, max(device, 0), token, host, port, started,
                                                      self._fake_node_size, round_robin, min_bytes, device)

    def _multi_node_comm(self, prefix):
        """A MultiNodeCommunicator of this group's ranks, ranked as torch ranks them: each rank publishes its
        MPI_COMM_WORLD rank in torch's store; the group is MPI_COMM_WORLD itself where those are 0..size-1 in order,
        else a communicator of those ranks (made by them only, as torch makes a group on its members only)."""
        mpi = _mpi_module()
        self._store.set(f"{prefix}/mpi_rank/{self._rank}", str(mpi.world_rank()))
        ranks = [int(self._store.get(f"{prefix}/mpi_rank/{r}").decode()) for r in range(self._size)]
        if len(set(ranks)) != len(ranks):  # e.g. torchrun without mpirun: each process is MPI rank 0 of its own
            raise _NoMpi(f"symcomm: the CPU tensors of a process group that spans nodes run on MPI, and its {self._size} "
                         f"ranks are not distinct MPI_COMM_WORLD ranks ({ranks}): start the job with mpirun")
        whole = ranks == list(range(mpi.world_size()))
        min_bytes = os.environ.get("SYMCOMM_NODE_MIN_BYTES") or None  # "all_reduce=64K,...": where "auto" goes hierarchical
        round_robin = self._fake_node_size > 0 and os.environ.get("SYMCOMM_FAKE_ROUND_ROBIN", "0") not in ("", "0")
        impl = mpi.MultiNodeCommunicator.create(self._fake_node_size, round_robin, min_bytes, None if whole else ranks)
        return _MultiNodeComm(impl)

    def _cuda_comm(self, index):
        """The CUDA communicator, on device `index`: made at the first CUDA collective (every rank issues it),
        then entered into the coalescing blocks open on this group."""
        if self._cuda is not None and index == self._cuda_device:
            return self._cuda
        if self._cuda is None:
            self._cuda = self._make_comm("symcomm/cuda", "cuda", index)
            self._cuda_device = index
            self._hot = _hot_all_reduce(self._cuda, index)
            for _ in self._coalescing:
                self._cuda.group_start()
            return self._cuda
        raise ValueError(f"symcomm: this process group runs on cuda:{self._cuda_device}; a tensor is on cuda:{index}")

    def _comms(self):
        return [self._comm] if self._cuda is None else [self._comm, self._cuda]

    def _each(self, method):
        """Calls `method` (a name) on every communicator of this group; raises the first error after all."""
        error = None
        for comm in self._comms():
            try:
                getattr(comm, method)()
            except BaseException as e:  # noqa: BLE001 - raised below, after the other communicators
                if error is None:
                    error = e
        if error is not None:
            raise error

    def _nccl(self):
        """The NCCL process group of CUDA sends and receives (torch's own, on a prefix of this group's store)."""
        if self._nccl_pg is None:
            nccl = getattr(_dist, "ProcessGroupNCCL", None)
            if nccl is None:
                raise RuntimeError("symcomm: sends and receives of CUDA tensors need torch with NCCL")
            store = _dist.PrefixStore("symcomm/nccl/", self._store)
            backend = nccl(store, self._rank, self._size)
            pg = _ProcessGroup(store, self._rank, self._size)
            pg._set_default_backend(_ProcessGroup.BackendType.NCCL)  # noqa: SLF001 - as torch builds its groups
            pg._register_backend(_torch.device("cuda"), _ProcessGroup.BackendType.NCCL, backend)  # noqa: SLF001
            self._nccl_pg = pg
        return self._nccl_pg

    def _forward(self, outputs, issue):
        """The Work of a CUDA call that NCCL runs: issue(NCCL's process group) runs it now, and its Work is
        wrapped as this module's: wait() orders the current stream after it, and inside a coalescing block the
        block's Work waits for it too."""
        self._flush_p2p()
        forwarded = issue(self._nccl())
        # torch 2.x's NCCL process group returns no Work for a call whose options say it is synchronous
        # (asyncOp False): it ran on the current stream, and there is nothing to wait for.
        core = _ForwardedWork(forwarded) if forwarded is not None else None
        work = Work(core, outputs, in_group=bool(self._coalescing))
        if self._coalescing:
            self._coalescing[-1][0].append(work)
        return work

    def _forward_premul(self, opts, t, what, outputs, issue):
        """_forward(outputs, issue) where opts holds a PREMUL_SUM and t is a CUDA tensor (the op's factor is
        visible to NCCL alone); ValueError for a PREMUL_SUM of CPU tensors; None for every other op."""
        if opts is None or not _is_premul(opts):
            return None
        if not t.is_cuda:
            raise ValueError(f"symcomm: {what}: PREMUL_SUM reduces CUDA tensors only (through NCCL; gloo has none)")
        return self._forward(outputs, issue)

    def _fused_comm(self, t):
        """The communicator of a fused operation on tensor t (coalescing blocks do not take fused operations)."""
        if self._coalescing:
            raise RuntimeError("symcomm: fused operations cannot run inside a coalescing block")
        self._flush_p2p()
        return self._cuda_comm(t.get_device()) if t.is_cuda else self._comm

    def _get_backend(self, device):
        """torch 2.x's per-device backend of the group (init_process_group(device_id=...) asks it)."""
        del device
        return _BackendView(self)

    def getBackendName(self):  # noqa: N802 - torch's name
        return BACKEND

    @property
    def group_name(self):
        """The name torch.distributed registered this group under (what the fused operations take)."""
        for pg, name in _group_names().items():
            if pg is self:
                return name
        raise ValueError("symcomm: this process group is not registered with torch.distributed")

    def _submit(self, call, outputs, like, finish=None):
        """Runs `call(comm, async_op, stream)` on the communicator of tensor `like` (None: the host one) and
        returns its Work (recorded in the innermost coalescing block, if any). CPU: the call runs asynchronously
        and wait() waits for it, then runs `finish`. CUDA: the call is enqueued on the current stream of the
        tensor's device, like NCCL's on its stream, and `finish` right after it on that stream (at the end of the
        coalescing block inside one); wait() only raises the communicator's error, if any."""
        if self._p2p_held:
            self._flush_p2p()
        if like is not None and like.is_cuda:
            comm = self._cuda_comm(like.get_device())
            call(comm, False, _stream(like))
            if finish is not None and not self._coalescing:
                finish()
                finish = None
            work = Work(None, outputs, finish, in_group=bool(self._coalescing), device_comm=comm)
            if self._coalescing:
                # The group records the call's pointers and launches at the block's end: the call holds the
                # staged tensors (_Pointer), and the Work holds the call until then.
                work._call = call
        else:
            work = Work(call(self._comm, True, None), outputs, finish, in_group=bool(self._coalescing))
        if self._coalescing:
            self._coalescing[-1][0].append(work)
        return work

    # Coalescing, as torch 1.13's torch.distributed.distributed_c10d._coalescing_manager(group, reqs) calls it
    # (group._start_coalescing(), the block, then group._end_coalescing(reqs) in a `finally`), and torch 2.x's
    # with a device (_start_coalescing(device), the block, _end_coalescing(device), whose Work it waits for).

    def _start_coalescing(self, device=None):
        """Opens a coalescing block: collectives issued on this group until _end_coalescing() are recorded in a
        symcomm group (group_start()) and run together at the end of the outermost block. Blocks nest."""
        del device  # every communicator of the group takes part
        self._flush_p2p()
        self._each("group_start")
        self._coalescing.append(([], sys.exc_info()[1]))

    def _end_coalescing(self, reqs=None):
        """Closes the innermost coalescing block. The outermost one runs every collective recorded (group_end():
        CPU collectives are done when it returns, CUDA ones enqueued) and completes their Works, `reqs` among
        them: wait() on them then returns at once. If an exception raised in the block is propagating (it is
        called from a `finally`), the block is cancelled instead (group_cancel()): nothing recorded in it runs,
        and its Works raise. Returns a Work whose wait() waits for the block's Works."""
        del reqs  # the Works of the block are known here; reqs holds some of them (torch 2.x passes a device)
        if not self._coalescing:
            raise RuntimeError("symcomm: _end_coalescing() without _start_coalescing()")
        works, before = self._coalescing[-1]
        raised = sys.exc_info()[1]
        if raised is not None and raised is not before:
            self._cancel_coalescing()
            return _BlockWork(works, ended=True)
        self._coalescing.pop()
        try:
            self._each("group_end")  # at an inner level the outermost runs it
        except BaseException as e:
            for w in works:
                w._group_ended(e)  # noqa: SLF001 - the Works of this module
            raise
        if self._coalescing:
            self._coalescing[-1][0].extend(works)
            return _BlockWork(works)
        for w in works:
            w._group_ended()  # noqa: SLF001
        return _BlockWork(works, ended=True)

    def _cancel_coalescing(self):
        """Closes the innermost coalescing block without running it (group_cancel()); its Works raise."""
        works, _ = self._coalescing.pop()
        error = RuntimeError("symcomm: the coalescing block raised; its collectives were cancelled")
        for w in works:
            w._group_ended(error)  # noqa: SLF001
        self._each("group_cancel")

    def close(self):
        """Runs the sends and receives still held, waits for pending collectives and destroys the communicators
        (destroy_process_group() drops the process group; this frees it at once)."""
        try:
            self._flush_p2p()
        finally:
            try:
                if self._cuda is not None:
                    self._cuda.close()
            finally:
                self._comm.close()

    def __del__(self):
        for name in ("_cuda", "_comm"):
            comm = getattr(self, name, None)
            if comm is not None:
                try:
                    comm.close()
                except Exception:  # noqa: BLE001 - nothing to report to in a destructor
                    pass

    # Point-to-point. torch.distributed's isend / irecv, and batch_isend_irecv on a process group of a Python
    # class, call send() and recv() one at a time, outside any group, and expect an exchange (both ranks send
    # first, then receive) to complete at any size, as gloo's does; symcomm runs a send larger than two staging
    # chunks only as far as the receiver drains it (NCCL's semantics). So sends and receives issued outside a
    # coalescing block are held and run together, in issue order, as one group, when one of their Works is
    # waited for or queried, or before the next collective or coalescing block of this process group, or at
    # close(): CPU tensors in one symcomm group, CUDA tensors in one NCCL coalescing block of the NCCL process
    # group. Inside a coalescing block CPU sends and receives join its group. Tags are ignored (as NCCL does); the
    # k-th send from A to B matches the k-th receive on B from A, with the same element count and dtype.

    def _p2p(self, call, outputs, t, peer, is_send, finish=None):
        if self._coalescing and not t.is_cuda:
            return self._submit(call, outputs, t, finish)
        work = Work(None, outputs, finish)
        work._held_by = self  # noqa: SLF001
        self._p2p_held.append((work, call, t, peer, is_send))
        return work

    def _flush_p2p(self):
        """Runs the held sends and receives; their Works complete (or fail) with their group."""
        held, self._p2p_held = self._p2p_held, []
        if not held:
            return
        for entry in held:
            entry[0]._held_by = None  # noqa: SLF001
        cuda = [e for e in held if e[2].is_cuda]
        host = [e for e in held if not e[2].is_cuda]
        try:
            if host:
                self._flush_host_p2p(host)
        finally:
            if cuda:
                self._flush_cuda_p2p(cuda)

    def _flush_host_p2p(self, held):
        self._comm.group_start()
        try:
            for w, call, *_ in held:
                w._core = call(self._comm, True, None)  # noqa: SLF001
        except BaseException as e:
            self._comm.group_cancel()
            for w, *_ in held:
                w._group_ended(e)  # noqa: SLF001
            raise
        try:
            self._comm.group_end()
        except BaseException as e:
            for w, *_ in held:
                w._group_ended(e)  # noqa: SLF001
            raise
        for w, *_ in held:
            w._group_ended()  # noqa: SLF001

    def _flush_cuda_p2p(self, held):
        pg = self._nccl()
        device = held[0][2].device
        try:
            pg._start_coalescing(device)  # noqa: SLF001 - torch's NCCL coalescing
            for _, _, t, peer, is_send in held:
                (pg.send if is_send else pg.recv)([t], peer, 0)
            work = _ForwardedWork(pg._end_coalescing(device))  # noqa: SLF001
        except BaseException as e:
            for w, *_ in held:
                w._group_ended(e)  # noqa: SLF001
            raise
        for w, *_ in held:
            w._core = work  # noqa: SLF001
            w._group_ended()  # noqa: SLF001

    def send(self, tensors, dstRank, tag=0):  # noqa: N803 - torch's names
        t = _single(tensors, "send")
        _ignored_tag(tag, t)
        staged, peer = _dense(t, "send"), self._peer(dstRank, "send")
        x = _numpy(staged)
        return self._p2p(lambda c, a, s: c.send(x, peer, a, _dtype(t)), [t], staged, peer, True)

    def recv(self, tensors, srcRank, tag=0):  # noqa: N803
        t = _single(tensors, "recv")
        _ignored_tag(tag, t)
        backs = []
        staged, peer = _dense(t, "recv", backs), self._peer(srcRank, "recv")
        y = _numpy(staged)
        return self._p2p(lambda c, a, s: c.recv(y, peer, a, _dtype(t)), [t], staged, peer, False,
                         _copy_back(backs))

    def _peer(self, rank, what):
        rank = int(rank)
        if not 0 <= rank < self._size:
            raise ValueError(f"symcomm: {what}: rank {rank} is not in this group (0-{self._size - 1})")
        return rank

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("symcomm: a receive from any source is not supported (recv needs the source rank)")

    # Collectives, with the signatures torch 1.13's torch.distributed calls them with.

    def allreduce(self, tensors, opts=None):
        # The hot call, dist.all_reduce's of one contiguous CUDA tensor, checked and enqueued by _TorchAllReduce
        # outside coalescing blocks and held sends (NOTE [torch hot path]); anything else takes the general path,
        # which checks and reports.
        hot = self._hot
        if hot is not None and not self._coalescing and not self._p2p_held:
            wants_work = hot(tensors, opts)
            if wants_work is not None:
                return _EnqueuedWork([tensors[0]], self._cuda) if wants_work else None
        if isinstance(tensors, _torch.Tensor):
            tensors = [tensors]
        t = _single(tensors, "allreduce")
        forwarded = self._forward_premul(opts, t, "allreduce", [t], lambda pg: pg.allreduce([t], opts))
        if forwarded is not None:
            return forwarded
        bitwise = _bitwise(opts, t)
        if bitwise is not None:
            return self._bitwise_all_reduce(t, bitwise, None, "allreduce")
        op = _reduce_op(opts if opts is not None else _TorchReduceOp.SUM, t)
        backs = []
        x = _numpy(_dense(t, "allreduce", backs))
        return self._submit(lambda c, a, s: c.all_reduce(x, x, op, a, _dtype(t), s), [t], t, _copy_back(backs))

    def allgather(self, output_lists, input_tensors, opts=None):
        if isinstance(input_tensors, _torch.Tensor):
            input_tensors, output_lists = [input_tensors], [output_lists]
        t = _single(input_tensors, "allgather input")
        outs = _single(output_lists, "allgather output")
        if not isinstance(outs, (list, tuple)) or len(outs) != self._size:
            raise ValueError(f"symcomm: allgather: expected a list of {self._size} output tensors")
        for i, o in enumerate(outs):
            _same(o, t, f"allgather output {i}")
            _checked(o, f"allgather output {i}")
        if any(o.numel() != outs[0].numel() for o in outs):
            return self._allgather_uneven(outs, t)
        _same(outs[0], t, "allgather output 0", t.numel())
        return self._gathered(t, "allgather input", [list(outs)], functools.partial(_copy_blocks, outs))

    def _allgather_uneven(self, outs, t):
        """allgather into outputs of different sizes, as torch's NCCL process group runs it: rank r's input
        (outs[r].numel() elements) into outs[r] of every rank. CPU: sends and receives in one coalescing block
        (_exchange); CUDA: NCCL's."""
        if outs[self._rank].numel() != t.numel():
            raise ValueError(f"symcomm: allgather: output {self._rank} has {outs[self._rank].numel()} elements, this "
                             f"rank's input {t.numel()}")
        if t.is_cuda:
            return self._forward([list(outs)], lambda pg: pg.allgather([list(outs)], [t], _dist.AllgatherOptions()))
        backs = []
        flat_outs = [_dense(o, f"allgather output {i}", backs).view(-1) for i, o in enumerate(outs)]
        x = _dense(t, "allgather input").view(-1)
        return self._exchange(flat_outs, [x] * self._size, t, "allgather", _copy_back(backs))

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        _same(output, input, "_allgather_base output", self._size * input.numel())
        backs = []
        x = _numpy(_dense(input, "_allgather_base input"))
        out = _numpy(_dense(output, "_allgather_base output", backs))
        return self._submit(lambda c, a, s: c.all_gather(x, out, a, _dtype(input), s), [output],
                            input, _copy_back(backs))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """all_gather_coalesced: output_lists[r][j] gets rank r's input_list[j] (tensors of one dtype, of any
        shapes, each output the size of its input). The inputs go into one temporary tensor, all-gathered once,
        and the blocks are copied out when the Work completes."""
        if not isinstance(input_list, (list, tuple)) or not input_list:
            raise ValueError("symcomm: allgather_coalesced: expected a non-empty list of input tensors")
        if not isinstance(output_lists, (list, tuple)) or len(output_lists) != self._size:
            raise ValueError(f"symcomm: allgather_coalesced: expected {self._size} output lists, one per rank")
        for j, x in enumerate(input_list):
            _checked(x, f"allgather_coalesced input {j}")
            _same(x, input_list[0], f"allgather_coalesced input {j}")
        for r, outs in enumerate(output_lists):
            if not isinstance(outs, (list, tuple)) or len(outs) != len(input_list):
                raise ValueError(f"symcomm: allgather_coalesced: output list {r} must hold {len(input_list)} "
                                 "tensors, one per input")
            for j, (o, x) in enumerate(zip(outs, input_list)):
                _same(o, x, f"allgather_coalesced output [{r}][{j}]", x.numel())
                _checked(o, f"allgather_coalesced output [{r}][{j}]")
        flat = _torch.cat([x.reshape(-1) for x in input_list])

        def finish(blocks):
            for block, outs in zip(blocks, output_lists):
                off = 0
                for o in outs:
                    o.data.copy_(block[off:off + o.numel()].view(o.shape))
                    off += o.numel()

        return self._gathered(flat, "allgather_coalesced input", [list(o) for o in output_lists], finish)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        t = _single(output_tensors, "reduce_scatter output")
        ins = _single(input_lists, "reduce_scatter input")
        forwarded = self._forward_premul(opts, t, "reduce_scatter", [t],
                                         lambda pg: pg.reduce_scatter([t], [list(ins)], opts))
        if forwarded is not None:
            return forwarded
        op = _reduce_op(opts if opts is not None else _TorchReduceOp.SUM, t)
        if not isinstance(ins, (list, tuple)) or len(ins) != self._size:
            raise ValueError(f"symcomm: reduce_scatter: expected a list of {self._size} input tensors")
        for i, x in enumerate(ins):
            _same(x, t, f"reduce_scatter input {i}")
            _checked(x, f"reduce_scatter input {i}")
        _same(ins[self._rank], t, f"reduce_scatter input {self._rank} (this rank's block)", t.numel())
        if any(x.numel() != t.numel() for x in ins):
            return self._reduce_scatter_uneven(t, ins, op, opts)
        backs = []
        out = _numpy(_dense(t, "reduce_scatter output", backs))
        flat = _torch.cat([x.reshape(-1) for x in ins]) if t.numel() else t.new_empty(0)
        return self._submit(lambda c, a, s: c.reduce_scatter(_numpy(flat), out, op, a, _dtype(t), s), [t], t,
                            _copy_back(backs))

    def _reduce_scatter_uneven(self, t, ins, op, opts):
        """reduce_scatter of input blocks of different sizes, as torch's NCCL process group runs it: block r of
        every rank reduced into rank r's output (ins[r].numel() elements). CPU: one all-reduce of the concatenated
        blocks, of which each rank copies its own when the Work completes; CUDA: NCCL's."""
        if t.is_cuda:
            return self._forward([t], lambda pg: pg.reduce_scatter(
                [t], [list(ins)], opts if opts is not None else _dist.ReduceScatterOptions()))
        flat = _torch.cat([x.reshape(-1) for x in ins])
        start = sum(x.numel() for x in ins[:self._rank])

        def finish():
            t.data.copy_(flat[start:start + t.numel()].view(t.shape))

        return self._reduced(flat, op, t, [t], finish)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        forwarded = self._forward_premul(opts, input, "_reduce_scatter_base", [output],
                                         lambda pg: pg._reduce_scatter_base(output, input, opts))  # noqa: SLF001
        if forwarded is not None:
            return forwarded
        op = _reduce_op(opts if opts is not None else _TorchReduceOp.SUM, input)
        _same(output, input, "_reduce_scatter_base output", input.numel() // self._size)
        if input.numel() % self._size:
            raise ValueError(f"symcomm: _reduce_scatter_base: {input.numel()} input elements are not divisible "
                             f"by the world size {self._size}")
        backs = []
        x = _numpy(_dense(input, "_reduce_scatter_base input"))
        out = _numpy(_dense(output, "_reduce_scatter_base output", backs))
        return self._submit(lambda c, a, s: c.reduce_scatter(x, out, op, a, _dtype(input), s),
                            [output], input, _copy_back(backs))

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, _torch.Tensor):  # broadcast(tensor, root)
            tensors, root = [tensors], int(opts)
        else:
            root = opts.rootRank if opts is not None else 0
            if opts is not None and opts.rootTensor != 0:
                raise ValueError("symcomm: broadcast: rootTensor must be 0")
        t = _single(tensors, "broadcast")
        backs = []
        x = _numpy(_dense(t, "broadcast", backs))
        return self._submit(lambda c, a, s: c.broadcast(x, x, root, a, _dtype(t), s), [t], t, _copy_back(backs))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        rows = input.shape[0] if input.dim() else 1
        even = [rows // self._size] * self._size if rows % self._size == 0 else None
        splits = (("output_split_sizes", output_split_sizes), ("input_split_sizes", input_split_sizes))
        if input.is_cuda and any(s and list(s) != even for _, s in splits):  # NCCL's all-to-all takes any splits
            return self._forward([output], lambda pg: pg.alltoall_base(
                output, input, output_split_sizes, input_split_sizes, _dist.AllToAllOptions()))
        if any(s for _, s in splits) and (even is None or any(s and list(s) != even for _, s in splits)):
            return self._alltoall_uneven(output, input, output_split_sizes, input_split_sizes)
        _same(output, input, "alltoall_base output", input.numel())
        if even is None:
            raise ValueError(f"symcomm: alltoall_base: the leading dimension {rows} is not divisible by the "
                             f"world size {self._size}")
        backs = []
        x = _numpy(_dense(input, "alltoall_base input"))
        out = _numpy(_dense(output, "alltoall_base output", backs))
        return self._submit(lambda c, a, s: c.all_to_all(x, out, a, _dtype(input), s), [output],
                            input, _copy_back(backs))

    def _alltoall_uneven(self, output, input, output_split_sizes, input_split_sizes):  # noqa: A002
        """alltoall_base of CPU tensors with unequal splits: rows [in_off[q], in_off[q] + input_split_sizes[q]) of
        the input go to rank q, rows [out_off[r], ...) of the output come from rank r (an absent list: equal
        splits of that tensor's rows)."""
        backs = []
        staged_in = _dense(input, "alltoall_base input")  # the pieces are views of these
        staged_out = _dense(output, "alltoall_base output", backs)
        if input.dtype != output.dtype:
            raise TypeError(f"symcomm: alltoall_base: output dtype {output.dtype} differs from the input's "
                            f"{input.dtype}")
        if input.dim() == 0 or output.dim() == 0:
            raise ValueError("symcomm: alltoall_base: split sizes need tensors of at least one dimension")
        row = math.prod(input.shape[1:])
        if math.prod(output.shape[1:]) != row:
            raise ValueError(f"symcomm: alltoall_base: rows of {math.prod(output.shape[1:])} output elements and "
                             f"{row} input elements differ")
        ins = self._split_rows(staged_in, input_split_sizes, "input_split_sizes")
        outs = self._split_rows(staged_out, output_split_sizes, "output_split_sizes")
        return self._exchange(outs, ins, input, "alltoall_base", _copy_back(backs))

    def _split_rows(self, t, split_sizes, name):
        """The world-size pieces of t (1-D views) that `split_sizes` (rows per rank; absent: equal) makes."""
        rows = t.shape[0]
        if not split_sizes:
            if rows % self._size:
                raise ValueError(f"symcomm: alltoall_base: {name} is absent and the leading dimension {rows} is not "
                                 f"divisible by the world size {self._size}")
            split_sizes = [rows // self._size] * self._size
        split_sizes = [int(n) for n in split_sizes]
        if len(split_sizes) != self._size or min(split_sizes) < 0 or sum(split_sizes) != rows:
            raise ValueError(f"symcomm: alltoall_base: {name} {split_sizes} must be {self._size} sizes, none "
                             f"negative, that add up to the leading dimension {rows}")
        flat, row, pieces, at = t.reshape(-1), math.prod(t.shape[1:]), [], 0
        for n in split_sizes:
            pieces.append(flat[at * row:(at + n) * row])
            at += n
        return pieces

    def _exchange(self, outs, ins, like, what, finish=None):
        """An all-to-all of pieces of any sizes: ins[q] to rank q, into outs[r] from rank r, as sends and receives
        in one coalescing block (the k-th send from A to B matches the k-th receive on B from A, with the same
        element count and dtype: a rank that disagrees gets an error); this rank's own piece is copied when the
        block runs, then `finish`. Returns the block's Work. An input that overlaps an output is read at the call."""
        me = self._rank
        if ins[me].numel() != outs[me].numel():
            raise ValueError(f"symcomm: {what}: this rank sends itself {ins[me].numel()} elements and receives "
                             f"{outs[me].numel()} from itself")
        if any(_overlap(i, o) for i in ins for o in outs if i.numel() and o.numel()):
            ins = [i.clone() for i in ins]
        dtype = _dtype(like)
        own_in, own_out = ins[me], outs[me]
        self._start_coalescing()
        try:
            for q in range(self._size):
                if q != me and ins[q].numel():
                    x = _numpy(ins[q])
                    self._submit(lambda c, a, s, x=x, q=q: c.send(x, q, a, dtype), [], like)
            for q in range(self._size):
                if q != me and outs[q].numel():
                    y = _numpy(outs[q])
                    self._submit(lambda c, a, s, y=y, q=q: c.recv(y, q, a, dtype), [outs[q]], like)
            def own_then_finish():
                own_out.data.copy_(own_in)
                if finish is not None:
                    finish()

            own = Work(None, [own_out], finish=own_then_finish, in_group=True)
            self._coalescing[-1][0].append(own)
        except BaseException:
            self._cancel_coalescing()
            raise
        return self._end_coalescing()

    def barrier(self, opts=None):
        """Every rank's host waits for the others, after the CUDA work issued so far on this group's device has
        completed (as NCCL's barrier waits for its device work)."""
        if self._cuda is not None:
            _torch.cuda.current_stream(self._cuda.device).synchronize()
        if isinstance(self._comm, _HostUnavailable) and _torch.cuda.is_available():
            # A group that spans nodes in a job without MPI: the barrier runs on the CUDA communicator (made on the
            # current device if no CUDA collective made it), and the host waits for it.
            device = self._cuda_device if self._cuda is not None else _torch.cuda.current_device()
            like = _torch.empty(0, device=f"cuda:{device}")
            work = self._submit(lambda c, a, s: c.barrier(a, s), [], like)
            _torch.cuda.current_stream(device).synchronize()
            return work
        return self._submit(lambda c, a, s: c.barrier(a), [], None)

    # torch 2.x's _coalescing_manager(group, async_ops) without a device issues nothing inside its block and
    # calls one of these at its end with the tensors of the block's collectives.

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        """_allgather_base of each (output, input) pair, run together as one coalescing block."""
        return self._coalesced(lambda: [self._allgather_base(o, i) for o, i in zip(outputs, inputs, strict=True)])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        """_reduce_scatter_base of each (output, input) pair, run together as one coalescing block."""
        return self._coalesced(lambda: [self._reduce_scatter_base(o, i, opts)
                                        for o, i in zip(outputs, inputs, strict=True)])

    def _coalesced(self, issue):
        self._start_coalescing()
        try:
            issue()
        except BaseException:
            self._cancel_coalescing()
            raise
        return self._end_coalescing()

    def allreduce_coalesced(self, tensors, opts=None):
        """The all-reduce of every tensor of the list (one dtype) as one: concatenated into a temporary tensor,
        reduced, and copied back when the Work is waited for."""
        if not isinstance(tensors, (list, tuple)) or not tensors:
            raise ValueError("symcomm: allreduce_coalesced: expected a non-empty list of tensors")
        forwarded = self._forward_premul(opts, tensors[0], "allreduce_coalesced", [list(tensors)],
                                         lambda pg: pg.allreduce_coalesced(list(tensors), opts))
        if forwarded is not None:
            return forwarded
        op = _reduce_op(opts if opts is not None else _TorchReduceOp.SUM, tensors[0])
        for i, t in enumerate(tensors):
            _checked(t, f"allreduce_coalesced tensor {i}")
            if t.dtype != tensors[0].dtype:
                raise TypeError(f"symcomm: allreduce_coalesced: tensor {i} is {t.dtype}, tensor 0 {tensors[0].dtype}")
        flat = _torch.cat([t.reshape(-1) for t in tensors])

        def finish():
            off = 0
            for t in tensors:
                t.data.copy_(flat[off:off + t.numel()].view(t.shape))
                off += t.numel()

        return self._reduced(flat, op, tensors[0], [list(tensors)], finish)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        """all_to_all with tensor lists: input tensor q goes to rank q, whose output tensor r receives it from
        rank r. Every tensor of both lists must have the same dtype and number of elements (equal splits)."""
        for name, ts in (("output", output_tensors), ("input", input_tensors)):
            if not isinstance(ts, (list, tuple)) or len(ts) != self._size:
                raise ValueError(f"symcomm: alltoall: expected a list of {self._size} {name} tensors")
        ref = input_tensors[0]
        for name, ts in (("input", input_tensors), ("output", output_tensors)):
            for i, t in enumerate(ts):
                _same(t, ref, f"alltoall {name} {i}")
                _checked(t, f"alltoall {name} {i}")
        if any(t.numel() != ref.numel() for ts in (input_tensors, output_tensors) for t in ts):
            if ref.is_cuda:  # NCCL's all-to-all takes any sizes
                return self._forward([list(output_tensors)], lambda pg: pg.alltoall(
                    list(output_tensors), list(input_tensors), _dist.AllToAllOptions()))
            backs = []
            outs = [_dense(t, "alltoall output", backs).view(-1) for t in output_tensors]
            ins = [_dense(t, "alltoall input").view(-1) for t in input_tensors]
            return self._exchange(outs, ins, ref, "alltoall", _copy_back(backs))
        flat_in = _torch.cat([t.reshape(-1) for t in input_tensors])
        flat_out = _torch.empty_like(flat_in)
        n = ref.numel()

        def finish():
            for i, o in enumerate(output_tensors):
                o.data.copy_(flat_out[i * n:(i + 1) * n].view(o.shape))

        return self._submit(lambda c, a, s: c.all_to_all(_numpy(flat_in), _numpy(flat_out), a, _dtype(ref),
                                                          s), [list(output_tensors)], ref, finish)

    def _root(self, opts, what):
        """The root rank of `opts` (ReduceOptions, GatherOptions, ScatterOptions); 0 without options."""
        root = opts.rootRank if opts is not None else 0
        if not 0 <= root < self._size:
            raise ValueError(f"symcomm: {what}: root {root} is not a rank of this group (0-{self._size - 1})")
        if opts is not None and getattr(opts, "rootTensor", 0) != 0:
            raise ValueError(f"symcomm: {what}: rootTensor must be 0")
        return root

    def _root_list(self, lists, root, ref, what):
        """gather's outputs and scatter's inputs: on the root, the one list in `lists`, of world-size tensors with
        ref's dtype and number of elements; on the other ranks [] (and `lists` must hold no tensor)."""
        if self._rank != root:
            if lists and any(len(x) for x in lists):
                raise ValueError(f"symcomm: {what}: tensors are given on a rank that is not the root")
            return []
        ts = _single(lists, what)
        if not isinstance(ts, (list, tuple)) or len(ts) != self._size:
            raise ValueError(f"symcomm: {what}: expected a list of {self._size} tensors on the root")
        for i, x in enumerate(ts):
            _same(x, ref, f"{what} {i}", ref.numel())
            _checked(x, f"{what} {i}")
        return ts

    def reduce(self, tensors, opts=None):
        """The reduction of every rank's tensor into the root's: an all-reduce of a copy, which the root copies
        into its tensor when the Work is waited for; the other ranks' tensors are left as they were."""
        t = _single(tensors, "reduce")
        root = self._root(opts, "reduce")
        forwarded = self._forward_premul(opts, t, "reduce", [t], lambda pg: pg.reduce([t], opts))
        if forwarded is not None:
            return forwarded
        bitwise = _bitwise(opts, t)
        if bitwise is not None:
            return self._bitwise_all_reduce(t, bitwise, root, "reduce")
        op = _reduce_op(opts if opts is not None else _TorchReduceOp.SUM, t)
        _checked(t, "reduce")
        tmp = t.detach().clone(memory_format=_torch.contiguous_format)

        def finish():
            if self._rank == root:
                t.data.copy_(tmp)

        return self._reduced(tmp, op, t, [t], finish)

    def _bitwise_all_reduce(self, t, fn, root, what):
        """All-reduce (root None) or reduce into the root of t by a bitwise op, whose torch function is fn: every
        rank's t is gathered, and the blocks reduced with fn on t's device into t (the root's only, for a reduce)
        when the Work completes."""
        def finish(blocks):
            if root is None or self._rank == root:
                t.data.copy_(functools.reduce(fn, blocks).view(t.shape))

        return self._gathered(t, what, [t], finish)

    def _gathered(self, t, what, outputs, finish):
        """The Work of an all-gather of every rank's t into a temporary tensor, whose blocks (rank r's t flat at
        index r) go to finish(blocks) when it completes; `outputs`: the tensors it writes, as _submit takes them."""
        x = _numpy(_dense(t, what))
        flat = _torch.empty(self._size * t.numel(), dtype=t.dtype, device=t.device)
        return self._submit(lambda c, a, s: c.all_gather(x, _numpy(flat), a, _dtype(t), s), outputs, t,
                            lambda: finish(flat.view(self._size, t.numel()).unbind(0)))

    def _reduced(self, flat, op, t, outputs, finish):
        """The Work of an in-place all-reduce of `flat` (a contiguous temporary of t's dtype) by `op`, which calls
        finish() when it completes to copy results out; `outputs` as _submit takes them."""
        x = _numpy(flat)
        return self._submit(lambda c, a, s: c.all_reduce(x, x, op, a, _dtype(t), s), outputs, t, finish)

    def gather(self, output_tensors, input_tensors, opts=None):
        """Every rank's tensor into the root's list (output_tensors: [list of world-size tensors] on the root,
        [] elsewhere): an all-gather into a temporary tensor, copied into the root's list when the Work is
        waited for."""
        t = _single(input_tensors, "gather input")
        root = self._root(opts, "gather")
        _checked(t, "gather input")
        outs = self._root_list(output_tensors, root, t, "gather output")
        return self._gathered(t, "gather input", [list(outs)], functools.partial(_copy_blocks, outs))

    def scatter(self, output_tensors, input_tensors, opts=None):
        """Block r of the root's list into rank r's tensor (input_tensors: [list of world-size tensors] on the
        root, [] elsewhere): a broadcast of the root's blocks, of which each rank copies its own when the Work
        is waited for."""
        t = _single(output_tensors, "scatter output")
        root = self._root(opts, "scatter")
        _checked(t, "scatter output")
        ins = self._root_list(input_tensors, root, t, "scatter input")
        flat = _torch.cat([x.reshape(-1) for x in ins]) if ins else t.new_empty(self._size * t.numel())
        n, me = t.numel(), self._rank

        def finish():
            t.data.copy_(flat[me * n:(me + 1) * n].view(t.shape))

        return self._submit(lambda c, a, s: c.broadcast(_numpy(flat), _numpy(flat), root, a, _dtype(t), s),
                            [t], t, finish)


class _BlockWork(Work):
    """The Work of a coalescing block: wait() waits for each Work recorded in it."""

    def __init__(self, works, ended=False):
        # The Work of a block that has ended (its Works have completed or failed) is not held: torch 1.13's
        # _coalescing_manager drops it unwaited, and holding it would keep its tensors until _PENDING_MAX.
        super().__init__(None, [w._outputs for w in works], held=not ended)  # noqa: SLF001
        self._works = works

    def wait(self, timeout=None):
        try:
            for w in self._works:
                w.wait(timeout)
        finally:
            _PENDING.pop(id(self), None)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def _settled(self):
        return all(w._settled() for w in self._works)  # noqa: SLF001


class _CoalescingManager:
    """What coalescing_manager() yields: `works`, the Works of the collectives recorded in the block (filled when
    it ends), and wait()."""

    def __init__(self):
        self.works = []

    def append(self, work):
        self.works.append(work)

    def wait(self):
        for w in self.works:
            w.wait()


def _symcomm_group(group, what):
    pg = _dist.distributed_c10d._get_default_group() if group is None else group  # noqa: SLF001
    if not isinstance(pg, ProcessGroupSymcomm):
        raise TypeError(f"symcomm: {what}: the group is a {type(pg).__name__}, not a symcomm process group")
    return pg


@contextlib.contextmanager
def coalescing_manager(group=None, async_ops=False):
    """Collectives issued on `group` (default: the default group, which must be symcomm's) inside the block are
    recorded in one symcomm group and run together when the block ends, as with torch 2.x's
    torch.distributed.distributed_c10d._coalescing_manager:

        with coalescing_manager(group):                  # synchronous: results are there after the block
            for t in tensors:
                dist.all_reduce(t, group=group)
        with coalescing_manager(group, async_ops=True) as cm:
            for t in tensors:
                dist.all_reduce(t, group=group)
        cm.wait()                                        # cm.works: the Works of the block

    If the block raises, nothing recorded in it runs (group_cancel()). Every rank must issue the same block."""
    pg = _symcomm_group(group, "coalescing_manager")
    cm = _CoalescingManager()
    pg._start_coalescing()  # noqa: SLF001
    try:
        yield cm
    except BaseException:
        pg._cancel_coalescing()  # noqa: SLF001
        raise
    cm.works.extend(pg._end_coalescing()._works)  # noqa: SLF001
    if not async_ops:
        cm.wait()


class _Bucket:
    """The packed input of one (dtype, device, group): `data` holds world_size rows of `shard` elements; the
    inputs recorded so far fill columns [0, offset) of every row, input_list[r] in row r."""

    def __init__(self, dtype, device, group, world_size, shard):
        self.group = group
        self.data = _torch.empty((world_size, shard), dtype=dtype, device=device)
        self.offset = 0
        self.pending = []  # (callback_fn, offset, count, shape)

    def flush(self):
        """One reduce-scatter of columns [0, offset) (skipped where they are empty), then the callbacks in the
        order their inputs were recorded, each with its view of the bucket's output."""
        if not self.pending:
            return
        offset, pending = self.offset, self.pending
        self.offset, self.pending = 0, []
        output = _torch.empty(offset, dtype=self.data.dtype, device=self.data.device)
        if offset:
            packed = self.data if offset == self.data.shape[1] else self.data[:, :offset].contiguous()
            _dist.reduce_scatter_tensor(output, packed.view(-1), group=self.group)
        for callback_fn, start, count, shape in pending:
            if callback_fn is not None:
                callback_fn(output[start:start + count].view(shape))


class ReduceScatterBucketer:
    """Many small reduce-scatters packed into few large ones, with fairscale's API
    (fairscale.internal.reduce_scatter_bucketer.ReduceScatterBucketer):

        bucketer = ReduceScatterBucketer(bucket_cap_mb=25)
        bucketer.reduce_scatter_async(input_list, group, callback_fn=lambda result: ...)
        ...
        bucketer.flush()      # callbacks are only guaranteed to have run after flush()
        bucketer.teardown()   # flush, then free the buckets

    input_list holds group.size() tensors of one dtype and element count; the result on rank r is the sum over the ranks
    of input_list[r] (a tensor of input_list[0]'s shape). Inputs are copied into the bucket of their (dtype, device,
    group), of bucket_cap_mb MiB split into group.size() shards; a bucket without room for an input is flushed
    first: one reduce-scatter (torch.distributed.reduce_scatter_tensor on the group) of the packed inputs, then
    the callbacks in recording order, each with its view of the bucket's output (a new tensor per flush). An
    input larger than a shard, or any input with bucket_cap_mb <= 0, is reduce-scattered at once and its callback
    called before reduce_scatter_async() returns. Every rank must make the same calls with the same sizes."""

    def __init__(self, bucket_cap_mb=25):
        self.bucket_cap_mb = bucket_cap_mb
        self.buckets = {}

    def _shard_size(self, element_size, world_size):
        """Elements of one rank's shard of a bucket (fairscale's rule); 0 where bucketing is off."""
        if self.bucket_cap_mb <= 0:
            return 0
        return int(self.bucket_cap_mb * 1024 * 1024 / element_size // world_size)

    @_torch.no_grad()
    def reduce_scatter_async(self, input_list, group=None, callback_fn=None):
        """Records the reduce-scatter of input_list on `group` (None: the default group); callback_fn(result) is
        called once it has run (at once for inputs larger than a shard)."""
        if group is None:
            group = _dist.distributed_c10d._get_default_group()  # noqa: SLF001
        world_size = _dist.get_world_size(group)
        if not isinstance(input_list, (list, tuple)) or len(input_list) != world_size:
            raise ValueError(f"symcomm: reduce_scatter_async: expected a list of {world_size} tensors "
                             f"(the group's size)")
        first = input_list[0]
        for i, t in enumerate(input_list):
            if not isinstance(t, _torch.Tensor):
                raise TypeError(f"symcomm: reduce_scatter_async: input {i} is a {type(t).__name__}, not a tensor")
            if t.dtype != first.dtype or t.numel() != first.numel() or t.device != first.device:
                raise ValueError(f"symcomm: reduce_scatter_async: input {i} ({t.dtype}, {t.numel()} elements, "
                                 f"{t.device}) differs from input 0 ({first.dtype}, {first.numel()} elements, "
                                 f"{first.device})")
        count = first.numel()
        shard = self._shard_size(first.element_size(), world_size)
        if self.bucket_cap_mb <= 0 or count > shard:
            output = _torch.empty(first.shape, dtype=first.dtype, device=first.device)
            packed = _torch.cat([t.reshape(-1) for t in input_list])
            _dist.reduce_scatter_tensor(output.view(-1), packed, group=group)
            if callback_fn is not None:
                callback_fn(output)
            return
        key = (first.dtype, first.device, group)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = _Bucket(first.dtype, first.device, group, world_size, shard)
        if count > shard - bucket.offset:
            bucket.flush()
        start = bucket.offset
        if count:
            for r, t in enumerate(input_list):
                bucket.data[r, start:start + count].copy_(t.reshape(-1))
        bucket.offset += count
        bucket.pending.append((callback_fn, start, count, first.shape))

    @_torch.no_grad()
    def flush(self):
        """Reduce-scatters every bucket that holds inputs (in the order the buckets were made) and runs their
        callbacks."""
        for bucket in list(self.buckets.values()):
            bucket.flush()

    @_torch.no_grad()
    def teardown(self):
        """flush(), then frees the buckets (the next call makes them again)."""
        self.flush()
        self.buckets.clear()


def _group_names():
    """torch.distributed's map of process groups to their names (torch 1.13: _pg_names; 2.x: _world.pg_names)."""
    c10d = _dist.distributed_c10d
    names = getattr(c10d, "_pg_names", None)
    return names if names is not None else c10d._world.pg_names  # noqa: SLF001


def _group_by_name(group_name, what):
    """The symcomm process group named `group_name` (a ProcessGroup object is taken as it is)."""
    if isinstance(group_name, _ProcessGroup):
        return _symcomm_group(group_name, what)
    if not isinstance(group_name, str):
        raise TypeError(f"symcomm: {what}: group_name must be a str, got {type(group_name).__name__}")
    for pg, name in _group_names().items():
        if name == group_name:
            return _symcomm_group(pg, what)
    raise ValueError(f"symcomm: {what}: no process group is named {group_name!r}")


def _fused_input(t, what, first=None):
    """The contiguous tensor of a fused operation's input `t` (a copy if `t` is not contiguous); `first`: the
    first input, whose dtype and device `t` must have."""
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"symcomm: {what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FUSED_DTYPES:
        raise TypeError(f"symcomm: {what}: dtype {t.dtype} is not supported by the fused operations "
                        f"({', '.join(str(d).replace('torch.', '') for d in FUSED_DTYPES)})")
    if first is not None and t.dtype != first.dtype:
        raise TypeError(f"symcomm: {what}: dtype {t.dtype} differs from the first input's {first.dtype}")
    if first is not None and t.device != first.device:
        raise ValueError(f"symcomm: {what}: on {t.device}, the first input on {first.device}")
    return _checked(t.detach().contiguous(), what)


def _dim(dim, ndim, what):
    """`dim` in [0, ndim - 1) (negative counts from the end); the last dim is the GEMM's contraction or column dim."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"symcomm: {what}: expected an int, got {type(dim).__name__}")
    d = dim + ndim if dim < 0 else dim
    if ndim < 2 or not 0 <= d < ndim - 1:
        raise ValueError(f"symcomm: {what}: {dim} is not a dim of a {ndim}-dim tensor other than its last")
    return d


@_torch.no_grad()
def fused_all_gather_matmul(A_shard, Bs, gather_dim, group_name, *, return_A=True):  # noqa: N803 - torch's names
    """All-gather of A_shard along gather_dim, then a matmul with each of Bs, as
    torch.distributed._symmetric_memory.fused_all_gather_matmul: returns (A, [A @ B for B in Bs]), A being None
    when return_A is False. A_shard is [..., M, K] (CPU or CUDA; bfloat16, float16 or float32), each B is [K, N_i];
    gather_dim is any dim of A_shard but the last. Collective over the group named group_name (every rank calls
    it with the same shapes). The GEMMs accumulate in float32 (symcomm's fused.h)."""
    pg = _group_by_name(group_name, "fused_all_gather_matmul")
    a = _fused_input(A_shard, "A_shard")
    if not isinstance(Bs, (list, tuple)):
        raise TypeError(f"symcomm: fused_all_gather_matmul: Bs must be a list of tensors, got {type(Bs).__name__}")
    bs = [_fused_input(b, f"Bs[{i}]", a) for i, b in enumerate(Bs)]
    d = _dim(gather_dim, a.dim(), "gather_dim")
    shape = list(a.shape)
    shape[d] *= pg.size()
    for i, b in enumerate(bs):
        if b.dim() != 2 or b.shape[0] != a.shape[-1]:
            raise ValueError(f"symcomm: fused_all_gather_matmul: Bs[{i}] has shape {tuple(b.shape)}, expected "
                             f"[{a.shape[-1]}, N] (A_shard's last extent first)")
    outs = [a.new_empty(shape[:-1] + [b.shape[1]]) for b in bs]
    gathered = a.new_empty(shape) if return_A else None
    pg._fused_comm(a).all_gather_matmul(_shaped(a), [_shaped(b) for b in bs], d,  # noqa: SLF001
                                        [_shaped(o) for o in outs], None if gathered is None else _shaped(gathered),
                                        _dtype(a), stream=_stream(a))
    return gathered, outs


@_torch.no_grad()
def fused_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group_name):  # noqa: N803 - torch's names
    """A matmul, then a reduce-scatter of the product along scatter_dim, as
    torch.distributed._symmetric_memory.fused_matmul_reduce_scatter: A is [..., M, K_local] (CPU or CUDA; bfloat16,
    float16 or float32), B is [K_local, N]; reduce_op is "sum" or "avg"; the product's extent along scatter_dim
    (any dim of A but the last) must be divisible by the world size. Returns this rank's block of the reduced
    product. Each rank's partial product is rounded to the dtype once and the partials are summed in float32."""
    pg = _group_by_name(group_name, "fused_matmul_reduce_scatter")
    a = _fused_input(A, "A")
    b = _fused_input(B, "B", a)
    ops = {"sum": _core.ReduceOp.SUM, "avg": _core.ReduceOp.AVG}
    if reduce_op not in ops:
        raise ValueError(f"symcomm: fused_matmul_reduce_scatter: reduce_op {reduce_op!r} is not 'sum' or 'avg'")
    d = _dim(scatter_dim, a.dim(), "scatter_dim")
    if b.dim() != 2 or b.shape[0] != a.shape[-1]:
        raise ValueError(f"symcomm: fused_matmul_reduce_scatter: B has shape {tuple(b.shape)}, expected "
                         f"[{a.shape[-1]}, N] (A's last extent first)")
    shape = list(a.shape[:-1]) + [b.shape[1]]
    if shape[d] % pg.size() != 0:
        raise ValueError(f"symcomm: fused_matmul_reduce_scatter: extent {shape[d]} of dim {scatter_dim} is not "
                         f"divisible by the world size {pg.size()}")
    shape[d] //= pg.size()
    out = a.new_empty(shape)
    pg._fused_comm(a).matmul_reduce_scatter(_shaped(a), _shaped(b), ops[reduce_op], d, _shaped(out),  # noqa: SLF001
                                            _dtype(a), stream=_stream(a))
    return out


# Symmetric tensors (NOTE [python heap] in python/src/module.cc): tensors in the symmetric heap of a process group's
# communicator, made and freed collectively; collectives on them run zero-copy, and every rank can view its peers'
# copies.

def _heap_comm(pg, device):
    if device.type == "cuda":
        return pg._cuda_comm(device.index if device.index is not None else _torch.cuda.current_device())  # noqa: SLF001
    if device.type != "cpu":
        raise ValueError(f"symcomm: empty: tensors on {device} are not supported (CPU and CUDA)")
    return pg._comm  # noqa: SLF001


def _view(buf, device, nbytes, dtype, shape):
    """A tensor of `dtype` and `shape` on the first `nbytes` of HeapBuffer `buf`, sharing its memory."""
    if device.type == "cuda":
        raw = _torch.as_tensor(buf, device=device)
    else:
        import numpy  # noqa: PLC0415 - the host backend's buffers reach torch through NumPy
        raw = _torch.from_numpy(numpy.asarray(buf))
    return raw[:nbytes].view(dtype).view(shape)


def empty(*size, dtype=None, device=None, group=None):
    """A tensor of `size` in the symmetric heap of `group` (default: the default group, symcomm's) on `device`
    (default: CPU; a CUDA device uses the group's CUDA communicator). Collective: every rank calls it in the same
    order with the same size and dtype. Its memory stays allocated until free(tensor, group) on every rank; it is
    never freed by garbage collection."""
    pg = _symcomm_group(group, "empty")
    if len(size) == 1 and isinstance(size[0], (tuple, list, _torch.Size)):
        size = tuple(size[0])
    dtype = dtype or _torch.get_default_dtype()
    device = _torch.device(device) if device is not None else _torch.device("cpu")
    numel = 1
    for extent in size:
        numel *= int(extent)
    nbytes = numel * _torch.empty((), dtype=dtype).element_size()
    comm = _heap_comm(pg, device)
    buf = comm.alloc(max(nbytes, 1))
    t = _view(buf, device, nbytes, dtype, tuple(size))
    pg._heap[t.data_ptr()] = (buf, comm)  # noqa: SLF001
    return t


def free(tensor, group=None):
    """Returns the memory of a tensor from empty() to the heap (collective, in the same order on every rank).
    Views of it, its peers' included, must not be used afterwards."""
    pg = _symcomm_group(group, "free")
    entry = pg._heap.pop(tensor.data_ptr(), None)  # noqa: SLF001
    if entry is None:
        raise ValueError("symcomm: free: the tensor was not made by symcomm.torch.empty() on this group (or is a view "
                         "that does not start where it does)")
    buf, comm = entry
    comm.free(buf)


def peer_tensor(tensor, peer, group=None):
    """Rank `peer`'s copy of a tensor from empty() (same dtype and shape), mapped in this process: reads and
    writes reach the peer's memory directly (order them with the peer yourself, e.g. with a barrier)."""
    pg = _symcomm_group(group, "peer_tensor")
    entry = pg._heap.get(tensor.data_ptr())  # noqa: SLF001
    if entry is None:
        raise ValueError("symcomm: peer_tensor: the tensor was not made by symcomm.torch.empty() on this group")
    buf, comm = entry
    nbytes = tensor.numel() * tensor.element_size()
    peer_buf = comm.peer_buffer(buf, int(peer), max(nbytes, 1))
    return _view(peer_buf, tensor.device, nbytes, tensor.dtype, tuple(tensor.shape))


# torch ops: the operations above and the symmetric-memory collectives of torch.distributed._symmetric_memory,
# with its names and signatures, in the namespace "symcomm" (torch.ops.symcomm.*), defined with torch.library so
# that CUDA graphs and torch.compile(fullgraph=True) see them (each has a fake implementation giving the output's
# shape). They run on the process group named group_name, on the calling thread: CPU tensors synchronously, CUDA
# tensors enqueued on the current stream.

_OP_NAMES = {"sum": _core.ReduceOp.SUM, "avg": _core.ReduceOp.AVG, "max": _core.ReduceOp.MAX,
             "min": _core.ReduceOp.MIN, "product": _core.ReduceOp.PROD, "prod": _core.ReduceOp.PROD}

_SCHEMAS = {
    "fused_all_gather_matmul": "fused_all_gather_matmul(Tensor A_shard, Tensor[] Bs, int gather_dim, str group_name, "
                               "*, bool return_A=True) -> (Tensor?, Tensor[])",
    "fused_matmul_reduce_scatter": "fused_matmul_reduce_scatter(Tensor A, Tensor B, str reduce_op, int scatter_dim, "
                                   "str group_name) -> Tensor",
    "one_shot_all_reduce": "one_shot_all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor",
    "two_shot_all_reduce_": "two_shot_all_reduce_(Tensor(a!) input, str reduce_op, str group_name) -> Tensor(a!)",
    "_low_contention_all_gather": "_low_contention_all_gather(Tensor tensor, str group_name) -> Tensor",
    "_low_contention_reduce_scatter": "_low_contention_reduce_scatter(Tensor tensor, str reduce_op, str group_name) "
                                      "-> Tensor",
}


def _op_by_name(reduce_op, what, t):
    if reduce_op not in _OP_NAMES:
        raise ValueError(f"symcomm: {what}: reduce_op {reduce_op!r} is not one of {', '.join(_OP_NAMES)}")
    return _op_for_dtype(_OP_NAMES[reduce_op], t)


def _symm_input(t, group_name, what):
    """The group, its communicator for t, and t as a contiguous tensor checked for symcomm."""
    pg = _group_by_name(group_name, what)
    t = _checked(t.detach().contiguous(), what)
    return pg, pg._fused_comm(t), t  # noqa: SLF001 - the process group of this module


def _rows(t, what):
    if t.dim() == 0:
        raise ValueError(f"symcomm: {what}: a 0-dim tensor has no leading dimension")
    return t.shape[0]


def _all_reduce_with(algorithm, t, reduce_op, group_name, out, what):
    op = _op_by_name(reduce_op, what, t)
    _, comm, x = _symm_input(t, group_name, what)
    if out is None:
        out = _torch.empty_like(x)
    comm.all_reduce(_numpy(x), _numpy(out), op, False, _dtype(x), _stream(x), algorithm=algorithm)
    return out


def _one_shot_all_reduce(input, reduce_op, group_name):  # noqa: A002 - torch's name
    """All-reduce on the one-shot path (every rank reads every peer's input): a new tensor."""
    return _all_reduce_with("one_shot", input, reduce_op, group_name, None, "one_shot_all_reduce")


def _two_shot_all_reduce_(input, reduce_op, group_name):  # noqa: A002
    """All-reduce in place on the two-shot path (reduce-scatter, then all-gather); returns input."""
    if not input.is_contiguous():
        raise ValueError("symcomm: two_shot_all_reduce_: the tensor is not contiguous")
    _all_reduce_with("two_shot", input, reduce_op, group_name, input, "two_shot_all_reduce_")
    return input


def _low_contention(tensor):
    """The CollOptions contention of a low-contention collective: the copy engine on CUDA; the host backend has
    one path."""
    return "low" if tensor.is_cuda else ""


def _low_contention_all_gather(tensor, group_name):
    """All-gather along the leading dimension, moved by the copy engine on CUDA (no SMs spent in waits)."""
    pg, comm, x = _symm_input(tensor, group_name, "_low_contention_all_gather")
    out = x.new_empty((pg.size() * _rows(x, "_low_contention_all_gather"),) + tuple(x.shape[1:]))
    comm.all_gather(_numpy(x), _numpy(out), False, _dtype(x), _stream(x), contention=_low_contention(x))
    return out


def _low_contention_reduce_scatter(tensor, reduce_op, group_name):
    """Reduce-scatter along the leading dimension (divisible by the world size), moved by the copy engine on
    CUDA with small reduction kernels."""
    op = _op_by_name(reduce_op, "_low_contention_reduce_scatter", tensor)
    pg, comm, x = _symm_input(tensor, group_name, "_low_contention_reduce_scatter")
    rows = _rows(x, "_low_contention_reduce_scatter")
    if rows % pg.size():
        raise ValueError(f"symcomm: _low_contention_reduce_scatter: the leading dimension {rows} is not divisible "
                         f"by the world size {pg.size()}")
    out = x.new_empty((rows // pg.size(),) + tuple(x.shape[1:]))
    comm.reduce_scatter(_numpy(x), _numpy(out), op, False, _dtype(x), _stream(x), contention=_low_contention(x))
    return out


def _fake_world(group_name):
    return _group_by_name(group_name, "fake").size()


def _fakes():
    """Output-shape implementations of the ops, for tracing."""

    def ag_matmul(A_shard, Bs, gather_dim, group_name, *, return_A=True):  # noqa: N803 - the schema's names
        d = gather_dim + A_shard.dim() if gather_dim < 0 else gather_dim
        shape = list(A_shard.shape)
        shape[d] *= _fake_world(group_name)
        outs = [A_shard.new_empty(shape[:-1] + [b.shape[1]]) for b in Bs]
        return (A_shard.new_empty(shape) if return_A else None), outs

    def matmul_rs(A, B, reduce_op, scatter_dim, group_name):  # noqa: N803
        shape = list(A.shape[:-1]) + [B.shape[1]]
        d = scatter_dim + A.dim() if scatter_dim < 0 else scatter_dim
        shape[d] //= _fake_world(group_name)
        return A.new_empty(shape)

    def lc_all_gather(tensor, group_name):
        return tensor.new_empty((_fake_world(group_name) * tensor.shape[0],) + tuple(tensor.shape[1:]))

    def lc_reduce_scatter(tensor, reduce_op, group_name):
        return tensor.new_empty((tensor.shape[0] // _fake_world(group_name),) + tuple(tensor.shape[1:]))

    return {"fused_all_gather_matmul": ag_matmul, "fused_matmul_reduce_scatter": matmul_rs,
            "one_shot_all_reduce": lambda input, reduce_op, group_name: _torch.empty_like(input),  # noqa: A006
            "two_shot_all_reduce_": lambda input, reduce_op, group_name: input,  # noqa: A006
            "_low_contention_all_gather": lc_all_gather, "_low_contention_reduce_scatter": lc_reduce_scatter}


def _define_ops():
    """Defines torch.ops.symcomm.* (torch 1.13: a Meta kernel gives the shapes; 2.x: a registered fake)."""
    lib = _torch.library.Library("symcomm", "DEF")
    impls = {"fused_all_gather_matmul": fused_all_gather_matmul,
             "fused_matmul_reduce_scatter": fused_matmul_reduce_scatter,
             "one_shot_all_reduce": _one_shot_all_reduce, "two_shot_all_reduce_": _two_shot_all_reduce_,
             "_low_contention_all_gather": _low_contention_all_gather,
             "_low_contention_reduce_scatter": _low_contention_reduce_scatter}
    register_fake = getattr(_torch.library, "register_fake", None)
    for name, schema in _SCHEMAS.items():
        lib.define(schema)
        lib.impl(name, impls[name], "CompositeExplicitAutograd")
        fake = _fakes()[name]
        if register_fake is not None:
            register_fake(f"symcomm::{name}", fake, lib=lib)
        else:
            lib.impl(name, fake, "Meta")
    return lib


_LIB = _define_ops() if not hasattr(_torch.ops.symcomm, "one_shot_all_reduce") else None


#: The timeout torch gives a process group whose creator passed none (other than NCCL's).
_DEFAULT_TIMEOUT = getattr(_dist, "default_pg_timeout", datetime.timedelta(minutes=30))


def _timeout_ms(timeout):
    """The communicator timeout (ms) for the `timeout` torch gives a process group: init_process_group's or
    new_group's where the caller passed one other than torch's default; 0 (symcomm's own, SYMCOMM_TIMEOUT_MS) for
    the default, which torch passes when the caller gave none."""
    if not isinstance(timeout, datetime.timedelta) or timeout == _DEFAULT_TIMEOUT:
        return 0
    return max(1, int(timeout.total_seconds() * 1000))


def _create(store, rank, size, timeout):
    return ProcessGroupSymcomm(store, rank, size, timeout)


if BACKEND.upper() not in _dist.Backend._plugins:  # noqa: SLF001 - torch keeps its plugins there
    try:  # torch 2.x: the devices the backend serves
        _dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
    except TypeError:  # torch 1.13
        _dist.Backend.register_backend(BACKEND, _create)
