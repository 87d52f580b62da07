"""The preflight of scripts/gpu_smoke.sh: can this node run the GPU path, and how.

Run from the checkout with it on PYTHONPATH (no install). Prints ``key=value`` lines that
gpu_smoke.sh reads, then readable ones; exit 1 when a dependency is missing (each named,
with what to do) or torch is older than the trainer accepts, 2 (one ERROR line) when
OSU_DL_BENCH_CUDA_AWARE is set to neither 0 nor 1.

- Every dependency is imported, not looked up: the mpich wheel's libmpi is found only when
  ``mpi4py.MPI`` loads, and cupy's NCCL only when ``cupy.cuda.nccl`` does.
- GPUs are counted by ``cupy.cuda.runtime.getDeviceCount()``, which honours
  CUDA_VISIBLE_DEVICES (``nvidia-smi -L`` lists every GPU of the node whatever it says).
- A GPU in compute mode EXCLUSIVE_PROCESS admits one process (CUDA Programming Guide,
  "Compute Modes") unless the MPS control daemon runs (its clients share the GPU): then
  ranks cannot share a GPU, and the steps that put two ranks on one are left out.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys

WHEELS_HINT = (
    "carry it: run scripts/gpu_wheels.sh where pip can download (PY=<the node's Python>), "
    "copy the wheels/ folder into this checkout; gpu_smoke.sh installs it offline into "
    ".gpu-deps/"
)
# (module, what provides it, what to do when it is missing)
DEPENDENCIES = [
    ("numpy", "numpy", "pip install numpy (the node image is expected to have it)"),
    ("pandas", "pandas", "pip install pandas"),
    ("scipy", "scipy", "pip install scipy"),
    ("tqdm", "tqdm", "pip install tqdm"),
    (
        "jsonschema",
        "jsonschema (+ referencing, jsonschema-specifications, rpds-py, attrs)",
        WHEELS_HINT,
    ),
    ("mpi4py", "mpi4py", "pip install mpi4py"),
    ("mpi4py.MPI", "an MPI library (the mpich wheel)", WHEELS_HINT),
    (
        "cupy",
        "cupy (cupy-cuda12x or cupy-cuda13x, the node's CUDA major)",
        "pip install cupy-cuda13x",
    ),
    ("cupy.cuda.nccl", "cupy's NCCL (nvidia-nccl-cu13)", "pip install nvidia-nccl-cu13"),
    ("torch", "torch >= 2.10", "pip install torch (a CUDA build)"),
]
TORCH_MIN = (2, 10)
EXCLUSIVE, PROHIBITED, EXCLUSIVE_PROCESS = 1, 2, 3  # cudaComputeMode


def missing_dependencies() -> list[str]:
    """One line per dependency that does not import: what, why, what to do."""
    lines = []
    for module, provider, hint in DEPENDENCIES:
        try:
            importlib.import_module(module)
        except Exception as error:  # ImportError, or a library that fails to load
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            lines.append(f"MISSING {provider}: import {module}: {first} -> {hint}")
    return lines


def torch_version_ok(version: str) -> bool:
    """True for torch >= 2.10 (the trainer's checkpoints rely on its torch.load)."""
    parts = version.split("+")[0].split(".")
    numbers = tuple(int(p) for p in parts[:2] if p.isdigit())
    return numbers >= TORCH_MIN


def mps_running() -> bool:
    """Whether the MPS control daemon serves this node (its pipe or its process)."""
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    if os.path.exists(os.path.join(pipe, "control")):
        return True
    if shutil.which("pgrep") is None:
        return False
    found = subprocess.run(["pgrep", "-x", "nvidia-cuda-mps-control"], capture_output=True)
    return found.returncode == 0


def sharing_reason(modes: list[int], mps: bool) -> str | None:
    """None if two processes may share each GPU, else why not."""
    if any(mode == PROHIBITED for mode in modes):
        return "a GPU is in compute mode PROHIBITED: no process may use it"
    if any(mode in (EXCLUSIVE, EXCLUSIVE_PROCESS) for mode in modes) and not mps:
        return "a GPU is in compute mode EXCLUSIVE_PROCESS without MPS: one process per GPU"
    return None


def report() -> int:
    """Print what the smoke check needs to know; exit code 0, or 1 when it cannot go on."""
    missing = missing_dependencies()
    if missing:
        print("\n".join(missing))
        print(f"python={sys.executable} {sys.version.split()[0]}")
        return 1
    import cupy
    import mpi4py
    import numpy
    import torch
    from cupy.cuda import nccl, runtime
    from mpi4py import MPI

    from collectives import device
    from collectives.errors import UsageError

    try:
        awareness = device.cuda_awareness()
    except UsageError as error:  # OSU_DL_BENCH_CUDA_AWARE set to neither 0 nor 1
        print(f"ERROR {error}")
        return 2
    try:
        gpus = runtime.getDeviceCount()
    except runtime.CUDARuntimeError as error:  # cudaErrorNoDevice: e.g. CUDA_VISIBLE_DEVICES=""
        print(f"gpus=0\ncupy sees no GPU: {error}")
        return 0
    modes = [int(runtime.getDeviceProperties(i).get("computeMode", 0)) for i in range(gpus)]
    mps = mps_running()
    share = sharing_reason(modes, mps)
    torch_ok = torch_version_ok(torch.__version__)
    print(f"gpus={gpus}")
    print(f"aware={int(awareness.aware)}")
    print(f"share={'no' if share else 'yes'}")
    print(f"torch_ok={int(torch_ok)}")
    print(f"torch_cuda={int(torch.cuda.is_available())}")
    print(
        f"python {sys.version.split()[0]} | numpy {numpy.__version__} | cupy {cupy.__version__}"
        f" | mpi4py {mpi4py.__version__} | torch {torch.__version__}"
    )
    print("MPI:", MPI.Get_library_version().splitlines()[0])
    print("CUDA runtime", runtime.runtimeGetVersion(), "| driver", runtime.driverGetVersion())
    print("NCCL", nccl.get_version() if getattr(nccl, "available", False) else "missing")
    print(f"GPUs visible (cupy): {gpus}; compute modes {modes}; MPS {'on' if mps else 'off'}")
    print(f"ranks may share a GPU: {share or 'yes'}")
    print("MPIX_Query_cuda_support:", device.query_cuda_support())
    print(f"CUDA-aware MPI (as used): {awareness.aware}, {awareness.path} ({awareness.source})")
    if not torch_ok:
        print(f"torch {torch.__version__} is older than 2.10, which the trainer needs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(report())
