"""torch's parallelism libraries over one backend: FSDP2 (fully_shard) training steps, DTensor redistribution, tensor
parallelism (ColwiseParallel / RowwiseParallel) and a distributed checkpoint saved and loaded, on a device mesh of
every rank. Prints one line per rank, "RESULT <rank> <json>", of what each produced (losses, outputs, equalities);
run once with "nccl" and once with "symcomm" and compare the lines (tools/gpu/check.sh's `apps` step does).

    symcomm-run -n 2 -- python3 tests/python/torch_parallel_apps.py symcomm /tmp/ckpt

torch 2.4 or later with CUDA. Where ranks outnumber the GPUs they share them (SYMCOMM_SHARED_GPU=1 for symcomm), and
each rank gets its own NCCL_HOSTID so that NCCL takes them too (over sockets).
"""

import importlib
import json
import os
import sys

import torch
import torch.distributed as dist


def fsdp2(mesh, rank):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16)).cuda()
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)
    losses = []
    for _ in range(3):
        x = torch.randn(8, 64, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def dtensor(mesh, rank, world):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    torch.manual_seed(2)
    full = torch.randn(world * 4, 8, device="cuda")
    d = distribute_tensor(full, mesh, [Shard(0)])
    replicated = d.redistribute(mesh, [Replicate()]).to_local()
    total = (d * 2).sum().full_tensor()
    columns = d.redistribute(mesh, [Shard(1)]).to_local()
    return [torch.equal(replicated, full), float(total), torch.equal(columns, full.chunk(world, dim=1)[rank])]


def tensor_parallel(mesh):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)).cuda()
    m = parallelize_module(m, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    torch.manual_seed(4)
    y = m(torch.randn(5, 32, device="cuda"))
    y.sum().backward()
    return y.detach().cpu().reshape(-1).tolist()


def checkpoint(mesh, world, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import Shard, distribute_tensor
    torch.manual_seed(5)
    full = torch.randn(world * 4, 4, device="cuda")
    dcp.save({"w": distribute_tensor(full, mesh, [Shard(0)])}, checkpoint_id=path)
    loaded = {"w": distribute_tensor(torch.zeros_like(full), mesh, [Shard(0)])}
    dcp.load(loaded, checkpoint_id=path)
    return torch.equal(loaded["w"].full_tensor(), full)


def main():
    backend, path = sys.argv[1], sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.device_count() < world:
        os.environ["NCCL_HOSTID"] = f"rank{rank}"
    torch.cuda.set_device(rank % torch.cuda.device_count())
    if backend == "symcomm":
        importlib.import_module("symcomm.torch")  # registers the backend
    dist.init_process_group(backend, device_id=torch.device("cuda", torch.cuda.current_device()))
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cuda", (world,))
    results = {}
    for name, run in (("fsdp2", lambda: fsdp2(mesh, rank)), ("dtensor", lambda: dtensor(mesh, rank, world)),
                      ("tensor_parallel", lambda: tensor_parallel(mesh)),
                      ("checkpoint", lambda: checkpoint(mesh, world, path))):
        try:
            results[name] = run()
        except Exception as e:  # noqa: BLE001 - reported in the result line, compared with the other backend's
            results[name] = f"{type(e).__name__}: {e}"
    torch.cuda.synchronize()
    print(f"RESULT {rank} {json.dumps(results)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
