"""tests/spmd runs on every rank of the MPI jobs tests/mpi/test_spmd.py launches (one per
process count; tests/support/spmd.py), never in pytest's own process."""

import os

import pytest
from support import spmd


def pytest_collection_modifyitems(config, items):
    """Refuse to run these tests outside an SPMD job, saying how to run them."""
    if not os.environ.get(spmd.MODE_ENV):
        raise pytest.UsageError(
            "tests/spmd runs inside MPI jobs, one per process count: run `pytest -m spmd` "
            "(or tests/mpi/test_spmd.py -k NAME); docs/testing.md says how to run one by hand"
        )
