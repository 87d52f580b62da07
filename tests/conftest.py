import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import exports, tuning  # noqa: E402  (found through the path set above)

# tests/spmd runs inside the MPI jobs tests/mpi/test_spmd.py launches (one per process
# count), never in this process: see tests/spmd/conftest.py.
collect_ignore = [] if os.environ.get("OSU_DL_BENCH_SPMD") else ["spmd"]


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path_factory):
    """Launch-variance pools (selection.pools) go to a cache of the test's own, never the
    user's: a test's pool must not steer a real sweep, nor a real one a test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def registered(monkeypatch):
    """Every algorithm the tuning tests name is registered (stand-ins removed afterwards)."""
    return tuning.register_stand_ins(monkeypatch)


@pytest.fixture
def winning_table(tmp_path):
    """A built table whose winners Open MPI and MPICH both have."""
    return exports.winning_table(tmp_path)


def pytest_sessionfinish(session, exitstatus):
    """Remove the MPICH segments that this suite's deliberately aborted and killed jobs left
    in /dev/shm (each holds memory until reboot): the suite's own `osu-dl-bench clean`."""
    from osu_dl_bench.commands import clean

    if clean.SHM_DIR.is_dir():
        clean.remove(clean.stale_segments(clean.SHM_DIR, os.getuid()))
