"""Unit tests: no MPI job. A test here that starts mpiexec, mpirun, srun or sbatch fails
(it belongs in tests/mpi), so `pytest -m "not mpi"` stays a run of seconds."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.strict import STRICT_CUPY

from collectives import device

LAUNCHERS = frozenset({"mpiexec", "mpiexec.hydra", "mpirun", "srun", "sbatch", "salloc"})


def _program(args) -> str:
    if isinstance(args, (str, bytes, os.PathLike)):
        args = [args]
    first = os.fsdecode(next(iter(args), ""))
    return Path(first.split()[0] if first.strip() else first).name


@pytest.fixture(autouse=True)
def no_mpi_jobs(monkeypatch):
    """Refuse to start an MPI launcher from a unit test."""
    real_init = subprocess.Popen.__init__

    def refusing_init(self, args, *rest, **kwargs):
        if _program(args) in LAUNCHERS:
            raise AssertionError(f"a unit test started {_program(args)}: move it to tests/mpi")
        real_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", refusing_init)


@pytest.fixture
def cupy(monkeypatch):
    """The strict stand-in imported as ``cupy``, gone again after the test; MPI is taken
    as CUDA-aware (``plain_mpi``: not)."""
    monkeypatch.setenv(device.CUDA_AWARE_ENV, "1")
    monkeypatch.syspath_prepend(str(STRICT_CUPY))
    for name in [m for m in sys.modules if m.split(".")[0] in ("cupy", "cupyx")]:
        monkeypatch.delitem(sys.modules, name)
    import cupy as module

    monkeypatch.setattr(device, "_selected", {})
    yield module
    for name in [m for m in sys.modules if m.split(".")[0] in ("cupy", "cupyx")]:
        del sys.modules[name]


@pytest.fixture
def plain_mpi(cupy, monkeypatch):
    """MPI that is not CUDA-aware: the stand-in then fails any device array handed to MPI,
    as a device pointer crashes such a library (its NCCL takes raw pointers, so only MPI
    fails)."""
    monkeypatch.setenv(device.CUDA_AWARE_ENV, "0")
    return cupy


@pytest.fixture
def nccl(monkeypatch, request):
    """The nccl backend registered on the stand-in (whose "NCCL" is MPI), gone afterwards."""
    from collectives import registry

    registry.load_algorithms()  # before cupy imports: no test after this one sees nccl
    cupy = request.getfixturevalue("cupy")
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.delitem(registry.UNAVAILABLE_BACKENDS, "nccl", raising=False)
    from collectives.backends import nccl as backend

    if ("allreduce", "nccl") not in registry._REGISTRY:
        backend.register_backend()
    return cupy
