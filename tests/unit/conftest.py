"""Unit tests: no MPI job. A test here that starts mpiexec, mpirun, srun or sbatch fails
(it belongs in tests/mpi), so `pytest -m "not mpi"` stays a run of seconds."""

import os
import subprocess
from pathlib import Path

import pytest

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
