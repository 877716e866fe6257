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
