"""MPI tests: real `mpiexec -n N` jobs (tests/mpirun.py, hard timeouts); each is marked
``mpi``, so `pytest -m "not mpi"` leaves them out."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Mark every test collected under tests/mpi with ``mpi``."""
    for item in items:
        if HERE in Path(item.fspath).resolve().parents:
            item.add_marker(pytest.mark.mpi)
