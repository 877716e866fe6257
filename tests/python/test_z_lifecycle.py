"""abort() and close() of the communicator every test shares (fixture comm): this file runs last (pytest takes
files in name order)."""

import numpy as np
import pytest

from conftest import check_usable

import symcomm


def test_abort_then_close(comm):
    check_usable(comm)
    comm.barrier()
    comm.abort()
    comm.abort()  # idempotent
    with pytest.raises(symcomm.Error) as info:
        comm.all_reduce(np.zeros(4, np.float32))
    assert info.value.code == "aborted"
    with pytest.raises(symcomm.Error) as info:
        comm.barrier_async().wait()
    assert info.value.code == "aborted"
    comm.close()
    assert comm.closed
    comm.close()  # idempotent
    comm.abort()  # nothing to abort
    assert comm.rank in range(comm.world_size)  # kept after close
    with pytest.raises(ValueError):
        comm.all_reduce(np.zeros(4, np.float32))
    with comm:  # a context manager closes on exit; closing again is harmless
        pass


def test_from_env_again_after_close():
    """After the shared communicator is closed, the job makes new ones from the same variables (the same
    MASTER_PORT for rank 0's store), one after another."""
    for round_ in range(3):
        with symcomm.Communicator.from_env() as c:
            x = np.arange(1031, dtype=np.int64) + 1000 * round_ + c.rank
            out = np.full_like(x, -7)
            c.all_reduce(x, out=out)
            n = c.world_size
            want = n * (np.arange(1031, dtype=np.int64) + 1000 * round_) + n * (n - 1) // 2
            assert np.array_equal(out, want), round_
