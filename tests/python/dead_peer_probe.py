"""One rank of a job whose last rank kills itself (SIGKILL) after its second collective; the others run collectives
until one raises, then print one line "RESULT {json}" with the seconds that took and the error's type, code, ranks
and message, and whether closing afterwards returned. Started by test_dead_peer.py with the rendezvous variables
set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, SYMCOMM_TOKEN).

    dead_peer_probe.py numpy|torch-cpu|torch-cuda|torch-cpu-nodes

torch-cpu-nodes runs under mpirun with SYMCOMM_FAKE_NODE_SIZE set (the ranks from Open MPI's variables), so the
process group is a MultiNodeCommunicator.
"""

import json
import os
import signal
import sys
import time


def main():
    mode = sys.argv[1]
    if mode == "torch-cpu-nodes":  # under mpirun, with SYMCOMM_FAKE_NODE_SIZE: a group that spans fake nodes
        from job_env import ranks_from_open_mpi  # noqa: PLC0415 - this folder, beside this script
        ranks_from_open_mpi()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if mode == "numpy":
        import numpy as np  # noqa: PLC0415 - only this mode needs it

        import symcomm  # noqa: PLC0415
        comm = symcomm.Communicator.from_env()
        x = np.ones(1024, np.float32)

        def step():
            comm.all_reduce(x, out=x)

        def close():
            comm.close()
    else:
        import torch  # noqa: PLC0415
        import torch.distributed as dist  # noqa: PLC0415

        import symcomm.torch  # noqa: F401, PLC0415 - registers the backend
        if mode == "torch-cuda":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend="symcomm")
        x = torch.ones(1024, device="cuda" if mode == "torch-cuda" else "cpu")

        def step():
            dist.all_reduce(x)
            if x.is_cuda:
                torch.cuda.synchronize()

        def close():
            dist.destroy_process_group()
    step()
    # The last rank dies right after its second collective, which the others may still be finishing: the death may
    # fail that one already (a communicator that spans nodes fails every call in flight once it sees a rank of its
    # host gone), so the time runs from before it.
    t0 = time.monotonic()
    result = {"elapsed": None}
    try:
        step()
        if rank == world - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        while time.monotonic() - t0 < 30:
            step()
    except Exception as e:  # noqa: BLE001 - what it is, is the result
        result = {"elapsed": time.monotonic() - t0, "type": type(e).__name__, "code": getattr(e, "code", None),
                  "ranks": list(getattr(e, "ranks", [])), "message": str(e)}
    try:
        close()
        result["closed"] = True
    except Exception as e:  # noqa: BLE001
        result["closed"] = f"{type(e).__name__}: {e}"
    # One write(2) of the whole line: under mpirun every rank's output meets in one stream.
    os.write(1, ("RESULT " + json.dumps(result) + "\n").encode())
    os._exit(0)


if __name__ == "__main__":
    main()
