"""What the runs of unmodified PyTorch programs with and without the NCCL drop-in library share: the real NCCL
of the nvidia-nccl wheel, a free port for torchrun, and each run's environment. Used by run_cases.py and by
bench/nccl_shim_torch_compare.py."""

import importlib.util
import os
import socket

# Settings of every child: no NVLink SHARP (multicast) anywhere, deterministic cuBLAS, unbuffered output.
COMMON_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "PYTHONUNBUFFERED": "1",
}


def find_wheel_nccl():
    """Path of libnccl.so.2 in the nvidia-nccl wheel, or None. nvidia is a namespace package: nvidia.nccl.__path__
    may be a list or a namespace path of several folders, each tried."""
    folders = []
    try:
        import nvidia.nccl

        folders.extend(list(getattr(nvidia.nccl, "__path__", [])))
    except ImportError:
        pass
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        folders.extend(list(spec.submodule_search_locations))
    for folder in folders:
        candidate = os.path.join(folder, "lib", "libnccl.so.2")
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(drop_in_mode, shim, real_nccl):
    """The environment of one run: the caller's, without any drop-in setting, plus COMMON_ENV; with a drop-in
    mode (forward, auto, native-only; None: without the drop-in library), the drop-in library preloaded in that
    mode with the real NCCL behind it and its statistics line at exit."""
    env = dict(os.environ)
    for key in list(env):
        if key == "LD_PRELOAD" or key.startswith("SYMCOMM_NCCL"):
            del env[key]
    env.update(COMMON_ENV)
    if drop_in_mode is not None:
        env["LD_PRELOAD"] = shim
        env["SYMCOMM_NCCL_REAL_LIBRARY"] = real_nccl
        env["SYMCOMM_NCCL_SHIM"] = drop_in_mode
        env["SYMCOMM_NCCL_SHIM_STATS"] = "1"
    return env
