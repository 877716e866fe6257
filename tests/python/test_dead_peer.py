"""A rank killed with SIGKILL surfaces on every survivor as a Python exception naming it within 2 s, through the
NumPy API and symcomm.torch (CPU tensors; CUDA tensors where each rank has a GPU; CPU tensors on a group that spans
fake nodes, under mpirun), and closing afterwards returns.

Rank 0 of the pytest job starts a job of its own (dead_peer_probe.py, 3 ranks, its own rendezvous) per case; the
other ranks skip the cases (they issue no collectives). The fake-node case starts 4 ranks under mpirun and runs only
where pytest runs alone (python -m pytest test_dead_peer.py -k nodes: ctest's python_torch_multinode_kill)."""

import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys

import pytest
from job_env import free_port

import symcomm

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 3


def run_probe(mode, world):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
               LOCAL_WORLD_SIZE=str(world), SYMCOMM_TOKEN=secrets.token_hex(16), PYTHONUNBUFFERED="1")
    procs = []
    for r in range(world):
        env_r = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "dead_peer_probe.py"), mode], env=env_r,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"the {mode} probe job did not end within 120 s")
        outputs.append(out)
    results = []
    for r, out in enumerate(outputs[:-1]):
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        assert lines, f"rank {r} of the {mode} probe printed no result:\n{out}"
        results.append(json.loads(lines[-1][len("RESULT "):]))
    assert procs[-1].returncode == -9, f"the last rank was to die by SIGKILL, exit {procs[-1].returncode}"
    return results


def run_probe_under_mpirun(mpiexec, world, fake_node_size):
    """The torch-cpu-nodes probe: `world` ranks under mpirun --enable-recovery (the survivors keep running after the
    death), declared as fake nodes of `fake_node_size`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SYMCOMM_TOKEN")}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), SYMCOMM_FAKE_NODE_SIZE=str(fake_node_size),
               PYTHONUNBUFFERED="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [mpiexec, "--enable-recovery", "-np", str(world)]
    for name in ("MASTER_ADDR", "MASTER_PORT", "SYMCOMM_FAKE_NODE_SIZE", "PYTHONUNBUFFERED", "PYTHONPATH"):
        cmd += ["-x", name]
    cmd += [sys.executable, os.path.join(HERE, "dead_peer_probe.py"), "torch-cpu-nodes"]
    # mpirun leads a process group of its own, without this pytest process, which a signal mpirun sends to its
    # group while it handles the death then cannot reach.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.terminate()  # mpirun ends its job on SIGTERM; the ranks are not all in its process group
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        pytest.fail("the torch-cpu-nodes probe job did not end within 120 s")
    # mpirun merges the ranks' output: a line may carry another rank's text around the result.
    results = [json.JSONDecoder().raw_decode(ln, ln.index("RESULT ") + len("RESULT "))[0]
               for ln in out.splitlines() if "RESULT " in ln]
    assert len(results) == world - 1, f"{len(results)} of {world - 1} survivors printed a result:\n{out}"
    return results


def cuda_ranks():
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return 0
    if not torch.cuda.is_available() or "cuda" not in symcomm.backends():
        return 0
    return torch.cuda.device_count()


@pytest.mark.parametrize("mode", ["numpy", "torch-cpu", "torch-cuda", "torch-cpu-nodes"])
def test_killed_rank_raises_naming_it(mode):
    if int(os.environ.get("RANK", "0")) != 0:
        pytest.skip("rank 0 runs the probe job")
    world = WORLD
    if mode.startswith("torch"):
        pytest.importorskip("torch")
    if mode == "torch-cuda":
        world = min(WORLD, cuda_ranks())
        if world < 2:
            pytest.skip("needs torch with CUDA, symcomm's CUDA backend and 2 GPUs")
    if mode == "torch-cpu-nodes":
        if os.environ.get("WORLD_SIZE", "1") != "1":
            pytest.skip("runs alone, outside a job of ranks (ctest -R python_torch_multinode_kill)")
        mpiexec = shutil.which("mpirun")
        if mpiexec is None or importlib.util.find_spec("symcomm._mpi") is None:
            pytest.skip("needs mpirun and symcomm._mpi (symcomm built with MPI)")
        world = 4
        results = run_probe_under_mpirun(mpiexec, world, 2)
    else:
        results = run_probe(mode, world)
    for r, res in enumerate(results):
        assert res["elapsed"] is not None, f"rank {r}: no exception within 30 s of the kill"
        assert res["elapsed"] < 2.0, f"rank {r}: the exception took {res['elapsed']:.2f} s: {res['message']}"
        assert res["type"] == "Error" and res["code"] == "peer_dead", f"rank {r}: {res}"
        assert world - 1 in res["ranks"] and str(world - 1) in res["message"], f"rank {r}: {res}"
        assert res["closed"] is True, f"rank {r}: closing after the error: {res['closed']}"
