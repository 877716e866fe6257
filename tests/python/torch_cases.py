"""Tables and helpers shared by the torch tests (test_torch.py on CPU tensors against gloo, test_torch_cuda.py on
CUDA tensors against NCCL). Import it after pytest.importorskip("torch")."""

import zlib

import numpy as np
import torch
import torch.distributed as dist

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
