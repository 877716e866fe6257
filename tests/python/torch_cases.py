"""Tables and helpers shared by the torch tests (test_torch.py on CPU tensors against gloo, test_torch_cuda.py on
CUDA tensors against NCCL). Import it after pytest.importorskip("torch")."""

import zlib

import numpy as np
import pytest
import torch
import torch.distributed as dist

from conftest import values

R = dist.ReduceOp
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32,
          torch.int64]
# NumPy dtypes the inputs are made in (bfloat16: small integers, exact in float32 and bfloat16).
NP = {torch.float16: np.float16, torch.bfloat16: np.float32, torch.float32: np.float32, torch.float64: np.float64,
      torch.int8: np.int8, torch.uint8: np.uint8, torch.int32: np.int32, torch.int64: np.int64}
OPS = {"sum": R.SUM, "prod": R.PRODUCT, "min": R.MIN, "max": R.MAX}


def dname(d):
    return str(d).replace("torch.", "")


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode())


# bool and the float8 types this torch has: symcomm.torch moves them as bytes; bool reduces as torch's NCCL process
# group does (SUM a logical or, PRODUCT a logical and), float8 does not reduce.
BYTE_DTYPES = [torch.bool] + [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]


def byte_input(seed, rank, n, dtype, device):
    """Rank `rank`'s input: bool mostly True (so that a logical and over the ranks is not all False), float8 the
    bytes of small values."""
    v = values(seed, rank, n, np.uint8)
    if dtype == torch.bool:
        return torch.from_numpy(v % 5 != 0).to(device)
    return torch.from_numpy(v % 64).view(dtype).to(device)


def check_byte_dtypes(device, sizes):
    """symcomm.torch's collectives on BYTE_DTYPES against results computed from every rank's known input, outputs
    poisoned; the reductions float8 and AVG on bool cannot do raise."""
    w, me = dist.get_world_size(), dist.get_rank()
    for dtype in BYTE_DTYPES:
        for n in sizes:
            seed = seed_of("bytes", dname(dtype), n)
            ins = [byte_input(seed, r, n, dtype, device) for r in range(w)]
            raw = [t.view(torch.uint8) for t in ins]

            def fresh():
                return torch.full((n,), 0xEE, dtype=torch.uint8, device=device).view(dtype)

            out = torch.full((w * n,), 0xEE, dtype=torch.uint8, device=device).view(dtype)
            dist.all_gather_into_tensor(out, ins[me])
            assert torch.equal(out.view(torch.uint8), torch.cat(raw)), f"all_gather {dname(dtype)} {n}"
            x = ins[me].clone() if me == 1 % w else fresh()
            dist.broadcast(x, src=1 % w)
            assert torch.equal(x.view(torch.uint8), raw[1 % w]), f"broadcast {dname(dtype)} {n}"
            got = torch.full((w * n,), 0xEE, dtype=torch.uint8, device=device).view(dtype)
            dist.all_to_all_single(got, torch.cat([byte_input(seed + q + 1, me, n, dtype, device) for q in range(w)]))
            want = torch.cat([byte_input(seed + me + 1, r, n, dtype, device).view(torch.uint8) for r in range(w)])
            assert torch.equal(got.view(torch.uint8), want), f"all_to_all_single {dname(dtype)} {n}"
            if dtype != torch.bool:
                x = ins[me].clone()
                with pytest.raises(TypeError, match="cannot be reduced"):
                    dist.all_reduce(x)
                assert torch.equal(x.view(torch.uint8), raw[me]), "a refused all_reduce changed its tensor"
                continue
            stacked = torch.stack(ins)
            for op, want in ((R.SUM, stacked.any(0)), (R.MAX, stacked.any(0)), (R.PRODUCT, stacked.all(0)),
                             (R.MIN, stacked.all(0))):
                x = ins[me].clone()
                dist.all_reduce(x, op=op)
                # The bytes: a bool tensor holding 2 or 3 compares equal to True, and is still wrong.
                assert torch.equal(x.view(torch.uint8), want.view(torch.uint8)), f"all_reduce bool {op} {n}"
            y = fresh()
            dist.reduce_scatter_tensor(y, torch.cat([ins[me]] * w), op=R.SUM)
            assert torch.equal(y.view(torch.uint8), stacked.any(0).view(torch.uint8)), f"reduce_scatter_tensor {n}"
            with pytest.raises(ValueError, match="AVG"):
                dist.all_reduce(ins[me].clone(), op=R.AVG)
